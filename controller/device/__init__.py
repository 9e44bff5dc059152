"""One switch as the controller drives it: a P4Runtime session
(``p4rt``), the typed switch API (``switch``) and an in-memory one
(``memswitch``), the entries as plain values (``entries``), the diff that
brings a switch to them (``reconcile``, ``session``), and the slot pool's
owners (``slots``).  Imports ``esa`` and ``controller.errors`` only."""
