"""One allreduce call as a worker sees it, and how it ends when it fails.

A ``Call`` holds the quantised chunks of one tensor, each chunk's state and
the sums so far.  ``rejected`` and ``timed_out`` turn the PS's REJECT or a
timeout (with the PS's REPORT, if any) into the exception ``allreduce``
raises: one line that names the job, the call and what the user must fix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from esa import wire
from esa.wire import RejectReason, ReportKind
from hosts import codec, quant
from hosts.errors import AllreduceTimeout, CallRejected

if TYPE_CHECKING:
    from hosts.worker import Worker

SEQ_MOD = 1 << 32

PENDING, SENT, FLOATING, DONE = range(4)
"""Chunk states: not sent yet; contribution sent; FLOAT sent after an
overflowed result; sum delivered."""

ANNOUNCING, STREAMING, FAILED = range(3)
"""Call phases: waiting for the PS's GO; sending chunks; given up."""


class Call:
    """One allreduce call: its chunks, their states and the sums so far."""

    def __init__(
        self, number: int, base: int, tensor: npt.NDArray[np.float32], bound: float, scale: float
    ) -> None:
        q = quant.quantise(tensor, bound, scale)
        self.number, self.base = number, base
        self.size = int(np.asarray(tensor).size)
        self.shape = np.asarray(tensor).shape
        self.q = q.values
        self.floats = q.floats
        self.clipped = q.clipped
        self.n = len(q.values)
        self.state = [PENDING] * self.n
        self.out = np.zeros((self.n, wire.K), dtype=np.float32)
        self.next_send = 0
        self.delivered = 0
        self.phase = STREAMING
        self.digest = 0

    def index(self, seq: int) -> int | None:
        i = (seq - self.base) % SEQ_MOD
        return i if i < self.n else None


def bits(mask: int) -> list[int]:
    return [i for i in range(wire.MAX_WORKERS) if mask >> i & 1]


def rejected(w: Worker, m: codec.Control, c: Call) -> CallRejected:
    """The exception for the PS's REJECT ``m`` of call ``c``."""
    peer = None if m.peer == wire.NO_PEER else m.peer
    try:
        reason = RejectReason(m.code)
    except ValueError:
        what, name = f"reason code {m.code}", "unknown"
    else:
        what, name = _why(w, reason, m, c, peer), reason.name.lower()
    return CallRejected(
        f"job {w.job} call {c.number} rejected by the PS: {what}", w.job, c.number, name, peer
    )


def _why(w: Worker, reason: RejectReason, m: codec.Control, c: Call, peer: int | None) -> str:
    ps = f"{w.control_addr[0]}:{w.control_addr[1]}"
    return {
        RejectReason.UNKNOWN_JOB: f"the PS at {ps} serves no job {w.job}",
        RejectReason.WORKER: f"worker index {w.index} is not in the PS's mask {m.mask:#x}",
        RejectReason.FAN_IN: f"this worker has fan-in {w.fan_in}, the PS's job {m.fan_in}",
        RejectReason.MASK: f"this worker has mask {w.mask:#x}, the PS's job {m.mask:#x}",
        RejectReason.DUPLICATE: f"another process also runs as worker {w.index}",
        RejectReason.CALL: f"this worker is at call {c.number}, worker {peer} at call "
        f"{m.call} (was one of them restarted?)",
        RejectReason.LENGTH: f"this worker has {c.size} values, worker {peer} has {m.length}",
        RejectReason.BASE: f"this worker starts at seq {c.base}, worker {peer} at {m.base} "
        "(an earlier call had other sizes)",
        RejectReason.CONFIG: f"worker {peer} quantises differently (bound or dtype; this "
        f"worker's bound is {w.bound:g})",
    }[reason]


def timed_out(
    job: int, c: Call, phase: int, timeout: float, report: codec.Control | None, asked: bool
) -> AllreduceTimeout:
    """The exception for call ``c`` of ``job`` given up in ``phase``, with the
    PS's ``report`` on it (None: no answer, or not ``asked``)."""
    missing: list[int] | None = None
    if report is None:
        known = "the PS did not answer" if asked else "no control channel"
        why = f"missing workers unknown ({known})"
    elif report.code == ReportKind.NOT_ANNOUNCED:
        missing = bits(report.missing)
        why = f"workers {missing} have not started it (started: {bits(report.mask)})"
    elif report.code == ReportKind.PARTIALS:
        missing = bits(report.missing)
        why = f"the PS's partial sums of {report.partials} chunks miss workers {missing}"
    elif report.code == ReportKind.NOTHING_HELD:
        why = "missing workers unknown (the PS holds no partial sum of the call)"
    else:
        why = "missing workers unknown (the PS has no record of the call)"
    where = (
        "waiting for the PS's GO"
        if phase == ANNOUNCING
        else f"{c.n - c.delivered} of {c.n} chunks without a sum"
    )
    return AllreduceTimeout(
        f"job {job} call {c.number}: no sum after {timeout:g} s ({where}); {why}",
        job, c.number, missing, timeout,
    )  # fmt: skip
