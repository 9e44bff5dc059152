"""One allreduce call as a worker sees it, and how it ends when it fails.

A ``Call`` holds the quantised chunks of one tensor, each chunk's state and
the sums so far.  ``rejected`` and ``timed_out`` turn the PS's REJECT or a
timeout (with the PS's REPORT, if any) into the exception ``allreduce``
raises: one line that names the job, the call and what the user must fix.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from esa import wire
from esa.wire import RejectReason, ReportKind
from hosts.net import payload, quant
from hosts.worker.errors import AllreduceTimeout, CallRejected
from hosts.worker.member import Member

SEQ_MOD = 1 << 32

PENDING, SENT, FLOATING, DONE = range(4)
"""Chunk states: not sent yet; contribution sent; FLOAT sent after an
overflowed result; sum delivered."""

ANNOUNCING, STREAMING, ASKING, FAILED = range(4)
"""Call phases: waiting for the PS's GO; sending chunks; past the deadline,
asking the PS hosts who is missing; given up."""


class Call:
    """One allreduce call: its chunks, their states and the sums so far."""

    def __init__(
        self,
        number: int,
        base: int,
        tensor: npt.NDArray[np.float32],
        bound: float,
        scale: float,
        start: float = 0.0,
        timeout: float = float("inf"),
    ) -> None:
        """``timeout``: seconds from ``start`` to the call's deadline."""
        q = quant.quantise(tensor, bound, scale)
        self.number, self.base = number, base
        self.offset: int | None = None
        """the epoch's first seq, as the PS hosts' GO tell it (None: no GO
        yet; a worker without a control channel has none, its seqs start at
        ``base``)."""
        self.first = base
        """the seq of the call's first chunk: ``offset + base``."""
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
        self.go = 0
        """bitmap of the PS shards whose GO holds (in their current session)."""
        self.resume = 0
        """shards whose PS restarted after its GO: announced again with RESUME."""
        self.regained = 0
        """shards whose GO came back after a restart: their chunks without a sum go again."""
        self.restarted = 0
        """shards whose PS restarted during the call."""
        self.timeout, self.deadline = timeout, start + timeout
        self.gave_up_in = ANNOUNCING
        """the phase the call was in at its deadline."""

    def index(self, seq: int) -> int | None:
        i = (seq - self.first) % SEQ_MOD
        return i if i < self.n else None

    def waiting(self, m: Member) -> list[int]:
        """The shards of worker ``m``'s PS hosts the call waits for: those
        whose GO it lacks and, once it streams, those that owe a chunk's sum."""
        shards = {s for s in range(m.shards) if not self.go >> s & 1}
        if self.phase != ANNOUNCING:
            undone = (self.first + i for i in range(self.n) if self.state[i] != DONE)
            shards |= {m.shard_of(seq % SEQ_MOD) for seq in undone}
        return sorted(shards)


def bits(mask: int) -> list[int]:
    return [i for i in range(wire.MAX_WORKERS) if mask >> i & 1]


def ps_name(shard: int, shards: int) -> str:
    """How a message names one of a job's PS hosts: "the PS" when it has one."""
    return "the PS" if shards == 1 else f"PS shard {shard} of {shards}"


def shard_list(shards: list[int], of: int) -> str:
    if len(shards) == 1:
        return ps_name(shards[0], of)
    return f"PS shards {', '.join(map(str, shards))} of {of}"


def rejected(w: Member, m: payload.Control, c: Call, shard: int) -> CallRejected:
    """The exception for the REJECT ``m`` of call ``c`` by the PS of ``shard``."""
    peer = None if m.peer == wire.NO_PEER else m.peer
    try:
        reason = RejectReason(m.code)
    except ValueError:
        what, name = f"reason code {m.code}", "unknown"
    else:
        what, name = _why(w, reason, m, c, peer, shard), reason.name.lower()
    by = ps_name(shard, w.shards)
    return CallRejected(
        f"job {w.job} call {c.number} rejected by {by}: {what}", w.job, c.number, name, peer, shard
    )


def _why(
    w: Member, reason: RejectReason, m: payload.Control, c: Call, peer: int | None, shard: int
) -> str:
    ps = "{}:{}".format(*w.control_addrs[shard])
    return {
        RejectReason.UNKNOWN_JOB: f"the PS at {ps} serves no job {w.job}",
        RejectReason.WORKER: f"worker index {w.index} is not in the PS's mask {m.mask:#x}",
        RejectReason.FAN_IN: f"this worker has fan-in {w.fan_in}, the PS's job {m.fan_in}",
        RejectReason.MASK: f"this worker has mask {w.mask:#x}, the PS's job {m.mask:#x}",
        RejectReason.DUPLICATE: f"another process also runs as worker {w.index}"
        if peer in (None, w.index)
        else f"worker {peer} runs in two processes",
        RejectReason.CALL: f"this worker is at call {c.number}, worker {peer} at call "
        f"{m.call} (was one of them restarted?)",
        RejectReason.LENGTH: f"this worker has {c.size} values, worker {peer} has {m.length}",
        RejectReason.BASE: f"this worker starts at seq {c.base}, worker {peer} at {m.base} "
        "(an earlier call had other sizes)",
        RejectReason.CONFIG: f"worker {peer} quantises differently (bound or dtype; this "
        f"worker's bound is {w.bound:g})",
        RejectReason.KEY: f"the PS at {ps} can not authenticate this worker: its key is not "
        f"job {w.job}'s",
    }[reason]


