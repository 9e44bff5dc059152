"""The end hosts: the workers that send a job's gradients through the
switch, and the parameter server (PS) that finishes what the switch could
not.  Four floors, each importing only from those below it and from
``esa`` (tests/test_layout.py checks it):

``hosts.net``, ``hosts.timing``
    what both ends share: the datagram codec, sockets, quantisation, the
    checks, drop reasons and counters of a datagram, the Scapy layer; and
    how long each end waits (the worker's timeout, the PS's stall).
``hosts.agreement``
    call agreement on the control channel: who may speak for a job (both
    ends), and the PS's side of it.
``hosts.worker``, ``hosts.ps``
    the worker agent and the parameter server, each with its parts; neither
    imports the other.
``hosts.torch``, ``hosts.programs``
    the PyTorch hook and process-group backend; ``esa-ps``, ``esa-worker``,
    ``esa-train`` and what they share.
"""
