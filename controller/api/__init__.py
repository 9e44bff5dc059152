"""The admin API and ``esa-ctl``: the messages and their JSON
(``messages``, ``codec``, ``admin.proto``), the checks of a request
(``validate``), the operations on every switch (``service``) and the
replies (``views``), the gRPC server and client (``admin``), the
Prometheus counters (``metrics``), one controller per state file
(``instance``), and the command line (``cli``, ``serve``, ``formats``).
Imports ``controller.world`` and below."""
