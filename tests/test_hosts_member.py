"""A worker's place in its job (hosts.worker.member): its checks, and where each chunk goes."""

from __future__ import annotations

import pytest

from esa import wire
from esa.job import Workers
from hosts.worker.member import FLOAT32_MAX, Member

PS = (("10.0.0.1", wire.UDP_PORT), ("10.0.0.2", wire.UDP_PORT))


def test_a_member_of_a_sharded_job() -> None:
    m = Member.of(3, 2, Workers.of(2, 0b101), 1.0, PS)
    assert (m.fan_in, m.mask, m.bit, m.shards) == (2, 0b101, 0b100, 2)
    assert m.control_addrs == (("10.0.0.1", wire.CONTROL_PORT), ("10.0.0.2", wire.CONTROL_PORT))
    assert [m.shard_of(seq) for seq in range(5)] == [0, 1, 0, 1, 0]
    assert [m.ps_for(seq) for seq in (6, 7)] == [PS[0], PS[1]]


def test_one_ps_takes_every_chunk() -> None:
    m = Member.of(3, 0, Workers.of(1), 1.0, PS[:1], (("10.9.9.9", 1),))
    assert m.control_addrs == (("10.9.9.9", 1),)
    assert {m.ps_for(seq) for seq in range(4)} == {PS[0]} and m.shard_of(3) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 0, Workers.of(2), 1.0, PS), "job must be 1..255, got 0"),
        ((1, 1, Workers.of(2, 0b101), 1.0, PS), "worker bit 1 is not in mask 0x5"),
        ((1, 32, Workers.of(2), 1.0, PS), "worker bit 32 is not in mask 0x3"),
        ((1, 0, Workers.of(2), 0.0, PS), "bound must be a positive float32, got 0.0"),
        ((1, 0, Workers.of(2), 2 * FLOAT32_MAX, PS), "bound must be a positive float32"),
        ((1, 0, Workers.of(2), 1.0, PS * 3), "a job has 1, 2, 4 or 8 PS hosts .* got 6"),
        ((1, 0, Workers.of(2), 1.0, (), ()), "a job has 1, 2, 4 or 8 PS hosts .* got 0"),
        ((1, 0, Workers.of(2), 1.0, PS, PS[:1]), "PS control addresses for 2 PS hosts"),
    ],
)
def test_what_a_member_refuses(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Member.of(*args)  # type: ignore[arg-type]
