"""The parameter server: finishes the sums the switch could not.

It merges contributions (FALLBACK) and partial sums (PARTIAL) of many jobs
by worker bitmap, completes a chunk when the bitmaps cover the job's
workers, and sends the sum as PS_RESULT to the switch, which multicasts it
to the workers.  It also acknowledges held results (ATP), answers
retransmissions from a bounded cache of recent results, pulls missing
contributions of stalled chunks, and sums FLOAT resends of overflowed chunks.

Every datagram is checked field by field against its job (``hosts.drops``
lists what is dropped and why), and a job's junk can cost only bounded
work: at most ``max_open`` chunks open at once and at most ``budget``
pulls and answers from the cache per worker per ``stall`` (a held result
is acknowledged regardless: ATP needs one answer per chunk).  With a
control transport the PS also agrees each call with the job's workers
(``hosts.ps_control``, ``hosts.agreement``; docs/agreement.md) and drops
data outside the agreed calls.  Without one (the packet simulator's tests,
``testbed.simnet``) it agrees nothing and fences nothing: no CLI or rig
runs a PS that way.

A job's chunks may be spread over several PS hosts: this one is shard
``shard`` of ``shards`` and completes only the chunks ``esa.job.ps_shard``
gives it.  It still agrees every call (each shard fences the whole call),
drops another shard's contributions, partials and floats (``shard``), and
ignores the copies of other shards' switch sums the switch may send it
(counted in ``other_shard_results``).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field

import numpy as np
import numpy.typing as npt

from esa import wire
from esa.job import MAX_PS_SHARDS, Workers, popcount, ps_shard, valid_shards
from esa.wire import Flag, PacketType
from hosts import auth, payload, quant
from hosts.agreement import Agreement, CallBook
from hosts.budget import Budget
from hosts.drops import HostDrop, new_drops
from hosts.ps_control import ControlDesk
from hosts.transport import Addr, Transport, wait_any

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
Key = tuple[int, int]

SENDER_FLAGS = {
    PacketType.RESULT: int(Flag.OVERFLOW | Flag.HOLD),
    PacketType.FALLBACK: int(Flag.RETX | Flag.OVERFLOW),
    PacketType.PARTIAL: int(Flag.OVERFLOW),
    PacketType.FLOAT: int(Flag.RETX),
}
"""The packet types a PS is sent and the flags their senders may set (plain
ints: the complement of an IntFlag keeps only the defined flags)."""


@dataclass
class PSCounters:
    received: int = 0
    switch_results: int = 0
    other_shard_results: int = 0
    """switch sums of chunks another shard owns: not this PS's to record."""
    held_answered: int = 0
    fallbacks: int = 0
    partials: int = 0
    floats: int = 0
    merged: int = 0
    completed: int = 0
    overflowed: int = 0
    float_completed: int = 0
    answered_from_cache: int = 0
    pulls_sent: int = 0
    abandoned: int = 0
    evicted: int = 0
    suppressed: int = 0
    """replies not sent because the job's budget was spent."""
    control_received: int = 0
    calls_agreed: int = 0
    epochs_started: int = 0
    """agreed calls that did not continue the last one (a new run of a job)."""
    gos_sent: int = 0
    rejects_sent: int = 0
    reports_sent: int = 0
    challenges_sent: int = 0
    control_suppressed: int = 0
    """REJECTs and CHALLENGEs not sent: their destination's rate was spent."""
    dropped: dict[str, int] = field(default_factory=new_drops)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass
class Partial:
    touched: float
    bitmap: int = 0
    count: int = 0
    overflow: bool = False
    pulls: int = 0
    pulled: float = float("-inf")
    values: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(wire.K, np.int64))


@dataclass
class FloatSum:
    touched: float
    pulls: int = 0
    parts: dict[int, npt.NDArray[np.float32]] = field(default_factory=dict)


@dataclass(frozen=True)
class Answer:
    """A finished chunk's PS_RESULT, encoded once, resent on retransmissions."""

    flags: int
    payload: bytes


def _one_bit(b: int) -> bool:
    return b != 0 and b & (b - 1) == 0


