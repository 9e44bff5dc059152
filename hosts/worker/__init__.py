"""The worker agent (``agent``: ``Worker``) and its parts: who it is in its
job (``member``), one call (``calls``) and how one fails (``errors``), its
data path (``stream``) and timers (``inflight``), its side of call
agreement (``announce``), and drivers that run it call after call
(``drivers``).  Imports ``hosts.agreement``, ``hosts.net``,
``hosts.timing`` and ``esa``."""
