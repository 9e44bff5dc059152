"""The worker agent: streams a job's quantised chunks and collects the sums.

``allreduce`` is the blocking call applications use; it is built on
``begin`` / ``poll`` / ``done`` / ``result`` so a simulator can drive many
workers in one thread on a virtual clock (``testbed.simnet``).

A job's chunks may be spread over several PS hosts, its shards: chunk
``seq`` is addressed to the PS of ``esa.job.ps_shard(seq, shards)``.  With a
control transport each call is first agreed with every shard's PS (CALL,
then GO or REJECT; see ``hosts.agreement``): nothing is sent for a call its
peers disagree on, and a call that does not finish in time ends in
``AllreduceTimeout`` naming the workers the PS hosts report missing.
"""

from __future__ import annotations

import heapq
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
import numpy.typing as npt

from esa import wire
from esa.job import MAX_PS_SHARDS, ps_shard, valid_shards
from esa.wire import ControlType, Flag, PacketType
from hosts import codec, quant
from hosts.calls import (
    ANNOUNCING,
    DONE,
    FAILED,
    FLOATING,
    PENDING,
    SENT,
    SEQ_MOD,
    STREAMING,
    Call,
    bits,
    rejected,
    timed_out,
)
from hosts.drops import Drop, new_drops
from hosts.errors import AllreduceTimeout, CallRejected
from hosts.rto import RetransmitTimeout
from hosts.transport import Addr, Transport, wait_any

FLOAT32_MAX = float(np.finfo(np.float32).max)
MAX_RTO = 1.0
"""Upper bound of the adaptive retransmission timeout, seconds (or the
initial timeout, if that is larger)."""
MAX_CALL_RTO = 1.0
"""Upper bound of the interval between a CALL's resends, seconds."""
DEFAULT_TIMEOUT = 60.0
"""``allreduce``'s default timeout, seconds."""
STATUS_TRIES, STATUS_WAIT = 3, 0.2
"""STATUS requests after a timeout, and seconds to wait for each answer."""

RETX, OVERFLOW, FLOAT, HOLD = int(Flag.RETX), int(Flag.OVERFLOW), int(Flag.FLOAT), int(Flag.HOLD)
"""Plain ints: IntFlag operators cost a Python call per packet."""

RESULT_FLAGS = {
    PacketType.RESULT: (0, OVERFLOW),
    PacketType.PS_RESULT: (0, OVERFLOW, FLOAT, HOLD, HOLD | OVERFLOW),
}
"""Flag values a worker may be sent on each result type."""


@dataclass
class WorkerCounters:
    received: int = 0
    control_received: int = 0
    sent: int = 0
    retransmitted: int = 0
    spurious: int = 0
    """retransmitted chunks whose first transmissions were summed in the switch."""
    float_sent: int = 0
    pulls_answered: int = 0
    results_switch: int = 0
    results_ps: int = 0
    results_float: int = 0
    overflowed: int = 0
    delivered: int = 0
    calls_sent: int = 0
    dropped: dict[str, int] = field(default_factory=new_drops)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


