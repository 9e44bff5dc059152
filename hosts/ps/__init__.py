"""The parameter server (``parameter_server``: ``ParameterServer``) and
its parts: one datagram's way through it, top to bottom (``aggregate``),
its open sums (``sums``), the answers of finished chunks (``results``) and
what it sends within each job's budget (``outbox``).  Imports
``hosts.agreement``, ``hosts.net``, ``hosts.timing`` and ``esa``."""
