"""Datagram validation: which ESA payloads a host takes, and why it drops the rest.

A host checks every field of a datagram against the job it knows before
the datagram touches any state: ``decode`` parses the header, ``ps_check``
and ``worker_check`` hold it against what the datagram's sender may send.
Each answers with the ``HostDrop`` reason, or None for a datagram to act on.
"""

from __future__ import annotations

from esa import wire
from esa.job import Workers, popcount
from esa.wire import Flag, PacketType
from hosts.net import payload
from hosts.net.drops import HostDrop

SENDER_FLAGS = {
    PacketType.RESULT: int(Flag.RETX | Flag.OVERFLOW | Flag.HOLD),
    PacketType.FALLBACK: int(Flag.RETX | Flag.OVERFLOW),
    PacketType.PARTIAL: int(Flag.RETX | Flag.OVERFLOW),
    PacketType.FLOAT: int(Flag.RETX),
}
"""The packet types a PS is sent and the flags their senders may set (plain
ints: the complement of an IntFlag keeps only the defined flags); on a
switch's sum RETX says a resent contribution went into it."""

RETX, OVERFLOW, FLOAT, HOLD = int(Flag.RETX), int(Flag.OVERFLOW), int(Flag.FLOAT), int(Flag.HOLD)

RESULT_FLAGS = {
    PacketType.RESULT: (0, OVERFLOW, RETX, RETX | OVERFLOW),
    PacketType.PS_RESULT: (0, OVERFLOW, FLOAT, HOLD, HOLD | OVERFLOW),
}
"""Flag values a worker may be sent on each result type."""


def decode(buf: bytearray, n: int) -> payload.Header | HostDrop:
    """The header of a datagram of ``n`` bytes in ``buf``, or why it is no ESA payload."""
    try:
        return payload.decode_header(buf, n)
    except payload.Malformed:
        return HostDrop.LENGTH if n != wire.PAYLOAD_BYTES else HostDrop.PTYPE


def one_bit(b: int) -> bool:
    return b != 0 and b & (b - 1) == 0


def ps_check(h: payload.Header, spec: Workers) -> HostDrop | None:
    """Why a datagram to a PS of a job with workers ``spec`` is not what a
    switch or worker would send (its shard and call are the PS's to check)."""
    allowed = SENDER_FLAGS.get(PacketType(h.ptype))
    if allowed is None:
        return HostDrop.PTYPE
    if h.flags & ~allowed:
        return HostDrop.FLAGS
    if h.bitmap == 0 or h.bitmap & ~spec.mask:
        return HostDrop.BITMAP
    if h.ptype == PacketType.RESULT and h.bitmap != spec.mask:
        return HostDrop.BITMAP
    if h.ptype == PacketType.FLOAT and not one_bit(h.bitmap):
        return HostDrop.BITMAP
    if h.count != popcount(h.bitmap):
        return HostDrop.COUNT
    return None


def worker_check(h: payload.Header, spec: Workers) -> HostDrop | None:
    """Why a datagram to a worker of a job with workers ``spec`` is not what
    a switch or PS would send: a PULL names some but not all workers, a
    result all of them."""
    if h.ptype == PacketType.PULL:
        if h.flags:
            return HostDrop.FLAGS
        if h.bitmap & ~spec.mask or h.bitmap == spec.mask:
            return HostDrop.BITMAP
        return HostDrop.COUNT if h.count != popcount(h.bitmap) else None
    allowed = RESULT_FLAGS.get(PacketType(h.ptype))
    if allowed is None:
        return HostDrop.PTYPE
    if h.flags not in allowed:
        return HostDrop.FLAGS
    if h.bitmap != spec.mask:
        return HostDrop.BITMAP
    return HostDrop.COUNT if h.count != spec.fan_in else None
