"""A worker process's side of call agreement (docs/agreement.md).

For each call the worker announces it to every PS shard (CALL, resent at
doubling intervals up to ``MAX_CALL_RTO`` until answered, and at once, at
most every ``PROBE_EVERY``, when a PULL shows a PS streaming a call whose GO
the worker lacks: the GO was lost) and streams once each said GO; while it
streams it tells them it is alive (ALIVE, every ``ALIVE_EVERY`` seconds and,
at most every ``PROBE_EVERY``, when a chunk timed out).  A PS it has not
spoken to, or that restarted, answers with a CHALLENGE that names its
session: the worker takes the session and sends again, as RESUME for a call
that PS had already agreed (it holds back that shard's chunks until the new
GO, then resends those without a sum).  At the call's deadline it asks the PS
hosts it waits for (STATUS) who is missing, and fails the call with what
they report.  ``leave`` says BYE.

Every message carries the worker process's nonce, its message number and
the session, sealed with the job's key (``hosts.agreement.auth``); an answer must
carry the nonce, the PS's session and a valid authenticator.  Message
numbers to shard ``s`` of ``n`` are ``s + n``, ``s + 2n``, ...: an answer
echoes one, and so tells which shard's PS sent it.  The GO of every shard
names the epoch's ``offset`` (the same from all: it comes from the epoch's
processes), where the call's seqs start.
A REJECT of an unknown job or key is the one answer a PS can not seal: it
is taken only from a PS the worker has no session with yet.
"""

from __future__ import annotations

import secrets
from dataclasses import replace

from esa import wire
from esa.wire import ControlType, RejectReason
from hosts.agreement import auth
from hosts.net import payload
from hosts.net.counters import WorkerCounters
from hosts.net.drops import HostDrop
from hosts.net.transport import Transport
from hosts.worker.calls import ANNOUNCING, ASKING, FAILED, STREAMING, Call, rejected, timed_out
from hosts.worker.member import Member

MAX_CALL_RTO = 1.0
"""Upper bound of the interval between a CALL's resends, seconds."""
ALIVE_EVERY = 0.5
"""Seconds between ALIVEs while a call streams."""
PROBE_EVERY = 0.1
"""Least seconds between ALIVEs sent because a chunk timed out."""
STATUS_TRIES, STATUS_WAIT = 3, 0.2
"""STATUS requests after a timeout, and seconds to wait for each answer."""
ANSWERS = frozenset(
    int(t) for t in (ControlType.GO, ControlType.REJECT, ControlType.REPORT, ControlType.CHALLENGE)
)
UNSIGNED = frozenset((int(RejectReason.UNKNOWN_JOB), int(RejectReason.KEY)))