class Worker:
    """One worker of job ``job``: bit ``index`` of the job's worker bitmap.

    ``ps`` holds the job's PS addresses, one per shard in shard order: chunk
    ``seq`` goes to ``ps[ps_shard(seq, len(ps))]`` (the PS's IP and
    ``UDP_PORT``; the switch intercepts it).  Every worker of a job must
    pass tensors of the same sizes in the same order: sequence numbers are a
    per-job counter (``base`` of a call = chunks of all earlier calls).
    With ``control`` (a second transport) each call is agreed with every
    shard's PS at ``control_addrs`` (default: each PS's host,
    ``CONTROL_PORT``) before anything is sent.
    """

    def __init__(
        self,
        job: int,
        index: int,
        fan_in: int,
        ps: tuple[Addr, ...],
        transport: Transport,
        bound: float = 1.0,
        window: int = 64,
        rto: float = 0.05,
        worker_mask: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        control: Transport | None = None,
        control_addrs: tuple[Addr, ...] | None = None,
    ) -> None:
        if not 1 <= job <= wire.MAX_JOB_ID:
            raise ValueError(f"job must be 1..{wire.MAX_JOB_ID}, got {job}")
        if not 1 <= fan_in <= wire.MAX_WORKERS:
            raise ValueError(f"fan-in must be 1..{wire.MAX_WORKERS}, got {fan_in}")
        self.mask = worker_mask if worker_mask is not None else (1 << fan_in) - 1
        if not 0 < self.mask < 1 << wire.MAX_WORKERS or len(bits(self.mask)) != fan_in:
            raise ValueError(f"mask {self.mask:#x} does not hold {fan_in} workers")
        if not 0 <= index < wire.MAX_WORKERS or not self.mask >> index & 1:
            raise ValueError(f"worker bit {index} is not in mask {self.mask:#x}")
        if not 0 < bound <= FLOAT32_MAX:
            raise ValueError(f"bound must be a positive float32, got {bound}")
        if window < 1 or not rto > 0:
            raise ValueError(f"window must be >= 1 and rto > 0, got {window} and {rto}")
        if not valid_shards(len(ps)):
            raise ValueError(
                f"a job has 1, 2, 4 or 8 PS hosts (up to {MAX_PS_SHARDS}), got {len(ps)}"
            )
        control_addrs = control_addrs or tuple((host, wire.CONTROL_PORT) for host, _ in ps)
        if len(control_addrs) != len(ps):
            raise ValueError(f"PS control addresses for {len(ps)} PS hosts: {control_addrs}")
        self.job, self.index, self.bit, self.fan_in = job, index, 1 << index, fan_in
        self.ps, self.shards, self.control_addrs = ps, len(ps), control_addrs
        self.transport, self.clock = transport, clock
        self.bound, self.scale = bound, quant.job_scale(bound, fan_in)
        self.window = window
        self.timeout = RetransmitTimeout(rto, MAX_RTO)
        """follows the measured time to a sum of the current call's chunks (``hosts.rto``)."""
        self.counters = WorkerCounters()
        self.calls = 0
        self.next_base = 0
        self.cur: Call | None = None
        self.prev: Call | None = None
        self.inflight: dict[int, float] = {}
        """chunk of the current call -> its retransmission deadline."""
        self.timers: list[tuple[float, int]] = []
        """heap of (deadline, chunk); entries no longer in ``inflight`` are skipped."""
        self.frame = codec.Frame()
        self.rbuf = bytearray(wire.PAYLOAD_BYTES + 1)
        self.control = control
        self.nonces = _nonces(self.shards)
        """one per shard: tells this process's control messages from another's
        with the same index, and which shard's PS an answer comes from."""
        self.shard_of = {nonce: s for s, nonce in enumerate(self.nonces)}
        self.cbuf = bytearray(wire.CONTROL_BYTES + 1)
        self.call_rto = rto
        self.call_deadline = 0.0
        self.failure: CallRejected | None = None
        self.reports: dict[int, codec.Control] = {}
        """the REPORT of each shard's PS on the current call, while asking."""

    # -- the blocking API -------------------------------------------------

    def allreduce(
        self, tensor: npt.NDArray[np.float32], timeout: float = DEFAULT_TIMEOUT
    ) -> npt.NDArray[np.float32]:
        """The sum of ``tensor`` over the job's workers (float32, same shape).

        Raises ``CallRejected`` when the PS refuses the call and
        ``AllreduceTimeout`` when no complete sum arrives within ``timeout``
        seconds; after either the worker is out of step with its job.
        """
        self.begin(tensor)
        end = self.clock() + timeout
        while not self.done:
            now = self.clock()
            if now >= end:
                raise self._timed_out(timeout)
            deadline = self.poll(now)
            if not self.done:
                wake = now + self.timeout.value if deadline is None else deadline
                self.wait(min(wake, end) - self.clock())
        return self.result()

    def linger(self, seconds: float, limit: float = DEFAULT_TIMEOUT) -> None:
        """Keep answering PULLs for the last call (before a worker exits):
        for ``seconds`` after the last PULL that asked for something, at most
        ``limit`` seconds in all.  A peer that lost sums the PS must pull from
        this worker can still finish after this worker is done."""
        start = self.clock()
        end, answered = start + seconds, self.counters.pulls_answered
        while (now := self.clock()) < min(end, start + limit):
            self.poll(now)
            if self.counters.pulls_answered != answered:
                end, answered = now + seconds, self.counters.pulls_answered
            self.wait(min(end, start + limit) - now)

    def wait(self, timeout: float) -> None:
        """Block until a datagram may be waiting on either socket, or ``timeout``."""
        wait_any(
            [self.transport] if self.control is None else [self.transport, self.control], timeout
        )

    # -- the steppable API ------------------------------------------------

    def begin(self, tensor: npt.NDArray[np.float32]) -> None:
        if self.cur is not None and self.cur.phase != FAILED and not self.done:
            raise RuntimeError("allreduce already in progress")
        call = Call(self.calls, self.next_base, tensor, self.bound, self.scale)
        if call.size == 0:
            raise ValueError("allreduce of an empty tensor")
        self.calls += 1
        self.next_base = (self.next_base + call.n) % SEQ_MOD
        self.prev, self.cur = self.cur, call
        self.inflight.clear()
        self.timers.clear()
        self.timeout.clear()
        if self.control is not None:
            call.phase = ANNOUNCING
            call.digest = wire.config_digest(
                self.fan_in, self.mask, self.bound, call.size, "float32"
            )
            self.call_rto, self.call_deadline = self.timeout.value, 0.0

    @property
    def done(self) -> bool:
        c = self.cur
        return c is None or (c.phase == STREAMING and c.delivered == c.n)

    def result(self) -> npt.NDArray[np.float32]:
        if self.cur is None or not self.done:
            raise RuntimeError("no finished allreduce")
        c = self.cur
        return c.out.ravel()[: c.size].reshape(c.shape).copy()

    def poll(self, now: float) -> float | None:
        """Handle waiting datagrams, announce or send what the window allows,
        retransmit what timed out; returns when to poll again at the latest.
        Raises ``CallRejected`` once when the PS rejected the current call."""
        while (got := self.transport.recv_into(self.rbuf)) is not None:
            self.handle(self.rbuf, got[0], now)
        if self.control is not None:
            while (cgot := self.control.recv_into(self.cbuf)) is not None:
                self.handle_control(self.cbuf, cgot[0], now)
        if self.failure is not None:
            failure, self.failure = self.failure, None
            raise failure
        c = self.cur
        if c is None or c.phase == FAILED:
            return None
        if c.phase == ANNOUNCING:
            if now >= self.call_deadline:
                for shard in range(self.shards):
                    if not c.go >> shard & 1:
                        self._announce(c, ControlType.CALL, shard)
                self.call_deadline = now + self.call_rto
                self.call_rto = min(2 * self.call_rto, MAX_CALL_RTO)
            return self.call_deadline
        while len(self.inflight) < self.window and c.next_send < c.n:
            i = c.next_send
            c.next_send += 1
            if c.state[i] == PENDING:
                self._send_contrib(c, i, 0, now)
        while self.timers and self.timers[0][0] <= now:
            deadline, i = heapq.heappop(self.timers)
            if self.inflight.get(i) != deadline:
                continue
            self.counters.retransmitted += 1
            self.timeout.resend(i)
            self.timeout.expired(now, self.window)
            if c.state[i] == FLOATING:
                self._send_float(c, i, RETX, now)
            else:
                self._send_contrib(c, i, RETX, now)
        while self.timers and self.inflight.get(self.timers[0][1]) != self.timers[0][0]:
            heapq.heappop(self.timers)
        return self.timers[0][0] if self.timers else None

    # -- receive ----------------------------------------------------------

    def _check(self, h: codec.Header) -> Drop | None:
        """Why a datagram of this job is not what a switch or PS would send."""
        if h.ptype == PacketType.PULL:
            if h.flags:
                return Drop.FLAGS
            if h.bitmap & ~self.mask or h.bitmap == self.mask:
                return Drop.BITMAP
            return Drop.COUNT if h.count != bin(h.bitmap).count("1") else None
        allowed = RESULT_FLAGS.get(PacketType(h.ptype))
        if allowed is None:
            return Drop.PTYPE
        if h.flags not in allowed:
            return Drop.FLAGS
        if h.bitmap != self.mask:
            return Drop.BITMAP
        return Drop.COUNT if h.count != self.fan_in else None

    def handle(self, buf: bytearray, n: int, now: float) -> None:
        self.counters.received += 1
        try:
            h = codec.decode_header(buf, n)
        except codec.Malformed:
            self._drop(Drop.LENGTH if n != wire.PAYLOAD_BYTES else Drop.PTYPE)
            return
        if h.job != self.job:
            self._drop(Drop.JOB)
            return
        reason = self._check(h)
        if reason is not None:
            self._drop(reason)
            return
        found = self._find(h.seq)
        if found is None:
            self._drop(Drop.STALE)
            return
        c, i = found
        if c.phase != STREAMING:
            self._drop(Drop.EARLY if c.phase == ANNOUNCING else Drop.STALE)
        elif h.ptype == PacketType.PULL:
            self._on_pull(h, c, i, now)
        else:
            self._on_result(h, c, i, codec.values_view(buf), now)

    def _drop(self, reason: Drop) -> None:
        self.counters.dropped[reason] += 1

    def _find(self, seq: int) -> tuple[Call, int] | None:
        for c in (self.cur, self.prev):
            if c is not None and (i := c.index(seq)) is not None:
                return c, i
        return None

    def _on_result(
        self, h: codec.Header, c: Call, i: int, values: npt.NDArray[np.int32], now: float
    ) -> None:
        """Deliver a chunk's sum.  An OVERFLOW-flagged sum is not exact: the
        worker resends its chunk as FLOAT, but still accepts an exact (plain)
        or float sum should one come, so a forged overflow can delay a chunk
        but neither wedge it nor make its sum differ from the peers'.
        A switch's sum (RESULT, or the PS's answer to ATP's held one, flagged
        HOLD) of a chunk resent since shows the timeout was spurious."""
        if c.state[i] == DONE:
            self._drop(Drop.DUPLICATE)
            return
        if h.flags & FLOAT:
            c.out[i] = quant.from_bits(values.astype(np.int32))
            self.counters.results_float += 1
        elif h.flags & OVERFLOW:
            if c.state[i] == FLOATING:
                self._drop(Drop.DUPLICATE)
            else:
                self.counters.overflowed += 1
                self._send_float(c, i, 0, now)
            return
        else:
            c.out[i] = quant.dequantise(values, self.scale)
        if h.ptype == PacketType.RESULT:
            self.counters.results_switch += 1
        else:
            self.counters.results_ps += 1
        c.state[i] = DONE
        c.delivered += 1
        self.counters.delivered += 1
        if c is self.cur:
            in_flight = max(1, len(self.inflight))
            self.inflight.pop(i, None)
            if self.timeout.answered(i, now, in_flight, h.ptype, h.flags):
                self.counters.spurious += 1

    def _on_pull(self, h: codec.Header, c: Call, i: int, now: float) -> None:
        """The PS misses contributions of ``h.seq``: resend ours unless it has it."""
        if h.bitmap & self.bit:
            return
        self.counters.pulls_answered += 1
        if c is self.cur:
            self.timeout.forget(i)
        if c.state[i] == PENDING:
            c.state[i] = SENT
        self._send_contrib(c, i, RETX, now, arm=c is self.cur and c.state[i] != DONE)

    # -- control ------------------------------------------------------------

    def handle_control(self, buf: bytearray, n: int, now: float) -> None:
        self.counters.control_received += 1
        try:
            m = codec.decode_control(buf, n)
        except codec.Malformed:
            self._drop(Drop.CONTROL)
            return
        shard = self.shard_of.get(m.nonce)
        answer = m.ctype in (ControlType.GO, ControlType.REJECT, ControlType.REPORT)
        if not answer or (m.job, m.worker) != (self.job, self.index) or shard is None:
            self._drop(Drop.STRANGER)
            return
        c = self.cur
        if m.ctype == ControlType.REPORT:
            if c is None or m.call != c.number:
                self._drop(Drop.STALE)
            else:
                self.reports[shard] = m
            return
        if c is None or c.phase != ANNOUNCING or m.call != c.number:
            self._drop(Drop.STALE)
        elif m.ctype == ControlType.GO:
            if (m.base, m.chunks, m.length, m.digest) != (c.base, c.n, c.size, c.digest):
                self._drop(Drop.STRANGER)
                return
            c.go |= 1 << shard
            if c.go == (1 << self.shards) - 1:
                c.phase = STREAMING
        else:
            c.phase = FAILED
            self.failure = rejected(self, m, c, shard)

    def _announce(self, c: Call, ctype: ControlType, shard: int) -> None:
        assert self.control is not None
        msg = codec.Control(
            ctype, 0, self.job, self.index, 0, self.nonces[shard], c.number, c.base, c.n, c.size,
            self.fan_in, self.mask, 0, 0, c.digest,
        )  # fmt: skip
        self.control.send(codec.encode_control(msg), self.control_addrs[shard])
        self.counters.calls_sent += ctype == ControlType.CALL

    def _timed_out(self, timeout: float) -> AllreduceTimeout:
        """Give up the current call, asking the PS hosts it waits for whose
        contributions they miss."""
        c = self.cur
        assert c is not None
        phase, c.phase = c.phase, FAILED
        if phase == ANNOUNCING:
            waiting = [s for s in range(self.shards) if not c.go >> s & 1]
        else:
            undone = (c.base + i for i in range(c.n) if c.state[i] != DONE)
            waiting = sorted({ps_shard(seq % SEQ_MOD, self.shards) for seq in undone})
        return timed_out(self, c, phase, timeout, waiting, self._ask_status(c, waiting))

    def _ask_status(self, c: Call, shards: list[int]) -> dict[int, codec.Control | None]:
        """The REPORT on call ``c`` of each of these shards' PS (None: no answer)."""
        if self.control is None:
            return {}
        self.reports = {}
        for _ in range(STATUS_TRIES):
            for s in shards:
                if s not in self.reports:
                    self._announce(c, ControlType.STATUS, s)
            end = time.monotonic() + STATUS_WAIT
            while not set(shards) <= set(self.reports) and (left := end - time.monotonic()) > 0:
                self.wait(left)
                self.poll(self.clock())
            if set(shards) <= set(self.reports):
                break
        return {s: self.reports.get(s) for s in shards}

    # -- send -------------------------------------------------------------

    def _send_contrib(self, c: Call, i: int, flags: int, now: float, arm: bool = True) -> None:
        if c.clipped[i]:
            flags |= OVERFLOW
        seq = (c.base + i) % SEQ_MOD
        h = codec.Header(PacketType.CONTRIB, flags, self.job, seq, self.bit, 1)
        self.transport.send(self.frame.pack(h, c.q[i]), self._ps_for(seq))
        self.counters.sent += 1
        if c.state[i] == PENDING:
            c.state[i] = SENT
            if c is self.cur:
                self.timeout.sent(i, now)
        if arm:
            self._arm(i, now)

    def _send_float(self, c: Call, i: int, flags: int, now: float) -> None:
        seq = (c.base + i) % SEQ_MOD
        h = codec.Header(PacketType.FLOAT, flags, self.job, seq, self.bit, 1)
        self.transport.send(self.frame.pack(h, quant.float_bits(c.floats[i])), self._ps_for(seq))
        self.counters.float_sent += 1
        c.state[i] = FLOATING
        if c is self.cur:
            self._arm(i, now)

    def _ps_for(self, seq: int) -> Addr:
        """Where chunk ``seq`` goes (``ps_shard`` is skipped on the fast path
        of a job with one PS)."""
        return self.ps[0] if self.shards == 1 else self.ps[ps_shard(seq, self.shards)]

    def _arm(self, i: int, now: float) -> None:
        deadline = now + self.timeout.value
        self.inflight[i] = deadline
        heapq.heappush(self.timers, (deadline, i))


def _nonces(n: int) -> tuple[int, ...]:
    """``n`` distinct random nonces."""
    out: set[int] = set()
    while len(out) < n:
        out.add(secrets.randbits(32))
    return tuple(out)
