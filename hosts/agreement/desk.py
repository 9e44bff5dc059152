"""The PS's end of the control channel (docs/agreement.md).

Each datagram is checked in this order, and the first check it fails drops
it, counted by reason (``hosts.net.drops``): its length, magic and type
(``control``: the PS is sent CALL, RESUME, ALIVE, STATUS and BYE), its job
(``job``), its authenticator under the job's key (``auth``), its session
(``session``: made for another PS process; answered with a CHALLENGE that
tells the current one, as is a worker's first message, with session 0,
which is not counted as dropped), and then, in the job's ``CallBook``, its message
number (``replay``) and its process (``stranger``).  Only a message that
passes them all can change what the PS holds.

A CALL or RESUME for a job the PS does not serve, or with a wrong
authenticator, is answered with a REJECT the PS can not authenticate
(UNKNOWN_JOB, KEY); every REJECT and CHALLENGE counts against its
destination's ``SourceLimit``, so a forged source draws at most a few
answers a second.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import replace

from esa import wire
from esa.wire import ControlType, RejectReason
from hosts.agreement import auth
from hosts.agreement.announcements import Agreement
from hosts.agreement.callbook import CallBook
from hosts.net import payload
from hosts.net.drops import HostDrop
from hosts.net.transport import Addr, Transport

FROM_WORKERS = frozenset(
    int(t)
    for t in (
        ControlType.CALL,
        ControlType.RESUME,
        ControlType.ALIVE,
        ControlType.STATUS,
        ControlType.BYE,
    )
)
LIMITED = frozenset((int(ControlType.REJECT), int(ControlType.CHALLENGE)))
GO_COPIES = 2
"""Copies of each GO the PS sends.  A worker whose GO is lost starts the
call only at its CALL's next resend, whose interval doubled while it waited
for its peers, and their chunks of the call wait for it: at 5 % loss on
BMv2 (``lossy-pool.json``, 5 runs, issue 39) the first and the last
worker's starts of each call lay 2.40-2.63 s apart in all over the 15
jobs with one GO, 0.32 s with two (``bench.loss_trace``'s call skew).  A
worker takes a second GO as it took the first."""


def new_session() -> int:
    """A PS process's session: random, never 0 (what a worker that knows none sends)."""
    return 1 + secrets.randbelow((1 << 32) - 1)


class ControlDesk:
    """Receives, checks and answers the control messages of the PS's jobs.

    ``forget(job)``: the job starts a new epoch; ``held(job, agreement)``:
    the bitmaps of the PS's partial sums of an agreed call; ``count(name)``
    and ``drop(reason)`` keep the PS's counters."""

    def __init__(
        self,
        transport: Transport,
        books: dict[int, CallBook],
        keys: auth.Keys,
        forget: Callable[[int], None],
        held: Callable[[int, Agreement], list[int]],
        count: Callable[[str], None],
        drop: Callable[[HostDrop], None],
        session: int | None = None,
    ) -> None:
        self.transport, self.books, self.keys = transport, books, keys
        self.forget, self.held, self.count, self.drop = forget, held, count, drop
        self.session = new_session() if session is None else session
        self.limit = auth.SourceLimit()
        self.buf = bytearray(wire.CONTROL_BYTES + 1)

    def poll(self, now: float) -> None:
        while (got := self.transport.recv_into(self.buf)) is not None:
            self.handle(self.buf, got[0], got[1], now)

    def handle(self, buf: bytearray, n: int, addr: Addr, now: float) -> None:
        self.count("control_received")
        try:
            msg = payload.decode_control(buf, n)
        except payload.Malformed:
            self.drop(HostDrop.CONTROL)
            return
        if msg.ctype not in FROM_WORKERS or msg.counter == 0:
            self.drop(HostDrop.CONTROL)
            return
        book = self.books.get(msg.job)
        announce = msg.ctype in (ControlType.CALL, ControlType.RESUME)
        if book is None:
            self.drop(HostDrop.JOB)
            if announce:
                self._unsigned(msg, addr, RejectReason.UNKNOWN_JOB, now)
            return
        key = self.keys[msg.job]
        if not auth.authentic(buf, key):
            self.drop(HostDrop.AUTH)
            if announce:
                self._unsigned(msg, addr, RejectReason.KEY, now)
            return
        if msg.session != self.session:
            if msg.session:
                self.drop(HostDrop.SESSION)
            challenge = payload.Control(
                ControlType.CHALLENGE, 0, msg.job, msg.worker, 0, msg.nonce, msg.call,
                counter=msg.counter,
            )  # fmt: skip
            self._send(challenge, addr, key, now)
            return
        out = book.handle(msg, addr, now, lambda ag: self.held(msg.job, ag))
        if out.drop is not None:
            self.drop(out.drop)
        if out.new_epoch:
            self.count("epochs_started")
            self.forget(msg.job)
        if out.agreed:
            self.count("calls_agreed")
        for reply, to in out.replies:
            p = book.roster.known(reply.nonce)
            counter = msg.counter if p is None else p.window.top
            self._send(replace(reply, counter=counter), to, key, now)

    def _unsigned(self, msg: payload.Control, addr: Addr, reason: RejectReason, now: float) -> None:
        """A REJECT the PS can not authenticate: it has no key for the job,
        or the CALL's authenticator is not the job key's."""
        reply = payload.Control(
            ControlType.REJECT, reason, msg.job, msg.worker, wire.NO_PEER, msg.nonce,
            msg.call, counter=msg.counter,
        )  # fmt: skip
        if self._allowed(reply, addr, now):
            self.transport.send(payload.encode_control(reply), addr)

    def _send(self, msg: payload.Control, addr: Addr, key: bytes, now: float) -> None:
        msg = replace(msg, session=self.session)
        if self._allowed(msg, addr, now):
            sealed = auth.seal(msg, key)
            for _ in range(GO_COPIES if msg.ctype == ControlType.GO else 1):
                self.transport.send(sealed, addr)

    def _allowed(self, msg: payload.Control, addr: Addr, now: float) -> bool:
        if msg.ctype in LIMITED and not self.limit.take(addr, now):
            self.count("control_suppressed")
            return False
        self.count(
            {
                ControlType.REJECT: "rejects_sent",
                ControlType.CHALLENGE: "challenges_sent",
                ControlType.REPORT: "reports_sent",
                ControlType.GO: "gos_sent",
            }[ControlType(msg.ctype)]
        )
        return True
