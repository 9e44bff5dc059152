"""Datagram validation (hosts.net.checks): each field against the job, one reason each."""

from __future__ import annotations

import pytest

from esa import wire
from esa.job import Workers
from esa.wire import Flag, PacketType
from hosts.net import payload
from hosts.net.checks import decode, one_bit, ps_check, worker_check
from hosts.net.drops import HostDrop

T = PacketType
JOB = Workers.of(2, 0b101)


def header(ptype: int, bitmap: int, count: int | None = None, flags: int = 0) -> payload.Header:
    return payload.Header(
        ptype, flags, 1, 7, bitmap, bin(bitmap).count("1") if count is None else count
    )


def test_decode_names_why_a_datagram_is_no_payload() -> None:
    good = payload.encode(header(T.RESULT, 0b101), [0] * wire.K)
    assert decode(bytearray(good), len(good)) == header(T.RESULT, 0b101)
    assert decode(bytearray(good), len(good) - 1) is HostDrop.LENGTH
    assert decode(bytearray(wire.PAYLOAD_BYTES), wire.PAYLOAD_BYTES) is HostDrop.PTYPE


def test_one_bit() -> None:
    assert [b for b in range(9) if one_bit(b)] == [1, 2, 4, 8]


@pytest.mark.parametrize(
    ("h", "reason"),
    [
        (header(T.FALLBACK, 0b001), None),
        (header(T.PARTIAL, 0b101, flags=Flag.OVERFLOW), None),
        (header(T.RESULT, 0b101, flags=Flag.HOLD), None),
        (header(T.FLOAT, 0b100, flags=Flag.RETX), None),
        (header(T.CONTRIB, 0b001), HostDrop.PTYPE),
        (header(T.PULL, 0b001), HostDrop.PTYPE),
        (header(T.FALLBACK, 0b001, flags=Flag.FLOAT), HostDrop.FLAGS),
        (header(T.PARTIAL, 0b001, flags=Flag.RETX), None),
        (header(T.RESULT, 0b101, flags=Flag.RETX | Flag.HOLD), None),
        (header(T.PARTIAL, 0b001, flags=Flag.HOLD), HostDrop.FLAGS),
        (header(T.FALLBACK, 0), HostDrop.BITMAP),
        (header(T.FALLBACK, 0b010), HostDrop.BITMAP),
        (header(T.RESULT, 0b001), HostDrop.BITMAP),
        (header(T.FLOAT, 0b101), HostDrop.BITMAP),
        (header(T.PARTIAL, 0b101, count=1), HostDrop.COUNT),
    ],
)
def test_ps_check(h: payload.Header, reason: HostDrop | None) -> None:
    assert ps_check(h, JOB) is reason


@pytest.mark.parametrize(
    ("h", "reason"),
    [
        (header(T.RESULT, 0b101), None),
        (header(T.RESULT, 0b101, flags=Flag.OVERFLOW), None),
        (header(T.RESULT, 0b101, flags=Flag.RETX | Flag.OVERFLOW), None),
        (header(T.PS_RESULT, 0b101, flags=Flag.HOLD | Flag.OVERFLOW), None),
        (header(T.PS_RESULT, 0b101, flags=Flag.FLOAT), None),
        (header(T.PULL, 0b100), None),
        (header(T.PULL, 0), None),
        (header(T.FALLBACK, 0b101), HostDrop.PTYPE),
        (header(T.CONTRIB, 0b001), HostDrop.PTYPE),
        (header(T.RESULT, 0b101, flags=Flag.HOLD), HostDrop.FLAGS),
        (header(T.PS_RESULT, 0b101, flags=Flag.FLOAT | Flag.OVERFLOW), HostDrop.FLAGS),
        (header(T.PS_RESULT, 0b101, flags=Flag.RETX | Flag.HOLD), HostDrop.FLAGS),
        (header(T.PULL, 0b001, flags=Flag.RETX), HostDrop.FLAGS),
        (header(T.RESULT, 0b001), HostDrop.BITMAP),
        (header(T.PULL, 0b101), HostDrop.BITMAP),
        (header(T.PULL, 0b010), HostDrop.BITMAP),
        (header(T.RESULT, 0b101, count=3), HostDrop.COUNT),
        (header(T.PULL, 0b001, count=2), HostDrop.COUNT),
    ],
)
def test_worker_check(h: payload.Header, reason: HostDrop | None) -> None:
    assert worker_check(h, JOB) is reason