def timed_out(
    w: Member, c: Call, waiting: list[int], reports: dict[int, payload.Control | None] | None
) -> AllreduceTimeout:
    """The exception for call ``c``, given up at its deadline while waiting
    for the PS hosts of these shards, with each one's report on it (None: no
    answer; ``reports`` None: the worker has no control channel)."""
    missing: set[int] | None = None
    left: set[int] = set()
    whys = []
    answers = [] if reports is None else [(s, reports.get(s)) for s in waiting]
    for s, report in answers:
        why, lacking, gone = _missing(report, w.index)
        if lacking is not None:
            missing = (missing or set()) | set(lacking)
        left |= set(gone)
        whys.append(why if w.shards == 1 else f"PS shard {s}: {why}")
    if not whys:
        whys.append("missing workers unknown (no control channel)")
    pses = shard_list(waiting, w.shards)
    if c.gave_up_in == ANNOUNCING:
        where = "waiting for the PS's GO" if w.shards == 1 else f"waiting for the GO of {pses}"
    else:
        where = f"{c.n - c.delivered} of {c.n} chunks without a sum"
        if w.shards > 1:
            where += f", at {pses}"
    restarted = bits(c.restarted)
    if restarted:
        where += "; " + ("the PS" if w.shards == 1 else shard_list(restarted, w.shards))
        where += " restarted during the call"
    return AllreduceTimeout(
        f"job {w.job} call {c.number}: no sum after {c.timeout:g} s ({where}); {'; '.join(whys)}",
        w.job, c.number, None if missing is None else sorted(missing), c.timeout,
        sorted(left - (missing or set())),
    )  # fmt: skip


def _missing(report: payload.Control | None, me: int) -> tuple[str, list[int] | None, list[int]]:
    """What one PS's ``report`` to worker ``me`` says is missing, the workers
    it names as missing, and those it says left (BYE)."""
    if report is None:
        return "missing workers unknown (the PS did not answer)", None, []
    if report.code == ReportKind.NOT_ANNOUNCED:
        return _not_started(report, me)
    if report.code == ReportKind.PARTIALS:
        missing = bits(report.missing)
        why = f"the PS's partial sums of {report.partials} chunks miss workers {missing}"
        return why, missing, []
    if report.code == ReportKind.NOTHING_HELD:
        return "missing workers unknown (the PS holds no partial sum of the call)", None, []
    if report.code == ReportKind.STOPPED:
        return _stopped(report)
    return "missing workers unknown (the PS has no record of the call)", None, []


def _not_started(report: payload.Control, me: int) -> tuple[str, list[int], list[int]]:
    """A NOT_ANNOUNCED report to worker ``me``: the workers that have not
    started the call, apart from those that said BYE (they left; the rest
    are missing).  ``me`` among them: the PS never heard its CALL (every
    one was lost), which does not make it a missing worker."""
    left = report.missing & report.base
    unheard = report.missing & ~left & 1 << me
    waiting = bits(report.missing & ~left & ~unheard)
    parts = [f"workers {waiting} have not started it"] if waiting else []
    if left:
        parts.append(f"{_who(left)} said BYE")
    if unheard:
        parts.append("the PS has not heard this worker's CALL")
    return f"{', '.join(parts)} (started: {bits(report.mask)})", waiting, bits(left)


def _stopped(report: payload.Control) -> tuple[str, list[int], list[int]]:
    """A STOPPED report: each worker that stopped as what it is (silent for
    how long, said BYE, never heard from), and those, not stopped, that the
    PS's partial sums miss; all but those that said BYE (they left) are missing."""
    left, unheard = report.missing & report.base, report.missing & report.chunks
    lacking = report.missing & report.offset & ~left & ~unheard
    silent = report.missing & ~left & ~unheard & ~lacking
    parts = []
    if silent:
        ms = report.length
        quiet = f"{ms / 1000:.1f} s" if ms else f"over {wire.LIVE_TTL:g} s"
        several = silent & (silent - 1)
        parts.append(f"{_who(silent)} silent for {quiet}" + (" or more" if several and ms else ""))
    if left:
        parts.append(f"{_who(left)} said BYE")
    if unheard:
        parts.append(f"{_who(unheard)} never heard from")
    if lacking:
        parts.append(f"the PS's partial sums of {report.partials} chunks miss {_who(lacking)}")
    why = ", ".join(parts) or "missing workers unknown (the PS named none that stopped)"
    return why, bits(silent | unheard | lacking), bits(left)


def _who(mask: int) -> str:
    """``worker 2`` or ``workers 0, 2``."""
    b = bits(mask)
    return f"worker {b[0]}" if len(b) == 1 else f"workers {', '.join(map(str, b))}"
