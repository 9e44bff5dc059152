"""What the controller knows and wants: where hosts and switches are
(``topology``, ``fabric``), the jobs and policy in its state file
(``state``), their priorities (``priority``) and partitions
(``partition``), and the entries each switch must hold for them
(``plan``).  Imports ``controller.device`` and below."""
