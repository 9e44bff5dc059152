"""The PS's side of call agreement.

Before each allreduce call every worker announces it to its PS over the
control channel (CALL: call number, first seq, chunk count, tensor length
and a digest of the job's configuration).  The PS answers GO only once
every worker of the job's mask announced the same call with the same
values, and REJECT, naming the field and the worker that differ, as soon as
two disagree.  So a worker whose tensor size, bound or call number differs
from its peers' fails before it sends a value, and all workers of a job
start a call within one round trip of each other (none parks half-filled
slots in the shared switch pool while a peer is still computing).

The agreed calls also fence the data path: the PS drops contributions to
sequence numbers outside the job's last two agreed calls, so junk that is
not for a call in progress opens nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from esa import wire
from esa.wire import ControlType, RejectReason, ReportKind
from hosts.codec import Control
from hosts.transport import Addr

SEQ_MOD = 1 << 32
PENDING_TTL = 3.0
"""Seconds an announcement is kept without being resent.  A waiting worker
resends its CALL at least every second; a dead one's announcement expires
and no longer holds its index."""
IDLE_FORGET = 5.0
"""Seconds without accepted traffic after which a job's agreed calls no
longer bind its worker processes.  Until then a second process announcing an
agreed call under a taken index is rejected as a duplicate; after it, a job
restarted against a running PS starts a new epoch."""
BANNED_KEPT = 64
"""Nonces of duplicate processes remembered per job."""


@dataclass
class Announcement:
    worker: int
    nonce: int
    addr: Addr
    call: int
    base: int
    chunks: int
    length: int
    digest: int
    heard: float

    @classmethod
    def of(cls, msg: Control, addr: Addr, now: float) -> Announcement:
        return cls(
            msg.worker, msg.nonce, addr, msg.call, msg.base, msg.chunks, msg.length, msg.digest, now
        )

    def shape(self) -> tuple[int, int, int, int, int]:
        return self.call, self.base, self.chunks, self.length, self.digest


@dataclass
class Agreement:
    """A call every worker announced alike, and who they are."""

    call: int
    base: int
    chunks: int
    length: int
    digest: int
    members: dict[int, Announcement]

    def covers(self, seq: int) -> bool:
        return (seq - self.base) % SEQ_MOD < self.chunks


@dataclass
class Outcome:
    """What a CALL leads to: answers to send and whether the job starts anew
    (its first agreement, or one that does not continue the last), in which
    case the PS forgets the job's old chunks."""

    replies: list[tuple[Control, Addr]] = field(default_factory=list)
    agreed: bool = False
    new_epoch: bool = False
    stale: bool = False
    """a delayed copy of a CALL its worker is long past; nothing to answer."""


def _differs(a: Announcement, b: Announcement) -> RejectReason:
    if a.call != b.call:
        return RejectReason.CALL
    if a.length != b.length or a.chunks != b.chunks:
        return RejectReason.LENGTH
    if a.base != b.base:
        return RejectReason.BASE
    return RejectReason.CONFIG


