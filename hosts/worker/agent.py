"""The worker agent: streams a job's quantised chunks and collects the sums.

``allreduce`` is the blocking call applications use; it is built on
``begin`` / ``poll`` / ``done`` / ``result`` so a simulator can drive many
workers in one thread on a virtual clock (``testbed.simnet``).

A job's chunks may be spread over several PS hosts, its shards: chunk
``seq`` is addressed to the PS of ``esa.job.ps_shard(seq, shards)``.  With a
control transport each call is first agreed with every shard's PS
(``hosts.worker.announce``; docs/agreement.md): nothing is sent for a call its
peers disagree on, and a call that does not finish in time ends in
``AllreduceTimeout`` naming the workers the PS hosts report missing.
Without one (the packet simulator's tests, ``testbed.simnet``, against a
PS without one) calls are not agreed: no CLI or rig runs a worker that way.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from esa import wire
from esa.job import Workers
from esa.wire import Flag, PacketType
from hosts.agreement import auth
from hosts.net import payload, quant
from hosts.net.checks import decode, worker_check
from hosts.net.counters import WorkerCounters
from hosts.net.drops import HostDrop
from hosts.net.transport import Addr, Transport, wait_any
from hosts.timing.rto import MAX_RTO, RetransmitTimeout
from hosts.worker.announce import Announcer
from hosts.worker.calls import (
    ANNOUNCING,
    ASKING,
    DONE,
    FAILED,
    FLOATING,
    SEQ_MOD,
    STREAMING,
    Call,
    timed_out,
)
from hosts.worker.member import Member
from hosts.worker.stream import Stream

DEFAULT_TIMEOUT = 60.0
"""``allreduce``'s default timeout, seconds."""
LINGER = 4 * MAX_RTO
"""Seconds a finished worker answers PULLs (``esa-worker --linger``): a
peer that lost its sum and the PS's copy resends only when its timeout
fires, which backs off to ``MAX_RTO``, and on a lossy link a resend, the
PS's pull or its answer may be lost again (one linger of 1 s lost a sum at
10 % loss on Mininet, bench.lossy)."""

OVERFLOW, FLOAT = int(Flag.OVERFLOW), int(Flag.FLOAT)
"""Plain ints: IntFlag operators cost a Python call per packet."""


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
    job's ``key`` (default: its open key, ``hosts.agreement.auth.open_key``).

    Its parts: who it is in its job (``member``), its data path and
    retransmission (``stream``) and, with ``control``, its side of call
    agreement (``agent``).
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
        self.member = m = Member.of(
            job, index, Workers.of(fan_in, worker_mask), bound, ps, control_addrs
        )
        if window < 1 or not rto > 0:
            raise ValueError(f"window must be >= 1 and rto > 0, got {window} and {rto}")
        self.job, self.index, self.fan_in = job, index, fan_in
        self.scale = quant.job_scale(bound, fan_in)
        self.transport, self.clock, self.control = transport, clock, control
        self.counters = WorkerCounters()
        timeout = RetransmitTimeout(rto, MAX_RTO)
        self.stream = Stream(m, transport, self.counters, window, timeout)
        self.calls = 0
        self.next_base = 0
        self.cur: Call | None = None
        self.prev: Call | None = None
        self.rbuf = bytearray(wire.PAYLOAD_BYTES + 1)
        self.agent = None if control is None else Announcer(
            m, self.counters, control, auth.open_key(job) if key is None else key, timeout.floor
        )  # fmt: skip

    @property
    def timeout(self) -> RetransmitTimeout:
        """The retransmission timeout of the current call's chunks (``hosts.timing.rto``)."""
        return self.stream.timeout

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
        call = Call(self.calls, self.next_base, tensor, self.member.bound, self.scale, start, limit)
        if call.size == 0:
            raise ValueError("allreduce of an empty tensor")
        self.calls += 1
        self.next_base = (self.next_base + call.n) % SEQ_MOD
        self.prev, self.cur = self.cur, call
        self.stream.begin(call)
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
        if self.stream.step(c, held, now) and agent is not None:
            agent.probe(c, now)
        deadline = self.stream.inflight.next_deadline()
        if deadline is not None:
            wake = min(wake, deadline)
        return None if wake == float("inf") else wake

    def _give_up(self, c: Call, now: float) -> None:
        """Call ``c`` reached its deadline: ask the PS hosts it waits for whose
        contributions they miss (then ``poll`` raises), or, without a control
        channel, fail it now."""
        waiting = c.waiting(self.member)
        if self.agent is None:
            c.gave_up_in, c.phase = c.phase, FAILED
            raise timed_out(self.member, c, waiting, None)
        self.agent.give_up(c, now, waiting)

    # -- receive ----------------------------------------------------------

    def handle(self, buf: bytearray, n: int, now: float) -> None:
        self.counters.received += 1
        h = decode(buf, n)
        if isinstance(h, HostDrop):
            self._drop(h)
            return
        if h.job != self.job:
            self._drop(HostDrop.JOB)
            return
        reason = worker_check(h, self.member.workers)
        if reason is not None:
            self._drop(reason)
            return
        found = self._find(h.seq)
        if found is None or found[0].phase != STREAMING:
            early = found is not None and found[0].phase == ANNOUNCING
            self._drop(HostDrop.EARLY if early else HostDrop.STALE)
            cur = self.cur
            announcing = cur is not None and cur.phase == ANNOUNCING
            if h.ptype == PacketType.PULL and announcing and self.agent is not None:
                self.agent.pulled(now)
            return
        c, i = found
        if h.ptype == PacketType.PULL:
            self.stream.pulled(c, i, h.bitmap, now)
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
        A sum of the workers' first sends (the switch's RESULT, or a
        PS_RESULT flagged HOLD) of a chunk resent since shows the timeout
        was spurious."""
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
                self.stream.send_float(c, i, 0, now)
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
            self.stream.answered(i, now, h.ptype, h.flags)