class ParameterServer:
    def __init__(
        self,
        transport: Transport,
        switch_addr: Addr,
        jobs: dict[int, Workers] | None = None,
        stall: float = 0.2,
        max_pulls: int = 10,
        cache_size: int = 1 << 16,
        clock: Callable[[], float] = time.monotonic,
        control: Transport | None = None,
        budget: int = 512,
        max_open: int = 4096,
        shard: int = 0,
        shards: int = 1,
        keys: Mapping[int, bytes] | None = None,
        session: int | None = None,
    ) -> None:
        """``keys``: each job's control key (a job without one has its open
        key, ``hosts.auth.open_key``); ``session``: this PS process's session
        (default random)."""
        if not valid_shards(shards) or not 0 <= shard < shards:
            raise ValueError(
                f"PS shard {shard} of {shards}: shards must be 1, 2, 4 or 8 "
                f"(up to {MAX_PS_SHARDS}) and the shard below them"
            )
        self.shard, self.shards = shard, shards
        self.transport, self.switch_addr, self.clock = transport, switch_addr, clock
        self.stall, self.max_pulls, self.cache_size = stall, max_pulls, cache_size
        self.budget, self.max_open = budget, max_open
        self.jobs: dict[int, Workers] = {}
        self.books: dict[int, CallBook] = {}
        self.budgets: dict[int, Budget] = {}
        self.open: dict[int, int] = {}
        """job -> chunks with a partial or float sum in progress."""
        self.partials: dict[Key, Partial] = {}
        self.float_sums: dict[Key, FloatSum] = {}
        self.done: OrderedDict[Key, Answer] = OrderedDict()
        """LRU of finished chunks, newest last."""
        self.counters = PSCounters()
        self.frame = payload.Frame()
        self.rbuf = bytearray(wire.PAYLOAD_BYTES + 1)
        self.next_scan = 0.0
        self.desk = None if control is None else ControlDesk(
            control, self.books, auth.Keys(keys), self._forget, self._held, self._count,
            self._drop, session,
        )  # fmt: skip
        for job, spec in (jobs or {}).items():
            self.add_job(job, spec)

    def add_job(self, job: int, spec: Workers) -> None:
        if not 1 <= job <= wire.MAX_JOB_ID:
            raise ValueError(f"job must be 1..{wire.MAX_JOB_ID}, got {job}")
        self.jobs[job] = spec
        self.budgets[job] = Budget(
            self.budget * spec.fan_in / self.stall, self.budget * spec.fan_in
        )
        self.open.setdefault(job, 0)
        if self.desk is not None:
            self.books[job] = CallBook(job, spec.fan_in, spec.mask)

    def serve(self, stop: Callable[[], bool]) -> None:
        """Run until ``stop()`` is true (checked at least every ``stall / 4``)."""
        transports = (
            [self.transport] if self.desk is None else [self.transport, self.desk.transport]
        )
        while not stop():
            self.poll(self.clock())
            wait_any(transports, self.stall / 4)

    def poll(self, now: float) -> float:
        """Handle waiting datagrams and pull stalled chunks; returns the next scan time."""
        while (got := self.transport.recv_into(self.rbuf)) is not None:
            self.handle(self.rbuf, got[0], now)
        if self.desk is not None:
            self.desk.poll(now)
        if now >= self.next_scan:
            self._scan(now)
            self.next_scan = now + self.stall / 4
        return self.next_scan

    # -- receive ----------------------------------------------------------

    def _drop(self, reason: HostDrop) -> None:
        self.counters.dropped[reason] += 1

    def _count(self, name: str) -> None:
        setattr(self.counters, name, getattr(self.counters, name) + 1)

    def _check(self, h: payload.Header, spec: Workers) -> HostDrop | None:
        """Why a datagram of a known job is not what its sender would send."""
        allowed = SENDER_FLAGS.get(PacketType(h.ptype))
        if allowed is None:
            return HostDrop.PTYPE
        if h.flags & ~allowed:
            return HostDrop.FLAGS
        if h.bitmap == 0 or h.bitmap & ~spec.mask:
            return HostDrop.BITMAP
        if h.ptype == PacketType.RESULT and h.bitmap != spec.mask:
            return HostDrop.BITMAP
        if h.ptype == PacketType.FLOAT and not _one_bit(h.bitmap):
            return HostDrop.BITMAP
        if h.count != popcount(h.bitmap):
            return HostDrop.COUNT
        if self.shards > 1 and ps_shard(h.seq, self.shards) != self.shard:
            return HostDrop.SHARD
        book = self.books.get(h.job)
        if book is not None and not book.covers(h.seq):
            return HostDrop.SEQ
        return None

    def handle(self, buf: bytearray, n: int, now: float) -> None:
        self.counters.received += 1
        try:
            h = payload.decode_header(buf, n)
        except payload.Malformed:
            self._drop(HostDrop.LENGTH if n != wire.PAYLOAD_BYTES else HostDrop.PTYPE)
            return
        spec = self.jobs.get(h.job)
        if spec is None:
            self._drop(HostDrop.JOB)
            return
        reason = self._check(h, spec)
        if reason is HostDrop.SHARD and h.ptype == PacketType.RESULT:
            self.counters.other_shard_results += 1
            return
        if reason is not None:
            self._drop(reason)
            return
        values = payload.values_view(buf)
        key = (h.job, h.seq)
        if h.ptype == PacketType.RESULT:
            self._on_switch_result(key, h, values, now)
        elif h.ptype == PacketType.FLOAT:
            self.counters.floats += 1
            self._on_float(key, spec, h, values, now)
        else:
            fallback = h.ptype == PacketType.FALLBACK
            self.counters.fallbacks += fallback
            self.counters.partials += not fallback
            self._on_contribution(key, spec, h, values, now, answer=fallback)

    def _on_switch_result(
        self, key: Key, h: payload.Header, values: npt.NDArray[np.int32], now: float
    ) -> None:
        """A sum completed in the switch: done here too; a held one (ATP) is
        acknowledged with a PS_RESULT that carries it on to the workers,
        flagged HOLD: the sum of every worker's first transmission, which
        tells a worker that resent the chunk its timeout was spurious.  The
        answer kept for later retransmissions is not flagged: it may answer
        a real loss."""
        self.counters.switch_results += 1
        self._close_partial(key)
        flags = h.flags & ~int(Flag.HOLD)
        payload = self._encode(PacketType.PS_RESULT, flags, key, h.bitmap, h.count, values)
        if h.flags & Flag.HOLD:
            self.counters.held_answered += 1
            self._send(self._encode(PacketType.PS_RESULT, h.flags, key, h.bitmap, h.count, values))
        known = self.done.get(key)
        if known is None:
            if not flags & Flag.OVERFLOW:
                self._close_float(key)
            self._finish(key, Answer(flags, payload))
        elif known.payload != payload and not known.flags & Flag.FLOAT:
            self._drop(HostDrop.CONFLICT)
        else:
            self._drop(HostDrop.LATE)

    def _on_contribution(
        self,
        key: Key,
        spec: Workers,
        h: payload.Header,
        values: npt.NDArray[np.int32],
        now: float,
        answer: bool,
    ) -> None:
        """Merge a worker's contribution or a switch partial; ``answer``: a
        worker is waiting for this chunk, so tell it what we already know."""
        known = self.done.get(key)
        if known is not None:
            self.done.move_to_end(key)
            if answer:
                self.counters.answered_from_cache += 1
                self._reply(key[0], known.payload, now)
            else:
                self._drop(HostDrop.LATE)
            return
        p = self.partials.get(key)
        if p is None:
            if not self._may_open(key):
                return
            p = self.partials[key] = Partial(touched=now)
        retx = bool(h.flags & Flag.RETX)
        if p.bitmap & h.bitmap:
            self._drop(HostDrop.OVERLAP)
            if retx:
                self._pull_soon(key, p, now)
            return
        self.counters.merged += 1
        p.values += values
        p.bitmap |= h.bitmap
        p.count += h.count
        p.overflow |= bool(h.flags & Flag.OVERFLOW)
        p.touched, p.pulls = now, 0
        if p.bitmap == spec.mask:
            self._close_partial(key)
            self._complete(key, p)
        elif retx:
            self._pull_soon(key, p, now)

    def _complete(self, key: Key, p: Partial) -> None:
        overflow = p.overflow or bool((p.values > INT32_MAX).any() or (p.values < INT32_MIN).any())
        flags = Flag.OVERFLOW if overflow else 0
        self.counters.completed += 1
        self.counters.overflowed += overflow
        if not overflow:
            self._close_float(key)
        vals = np.clip(p.values, INT32_MIN, INT32_MAX)
        payload = self._encode(PacketType.PS_RESULT, flags, key, p.bitmap, p.count, vals)
        self._send(payload)
        self._finish(key, Answer(flags, payload))

    def _on_float(
        self, key: Key, spec: Workers, h: payload.Header, values: npt.NDArray[np.int32], now: float
    ) -> None:
        """A worker's float32 resend after an overflowed result.  If the PS
        knows an exact or float sum of the chunk it answers with that (the
        worker may have been sent a forged overflow); otherwise it collects
        the workers' floats and, should the others stay silent, pulls their
        int contributions, which settle whether the chunk really overflowed."""
        known = self.done.get(key)
        if known is not None and not known.flags & Flag.OVERFLOW:
            self.counters.answered_from_cache += 1
            self._reply(key[0], known.payload, now)
            return
        acc = self.float_sums.get(key)
        if acc is None:
            if not self._may_open(key):
                return
            acc = self.float_sums[key] = FloatSum(touched=now)
        if h.bitmap in acc.parts:
            self._drop(HostDrop.DUPLICATE)
            return
        acc.parts[h.bitmap] = quant.from_bits(values.astype(np.int32))
        acc.touched, acc.pulls = now, 0
        if sum(acc.parts) != spec.mask:
            return
        self._close_float(key)
        self._close_partial(key)
        total = np.zeros(wire.K, np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            for bit in sorted(acc.parts):
                total += acc.parts[bit]
        self.counters.float_completed += 1
        flags = int(Flag.FLOAT)
        payload = self._encode(
            PacketType.PS_RESULT, flags, key, spec.mask, len(acc.parts), quant.float_bits(total)
        )
        self._send(payload)
        self._finish(key, Answer(flags, payload))

    # -- control ------------------------------------------------------------

    @property
    def session(self) -> int:
        """This PS process's session (0 without a control transport)."""
        return 0 if self.desk is None else self.desk.session

    def handle_control(self, buf: bytearray, n: int, addr: Addr, now: float) -> None:
        assert self.desk is not None
        self.desk.handle(buf, n, addr, now)

    def _held(self, job: int, ag: Agreement) -> list[int]:
        """The bitmaps of the partial sums of ``job`` this PS holds for call ``ag``."""
        return [p.bitmap for (j, seq), p in self.partials.items() if j == job and ag.covers(seq)]

    def _forget(self, job: int) -> None:
        """A job starts anew: its old chunks' sums and partials mean nothing now."""
        for key in [k for k in self.done if k[0] == job]:
            del self.done[key]
        for key in [k for k in self.partials if k[0] == job]:
            self._close_partial(key)
        for key in [k for k in self.float_sums if k[0] == job]:
            self._close_float(key)

    # -- open chunks --------------------------------------------------------

    def _may_open(self, key: Key) -> bool:
        if self.open[key[0]] >= self.max_open:
            self._drop(HostDrop.BUDGET)
            return False
        self.open[key[0]] += 1
        return True

    def _close_partial(self, key: Key) -> None:
        if self.partials.pop(key, None) is not None:
            self.open[key[0]] -= 1

    def _close_float(self, key: Key) -> None:
        if self.float_sums.pop(key, None) is not None:
            self.open[key[0]] -= 1

    # -- timers -------------------------------------------------------------

    def _pull_soon(self, key: Key, p: Partial, now: float) -> None:
        """A worker retransmitted into an incomplete chunk: it is still
        waiting, so pull the others now rather than after ``stall`` (those
        that have the sum will not send again by themselves)."""
        if now - p.pulled >= self.stall / 4:
            self._pull(key, p, now)

    def _pull(self, key: Key, p: Partial, now: float) -> None:
        """Pull the workers missing from ``p``; a pull over budget is not
        counted, and the next scan tries again."""
        if self._send_pull(key, p.bitmap, p.count, now):
            p.pulls += 1
            p.touched = p.pulled = now

    def _send_pull(self, key: Key, bitmap: int, count: int, now: float) -> bool:
        zeros = np.zeros(wire.K, np.int32)
        sent = self._reply(key[0], self._encode(PacketType.PULL, 0, key, bitmap, count, zeros), now)
        self.counters.pulls_sent += sent
        return sent

    def _scan(self, now: float) -> None:
        """Pull partials untouched for ``stall``; pull the int contributions of
        float sums of chunks the PS has no sum of (see ``_on_float``); drop
        either after ``max_pulls`` stalls without progress."""
        for key, p in list(self.partials.items()):
            if now - p.touched < self.stall:
                continue
            if p.pulls >= self.max_pulls:
                self.counters.abandoned += 1
                self._close_partial(key)
                continue
            self._pull(key, p, now)
        for key, acc in list(self.float_sums.items()):
            if now - acc.touched < self.stall:
                continue
            if acc.pulls >= self.max_pulls:
                self.counters.abandoned += 1
                self._close_float(key)
                continue
            acc.pulls += 1
            acc.touched = now
            if key not in self.done:
                held = self.partials.get(key)
                bitmap, count = (0, 0) if held is None else (held.bitmap, held.count)
                self._send_pull(key, bitmap, count, now)

    # -- send -------------------------------------------------------------

    def _finish(self, key: Key, answer: Answer) -> None:
        self.done[key] = answer
        self.done.move_to_end(key)
        if len(self.done) > self.cache_size:
            self.done.popitem(last=False)
            self.counters.evicted += 1

    def _encode(
        self, ptype: int, flags: int, key: Key, bitmap: int, count: int, values: npt.ArrayLike
    ) -> bytes:
        header = payload.Header(ptype, flags, key[0], key[1], bitmap, count)
        return bytes(self.frame.pack(header, values))

    def _reply(self, job: int, payload: bytes, now: float) -> bool:
        """Send a pull or an answer from the cache (what one junk datagram
        could make the PS send many of), within the job's budget."""
        if not self.budgets[job].take(now):
            self.counters.suppressed += 1
            return False
        self._send(payload)
        return True

    def _send(self, payload: bytes) -> None:
        self.transport.send(payload, self.switch_addr)
