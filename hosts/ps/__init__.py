"""The parameter server (``parameter_server``: ``ParameterServer``) and
its parts: one datagram's way through it, top to bottom, and what it sends
within each job's budget (``aggregate``), its open sums (``sums``) and the
answers of finished chunks (``results``).  Imports
``hosts.agreement``, ``hosts.net``, ``hosts.timing`` and ``esa``."""
