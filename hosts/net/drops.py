"""Why a host drops a datagram.

The PS and the worker check every field of every datagram against the job
they know before it touches any state; what fails a check, or needs no
action, is counted under one of these reasons and dropped, so junk shows
up in the counters and nowhere else.
"""

from __future__ import annotations

import enum


class HostDrop(str, enum.Enum):
    LENGTH = "length"
    """not the size of an ESA payload."""
    PTYPE = "ptype"
    """an unknown packet type, or one this host is never sent."""
    JOB = "job"
    """a job this host does not serve."""
    BITMAP = "bitmap"
    """empty, outside the job's mask, not one bit where one worker sends, or
    not the whole mask on a result."""
    COUNT = "count"
    """``count`` differs from the number of workers in ``bitmap``."""
    FLAGS = "flags"
    """flags the packet's sender never sets on its type."""
    SEQ = "seq"
    """PS: outside the calls the job agreed on."""
    SOURCE = "source"
    """PS: a sum the switch completed (RESULT without HOLD) from an address
    other than the switch's (``esa-ps --switch-addr``)."""
    SHARD = "shard"
    """PS: a chunk another of the job's PS shards owns (``esa.job.ps_shard``)."""
    STALE = "stale"
    """worker: outside the calls it keeps."""
    EARLY = "early"
    """worker: for a call the PS has not let it start."""
    DUPLICATE = "duplicate"
    """a chunk already delivered, or a worker's part the PS already holds."""
    OVERLAP = "overlap"
    """PS: workers it already holds for the chunk (never added twice)."""
    LATE = "late"
    """PS: a switch sum of a chunk already finished."""
    CONFLICT = "conflict"
    """PS: a switch sum that differs from the chunk's finished sum."""
    BUDGET = "budget"
    """PS: the job already has as many open chunks as it may."""
    UNASKED = "unasked"
    """worker: a FLOAT sum of a chunk it has not resent as FLOAT."""
    CONTROL = "control"
    """a control message with a wrong length, magic, type or shape."""
    AUTH = "auth"
    """a control message whose authenticator is not the job's key's."""
    SESSION = "session"
    """PS: an authentic control message made for another PS process
    (answered with a CHALLENGE); worker: an answer from another PS process."""
    REPLAY = "replay"
    """PS: a message number the worker process already used (a copy or a replay)."""
    STRANGER = "stranger"
    """a control message for another worker, process or call."""


def new_drops() -> dict[str, int]:
    """A zero counter for every reason, keyed by the reason's name."""
    return {d.value: 0 for d in HostDrop}