class Announcer:
    """The control channel of worker ``w`` to its job's PS hosts (at
    ``w.control_addrs``), its messages sealed with ``key``, counted in
    ``counters``; ``rto``: the first interval between a CALL's resends."""

    def __init__(
        self, w: Member, counters: WorkerCounters, control: Transport, key: bytes, rto: float
    ) -> None:
        self.w, self.counters, self.control, self.key = w, counters, control, key
        self.addrs, self.rto = w.control_addrs, rto
        self.shards = len(self.addrs)
        self.full = (1 << self.shards) - 1
        self.nonce = secrets.randbits(32)
        """tells this process's messages from another's with the same index."""
        self.sessions = [0] * self.shards
        """each shard's PS session, as its last CHALLENGE told (0: none yet)."""
        self.numbers = list(range(self.shards))
        """the number of the last message sent to each shard (``s`` at first: none)."""
        self.since = [s + self.shards for s in range(self.shards)]
        """the number of the first message sent to each shard under its session."""
        self.buf = bytearray(wire.CONTROL_BYTES + 1)
        self.failure: Exception | None = None
        self.reports: dict[int, payload.Control] = {}
        self.call_rto = self.next_call = self.next_alive = self.probed = 0.0
        self.recalled = float("-inf")
        """when a PULL last sent the CALL again."""
        self.asking: list[int] = []
        self.tries, self.next_status = 0, 0.0

    # -- a call's life --------------------------------------------------------

    def start(self, c: Call, rto: float) -> None:
        c.phase = ANNOUNCING
        c.digest = wire.config_digest(self.w.fan_in, self.w.mask, self.w.bound, c.size, "float32")
        self.call_rto, self.next_call = rto, 0.0

    def poll(self, c: Call, now: float) -> float:
        """Send what is due for call ``c``; returns when something next is.
        Raises the call's ``AllreduceTimeout`` once the PS hosts it asked answered."""
        if c.phase == ASKING:
            return self._ask(c, now)
        wake = float("inf")
        if c.go != self.full:
            if now >= self.next_call:
                for s in range(self.shards):
                    if not c.go >> s & 1:
                        kind = ControlType.RESUME if c.resume >> s & 1 else ControlType.CALL
                        self._send(s, self._about(c, kind))
                        self.counters.calls_sent += 1
                self.next_call = now + self.call_rto
                self.call_rto = min(2 * self.call_rto, MAX_CALL_RTO)
            wake = self.next_call
        if c.phase == STREAMING and c.delivered < c.n:
            if now >= self.next_alive:
                self._alive(c, now)
            wake = min(wake, self.next_alive)
        return wake

    def probe(self, c: Call, now: float) -> None:
        """A chunk timed out: ask the PS hosts whether they still know the call."""
        if now - self.probed >= PROBE_EVERY:
            self._alive(c, now)

    def pulled(self, now: float) -> None:
        """A PULL came for a chunk the worker does not stream while it
        announces its call: a PS pulls only the chunks of a call it agreed,
        so its GO was lost.  The CALL goes again now rather than after its
        interval, which may have doubled to ``MAX_CALL_RTO`` meanwhile while
        the peers stream and wait for this worker's contributions; at most
        every ``PROBE_EVERY``, as a window of PULLs comes together.  A CALL
        the interval sent does not hold it back: the PS's first pull comes
        a stall after the GO it lost, often within ``PROBE_EVERY`` of the
        call's first CALL (in one traced at 5 % loss, 89 ms after it; the
        next PULL, and the CALL, came 61 ms later)."""
        if now - self.recalled >= PROBE_EVERY:
            self.next_call = self.recalled = now

    def give_up(self, c: Call, now: float, waiting: list[int]) -> None:
        """Call ``c`` reached its deadline waiting for the PS hosts of these shards."""
        c.gave_up_in, c.phase = c.phase, ASKING
        self.asking, self.reports, self.tries, self.next_status = waiting, {}, 0, now

    def leave(self) -> None:
        """BYE to every PS this process spoke to: its index is free at once."""
        for s in range(self.shards):
            if self.sessions[s]:
                self._send(s, payload.Control(ControlType.BYE, 0, self.w.job, self.w.index))

    def _alive(self, c: Call, now: float) -> None:
        for s in range(self.shards):
            if c.go >> s & 1:
                self._send(s, self._about(c, ControlType.ALIVE))
        self.next_alive, self.probed = now + ALIVE_EVERY, now

    def _ask(self, c: Call, now: float) -> float:
        if set(self.asking) <= set(self.reports) or (
            self.tries == STATUS_TRIES and now >= self.next_status
        ):
            reports = {s: self.reports.get(s) for s in self.asking}
            c.phase = FAILED
            raise timed_out(self.w, c, self.asking, reports)
        if now >= self.next_status:
            for s in self.asking:
                if s not in self.reports:
                    self._send(s, self._about(c, ControlType.STATUS))
            self.tries += 1
            self.next_status = now + STATUS_WAIT
        return self.next_status

    # -- send -----------------------------------------------------------------

    def _about(self, c: Call, ctype: ControlType) -> payload.Control:
        w = self.w
        offset = c.offset if ctype == ControlType.RESUME and c.offset is not None else 0
        return payload.Control(
            ctype, 0, w.job, w.index, 0, 0, c.number, c.base, c.n, c.size, w.fan_in, w.mask,
            0, 0, c.digest, offset,
        )  # fmt: skip

    def _send(self, s: int, msg: payload.Control) -> None:
        self.numbers[s] += self.shards
        msg = replace(msg, nonce=self.nonce, session=self.sessions[s], counter=self.numbers[s])
        self.control.send(auth.seal(msg, self.key), self.addrs[s])

    # -- receive --------------------------------------------------------------

    def receive(self, c: Call | None, now: float) -> None:
        while (got := self.control.recv_into(self.buf)) is not None:
            self.handle(self.buf, got[0], c, now)

    def handle(self, buf: bytearray, n: int, c: Call | None, now: float) -> None:
        counters = self.counters
        counters.control_received += 1
        try:
            m = payload.decode_control(buf, n)
        except payload.Malformed:
            counters.dropped[HostDrop.CONTROL] += 1
            return
        s = m.counter % self.shards
        who = (m.job, m.worker, m.nonce)
        if m.ctype not in ANSWERS or who != (self.w.job, self.w.index, self.nonce):
            counters.dropped[HostDrop.STRANGER] += 1
            return
        unsigned = m.ctype == ControlType.REJECT and m.code in UNSIGNED and not self.sessions[s]
        if not unsigned and not auth.authentic(buf, self.key):
            counters.dropped[HostDrop.AUTH] += 1
            return
        if m.ctype == ControlType.CHALLENGE:
            self._on_challenge(m, s, c, now)
        elif not unsigned and m.session != self.sessions[s]:
            counters.dropped[HostDrop.SESSION] += 1
        elif c is None or m.call != c.number:
            counters.dropped[HostDrop.STALE] += 1
        elif m.ctype == ControlType.REPORT:
            self.reports[s] = m
        elif m.ctype == ControlType.GO:
            self._on_go(m, s, c, now)
        elif c.phase in (ANNOUNCING, STREAMING) and c.delivered < c.n:
            c.phase = FAILED
            self.failure = rejected(self.w, m, c, s)
        else:
            counters.dropped[HostDrop.STALE] += 1

    def _on_challenge(self, m: payload.Control, s: int, c: Call | None, now: float) -> None:
        """The PS of shard ``s`` has another session than the one this worker
        sent since ``since[s]``: it is new to the worker, or it restarted."""
        if m.counter < self.since[s] or m.session in (0, self.sessions[s]):
            self.counters.dropped[HostDrop.STALE] += 1
            return
        restarted = self.sessions[s] != 0
        self.sessions[s], self.since[s] = m.session, self.numbers[s] + self.shards
        if c is None or c.phase not in (ANNOUNCING, STREAMING):
            return
        bit = 1 << s
        if c.go & bit:
            c.go &= ~bit
            c.resume |= bit
        if restarted:
            c.restarted |= bit
        self.next_call, self.call_rto = now, self.rto

    def _on_go(self, m: payload.Control, s: int, c: Call, now: float) -> None:
        """Shard ``s`` agreed the call; every shard names the same offset."""
        shape = (m.base, m.chunks, m.length, m.digest)
        if shape != (c.base, c.n, c.size, c.digest) or c.offset not in (None, m.offset):
            self.counters.dropped[HostDrop.STRANGER] += 1
            return
        bit = 1 << s
        if c.phase not in (ANNOUNCING, STREAMING):
            self.counters.dropped[HostDrop.STALE] += 1
            return
        c.go |= bit
        c.offset, c.first = m.offset, (m.offset + c.base) % (1 << 32)
        if c.resume & bit:
            c.resume &= ~bit
            c.regained |= bit
        if c.phase == ANNOUNCING and c.go == self.full:
            c.phase = STREAMING
            self.next_alive = now + ALIVE_EVERY
