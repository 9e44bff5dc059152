"""Differential test: one random packet trace through BMv2 and through
esa.model; every output frame and every counter must be the same."""

from __future__ import annotations

import random

import pytest

from controller.topology import Host
from esa import wire
from esa.model import Packet
from esa.spec import Policy
from esa.wire import Flag, PacketType
from tests.dataplane import JOBS, Rig

pytestmark = pytest.mark.bmv2


def trace(seed: int, n: int) -> list[tuple[Packet, Host]]:
    """Contributions of the rig's jobs (one, two and four PS hosts) over a few
    seqs, so they collide in the small pool, each worker's first send plain
    and later ones retransmissions, a few saturating values; PS results and
    pulls, mostly from the PS of the chunk's shard and at times from another
    shard's PS or a worker; float resends and stray packets."""
    rng = random.Random(seed)
    sent: set[tuple[int, int, int]] = set()
    out: list[tuple[Packet, Host]] = []
    for _ in range(n):
        job = rng.choice(list(JOBS.values()))
        seq = rng.randrange(12)
        roll = rng.random()
        if roll < 0.1:
            ptype = PacketType.PS_RESULT if roll < 0.07 else PacketType.PULL
            src = rng.choice((job.ps_for(seq),) * 4 + job.ps + job.workers[:1])
            out.append((Packet(ptype, job.job, seq, 0b11, (0,) * wire.K, count=2), src))
            continue
        if roll < 0.12:
            w = rng.randrange(2)
            fl = Packet(PacketType.FLOAT, job.job, seq, 1 << w, (w,) * wire.K, count=1)
            out.append((fl, job.workers[w]))
            continue
        if roll < 0.14:
            stray = Packet(PacketType.CONTRIB, 200, seq, 1, (1,) * wire.K, count=1)
            out.append((stray, job.workers[0]))
            continue
        w = rng.randrange(2)
        flags = Flag.RETX if (job.job, seq, w) in sent else 0
        sent.add((job.job, seq, w))
        big = rng.random() < 0.05
        values = tuple(2**31 - 10 if big else rng.randrange(-(2**20), 2**20) for _ in range(wire.K))
        out.append(
            (Packet(PacketType.CONTRIB, job.job, seq, 1 << w, values, flags, 1), job.workers[w])
        )
    return out


@pytest.mark.parametrize(
    ("policy", "parts"),
    [(p, None) for p in Policy] + [(Policy.ESA, (1, 2, 3)), (Policy.ATP, (1, 2, 3))],
)
def test_switch_equals_model(rig: Rig, policy: Policy, parts: tuple[int, ...] | None) -> None:
    """Every policy as the controller writes it; and ESA (ATP, which ignores
    them) with partitions for three jobs and none for the fourth, which
    hashes into theirs."""
    rig.reset(policy, parts=parts)
    got = rig.run(trace(seed=int(policy) + len(parts or ()), n=300))
    assert len(got) > 100
    assert {s.port for s in got} == set(range(1, 17))
