"""The parameter server: finishes the sums the switch could not.

It merges contributions (FALLBACK) and partial sums (PARTIAL) of many jobs
by worker bitmap, completes a chunk when the bitmaps cover the job's
workers, and sends the sum as PS_RESULT to the switch, which multicasts it
to the workers.  It also acknowledges held results (ATP), answers
retransmissions from a bounded cache of recent results, pulls missing
contributions of stalled chunks, and sums FLOAT resends of overflowed chunks.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
import numpy.typing as npt

from esa import wire
from esa.wire import Flag, PacketType
from hosts import codec, quant
from hosts.transport import Addr, Transport

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
Key = tuple[int, int]


@dataclass(frozen=True)
class JobSpec:
    fan_in: int
    mask: int

    @classmethod
    def of(cls, fan_in: int, mask: int | None = None) -> JobSpec:
        return cls(fan_in, (1 << fan_in) - 1 if mask is None else mask)


@dataclass
class PSCounters:
    received: int = 0
    switch_results: int = 0
    held_answered: int = 0
    fallbacks: int = 0
    partials: int = 0
    floats: int = 0
    merged: int = 0
    rejected_overlap: int = 0
    completed: int = 0
    overflowed: int = 0
    float_completed: int = 0
    float_duplicates: int = 0
    answered_from_cache: int = 0
    late: int = 0
    pulls_sent: int = 0
    abandoned: int = 0
    evicted: int = 0
    malformed: int = 0
    foreign: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass
class Partial:
    touched: float
    bitmap: int = 0
    count: int = 0
    overflow: bool = False
    pulls: int = 0
    values: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(wire.K, np.int64))


@dataclass
class FloatSum:
    touched: float
    parts: dict[int, npt.NDArray[np.float32]] = field(default_factory=dict)


@dataclass(frozen=True)
class Answer:
    """A finished chunk's PS_RESULT, encoded once, resent on retransmissions."""

    flags: int
    payload: bytes


def _one_bit(b: int, mask: int) -> bool:
    return b != 0 and b & (b - 1) == 0 and b & ~mask == 0


