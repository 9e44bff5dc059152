"""What a PS does with a datagram that passed its checks: it finishes chunks.

Contributions and switch partials merge into the chunk's partial sum
(``hosts.ps.sums``) until it covers the job's workers; the sum goes out and
its answer is kept (``hosts.ps.results``) to answer retransmissions.  A chunk
that stalls has its missing workers pulled, and a chunk whose sum
overflowed is summed again from the workers' FLOAT resends (float
recovery).  What it sends goes through the PS's ``Outbox``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from esa.job import Workers
from esa.wire import Flag, PacketType
from hosts.agreement.announcements import Agreement
from hosts.net import payload, quant
from hosts.net.counters import PSCounters
from hosts.net.drops import HostDrop
from hosts.ps.outbox import Outbox
from hosts.ps.results import Answer, ResultCache
from hosts.ps.sums import Key, OpenSums, Partial
from hosts.timing.ps_stall import PullStall


class Aggregator:
    """Finishes chunks into ``done`` from the open ``sums``; a chunk is
    pulled once untouched for ``stall.value`` seconds (what it learns from
    the chunks, ``hosts.timing.ps_stall``), and given up after ``max_pulls`` pulls."""

    def __init__(
        self,
        sums: OpenSums,
        done: ResultCache,
        outbox: Outbox,
        counters: PSCounters,
        stall: PullStall,
        max_pulls: int,
    ) -> None:
        self.sums, self.done, self.outbox, self.counters = sums, done, outbox, counters
        self.stall, self.max_pulls = stall, max_pulls

    def _drop(self, reason: HostDrop) -> None:
        self.counters.dropped[reason] += 1

    def on_switch_result(self, key: Key, h: payload.Header, values: npt.NDArray[np.int32]) -> None:
        """A sum completed in the switch: done here too; a held one (ATP) is
        acknowledged with a PS_RESULT that carries it on to the workers,
        flagged HOLD: the sum of every worker's first transmission, which
        tells a worker that resent the chunk its timeout was spurious.  The
        answer kept for later retransmissions is not flagged: it may answer
        a real loss."""
        self.counters.switch_results += 1
        self.sums.close_partial(key)
        flags = h.flags & ~int(Flag.HOLD)
        encode = self.outbox.encode
        datagram = encode(PacketType.PS_RESULT, flags, key, h.bitmap, h.count, values)
        if h.flags & Flag.HOLD:
            self.counters.held_answered += 1
            self.outbox.send(encode(PacketType.PS_RESULT, h.flags, key, h.bitmap, h.count, values))
        known = self.done.get(key)
        if known is None:
            if not flags & Flag.OVERFLOW:
                self.sums.close_float(key)
            self._finish(key, Answer(flags, datagram))
        elif known.payload != datagram and not known.flags & Flag.FLOAT:
            self._drop(HostDrop.CONFLICT)
        else:
            self._drop(HostDrop.LATE)

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
        p.merge(h.bitmap, h.count, bool(h.flags & Flag.OVERFLOW), values, now)
        if p.bitmap == spec.mask:
            if p.pulled == float("-inf") and p.opened < now:
                self.stall.gathered(now - p.opened)
            self.sums.close_partial(key)
            self._complete(key, p)
        elif retx:
            self._pull_soon(key, p, now)

    def _complete(self, key: Key, p: Partial) -> None:
        overflow, values = p.result()
        flags = Flag.OVERFLOW if overflow else 0
        self.counters.completed += 1
        self.counters.overflowed += overflow
        if not overflow:
            self.sums.close_float(key)
        datagram = self.outbox.encode(PacketType.PS_RESULT, flags, key, p.bitmap, p.count, values)
        self.outbox.send(datagram)
        self._finish(key, Answer(flags, datagram))

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
        flags = int(Flag.FLOAT)
        datagram = self.outbox.encode(
            PacketType.PS_RESULT,
            flags,
            key,
            spec.mask,
            len(acc.parts),
            quant.float_bits(acc.total()),
        )
        self.outbox.send(datagram)
        self._finish(key, Answer(flags, datagram))

    def _finish(self, key: Key, answer: Answer) -> None:
        self.counters.evicted += self.done.put(key, answer)

    def held(self, job: int, ag: Agreement) -> list[int]:
        """The bitmaps of the partial sums of ``job`` this PS holds for call ``ag``."""
        return self.sums.held(job, ag.covers)

    def forget(self, job: int) -> None:
        """A job starts anew: its old chunks' sums and partials mean nothing now."""
        self.done.forget(job)
        self.sums.forget(job)

    # -- pulls ---------------------------------------------------------------

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
