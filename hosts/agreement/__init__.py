"""Call agreement on the control channel (docs/agreement.md): who may speak
for a job, for both ends (``auth``); and the PS's side: its end of the
channel (``desk``), each job's calls (``callbook``) with the announcements
and agreements (``announcements``), the worker processes (``roster``) and
the GO and REJECT it sends (``answers``).  The worker's side is
``hosts.worker.announce``.  Imports ``hosts.net`` and ``esa``."""
