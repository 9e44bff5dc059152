"""The worker agent: streams a job's quantised chunks and collects the sums.

``allreduce`` is the blocking call applications use; it is built on
``begin`` / ``poll`` / ``done`` / ``result`` so a simulator can drive many
workers in one thread on a virtual clock (``testbed.simnet``).

A job's chunks may be spread over several PS hosts, its shards: chunk
``seq`` is addressed to the PS of ``esa.job.ps_shard(seq, shards)``.  With a
control transport each call is first agreed with every shard's PS
(``hosts.announce``; docs/agreement.md): nothing is sent for a call its
peers disagree on, and a call that does not finish in time ends in
``AllreduceTimeout`` naming the workers the PS hosts report missing.
Without one (the packet simulator's tests, ``testbed.simnet``, against a
PS without one) calls are not agreed: no CLI or rig runs a worker that way.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
import numpy.typing as npt

from esa import wire
from esa.job import MAX_PS_SHARDS, ps_shard, valid_shards
from esa.wire import Flag, PacketType
from hosts import auth, payload, quant
from hosts.announce import Announcer
from hosts.calls import (
    ANNOUNCING,
    ASKING,
    DONE,
    FAILED,
    FLOATING,
    PENDING,
    SENT,
    SEQ_MOD,
    STREAMING,
    Call,
    bits,
    timed_out,
)
from hosts.drops import HostDrop, new_drops
from hosts.rto import RetransmitTimeout
from hosts.transport import Addr, Transport, wait_any

FLOAT32_MAX = float(np.finfo(np.float32).max)
MAX_RTO = 1.0
"""Upper bound of the adaptive retransmission timeout, seconds (or the
initial timeout, if that is larger)."""
DEFAULT_TIMEOUT = 60.0
"""``allreduce``'s default timeout, seconds."""

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
    ``CONTROL_PORT``) before anything is sent, in messages sealed with the
    job's ``key`` (default: its open key, ``hosts.auth.open_key``).
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
        key: bytes | None = None,
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
        self.frame = payload.Frame()
        self.rbuf = bytearray(wire.PAYLOAD_BYTES + 1)
        self.control = control
        self.agent = (
            None
            if control is None
            else Announcer(self, control, control_addrs, auth.open_key(job) if key is None else key)
        )

    # -- the blocking API -------------------------------------------------

    def allreduce(
        self, tensor: npt.NDArray[np.float32], timeout: float = DEFAULT_TIMEOUT
    ) -> npt.NDArray[np.float32]:
        """The sum of ``tensor`` over the job's workers (float32, same shape).

        Raises ``CallRejected`` when the PS refuses the call and
        ``AllreduceTimeout`` when no complete sum arrives within ``timeout``
        seconds; after either the worker is out of step with its job.
        """
        self.begin(tensor, timeout)
        while not self.done:
            now = self.clock()
            wake = self.poll(now)
            if not self.done:
                self.wait((now + self.timeout.value if wake is None else wake) - self.clock())
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

    def begin(self, tensor: npt.NDArray[np.float32], timeout: float | None = None) -> None:
        """Start a call; ``poll`` fails it ``timeout`` seconds from now (None: never)."""
        if self.cur is not None and self.cur.phase != FAILED and not self.done:
            raise RuntimeError("allreduce already in progress")
        start, limit = self.clock(), float("inf") if timeout is None else timeout
        call = Call(self.calls, self.next_base, tensor, self.bound, self.scale, start, limit)
        if call.size == 0:
            raise ValueError("allreduce of an empty tensor")
        self.calls += 1
        self.next_base = (self.next_base + call.n) % SEQ_MOD
        self.prev, self.cur = self.cur, call
        self.inflight.clear()
        self.timers.clear()
        self.timeout.clear()
        if self.agent is not None:
            self.agent.start(call, self.timeout.value)

    def leave(self) -> None:
        """Tell the PS hosts this process leaves the job (BYE), so that a new
        process may take its index at once; the worker is not used after."""
        if self.agent is not None:
            self.agent.leave()

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
        Raises ``CallRejected`` or ``AllreduceTimeout`` once when the current
        call fails."""
        c, agent = self.cur, self.agent
        if agent is not None:
            agent.receive(c, now)
        while (got := self.transport.recv_into(self.rbuf)) is not None:
            self.handle(self.rbuf, got[0], now)
        if agent is not None and agent.failure is not None:
            failure, agent.failure = agent.failure, None
            raise failure
        if c is None or c.phase == FAILED:
            return None
        if now >= c.deadline and c.phase in (ANNOUNCING, STREAMING) and not self.done:
            self._give_up(c, now)
        if agent is not None and c.phase == ASKING:
            return agent.poll(c, now)
        if agent is not None and c.phase == ANNOUNCING:
            return min(agent.poll(c, now), c.deadline)
        wake = float("inf") if self.done else c.deadline
        if agent is not None:
            wake = min(wake, agent.poll(c, now))
        held = 0 if agent is None else agent.full & ~c.go
        if c.regained:
            self._rearm(c, c.regained, now)
            c.regained = 0
        while not held and len(self.inflight) < self.window and c.next_send < c.n:
            i = c.next_send
            c.next_send += 1
            if c.state[i] == PENDING:
                self._send_contrib(c, i, 0, now)
        expired = False
        while self.timers and self.timers[0][0] <= now:
            deadline, i = heapq.heappop(self.timers)
            if self.inflight.get(i) != deadline:
                continue
            expired = True
            if held and held >> self._shard(c, i) & 1:
                self._arm(i, now)
                continue
            self.counters.retransmitted += 1
            self.timeout.resend(i)
            self.timeout.expired(now, self.window)
            if c.state[i] == FLOATING:
                self._send_float(c, i, RETX, now)
            else:
                self._send_contrib(c, i, RETX, now)
        if expired and agent is not None:
            agent.probe(c, now)
        while self.timers and self.inflight.get(self.timers[0][1]) != self.timers[0][0]:
            heapq.heappop(self.timers)
        if self.timers:
            wake = min(wake, self.timers[0][0])
        return None if wake == float("inf") else wake

    def _give_up(self, c: Call, now: float) -> None:
        """Call ``c`` reached its deadline: ask the PS hosts it waits for whose
        contributions they miss (then ``poll`` raises), or, without a control
        channel, fail it now."""
        if c.phase == ANNOUNCING:
            waiting = [s for s in range(self.shards) if not c.go >> s & 1]
        else:
            undone = (c.first + i for i in range(c.n) if c.state[i] != DONE)
            waiting = sorted({ps_shard(seq % SEQ_MOD, self.shards) for seq in undone})
            waiting = sorted({*waiting, *(s for s in range(self.shards) if not c.go >> s & 1)})
        if self.agent is None:
            c.gave_up_in, c.phase = c.phase, FAILED
            raise timed_out(self, c, waiting, {})
        self.agent.give_up(c, now, waiting)

    def _rearm(self, c: Call, shards: int, now: float) -> None:
        """The PS hosts of ``shards`` agreed the call again after a restart:
        resend at once what of theirs is in flight (they hold nothing of it)."""
        for i in list(self.inflight):
            if shards >> self._shard(c, i) & 1:
                self.inflight[i] = now
                heapq.heappush(self.timers, (now, i))

    def _shard(self, c: Call, i: int) -> int:
        return ps_shard((c.first + i) % SEQ_MOD, self.shards)

    # -- receive ----------------------------------------------------------

    def _check(self, h: payload.Header) -> HostDrop | None:
        """Why a datagram of this job is not what a switch or PS would send."""
        if h.ptype == PacketType.PULL:
            if h.flags:
                return HostDrop.FLAGS
            if h.bitmap & ~self.mask or h.bitmap == self.mask:
                return HostDrop.BITMAP
            return HostDrop.COUNT if h.count != bin(h.bitmap).count("1") else None
        allowed = RESULT_FLAGS.get(PacketType(h.ptype))
        if allowed is None:
            return HostDrop.PTYPE
        if h.flags not in allowed:
            return HostDrop.FLAGS
        if h.bitmap != self.mask:
            return HostDrop.BITMAP
        return HostDrop.COUNT if h.count != self.fan_in else None

    def handle(self, buf: bytearray, n: int, now: float) -> None:
        self.counters.received += 1
        try:
            h = payload.decode_header(buf, n)
        except payload.Malformed:
            self._drop(HostDrop.LENGTH if n != wire.PAYLOAD_BYTES else HostDrop.PTYPE)
            return
        if h.job != self.job:
            self._drop(HostDrop.JOB)
            return
        reason = self._check(h)
        if reason is not None:
            self._drop(reason)
            return
        found = self._find(h.seq)
        if found is None:
            self._drop(HostDrop.STALE)
            return
        c, i = found
        if c.phase != STREAMING:
            self._drop(HostDrop.EARLY if c.phase == ANNOUNCING else HostDrop.STALE)
        elif h.ptype == PacketType.PULL:
            self._on_pull(h, c, i, now)
        else:
            self._on_result(h, c, i, payload.values_view(buf), now)

    def _drop(self, reason: HostDrop) -> None:
        self.counters.dropped[reason] += 1

    def _find(self, seq: int) -> tuple[Call, int] | None:
        for c in (self.cur, self.prev):
            if c is not None and (i := c.index(seq)) is not None:
                return c, i
        return None

    def _on_result(
        self, h: payload.Header, c: Call, i: int, values: npt.NDArray[np.int32], now: float
    ) -> None:
        """Deliver a chunk's sum.  An OVERFLOW-flagged sum is not exact: the
        worker resends its chunk as FLOAT, but still accepts an exact (plain)
        or float sum should one come, so a forged overflow can delay a chunk
        but neither wedge it nor make its sum differ from the peers'.
        A switch's sum (RESULT, or the PS's answer to ATP's held one, flagged
        HOLD) of a chunk resent since shows the timeout was spurious."""
        if c.state[i] == DONE:
            self._drop(HostDrop.DUPLICATE)
            return
        if h.flags & FLOAT:
            if c.state[i] != FLOATING:
                self._drop(HostDrop.UNASKED)
                return
            c.out[i] = quant.from_bits(values.astype(np.int32))
            self.counters.results_float += 1
        elif h.flags & OVERFLOW:
            if c.state[i] == FLOATING:
                self._drop(HostDrop.DUPLICATE)
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

    def _on_pull(self, h: payload.Header, c: Call, i: int, now: float) -> None:
        """The PS misses contributions of ``h.seq``: resend ours unless it has it."""
        if h.bitmap & self.bit:
            return
        self.counters.pulls_answered += 1
        if c is self.cur:
            self.timeout.forget(i)
        if c.state[i] == PENDING:
            c.state[i] = SENT
        self._send_contrib(c, i, RETX, now, arm=c is self.cur and c.state[i] != DONE)

    # -- send -------------------------------------------------------------

    def _send_contrib(self, c: Call, i: int, flags: int, now: float, arm: bool = True) -> None:
        if c.clipped[i]:
            flags |= OVERFLOW
        seq = (c.first + i) % SEQ_MOD
        h = payload.Header(PacketType.CONTRIB, flags, self.job, seq, self.bit, 1)
        self.transport.send(self.frame.pack(h, c.q[i]), self._ps_for(seq))
        self.counters.sent += 1
        if c.state[i] == PENDING:
            c.state[i] = SENT
            if c is self.cur:
                self.timeout.sent(i, now)
        if arm:
            self._arm(i, now)

    def _send_float(self, c: Call, i: int, flags: int, now: float) -> None:
        seq = (c.first + i) % SEQ_MOD
        h = payload.Header(PacketType.FLOAT, flags, self.job, seq, self.bit, 1)
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
