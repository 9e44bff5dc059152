"""The PS's side of call agreement for one job (docs/agreement.md).

Before each allreduce call every worker announces it to its PS (CALL: call
number, first seq, chunk count, tensor length and a digest of the job's
configuration).  The PS answers GO once every worker index of the job's
mask is announced alike by the process that holds it (``hosts.agreement.roster``),
and REJECT, naming the field and the worker that differ, as soon as two
disagree.  So a worker whose tensor size, bound or call number differs from
its peers' fails before it sends a value, and all workers of a job start a
call within one round trip of each other.

The agreed calls also fence the data path: the PS drops contributions to
sequence numbers outside the job's last two agreed calls.  An agreement
that does not continue the last one (other processes, or not the next
call) starts a new epoch, and the PS forgets the job's old sums.  After a
PS restart the workers streaming a call RESUME it: the new PS adopts the
call from the first RESUME, and the others join it.

Only authentic messages of the current PS session reach a ``CallBook``
(``hosts.agreement.desk``); it drops copies by their message number.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from esa import wire
from esa.job import Workers
from esa.wire import ControlType, RejectReason, ReportKind
from hosts.agreement.announcements import SEQ_MOD, Agreement, Announcement, differs
from hosts.agreement.answers import Answers
from hosts.agreement.roster import Roster, RosterState, WorkerProcess
from hosts.net import payload, quant
from hosts.net.drops import HostDrop
from hosts.net.transport import Addr

Replies = list[tuple[payload.Control, Addr]]


@dataclass
class StoppedWorkers:
    """The workers of an agreed call that stopped, as a REPORT names them
    (bitmaps): silent for ``LIVE_TTL`` or more (``quiet_ms`` the most recently
    heard of them, 0: unknown), said BYE, or never heard from in the call
    (not among the processes that resumed it after a restart, and no live
    process holds its index)."""

    silent: int = 0
    left: int = 0
    unheard: int = 0
    quiet_ms: int = 0

    @property
    def all(self) -> int:
        return self.silent | self.left | self.unheard


@dataclass
class Outcome:
    """What a message leads to: answers to send, a drop reason, and whether
    a call was agreed, in a new epoch (the PS then forgets the job's sums)."""

    replies: Replies = field(default_factory=list)
    drop: HostDrop | None = None
    agreed: bool = False
    new_epoch: bool = False


class CallBook:
    """One job's worker processes, announcements and agreed calls."""

    def __init__(self, job: int, fan_in: int, mask: int) -> None:
        self.job, self.fan_in, self.mask = job, fan_in, mask
        self.answers = Answers(job, Workers(fan_in, mask))
        self.workers = frozenset(i for i in range(wire.MAX_WORKERS) if mask >> i & 1)
        self.roster = Roster()
        self.agreed: list[Agreement] = []
        """the last two agreed calls, newest last."""
        self.pending: dict[int, Announcement] = {}
        """index -> its holder's announcement of the next call."""
        self.gave_up: dict[int, Announcement] = {}
        """index -> its holder's announcement of a call not agreed that the
        holder gave up (it asked STATUS about it): it started that call, and
        left it."""

    def covers(self, seq: int) -> bool:
        return any(a.covers(seq) for a in self.agreed)

    def agreement(self, call: int) -> Agreement | None:
        return next((a for a in self.agreed if a.call == call), None)

    def snapshot(self) -> tuple[object, ...]:
        """Everything the book holds, to compare: a message dropped changes none of it."""
        return (self.roster.snapshot(), repr(self.pending), repr(self.gave_up), repr(self.agreed))

    # -- messages -------------------------------------------------------------

    def handle(
        self,
        msg: payload.Control,
        addr: Addr,
        now: float,
        held: Callable[[Agreement], list[int]],
    ) -> Outcome:
        """An authentic message of the current session; ``held`` gives the
        bitmaps of the PS's partial sums of an agreed call (for REPORT)."""
        p = self.roster.known(msg.nonce)
        if p is not None and (p.index != msg.worker or not p.window.fresh(msg.counter)):
            return Outcome(drop=HostDrop.STRANGER if p.index != msg.worker else HostDrop.REPLAY)
        if msg.ctype in (ControlType.CALL, ControlType.RESUME):
            return self._on_call(msg, addr, now)
        if p is None:
            return Outcome(drop=HostDrop.STRANGER)
        banned = self.roster.hear(p, msg, addr, now)
        out = Outcome(self._fail(banned, msg))
        if p.state is RosterState.BANNED and p not in banned:
            out.replies.append(
                self.answers.reject(msg, addr, RejectReason.DUPLICATE, None, msg.worker)
            )
        elif p.state is RosterState.GONE:
            self._withdraw(p)
        elif msg.ctype == ControlType.STATUS:
            out.replies.append((self._report(msg, now, held), addr))
            q = self.pending.get(p.index)
            if q is not None and q.nonce == p.nonce and q.call == msg.call:
                self.gave_up[p.index] = self.pending.pop(p.index)
        return out

    def _on_call(self, msg: payload.Control, addr: Addr, now: float) -> Outcome:
        if msg.length == 0 or msg.chunks != quant.chunks(msg.length):
            return Outcome(drop=HostDrop.CONTROL)
        table = self.answers.against_table(msg)
        if table is not None:
            return Outcome([self.answers.reject(msg, addr, table, None)])
        p, banned = self.roster.claim(msg, addr, now)
        out = Outcome(self._fail(banned, msg))
        if p.state is RosterState.BANNED:
            if p not in banned:
                out.replies.append(
                    self.answers.reject(msg, addr, RejectReason.DUPLICATE, None, p.index)
                )
            return out
        if p.state is not RosterState.HOLDER:
            out.drop = None if p.state is RosterState.CONTENDER else HostDrop.STRANGER
            return out
        a = Announcement.of(msg, addr)
        ag = self.agreement(msg.call)
        m = None if ag is None else ag.members.get(msg.worker)
        resume = msg.ctype == ControlType.RESUME
        member = m is not None and m.nonce == msg.nonce
        if ag is not None and (member or (m is None and resume)):
            if a.shape() != ag.shape() or (resume and a.offset != ag.offset):
                peer = next((x for x in ag.members.values() if x.worker != a.worker), m)
                assert peer is not None
                out.replies.append(self.answers.reject(msg, addr, differs(a, peer), peer))
                return out
            ag.members[msg.worker] = a
            out.replies.append(self.answers.go(ag, a))
            return out
        if ag is None and self._is_past(msg, p):
            out.drop = HostDrop.STALE
            return out
        last = self.agreed[-1] if self.agreed else None
        if resume and (last is None or msg.call > last.call):
            return self._adopt(a, out)
        self._pend(a, now, out)
        if ag is not None and m is None:
            self._join(ag, out)
        return out

    # -- announcing and agreeing ---------------------------------------------

    def _pend(self, a: Announcement, now: float, out: Outcome) -> None:
        """Add ``a`` to the next call's announcements; agree once every index has one."""
        self.pending = {
            i: q
            for i, q in self.pending.items()
            if (h := self.roster.holders.get(i)) is not None
            and h.nonce == q.nonce
            and self.roster.live(h, now)
        }
        for q in self.pending.values():
            if q.worker != a.worker and q.shape() != a.shape():
                reason = differs(a, q)
                if reason is not RejectReason.CALL:
                    self.pending[a.worker] = a
                out.replies.append(self.answers.reject_announcement(a, reason, q))
                out.replies.append(self.answers.reject_announcement(q, differs(q, a), a))
                return
        self.pending[a.worker] = a
        self.gave_up.pop(a.worker, None)
        if set(self.pending) == self.workers:
            members, self.pending = self.pending, {}
            self._record(Agreement(*a.shape(), 0, members), out)

    def _adopt(self, a: Announcement, out: Outcome) -> Outcome:
        """A RESUME: the call was agreed with this PS's predecessor; the
        pending announcements of it join, those that differ are rejected."""
        ag = Agreement(*a.shape(), a.offset, {a.worker: a})
        for i, q in list(self.pending.items()):
            if q.call == a.call and i != a.worker:
                del self.pending[i]
                if q.shape() == a.shape() and q.offset in (0, a.offset):
                    ag.members[i] = q
                else:
                    out.replies.append(self.answers.reject_announcement(q, differs(q, a), a))
        self.pending.pop(a.worker, None)
        self._record(ag, out, adopted=True)
        return out

    def _join(self, ag: Agreement, out: Outcome) -> None:
        """Announcements of adopted call ``ag`` by the processes it lacks
        join it once they complete its epoch's processes (their offset is
        the epoch's): those whose GO the PS's predecessor sent and lost.
        New processes that announce the same call start an epoch of their own."""
        joiners = {
            i: q for i, q in self.pending.items() if q.call == ag.call and q.shape() == ag.shape()
        }
        nonces = {i: q.nonce for i, q in [*ag.members.items(), *joiners.items()]}
        if set(nonces) != self.workers or wire.epoch_offset(self.job, nonces) != ag.offset:
            return
        for i, q in joiners.items():
            del self.pending[i]
            ag.members[i] = q
            out.replies.append(self.answers.go(ag, q))

    def _record(self, ag: Agreement, out: Outcome, adopted: bool = False) -> None:
        """Keep ``ag``; a call that does not continue the last agreed one
        starts an epoch, whose offset comes from its processes (adopted from
        a RESUME: the call's own)."""
        last = self.agreed[-1] if self.agreed else None
        continues = (
            last is not None
            and ag.call == last.call + 1
            and ag.base == (last.base + last.chunks) % SEQ_MOD
            and (not adopted or ag.offset == last.offset)
            and all(
                m.nonce == last.members[i].nonce for i, m in ag.members.items() if i in last.members
            )
        )
        if last is not None and continues:
            ag.offset = last.offset
        elif not adopted:
            ag.offset = wire.epoch_offset(self.job, {i: m.nonce for i, m in ag.members.items()})
        self.agreed = [*self.agreed[-1:], ag] if continues else [ag]
        out.agreed, out.new_epoch = True, not continues
        out.replies += [self.answers.go(ag, ag.members[i]) for i in sorted(ag.members)]

    def _is_past(self, msg: payload.Control, p: WorkerProcess) -> bool:
        """A delayed CALL of a call its process is long past."""
        last = self.agreed[-1] if self.agreed else None
        m = None if last is None else last.members.get(p.index)
        return m is not None and m.nonce == p.nonce and last is not None and msg.call < last.call

    def _withdraw(self, p: WorkerProcess) -> None:
        """``p`` left: its announcement no longer counts."""
        q = self.pending.get(p.index)
        if q is not None and q.nonce == p.nonce:
            del self.pending[p.index]

    def _fail(self, banned: list[WorkerProcess], msg: payload.Control) -> Replies:
        """Processes found running as one index (``msg`` showed it): each of
        them, every announcer of the next call and the members of the last
        call they agreed are sent a REJECT (DUPLICATE, ``peer`` the index),
        for the call each is in; none of those calls can complete."""
        replies: Replies = []
        told: set[int] = set()

        def tell(worker: int, nonce: int, addr: Addr, call: int, index: int) -> None:
            if nonce not in told:
                told.add(nonce)
                to = payload.Control(ControlType.CALL, 0, self.job, worker, 0, nonce, call)
                replies.append(self.answers.reject(to, addr, RejectReason.DUPLICATE, None, index))

        for b in banned:
            if b.nonce == msg.nonce:
                tell(b.index, b.nonce, b.addr, msg.call, b.index)
            for q in self.pending.values():
                tell(q.worker, q.nonce, q.addr, q.call, b.index)
            self.pending.clear()
            for ag in reversed(self.agreed):
                m = ag.members.get(b.index)
                if m is not None and m.nonce == b.nonce:
                    for x in ag.members.values():
                        tell(x.worker, x.nonce, x.addr, ag.call, b.index)
                    break
            tell(b.index, b.nonce, b.addr, self.agreed[-1].call if self.agreed else 0, b.index)
        return replies

    # -- answers --------------------------------------------------------------

    def _report(
        self, msg: payload.Control, now: float, held: Callable[[Agreement], list[int]]
    ) -> payload.Control:
        """The REPORT answering STATUS ``msg``."""
        kind, announced, missing, partials = ReportKind.UNKNOWN_CALL, 0, 0, 0
        s = StoppedWorkers()
        ag = self.agreement(msg.call)
        m = None if ag is None else ag.members.get(msg.worker)
        lacking = 0  # STOPPED: workers not stopped whose contributions the partial sums miss
        if ag is not None and m is not None and m.nonce == msg.nonce:
            s = self._stopped(ag, now)
            bitmaps = held(ag)
            partials, announced = len(bitmaps), self.mask & ~s.all
            for bitmap in bitmaps:
                missing |= self.mask & ~bitmap
            if s.all:
                kind, lacking = ReportKind.STOPPED, missing & ~s.all
                missing = s.all | lacking
            else:
                kind = ReportKind.PARTIALS if bitmaps else ReportKind.NOTHING_HELD
        elif announced := self._announced(msg):
            kind, missing = ReportKind.NOT_ANNOUNCED, self.mask & ~announced
            s.left = missing & (self._said_bye(missing, now) | self._left_call(msg, now))
        return payload.Control(
            ControlType.REPORT, kind, self.job, msg.worker, 0, msg.nonce, msg.call,
            base=s.left, chunks=s.unheard, length=s.quiet_ms, mask=announced, missing=missing,
            partials=partials, offset=lacking,
        )  # fmt: skip

    def _announced(self, msg: payload.Control) -> int:
        """The workers whose announcement of call ``msg.call`` (not agreed)
        is pending, and the asker if it announced the call and gave it up
        (it asks again: the PS's REPORT to it was lost)."""
        announced = sum(1 << q.worker for q in self.pending.values() if q.call == msg.call)
        q = self.gave_up.get(msg.worker)
        if q is not None and q.nonce == msg.nonce and q.call == msg.call:
            announced |= 1 << q.worker
        return announced

    def _left_call(self, msg: payload.Control, now: float) -> int:
        """The workers other than the asker that announced call ``msg.call``
        and gave it up (their BYE may be on its way), while no other live
        process holds or claims their index."""
        left = 0
        for i, q in self.gave_up.items():
            if i == msg.worker or q.call != msg.call:
                continue
            p = self.roster.known(q.nonce)
            if p is None or p.state not in (RosterState.HOLDER, RosterState.GONE):
                continue
            if not self.roster.live_rivals(i, now, other_than=p):
                left |= 1 << i
        return left

    def _said_bye(self, workers: int, now: float) -> int:
        """Of ``workers`` (a bitmap), those whose last process said BYE and
        whose index no live process holds or claims since."""
        last = {p.index: p for p in self.roster.procs.values()}
        left = 0
        for i in sorted(self.workers):
            if not workers >> i & 1:
                continue
            if self.roster.live_rivals(i, now):
                continue
            q = last.get(i)
            if q is not None and q.state is RosterState.GONE:
                left |= 1 << i
        return left

    def _stopped(self, ag: Agreement, now: float) -> StoppedWorkers:
        """The workers of agreed call ``ag`` that stopped, each as what it is."""
        s = StoppedWorkers()
        quiet: list[float] = []
        for i in sorted(self.workers):
            m = ag.members.get(i)
            p = None if m is None else self.roster.known(m.nonce)
            if m is None:
                if not self.roster.live_rivals(i, now):
                    s.unheard |= 1 << i
            elif p is not None and p.state is RosterState.GONE:
                s.left |= 1 << i
            elif p is None or not self.roster.live(p, now):
                s.silent |= 1 << i
                if p is not None:
                    quiet.append(now - p.heard)
        if quiet:
            s.quiet_ms = max(1, min(int(min(quiet) * 1000), (1 << 32) - 1))
        return s
