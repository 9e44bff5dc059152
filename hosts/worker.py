"""The worker agent: streams a job's quantised chunks and collects the sums.

``allreduce`` is the blocking call applications use; it is built on
``begin`` / ``poll`` / ``done`` / ``result`` so a simulator can drive many
workers in one thread on a virtual clock (``hosts.simnet``).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import numpy.typing as npt

from esa import wire
from esa.wire import Flag, PacketType
from hosts import codec, quant
from hosts.transport import Addr, Transport

SEQ_MOD = 1 << 32
MAX_RTO = 2.0
"""Upper bound of the adaptive retransmission timeout, seconds."""

RETX, OVERFLOW, FLOAT = int(Flag.RETX), int(Flag.OVERFLOW), int(Flag.FLOAT)
"""Plain ints: IntFlag operators cost a Python call per packet."""

PENDING, SENT, FLOATING, DONE = range(4)
"""Chunk states: not sent yet; contribution sent; FLOAT sent after an
overflowed result; sum delivered."""


@dataclass
class WorkerCounters:
    sent: int = 0
    retransmitted: int = 0
    float_sent: int = 0
    pulls_answered: int = 0
    results_switch: int = 0
    results_ps: int = 0
    results_float: int = 0
    overflowed: int = 0
    delivered: int = 0
    duplicates: int = 0
    stale: int = 0
    malformed: int = 0
    foreign: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class Call:
    """One allreduce call: its chunks, their states and the sums so far."""

    def __init__(self, base: int, tensor: npt.NDArray[np.float32], bound: float, scale: float):
        q = quant.quantise(tensor, bound, scale)
        self.base = base
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

    def index(self, seq: int) -> int | None:
        i = (seq - self.base) % SEQ_MOD
        return i if i < self.n else None


class Worker:
    """One worker of job ``job``: bit ``index`` of the job's worker bitmap.

    ``ps_addr`` is where contributions go (the PS's IP and ``UDP_PORT``; the
    switch intercepts them).  Every worker of a job must pass tensors of the
    same sizes in the same order: sequence numbers are a per-job counter
    (``base`` of a call = chunks of all earlier calls) and so agree.
    """

    def __init__(
        self,
        job: int,
        index: int,
        fan_in: int,
        ps_addr: Addr,
        transport: Transport,
        bound: float = 1.0,
        window: int = 64,
        rto: float = 0.05,
        worker_mask: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 1 <= job <= wire.MAX_JOB_ID:
            raise ValueError(f"job must be 1..{wire.MAX_JOB_ID}")
        self.mask = worker_mask if worker_mask is not None else (1 << fan_in) - 1
        if not self.mask >> index & 1:
            raise ValueError(f"worker bit {index} is not in mask {self.mask:#x}")
        self.job, self.bit, self.fan_in = job, 1 << index, fan_in
        self.ps_addr, self.transport, self.clock = ps_addr, transport, clock
        self.bound, self.scale = bound, quant.job_scale(bound, fan_in)
        self.window = window
        self.min_rto, self.rto = rto, rto
        """``rto`` adapts to the measured time to a sum (RFC 6298 style, with
        Karn's rule and doubling on timeout); it never drops below ``min_rto``."""
        self.srtt: float | None = None
        self.rttvar = 0.0
        self.sent_at: dict[int, float] = {}
        """first send time of chunks of the current call not retransmitted yet."""
        self.counters = WorkerCounters()
        self.next_base = 0
        self.cur: Call | None = None
        self.prev: Call | None = None
        self.inflight: OrderedDict[int, float] = OrderedDict()
        """chunk of the current call -> retransmission deadline, earliest first (one RTO)."""
        self.frame = codec.Frame()
        self.rbuf = bytearray(wire.PAYLOAD_BYTES + 1)

    # -- the blocking API -------------------------------------------------

    def allreduce(self, tensor: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """The sum of ``tensor`` over the job's workers (float32, same shape)."""
        self.begin(tensor)
        while not self.done:
            deadline = self.poll(self.clock())
            wait = self.rto if deadline is None else deadline - self.clock()
            if not self.done:
                self.transport.wait(wait)
        return self.result()

    def linger(self, seconds: float) -> None:
        """Keep answering PULLs for the last call (before a worker exits)."""
        end = self.clock() + seconds
        while (now := self.clock()) < end:
            self.poll(now)
            self.transport.wait(end - now)

    # -- the steppable API ------------------------------------------------

    def begin(self, tensor: npt.NDArray[np.float32]) -> None:
        if self.cur is not None and not self.done:
            raise RuntimeError("allreduce already in progress")
        call = Call(self.next_base, tensor, self.bound, self.scale)
        self.next_base = (self.next_base + call.n) % SEQ_MOD
        self.prev, self.cur = self.cur, call
        self.inflight.clear()
        self.sent_at.clear()

    @property
    def done(self) -> bool:
        return self.cur is None or self.cur.delivered == self.cur.n

    def result(self) -> npt.NDArray[np.float32]:
        if self.cur is None or not self.done:
            raise RuntimeError("no finished allreduce")
        c = self.cur
        return c.out.ravel()[: c.size].reshape(c.shape).copy()

    def poll(self, now: float) -> float | None:
        """Handle waiting datagrams, send what the window allows, retransmit
        what timed out; returns the next retransmission deadline."""
        while (got := self.transport.recv_into(self.rbuf)) is not None:
            self.handle(self.rbuf, got[0], now)
        c = self.cur
        if c is None:
            return None
        while len(self.inflight) < self.window and c.next_send < c.n:
            i = c.next_send
            c.next_send += 1
            if c.state[i] == PENDING:
                self._send_contrib(c, i, 0, now)
        backed_off = False
        while self.inflight:
            i, deadline = next(iter(self.inflight.items()))
            if deadline > now:
                break
            self.counters.retransmitted += 1
            self.sent_at.pop(i, None)
            if not backed_off:
                self.rto, backed_off = min(2 * self.rto, MAX_RTO), True
            if c.state[i] == FLOATING:
                self._send_float(c, i, RETX, now)
            else:
                self._send_contrib(c, i, RETX, now)
        return next(iter(self.inflight.values()), None)

    # -- receive ----------------------------------------------------------

    def handle(self, buf: bytearray, n: int, now: float) -> None:
        try:
            h = codec.decode_header(buf, n)
        except codec.Malformed:
            self.counters.malformed += 1
            return
        if h.job != self.job:
            self.counters.foreign += 1
            return
        if h.ptype == PacketType.PULL:
            self._on_pull(h, now)
        elif h.ptype in (PacketType.RESULT, PacketType.PS_RESULT):
            if h.bitmap != self.mask:
                self.counters.malformed += 1
                return
            self._on_result(h, codec.values_view(buf), now)
        else:
            self.counters.malformed += 1

    def _find(self, seq: int) -> tuple[Call, int] | None:
        for c in (self.cur, self.prev):
            if c is not None and (i := c.index(seq)) is not None:
                return c, i
        return None

    def _on_result(self, h: codec.Header, values: npt.NDArray[np.int32], now: float) -> None:
        found = self._find(h.seq)
        if found is None:
            self.counters.stale += 1
            return
        c, i = found
        if c.state[i] == DONE:
            self.counters.duplicates += 1
            return
        if h.flags & FLOAT:
            if c.state[i] != FLOATING:
                self.counters.malformed += 1
                return
            c.out[i] = quant.from_bits(values.astype(np.int32))
            self.counters.results_float += 1
        elif h.flags & OVERFLOW:
            if c.state[i] == FLOATING:
                self.counters.duplicates += 1
            else:
                self.counters.overflowed += 1
                self._send_float(c, i, 0, now)
            return
        else:
            if c.state[i] == FLOATING:
                self.counters.malformed += 1
                return
            c.out[i] = quant.dequantise(values, self.scale)
        if h.ptype == PacketType.RESULT:
            self.counters.results_switch += 1
        else:
            self.counters.results_ps += 1
        c.state[i] = DONE
        c.delivered += 1
        self.counters.delivered += 1
        if c is self.cur:
            self.inflight.pop(i, None)
            sent = self.sent_at.pop(i, None)
            if sent is not None:
                self._sample(now - sent)

    def _sample(self, rtt: float) -> None:
        """Fold one time-to-sum sample into the retransmission timeout."""
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
        self.rto = min(max(self.min_rto, self.srtt + 4 * self.rttvar), MAX_RTO)

    def _on_pull(self, h: codec.Header, now: float) -> None:
        """The PS misses contributions of ``h.seq``: resend ours unless it has it."""
        if h.bitmap & self.bit:
            return
        found = self._find(h.seq)
        if found is None:
            self.counters.stale += 1
            return
        c, i = found
        self.counters.pulls_answered += 1
        if c.state[i] == PENDING:
            c.state[i] = SENT
        self._send_contrib(c, i, RETX, now, arm=c is self.cur and c.state[i] != DONE)

    # -- send -------------------------------------------------------------

    def _send_contrib(self, c: Call, i: int, flags: int, now: float, arm: bool = True) -> None:
        if c.clipped[i]:
            flags |= OVERFLOW
        h = codec.Header(PacketType.CONTRIB, flags, self.job, (c.base + i) % SEQ_MOD, self.bit, 1)
        self.transport.send(self.frame.pack(h, c.q[i]), self.ps_addr)
        self.counters.sent += 1
        if c.state[i] == PENDING:
            c.state[i] = SENT
            if c is self.cur:
                self.sent_at[i] = now
        if arm:
            self._arm(i, now)

    def _send_float(self, c: Call, i: int, flags: int, now: float) -> None:
        seq = (c.base + i) % SEQ_MOD
        h = codec.Header(PacketType.FLOAT, flags, self.job, seq, self.bit, 1)
        self.transport.send(self.frame.pack(h, quant.float_bits(c.floats[i])), self.ps_addr)
        self.counters.float_sent += 1
        c.state[i] = FLOATING
        if c is self.cur:
            self._arm(i, now)

    def _arm(self, i: int, now: float) -> None:
        self.inflight[i] = now + self.rto
        self.inflight.move_to_end(i)
