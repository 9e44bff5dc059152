"""Differential test: one random packet trace through BMv2 and through
esa.model; every output frame and every counter must be the same."""

from __future__ import annotations

import random

import pytest

from controller.world.topology import Host
from esa import wire
from esa.model import Packet
from esa.spec import GONE_SPAN, Event, Policy
from esa.wire import Flag, PacketType
from tests.dataplane import JOBS, LOW, SWITCH_IP, TWO, Rig

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


SEQ_MOD = 1 << 32
STREAM_BASES = {1: SEQ_MOD - 9, 2: 0, 3: GONE_SPAN - 7, 4: SEQ_MOD // 2 - 3}
"""Each job's first seq: job 1's wrap around 2^32 within the trace."""


def stream(seed: int, n: int, window: int = 6) -> list[tuple[Packet, Host]]:
    """The rig's jobs streaming chunks over lossy, duplicating, reordering
    links: each worker sends its chunks in order, at most ``window`` ahead
    of the job's slowest worker; a contribution is lost (never sent), or
    arrives late and out of order, or twice; a worker retransmits (RETX)
    a chunk it sent, lost or not.  Small pools and partitions put several
    chunks of a job, and of several jobs, on each slot (rule S13's marker,
    docs/dataplane.md "Gone is gone")."""
    rng = random.Random(seed)
    jobs = list(JOBS.values())
    nxt = {(j.job, w): 0 for j in jobs for w in range(2)}
    late: list[tuple[Packet, Host]] = []
    sent: list[tuple[int, int, int]] = []
    out: list[tuple[Packet, Host]] = []

    def contrib(job: int, i: int, w: int, flags: int = 0) -> tuple[Packet, Host]:
        seq = (STREAM_BASES[job] + i) % SEQ_MOD
        values = tuple(rng.randrange(-(2**20), 2**20) for _ in range(wire.K))
        return Packet(PacketType.CONTRIB, job, seq, 1 << w, values, flags, 1), JOBS[job].workers[w]

    while len(out) < n:
        roll = rng.random()
        if roll < 0.15 and late:
            out.append(late.pop(rng.randrange(len(late))))  # reordered
        elif roll < 0.25 and sent:
            job, i, w = rng.choice(sent)
            out.append(contrib(job, i, w, Flag.RETX))
        elif roll < 0.3:
            plan = rng.choice(jobs)
            seq = (STREAM_BASES[plan.job] + rng.randrange(max(1, nxt[(plan.job, 0)]))) % SEQ_MOD
            ps = Packet(PacketType.PS_RESULT, plan.job, seq, 0b11, (0,) * wire.K, count=2)
            out.append((ps, plan.ps_for(seq)))
        else:
            job = rng.choice(jobs).job
            w = rng.randrange(2)
            i = nxt[(job, w)]
            if i - nxt[(job, 1 - w)] >= window:
                continue
            nxt[(job, w)] = i + 1
            sent.append((job, i, w))
            fate = rng.random()
            if fate < 0.15:
                continue  # lost
            pkt = contrib(job, i, w)
            if fate < 0.3:
                late.append(pkt)
            else:
                out.append(pkt)
                if fate > 0.9:
                    late.append(pkt)  # duplicated
    return out


@pytest.mark.parametrize(
    ("policy", "parts"),
    [(Policy.ESA, None), (Policy.ESA, (1, 2, 3)), (Policy.ATP, None), (Policy.STATIC, None)],
)
def test_switch_equals_model_on_lossy_streams(
    rig: Rig, policy: Policy, parts: tuple[int, ...] | None
) -> None:
    """Windowed streams with loss, duplication, reordering and
    retransmissions, seqs across the wrap: chunks fall back, are preempted,
    flushed and followed, and the marker keeps each job's highest seq gone."""
    rig.reset(policy, parts=parts)
    got = rig.run(stream(seed=10 + int(policy) + len(parts or ()), n=300))
    assert len(got) > 100
    events = rig.model.events
    followed = sum(events(j)[Event.FOLLOWED] for j in JOBS)
    assert followed > 0


def test_the_marker_covers_its_span_across_the_wrap_on_bmv2(rig: Rig) -> None:
    """Job 1's partition of 4 slots, slot ``seq mod 4``.  In slot 0 the
    marker at seq 4 covers the chunk just before the wrap, in slot 1 the
    marker at 5 the farthest chunk its span reaches; in slots 2 and 3 the
    markers at 6 and 7 cover neither a chunk ahead nor one a full span
    behind (``tests/test_model.py`` states the same on the model)."""
    rig.reset(Policy.STATIC)

    def c(seq: int, w: int, flags: int = 0) -> tuple[Packet, Host]:
        seq %= SEQ_MOD
        pkt = Packet(PacketType.CONTRIB, LOW.job, seq, 1 << w, (seq % 1000,) * wire.K, flags, 1)
        return pkt, LOW.workers[w]

    trace = []
    for mark, before in ((4, -4), (5, 5 - (GONE_SPAN - 4))):
        trace += [c(before, 0), c(mark, 0), c(before, 1, Flag.RETX), c(before, 0)]
    for mark, outside in ((6, 10), (7, 7 - GONE_SPAN)):
        trace += [c(mark, 0, Flag.RETX), c(outside, 0), c(outside, 1)]
    rig.run(trace)
    ev = rig.model.events(LOW.job)
    assert (ev[Event.FOLLOWED], ev[Event.COMPLETED]) == (2, 4)


@pytest.mark.parametrize("policy", [Policy.ESA, Policy.STATIC, Policy.ATP])
def test_the_ps_copy_of_a_switch_sum_comes_from_the_switch(rig: Rig, policy: Policy) -> None:
    """A sum completed in the switch reaches the workers from the address of
    the chunk's PS and that PS from the switch's address (``replicas.p4``):
    a host drops a datagram from its own address, and the PS takes a switch
    sum from the switch's address only.  Under ATP the switch holds the sum
    and sends it to the PS alone, from the switch's address too
    (``forwarding.p4``).  Job 3's two chunks go to its two PS hosts."""
    rig.reset(policy)
    chunks = ((LOW, 5), (TWO, 6), (TWO, 7))
    for job, seq in chunks:
        for w in (0, 1):
            rig.send(Packet(PacketType.CONTRIB, job.job, seq, 1 << w, (w + 1,) * wire.K, count=1),
                     job.workers[w])  # fmt: skip
    held = policy is Policy.ATP
    got = rig.collect(want=3 if held else 9)
    sources = sorted((s.port, s.packet.job, s.packet.seq, s.src_ip) for s in got)
    assert all(s.packet.ptype == PacketType.RESULT for s in got)
    assert all(bool(s.packet.flags & Flag.HOLD) == held for s in got)
    workers = [] if held else [
        (w.port, job.job, seq, job.ps_for(seq).ip) for job, seq in chunks for w in job.workers
    ]  # fmt: skip
    assert sources == sorted(
        workers + [(job.ps_for(seq).port, job.job, seq, SWITCH_IP) for job, seq in chunks]
    )