class ParameterServer:
    def __init__(
        self,
        transport: Transport,
        switch_addr: Addr,
        jobs: dict[int, JobSpec] | None = None,
        stall: float = 0.2,
        max_pulls: int = 50,
        cache_size: int = 1 << 16,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.transport, self.switch_addr, self.clock = transport, switch_addr, clock
        self.jobs: dict[int, JobSpec] = dict(jobs or {})
        self.stall, self.max_pulls, self.cache_size = stall, max_pulls, cache_size
        self.partials: dict[Key, Partial] = {}
        self.float_sums: dict[Key, FloatSum] = {}
        self.done: OrderedDict[Key, Answer] = OrderedDict()
        """LRU of finished chunks, newest last."""
        self.counters = PSCounters()
        self.frame = codec.Frame()
        self.rbuf = bytearray(wire.PAYLOAD_BYTES + 1)
        self.next_scan = 0.0

    def add_job(self, job: int, spec: JobSpec) -> None:
        self.jobs[job] = spec

    def serve(self, stop: Callable[[], bool]) -> None:
        """Run until ``stop()`` is true (checked at least every ``stall / 4``)."""
        while not stop():
            self.poll(self.clock())
            self.transport.wait(self.stall / 4)

    def poll(self, now: float) -> float:
        """Handle waiting datagrams and pull stalled chunks; returns the next scan time."""
        while (got := self.transport.recv_into(self.rbuf)) is not None:
            self.handle(self.rbuf, got[0], now)
        if now >= self.next_scan:
            self._scan(now)
            self.next_scan = now + self.stall / 4
        return self.next_scan

    # -- receive ----------------------------------------------------------

    def handle(self, buf: bytearray, n: int, now: float) -> None:
        self.counters.received += 1
        try:
            h = codec.decode_header(buf, n)
        except codec.Malformed:
            self.counters.malformed += 1
            return
        spec = self.jobs.get(h.job)
        if spec is None:
            self.counters.foreign += 1
            return
        values = codec.values_view(buf)
        key = (h.job, h.seq)
        if h.ptype == PacketType.RESULT and h.bitmap == spec.mask:
            self._on_switch_result(key, h, values)
        elif h.ptype == PacketType.FALLBACK and _one_bit(h.bitmap, spec.mask):
            self.counters.fallbacks += 1
            self._on_contribution(key, spec, h, values, now, answer=True)
        elif h.ptype == PacketType.PARTIAL and h.bitmap and h.bitmap & ~spec.mask == 0:
            self.counters.partials += 1
            self._on_contribution(key, spec, h, values, now, answer=False)
        elif h.ptype == PacketType.FLOAT and _one_bit(h.bitmap, spec.mask):
            self.counters.floats += 1
            self._on_float(key, spec, h, values, now)
        else:
            self.counters.malformed += 1

    def _on_switch_result(self, key: Key, h: codec.Header, values: npt.NDArray[np.int32]) -> None:
        """A sum completed in the switch: done here too; a held one (ATP) is
        acknowledged with a PS_RESULT that carries it on to the workers."""
        self.counters.switch_results += 1
        self.partials.pop(key, None)
        flags = h.flags & ~Flag.HOLD
        payload = self._encode(PacketType.PS_RESULT, flags, key, h.bitmap, h.count, values)
        if h.flags & Flag.HOLD:
            self.counters.held_answered += 1
            self._send(payload)
        known = self.done.get(key)
        if known is None or not known.flags & Flag.FLOAT:
            self._finish(key, Answer(flags, payload))

    def _on_contribution(
        self,
        key: Key,
        spec: JobSpec,
        h: codec.Header,
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
                self._send(known.payload)
            else:
                self.counters.late += 1
            return
        if key in self.float_sums:
            if answer:
                self.counters.answered_from_cache += 1
                self._send(self._overflow_notice(key, spec))
            else:
                self.counters.late += 1
            return
        p = self.partials.get(key)
        if p is None:
            p = self.partials[key] = Partial(touched=now)
        if p.bitmap & h.bitmap:
            self.counters.rejected_overlap += 1
            return
        self.counters.merged += 1
        p.values += values
        p.bitmap |= h.bitmap
        p.count += h.count
        p.overflow |= bool(h.flags & Flag.OVERFLOW)
        p.touched, p.pulls = now, 0
        if p.bitmap == spec.mask:
            del self.partials[key]
            self._complete(key, p)

    def _complete(self, key: Key, p: Partial) -> None:
        overflow = p.overflow or bool((p.values > INT32_MAX).any() or (p.values < INT32_MIN).any())
        flags = Flag.OVERFLOW if overflow else 0
        self.counters.completed += 1
        self.counters.overflowed += overflow
        vals = np.clip(p.values, INT32_MIN, INT32_MAX)
        payload = self._encode(PacketType.PS_RESULT, flags, key, p.bitmap, p.count, vals)
        self._send(payload)
        self._finish(key, Answer(flags, payload))

    def _on_float(
        self, key: Key, spec: JobSpec, h: codec.Header, values: npt.NDArray[np.int32], now: float
    ) -> None:
        known = self.done.get(key)
        if known is not None and known.flags & Flag.FLOAT:
            self.counters.answered_from_cache += 1
            self._send(known.payload)
            return
        self.partials.pop(key, None)
        acc = self.float_sums.get(key)
        if acc is None:
            acc = self.float_sums[key] = FloatSum(touched=now)
        if h.bitmap in acc.parts:
            self.counters.float_duplicates += 1
            return
        acc.parts[h.bitmap] = quant.from_bits(values.astype(np.int32))
        acc.touched = now
        if sum(acc.parts) != spec.mask:
            return
        del self.float_sums[key]
        total = np.zeros(wire.K, np.float32)
        for bit in sorted(acc.parts):
            total += acc.parts[bit]
        self.counters.float_completed += 1
        flags = int(Flag.FLOAT)
        payload = self._encode(
            PacketType.PS_RESULT, flags, key, spec.mask, len(acc.parts), quant.float_bits(total)
        )
        self._send(payload)
        self._finish(key, Answer(flags, payload))

    def _overflow_notice(self, key: Key, spec: JobSpec) -> bytes:
        """Tells a worker still on the int path that the chunk is in float recovery."""
        zeros = np.zeros(wire.K, np.int32)
        return self._encode(PacketType.PS_RESULT, Flag.OVERFLOW, key, spec.mask, spec.fan_in, zeros)

    # -- timers -------------------------------------------------------------

    def _scan(self, now: float) -> None:
        for key, p in list(self.partials.items()):
            if now - p.touched < self.stall:
                continue
            if p.pulls >= self.max_pulls:
                self.counters.abandoned += 1
                del self.partials[key]
                continue
            p.pulls += 1
            p.touched = now
            self.counters.pulls_sent += 1
            zeros = np.zeros(wire.K, np.int32)
            self._send(self._encode(PacketType.PULL, 0, key, p.bitmap, p.count, zeros))
        give_up = self.stall * self.max_pulls
        for key, acc in list(self.float_sums.items()):
            if now - acc.touched >= give_up:
                self.counters.abandoned += 1
                del self.float_sums[key]

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
        header = codec.Header(ptype, flags, key[0], key[1], bitmap, count)
        return bytes(self.frame.pack(header, values))

    def _send(self, payload: bytes) -> None:
        self.transport.send(payload, self.switch_addr)
