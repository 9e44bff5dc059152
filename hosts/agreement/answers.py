"""The PS's GO and REJECT for one job: each names the job's table (fan-in
and mask) and, in a REJECT, the announcement the receiver differs from.
"""

from __future__ import annotations

from esa import wire
from esa.job import Workers
from esa.wire import ControlType, RejectReason
from hosts.agreement.announcements import Agreement, Announcement
from hosts.net import payload
from hosts.net.transport import Addr


class Answers:
    """The answers of the PS of job ``job``, whose workers are ``workers``."""

    def __init__(self, job: int, workers: Workers) -> None:
        self.job, self.fan_in, self.mask = job, workers.fan_in, workers.mask

    def against_table(self, msg: payload.Control) -> RejectReason | None:
        """How a CALL differs from the job's table, if it does."""
        if not self.mask >> msg.worker & 1:
            return RejectReason.WORKER
        if msg.fan_in != self.fan_in:
            return RejectReason.FAN_IN
        if msg.mask != self.mask:
            return RejectReason.MASK
        return None

    def go(self, ag: Agreement, m: Announcement) -> tuple[payload.Control, Addr]:
        msg = payload.Control(
            ControlType.GO, 0, self.job, m.worker, 0, m.nonce, ag.call, ag.base, ag.chunks,
            ag.length, self.fan_in, self.mask, 0, 0, ag.digest, ag.offset,
        )  # fmt: skip
        return msg, m.addr

    def reject_announcement(
        self, a: Announcement, reason: RejectReason, peer: Announcement
    ) -> tuple[payload.Control, Addr]:
        msg = payload.Control(ControlType.CALL, 0, self.job, a.worker, 0, a.nonce, a.call)
        return self.reject(msg, a.addr, reason, peer)

    def reject(
        self,
        msg: payload.Control,
        addr: Addr,
        reason: RejectReason,
        peer: Announcement | None,
        index: int | None = None,
    ) -> tuple[payload.Control, Addr]:
        """A REJECT to ``msg``'s sender carrying what it differs from: the
        peer's announcement, or (peer None) its own call with the PS's table;
        ``index``: the worker index run twice (DUPLICATE)."""
        src = msg if peer is None else peer
        who = wire.NO_PEER if peer is None else peer.worker
        reply = payload.Control(
            ControlType.REJECT, reason, self.job, msg.worker, who if index is None else index,
            msg.nonce, src.call, src.base, src.chunks, src.length, self.fan_in, self.mask, 0, 0,
            src.digest,
        )  # fmt: skip
        return reply, addr