class CallBook:
    """One job's announcements and agreed calls."""

    def __init__(self, job: int, fan_in: int, mask: int) -> None:
        self.job, self.fan_in, self.mask = job, fan_in, mask
        self.workers = frozenset(i for i in range(wire.MAX_WORKERS) if mask >> i & 1)
        self.agreed: list[Agreement] = []
        """the last two agreed calls, newest last."""
        self.pending: dict[int, Announcement] = {}
        self.banned: OrderedDict[int, None] = OrderedDict()
        self.active = float("-inf")

    def covers(self, seq: int) -> bool:
        return any(a.covers(seq) for a in self.agreed)

    def touch(self, now: float) -> None:
        """The job's data or its workers' control traffic was accepted now."""
        self.active = now

    def agreement(self, call: int) -> Agreement | None:
        return next((a for a in self.agreed if a.call == call), None)

    def knows(self, worker: int, nonce: int) -> bool:
        """Whether ``nonce`` is the process announced for ``worker``."""
        held = [self.pending.get(worker)] + [a.members.get(worker) for a in self.agreed]
        return any(h is not None and h.nonce == nonce for h in held)

    def announced(self, call: int) -> int:
        """Bitmap of the workers whose pending announcement is for ``call``."""
        return sum(1 << p.worker for p in self.pending.values() if p.call == call)

    def report(self, msg: Control, held: list[int]) -> Control:
        """The REPORT answering STATUS ``msg``, given the bitmaps of the PS's
        partial sums of the call (if it is agreed)."""
        kind, announced, missing = ReportKind.UNKNOWN_CALL, 0, 0
        if self.agreement(msg.call) is not None:
            announced = self.mask
            for bitmap in held:
                missing |= self.mask & ~bitmap
            kind = ReportKind.PARTIALS if held else ReportKind.NOTHING_HELD
        elif announced := self.announced(msg.call):
            kind, missing = ReportKind.NOT_ANNOUNCED, self.mask & ~announced
        return Control(
            ControlType.REPORT, kind, self.job, msg.worker, 0, msg.nonce, msg.call,
            mask=announced, missing=missing, partials=len(held),
        )  # fmt: skip

    def on_call(self, msg: Control, addr: Addr, now: float) -> Outcome:
        table = self._against_table(msg)
        if table is not None:
            return Outcome([self._reject(msg, addr, table, None)])
        if msg.nonce in self.banned:
            return Outcome([self._reject(msg, addr, RejectReason.DUPLICATE, None)])
        idle = now - self.active >= IDLE_FORGET
        if self.knows(msg.worker, msg.nonce):
            self.active = now
        a = Announcement.of(msg, addr, now)
        ag = self.agreement(msg.call)
        if ag is not None:
            m = ag.members[msg.worker]
            if m.nonce == msg.nonce:
                m.addr = addr
                if m.shape() == a.shape():
                    return Outcome([self._go(ag, m)])
                return Outcome([self._reject(msg, addr, _differs(a, m), m)])
            if not idle:
                return Outcome([self._reject(msg, addr, RejectReason.DUPLICATE, m)])
        elif self._is_past(msg):
            return Outcome(stale=True)
        return self._pend(msg, a, now)

    def _pend(self, msg: Control, a: Announcement, now: float) -> Outcome:
        """Add ``a`` to the call being announced.  The processes of the last
        agreed call come first: a stranger's announcement (a forged CALL, a
        restarted or second process) never holds up or evicts theirs."""
        addr = a.addr
        member = self._is_member(msg.worker, msg.nonce)
        self._expire(now, strangers=not member)
        held = self.pending.get(msg.worker)
        if held is not None and held.nonce != msg.nonce:
            if member or self._is_member(held.worker, held.nonce):
                self._ban((held if member else msg).nonce)
                if not member:
                    return Outcome([self._reject(msg, addr, RejectReason.DUPLICATE, held)])
            else:
                del self.pending[msg.worker]
                self._ban(held.nonce)
                self._ban(msg.nonce)
                return Outcome([self._reject(msg, addr, RejectReason.DUPLICATE, held)])
        for p in self.pending.values():
            if p.worker != msg.worker and p.shape() != a.shape():
                reason = _differs(a, p)
                if reason is not RejectReason.CALL:
                    self.pending[msg.worker] = a
                return Outcome([self._reject(msg, addr, reason, p)])
        self.pending[msg.worker] = a
        if set(self.pending) != self.workers:
            return Outcome()
        return self._agree(a)

    def _agree(self, a: Announcement) -> Outcome:
        members, self.pending = self.pending, {}
        self.active = a.heard
        last = self.agreed[-1] if self.agreed else None
        continues = (
            last is not None
            and a.call == last.call + 1
            and a.base == (last.base + last.chunks) % SEQ_MOD
            and all(members[i].nonce == last.members[i].nonce for i in self.workers)
        )
        if not continues:
            self.agreed.clear()
        ag = Agreement(a.call, a.base, a.chunks, a.length, a.digest, members)
        self.agreed = [*self.agreed[-1:], ag]
        replies = [self._go(ag, members[i]) for i in sorted(members)]
        return Outcome(replies, agreed=True, new_epoch=not continues)

    def _expire(self, now: float, strangers: bool) -> None:
        """Forget announcements not resent for ``PENDING_TTL`` and, unless
        ``strangers``, those of processes outside the last agreed call."""
        self.pending = {
            i: p
            for i, p in self.pending.items()
            if now - p.heard < PENDING_TTL and (strangers or self._is_member(i, p.nonce))
        }

    def _is_member(self, worker: int, nonce: int) -> bool:
        """Whether ``nonce`` ran as ``worker`` in the last agreed call."""
        m = self.agreed[-1].members.get(worker) if self.agreed else None
        return m is not None and m.nonce == nonce

    def _is_past(self, msg: Control) -> bool:
        if not self.agreed:
            return False
        last = self.agreed[-1]
        return last.members[msg.worker].nonce == msg.nonce and msg.call < last.call

    def _against_table(self, msg: Control) -> RejectReason | None:
        if msg.worker not in self.workers:
            return RejectReason.WORKER
        if msg.fan_in != self.fan_in:
            return RejectReason.FAN_IN
        if msg.mask != self.mask:
            return RejectReason.MASK
        return None

    def _ban(self, nonce: int) -> None:
        self.banned[nonce] = None
        while len(self.banned) > BANNED_KEPT:
            self.banned.popitem(last=False)

    def _go(self, ag: Agreement, m: Announcement) -> tuple[Control, Addr]:
        msg = Control(
            ControlType.GO, 0, self.job, m.worker, 0, m.nonce, ag.call, ag.base, ag.chunks,
            ag.length, self.fan_in, self.mask, 0, 0, ag.digest,
        )  # fmt: skip
        return msg, m.addr

    def _reject(
        self, msg: Control, addr: Addr, reason: RejectReason, peer: Announcement | None
    ) -> tuple[Control, Addr]:
        """A REJECT to ``msg``'s sender carrying what it differs from: the
        peer's announcement, or (peer None) its own with the PS's table."""
        src = msg if peer is None else peer
        reply = Control(
            ControlType.REJECT, reason, self.job, msg.worker,
            wire.NO_PEER if peer is None else peer.worker, msg.nonce, src.call, src.base,
            src.chunks, src.length, self.fan_in, self.mask, 0, 0, src.digest,
        )  # fmt: skip
        return reply, addr
