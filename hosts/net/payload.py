"""Fast-path encode/decode of ESA payloads: ``struct`` for the header, a
numpy ``'>i4'`` view for the values, into buffers allocated once.

The header layout comes from ``esa.wire`` (``struct_format`` and ``HEADER``);
``Header`` only names the fields, and the check below fails at import if
the two ever disagree.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, fields
from operator import attrgetter

import numpy as np
import numpy.typing as npt

from esa import model, wire

HEADER_STRUCT = struct.Struct(wire.struct_format())
VALUES_DTYPE = np.dtype(">i4")
PTYPES = frozenset(int(p) for p in wire.PacketType)


@dataclass(frozen=True, slots=True)
class Header:
    ptype: int
    flags: int
    job: int
    seq: int
    bitmap: int
    count: int


FIELD_NAMES = tuple(f.name for f in wire.HEADER)
if tuple(f.name for f in fields(Header)) != FIELD_NAMES:
    raise ImportError("hosts.net.payload.Header does not match esa.wire.HEADER")
if HEADER_STRUCT.size != wire.HEADER_BYTES:
    raise ImportError("esa.wire.struct_format() does not match HEADER_BYTES")


_header_tuple = attrgetter(*FIELD_NAMES)


class Malformed(ValueError):
    """A datagram that is not an ESA payload (length or packet type)."""


def values_view(buf: bytearray | memoryview) -> npt.NDArray[np.int32]:
    """The K big-endian int32 values of ``buf`` as a numpy view (no copy)."""
    return np.frombuffer(buf, dtype=VALUES_DTYPE, count=wire.K, offset=wire.HEADER_BYTES)


class Frame:
    """One preallocated payload buffer with a writable view on its values."""

    __slots__ = ("buf", "values")

    def __init__(self) -> None:
        self.buf = bytearray(wire.PAYLOAD_BYTES)
        self.values = values_view(self.buf)

    def pack(self, header: Header, values: npt.ArrayLike) -> bytearray:
        """Fill the buffer (values converted to big-endian int32) and return it."""
        HEADER_STRUCT.pack_into(self.buf, 0, *_header_tuple(header))
        self.values[:] = values
        return self.buf


def encode(header: Header, values: npt.ArrayLike) -> bytes:
    return bytes(Frame().pack(header, values))


def decode_header(buf: bytes | bytearray | memoryview, n: int) -> Header:
    """The header of a datagram of ``n`` bytes held in ``buf``; raises ``Malformed``."""
    if n != wire.PAYLOAD_BYTES:
        raise Malformed(f"length {n}, expected {wire.PAYLOAD_BYTES}")
    h = Header(*HEADER_STRUCT.unpack_from(buf, 0))
    if h.ptype not in PTYPES:
        raise Malformed(f"unknown packet type {h.ptype}")
    return h


def decode(buf: bytes | bytearray | memoryview) -> tuple[Header, npt.NDArray[np.int32]]:
    """Header and a copy of the values as native int32."""
    h = decode_header(buf, len(buf))
    return h, values_view(memoryview(buf)).astype(np.int32)


def to_model(data: bytes | bytearray | memoryview) -> model.Packet:
    """A datagram as the switch model's packet; raises ``Malformed``."""
    h, values = decode(data)
    return model.Packet(
        ptype=wire.PacketType(h.ptype),
        job=h.job,
        seq=h.seq,
        bitmap=h.bitmap,
        values=tuple(values.tolist()),
        flags=h.flags,
        count=h.count,
    )


def from_model(p: model.Packet) -> bytes:
    return encode(Header(p.ptype, p.flags, p.job, p.seq, p.bitmap, p.count), p.values)


CONTROL_STRUCT = struct.Struct(wire.control_struct_format())
CONTROL_TYPES = frozenset(int(t) for t in wire.ControlType)


@dataclass(frozen=True, slots=True)
class Control:
    """A control message; ``magic`` is added and checked by the codec."""

    ctype: int
    code: int = 0
    job: int = 0
    worker: int = 0
    peer: int = 0
    nonce: int = 0
    call: int = 0
    base: int = 0
    chunks: int = 0
    length: int = 0
    fan_in: int = 0
    mask: int = 0
    missing: int = 0
    partials: int = 0
    digest: int = 0
    offset: int = 0
    session: int = 0
    counter: int = 0
    mac: int = 0


if tuple(f.name for f in fields(Control)) != tuple(f.name for f in wire.CONTROL[1:]):
    raise ImportError("hosts.net.payload.Control does not match esa.wire.CONTROL")
if CONTROL_STRUCT.size != wire.CONTROL_BYTES:
    raise ImportError("esa.wire.control_struct_format() does not match CONTROL_BYTES")

_control_tuple = attrgetter(*(f.name for f in fields(Control)))


def encode_control(msg: Control) -> bytes:
    return CONTROL_STRUCT.pack(wire.CONTROL_MAGIC, *_control_tuple(msg))


def decode_control(buf: bytes | bytearray | memoryview, n: int) -> Control:
    """The control message of a datagram of ``n`` bytes in ``buf``; raises ``Malformed``."""
    if n != wire.CONTROL_BYTES:
        raise Malformed(f"control length {n}, expected {wire.CONTROL_BYTES}")
    magic, *rest = CONTROL_STRUCT.unpack_from(buf, 0)
    if magic != wire.CONTROL_MAGIC:
        raise Malformed(f"control magic {magic:#06x}")
    msg = Control(*rest)
    if msg.ctype not in CONTROL_TYPES:
        raise Malformed(f"unknown control type {msg.ctype}")
    return msg
