"""One datagram's way through the PS, top to bottom: ``Aggregator.handle``.

It checks the datagram against its job, its shard and the agreed calls,
then finishes chunks: contributions and switch partials merge into the
chunk's partial sum (``hosts.ps.sums``) until it covers the job's workers;
the sum goes out and its answer is kept (``hosts.ps.results``) to answer
retransmissions.  A chunk that stalls has its missing workers pulled, and a
chunk whose sum overflowed is summed again from the workers' FLOAT resends
(float recovery).

What it sends goes through the PS's ``Outbox``, below: sums go out as they
complete.  A pull or an answer from the result cache is what one junk
datagram could make the PS send many of, so each job may draw at most
``budget`` of them per worker per ``stall`` (a token bucket,
``hosts.net.budget``); the rest are counted as ``suppressed`` and not sent.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from esa import wire
from esa.job import Workers, ps_shard
from esa.wire import Flag, PacketType
from hosts.agreement.announcements import Agreement
from hosts.agreement.callbook import CallBook
from hosts.net import payload, quant
from hosts.net.budget import Budget
from hosts.net.checks import decode, ps_check
from hosts.net.counters import PSCounters
from hosts.net.drops import HostDrop
from hosts.net.transport import Addr, Transport
from hosts.ps.results import Answer, ResultCache
from hosts.ps.sums import Key, OpenSums, Partial
from hosts.timing.ps_stall import PullStall
from hosts.timing.rto import holds_first_sends


class Aggregator:
    """Finishes the chunks of the PS's ``jobs`` (shard ``shard`` of
    ``shards``) into ``done`` from the open ``sums``, within the calls its
    ``books`` agreed (none: no fence); a chunk is pulled once untouched for
    ``stall.value`` seconds (what it learns from the chunks,
    ``hosts.timing.ps_stall``), and given up after ``max_pulls`` pulls."""

    def __init__(
        self,
        jobs: Mapping[int, Workers],
        books: Mapping[int, CallBook],
        sums: OpenSums,
        done: ResultCache,
        outbox: Outbox,
        counters: PSCounters,
        stall: PullStall,
        max_pulls: int,
        shard: int = 0,
        shards: int = 1,
    ) -> None:
        self.jobs, self.books, self.shard, self.shards = jobs, books, shard, shards
        self.sums, self.done, self.outbox, self.counters = sums, done, outbox, counters
        self.stall, self.max_pulls = stall, max_pulls

    def handle(self, buf: bytearray, n: int, src: Addr, now: float) -> None:
        """The datagram of ``n`` bytes in ``buf`` from ``src``, top to bottom:
        its header, its job, what its sender may send, its source, its shard
        and its call (``_check``), then what its type asks for: a switch's sum
        (``on_switch_result``), a worker's float resend (``on_float``), or a
        contribution or partial (``on_contribution``)."""
        self.counters.received += 1
        h = decode(buf, n)
        if isinstance(h, HostDrop):
            self._drop(h)
            return
        spec = self.jobs.get(h.job)
        if spec is None:
            self._drop(HostDrop.JOB)
            return
        reason = self._check(h, spec, src)
        if reason is HostDrop.SHARD and h.ptype == PacketType.RESULT:
            self.counters.other_shard_results += 1
            return
        if reason is not None:
            self._drop(reason)
            return
        values = payload.values_view(buf)
        key = (h.job, h.seq)
        if h.ptype == PacketType.RESULT:
            self.on_switch_result(key, h, values)
        elif h.ptype == PacketType.FLOAT:
            self.counters.floats += 1
            self.on_float(key, spec, h, values, now)
        else:
            fallback = h.ptype == PacketType.FALLBACK
            self.counters.fallbacks += fallback
            self.counters.partials += not fallback
            self.on_contribution(key, spec, h, values, now, answer=fallback)

    def _check(self, h: payload.Header, spec: Workers, src: Addr) -> HostDrop | None:
        """Why a datagram of a known job is not for this PS: not what its
        sender would send (``hosts.net.checks``), a sum the switch completed
        from any address but the switch's, another shard's or outside the
        agreed calls.  The switch sends the PS its copy of such a sum, and
        a sum it holds (ATP) to the PS alone, from the address of the
        switch where the job's sums complete, the one the PS sends to
        (``p4src/include/replicas.p4``, ``forwarding.p4``)."""
        reason = ps_check(h, spec)
        if reason is not None:
            return reason
        if h.ptype == PacketType.RESULT and src[0] != self.outbox.switch_addr[0]:
            return HostDrop.SOURCE
        if self.shards > 1 and ps_shard(h.seq, self.shards) != self.shard:
            return HostDrop.SHARD
        book = self.books.get(h.job)
        if book is not None and not book.covers(h.seq):
            return HostDrop.SEQ
        return None

    def _drop(self, reason: HostDrop) -> None:
        self.counters.dropped[reason] += 1

    # -- a sum the switch completed --------------------------------------------

    def on_switch_result(self, key: Key, h: payload.Header, values: npt.NDArray[np.int32]) -> None:
        """A sum completed in the switch: done here too; a held one (ATP) is
        acknowledged with a PS_RESULT that carries it on to the workers,
        flagged HOLD unless a resent contribution went into it (RETX): the
        sum of every worker's first transmission, which tells a worker that
        resent the chunk its timeout was spurious.  The answer kept for later
        retransmissions is not flagged: it may answer a real loss."""
        self.counters.switch_results += 1
        self.sums.close_partial(key)
        flags = h.flags & ~int(Flag.HOLD | Flag.RETX)
        encode = self.outbox.encode
        datagram = encode(PacketType.PS_RESULT, flags, key, h.bitmap, h.count, values)
        if h.flags & Flag.HOLD:
            self.counters.held_answered += 1
            held = flags if h.flags & Flag.RETX else flags | Flag.HOLD
            self.outbox.send(encode(PacketType.PS_RESULT, held, key, h.bitmap, h.count, values))
        known = self.done.get(key)
        if known is None:
            if not flags & Flag.OVERFLOW:
                self.sums.close_float(key)
            self._finish(key, Answer(flags, datagram))
        elif known.payload != datagram and not known.flags & Flag.FLOAT:
            self._drop(HostDrop.CONFLICT)
        else:
            self._drop(HostDrop.LATE)

    # -- a worker's contribution, or a partial the switch pushed out -----------

    def on_contribution(
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
        known = self.done.use(key)
        if known is not None:
            if answer:
                self.counters.answered_from_cache += 1
                self.outbox.reply(key[0], known.payload, now)
            else:
                self._drop(HostDrop.LATE)
            return
        p = self.sums.partial(key, now)
        if p is None:
            self._drop(HostDrop.BUDGET)
            return
        retx = bool(h.flags & Flag.RETX)
        if p.bitmap & h.bitmap:
            self._drop(HostDrop.OVERLAP)
            if retx:
                self._pull_soon(key, p, now)
            return
        self.counters.merged += 1
        if p.bitmap:
            self._observe(p, now, early=answer and not retx)
        first = holds_first_sends(h.ptype, h.flags, h.bitmap)
        p.merge(h.bitmap, h.count, bool(h.flags & Flag.OVERFLOW), values, now, first)
        if p.bitmap == spec.mask:
            if p.pulled == float("-inf") and p.opened < now:
                self.stall.gathered(now - p.opened)
            self.sums.close_partial(key)
            self._complete(key, p)
        elif retx:
            self._pull_soon(key, p, now)

    def _complete(self, key: Key, p: Partial) -> None:
        """Send the sum the PS gathered; flagged HOLD where it holds only the
        workers' first sends, as the answer to ATP's held RESULT is: a
        worker that resent the chunk learns that its timeout was spurious
        (``hosts.timing.rto``).  Without the flag a PS-bound job's workers
        would learn it from no sum, and a queue at the PS's link longer
        than their timeout would fill with resends."""
        overflow, values = p.result()
        self.counters.completed += 1
        self.counters.overflowed += overflow
        if not overflow:
            self.sums.close_float(key)
        flags = Flag.OVERFLOW if overflow else 0
        self._send_sum(key, flags, p.bitmap, p.count, values, first=not p.resent)

    # -- a worker's float32 resend ---------------------------------------------

    def on_float(
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
            self.outbox.reply(key[0], known.payload, now)
            return
        acc = self.sums.float_sum(key, now)
        if acc is None:
            self._drop(HostDrop.BUDGET)
            return
        if h.bitmap in acc.parts:
            self._drop(HostDrop.DUPLICATE)
            return
        acc.add(h.bitmap, values, now)
        if not acc.covers(spec.mask):
            return
        self.sums.close_float(key)
        self.sums.close_partial(key)
        self.counters.float_completed += 1
        total = quant.float_bits(acc.total())
        self._send_sum(key, int(Flag.FLOAT), spec.mask, len(acc.parts), total)

    # -- a finished chunk ------------------------------------------------------

    def _send_sum(
        self,
        key: Key,
        flags: int,
        bitmap: int,
        count: int,
        values: npt.ArrayLike,
        first: bool = False,
    ) -> None:
        """Send a sum the PS completed as PS_RESULT, flagged HOLD if ``first``
        (the sum of the workers' first sends), and keep it unflagged as the
        chunk's answer: a later answer may answer a real loss."""
        encode = self.outbox.encode
        datagram = encode(PacketType.PS_RESULT, flags, key, bitmap, count, values)
        if first:
            self.outbox.send(
                encode(PacketType.PS_RESULT, flags | Flag.HOLD, key, bitmap, count, values)
            )
        else:
            self.outbox.send(datagram)
        self._finish(key, Answer(flags, datagram))

    def _finish(self, key: Key, answer: Answer) -> None:
        self.counters.evicted += self.done.put(key, answer)

    # -- pulls -----------------------------------------------------------------

    def _observe(self, p: Partial, now: float, early: bool) -> None:
        """The first packet of a chunk since its pull is a sample of the
        stall: a resend (or a partial flushed by one) is the pull's round
        trip; a first send (``early``) was on its way, and the chunk's span
        so far is how long its contributions take to come together."""
        if p.touched != p.pulled:
            return
        if early:
            self.stall.gathered(now - p.opened)
        else:
            self.stall.answered(now - p.pulled)

    def _pull_soon(self, key: Key, p: Partial, now: float) -> None:
        """A worker retransmitted into an incomplete chunk: it is still
        waiting, so pull the others now rather than after the stall (those
        that have the sum will not send again by themselves)."""
        if now - p.pulled >= self.stall.value / 4:
            self._pull(key, p, now)

    def _pull(self, key: Key, p: Partial, now: float) -> None:
        """Pull the workers missing from ``p``; a pull over budget is not
        counted, and the next scan tries again."""
        if self.outbox.pull(key, p.bitmap, p.count, now):
            p.pulls += 1
            p.touched = p.pulled = now

    def scan(self, now: float) -> None:
        """Pull partials untouched for the stall (backed off per pull without
        progress, ``PullStall.wait``); pull the int contributions of
        float sums of chunks the PS has no sum of (see ``on_float``); drop
        either after ``max_pulls`` stalls without progress."""
        stall = self.stall.value
        for key, p in self.sums.stalled_partials(now, stall):
            if now - p.touched < self.stall.wait(p.pulls):
                continue
            if p.pulls >= self.max_pulls:
                self.counters.abandoned += 1
                self.sums.close_partial(key)
            else:
                self._pull(key, p, now)
        for key, acc in self.sums.stalled_floats(now, stall):
            if acc.pulls >= self.max_pulls:
                self.counters.abandoned += 1
                self.sums.close_float(key)
                continue
            acc.pulls += 1
            acc.touched = now
            if key not in self.done:
                held = self.sums.partials.get(key)
                bitmap, count = (0, 0) if held is None else (held.bitmap, held.count)
                self.outbox.pull(key, bitmap, count, now)

    # -- what call agreement asks of the sums ----------------------------------

    def held(self, job: int, ag: Agreement) -> list[int]:
        """The bitmaps of the partial sums of ``job`` this PS holds for call ``ag``."""
        return self.sums.held(job, ag.covers)

    def forget(self, job: int) -> None:
        """A job starts anew: its old chunks' sums and partials mean nothing now."""
        self.done.forget(job)
        self.sums.forget(job)


class Outbox:
    """The PS's datagrams to the switch at ``switch_addr``, encoded in one buffer."""

    def __init__(self, transport: Transport, switch_addr: Addr, counters: PSCounters) -> None:
        self.transport, self.switch_addr, self.counters = transport, switch_addr, counters
        self.budgets: dict[int, Budget] = {}
        self.frame = payload.Frame()

    def add_job(self, job: int, fan_in: int, budget: int, stall: float) -> None:
        """``budget`` replies per worker per ``stall`` seconds, as a burst too."""
        self.budgets[job] = Budget(budget * fan_in / stall, budget * fan_in)

    def encode(
        self, ptype: int, flags: int, key: Key, bitmap: int, count: int, values: npt.ArrayLike
    ) -> bytes:
        header = payload.Header(ptype, flags, key[0], key[1], bitmap, count)
        return bytes(self.frame.pack(header, values))

    def send(self, datagram: bytes) -> None:
        self.transport.send(datagram, self.switch_addr)

    def reply(self, job: int, datagram: bytes, now: float) -> bool:
        """Send a pull or an answer from the cache, within the job's budget."""
        if not self.budgets[job].take(now):
            self.counters.suppressed += 1
            return False
        self.send(datagram)
        return True

    def pull(self, key: Key, bitmap: int, count: int, now: float) -> bool:
        """Ask the workers missing from ``bitmap`` to resend chunk ``key``."""
        zeros = np.zeros(wire.K, np.int32)
        sent = self.reply(key[0], self.encode(PacketType.PULL, 0, key, bitmap, count, zeros), now)
        self.counters.pulls_sent += sent
        return sent
