"""A worker's data path: its chunks out to the PS hosts, and their retransmission.

The ``Stream`` sends the chunks of the current call (``begin``) as its
window allows, arms a timer for each (``hosts.worker.inflight``) and resends a
chunk whose timer expired, as FLOAT if its sum overflowed (float
recovery).  The timeout follows the measured time to a sum of the
current call's chunks (``hosts.timing.rto``).  A chunk of an earlier call goes
out only when a PS pulls it, and is not timed.
"""

from __future__ import annotations

from esa.wire import Flag, PacketType
from hosts.net import payload, quant
from hosts.net.counters import WorkerCounters
from hosts.net.transport import Transport
from hosts.timing.rto import RetransmitTimeout
from hosts.worker.calls import DONE, FLOATING, PENDING, SENT, SEQ_MOD, Call
from hosts.worker.inflight import InFlight
from hosts.worker.member import Member

RETX, OVERFLOW = int(Flag.RETX), int(Flag.OVERFLOW)
"""Plain ints: IntFlag operators cost a Python call per packet."""


class Stream:
    """The chunks of worker ``member`` on ``transport``: at most ``window``
    of the current call's in flight, resent after ``timeout``."""

    def __init__(
        self,
        member: Member,
        transport: Transport,
        counters: WorkerCounters,
        window: int,
        timeout: RetransmitTimeout,
    ) -> None:
        self.member, self.transport, self.counters = member, transport, counters
        self.window, self.timeout = window, timeout
        self.inflight = InFlight()
        self.call: Call | None = None
        """the current call: its chunks are timed."""
        self.frame = payload.Frame()

    def begin(self, c: Call) -> None:
        """``c`` is the current call now: the last one's timers and samples go."""
        self.call = c
        self.inflight.clear()
        self.timeout.clear()

    def step(self, c: Call, held: int, now: float) -> bool:
        """Send what the window allows of the current call ``c`` and resend
        what timed out; True if a timer expired.  ``held``: the shards whose
        GO does not hold (their PS restarted): while any does no new chunk
        goes out, and a timed-out chunk of theirs waits for the GO; once it
        comes back (``c.regained``) their chunks in flight go again at once."""
        if c.regained:
            self._rearm(c, c.regained, now)
            c.regained = 0
        while not held and len(self.inflight) < self.window and c.next_send < c.n:
            i = c.next_send
            c.next_send += 1
            if c.state[i] == PENDING:
                self.send_contrib(c, i, 0, now)
        expired = False
        for i in self.inflight.expired(now, self.timeout.learnt):
            expired = True
            if held and held >> self._shard(c, i) & 1:
                self.arm(i, now)
                continue
            self.counters.retransmitted += 1
            self.timeout.resend(i)
            self.timeout.expired(now, self.window)
            if c.state[i] == FLOATING:
                self.send_float(c, i, RETX, now)
            else:
                self.send_contrib(c, i, RETX, now)
        return expired

    def answered(self, i: int, now: float, ptype: int, flags: int) -> None:
        """Chunk ``i`` of the current call got its sum (``ptype``, ``flags``)."""
        in_flight = max(1, len(self.inflight))
        self.inflight.disarm(i)
        if self.timeout.answered(i, now, in_flight, ptype, flags):
            self.counters.spurious += 1

    def pulled(self, c: Call, i: int, bitmap: int, now: float) -> None:
        """A PS pulled chunk ``i`` of ``c``: it holds the contributions of
        ``bitmap``; resend ours unless it has it."""
        if bitmap & self.member.bit:
            return
        self.counters.pulls_answered += 1
        current = c is self.call
        if current:
            self.timeout.forget(i)
        if c.state[i] == PENDING:
            c.state[i] = SENT
        self.send_contrib(c, i, RETX, now, arm=current and c.state[i] != DONE)

    def send_contrib(self, c: Call, i: int, flags: int, now: float, arm: bool = True) -> None:
        if c.clipped[i]:
            flags |= OVERFLOW
        seq = (c.first + i) % SEQ_MOD
        m = self.member
        h = payload.Header(PacketType.CONTRIB, flags, m.job, seq, m.bit, 1)
        self.transport.send(self.frame.pack(h, c.q[i]), m.ps_for(seq))
        self.counters.sent += 1
        if c.state[i] == PENDING:
            c.state[i] = SENT
            if c is self.call:
                self.timeout.sent(i, now)
        if arm:
            self.arm(i, now)

    def send_float(self, c: Call, i: int, flags: int, now: float) -> None:
        """Resend chunk ``i`` of ``c`` as float32: its sum overflowed."""
        seq = (c.first + i) % SEQ_MOD
        m = self.member
        h = payload.Header(PacketType.FLOAT, flags, m.job, seq, m.bit, 1)
        self.transport.send(self.frame.pack(h, quant.float_bits(c.floats[i])), m.ps_for(seq))
        self.counters.float_sent += 1
        c.state[i] = FLOATING
        if c is self.call:
            self.arm(i, now)

    def arm(self, i: int, now: float) -> None:
        self.inflight.arm(i, now, self.timeout.value)

    def _rearm(self, c: Call, shards: int, now: float) -> None:
        """The PS hosts of ``shards`` agreed the call again after a restart:
        resend at once what of theirs is in flight (they hold nothing of it)."""
        for i in list(self.inflight):
            if shards >> self._shard(c, i) & 1:
                self.inflight.due(i, now)

    def _shard(self, c: Call, i: int) -> int:
        return self.member.shard_of((c.first + i) % SEQ_MOD)
