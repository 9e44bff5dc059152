"""What a PS knows of a call: each worker's announcement of it (CALL or
RESUME), and the agreement once the announcements of every index match
(docs/agreement.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from esa.wire import RejectReason
from hosts.net import payload
from hosts.net.transport import Addr

SEQ_MOD = 1 << 32


@dataclass
class Announcement:
    worker: int
    nonce: int
    addr: Addr
    call: int
    base: int
    """relative to the epoch's offset."""
    chunks: int
    length: int
    digest: int
    offset: int
    """RESUME: the offset of the epoch the call was agreed in (0 on CALL)."""

    @classmethod
    def of(cls, msg: payload.Control, addr: Addr) -> Announcement:
        return cls(
            msg.worker, msg.nonce, addr, msg.call, msg.base, msg.chunks, msg.length, msg.digest,
            msg.offset,
        )  # fmt: skip

    def shape(self) -> tuple[int, int, int, int, int]:
        return self.call, self.base, self.chunks, self.length, self.digest


@dataclass
class Agreement:
    """A call announced alike by the holders of every index (or adopted from
    a RESUME), its epoch's ``offset`` and its members' announcements."""

    call: int
    base: int
    chunks: int
    length: int
    digest: int
    offset: int
    members: dict[int, Announcement]

    def covers(self, seq: int) -> bool:
        return (seq - self.offset - self.base) % SEQ_MOD < self.chunks

    def shape(self) -> tuple[int, int, int, int, int]:
        return self.call, self.base, self.chunks, self.length, self.digest


def differs(a: Announcement, b: Announcement) -> RejectReason:
    """The first field in which two announcements of one job differ."""
    if a.call != b.call:
        return RejectReason.CALL
    if a.length != b.length or a.chunks != b.chunks:
        return RejectReason.LENGTH
    if a.base != b.base or a.offset != b.offset:
        return RejectReason.BASE
    return RejectReason.CONFIG
