"""Packet-level tests of p4src/esa.p4 on BMv2: one test per rule and policy.

Each test sends real frames into the switch and checks the frames that come
out against exact expectations, and (through ``Rig.run``) against esa.model:
every output frame on every port and every counter must agree.
"""

from __future__ import annotations

import time

import pytest

from controller.world.plan import JobPlan
from controller.world.topology import Host
from esa import spec, wire
from esa.model import INT32_MAX, Packet, second_hash, slot_hash
from esa.spec import Drop, Event, Policy
from esa.wire import Flag, PacketType
from tests.dataplane import FOUR, HIGH, LOW, POOL, TWO, Rig

pytestmark = pytest.mark.bmv2


def vals(x: int) -> tuple[int, ...]:
    return tuple(x * (i + 1) for i in range(wire.K))


def contrib(job: JobPlan, seq: int, w: int, x: int = 1, flags: int = 0) -> tuple[Packet, Host]:
    pkt = Packet(PacketType.CONTRIB, job.job, seq, 1 << w, vals(x), flags=flags, count=1)
    return pkt, job.workers[w]


def one_slot(job: int, seq: int) -> bool:
    """The chunk's second hash is its first: under ESA it has one slot."""
    return second_hash(job, seq, POOL) == slot_hash(job, seq, POOL)


def colliding() -> tuple[int, int]:
    """A LOW seq and a HIGH seq of one slot each that share it."""
    return next(
        (s, t)
        for s in range(400)
        for t in range(400)
        if slot_hash(LOW.job, s, POOL) == slot_hash(HIGH.job, t, POOL)
        and one_slot(LOW.job, s)
        and one_slot(HIGH.job, t)
    )


def events(rig: Rig, job: JobPlan) -> dict[Event, int]:
    got, _ = rig.counters()
    return {e: got[spec.counter_index(job.job, e)] for e in Event}


@pytest.mark.parametrize("policy", list(Policy))
def test_aggregation_completes_and_multicasts(rig: Rig, policy: Policy) -> None:
    rig.reset(policy)
    got = rig.run([contrib(LOW, 5, 0, 3), contrib(LOW, 5, 1, -7)])
    results = [s for s in got if s.packet.ptype is PacketType.RESULT]
    assert {s.packet.values for s in results} == {vals(-4)}
    if policy is Policy.ATP:
        assert [(s.port, s.packet.flags) for s in results] == [(3, Flag.HOLD)]
    else:
        assert sorted((s.port, s.ip, s.udp_port) for s in results) == [
            (1, "10.0.0.1", 40001),
            (2, "10.0.0.2", 40002),
            (3, "10.0.0.3", wire.UDP_PORT),
        ]
    assert events(rig, LOW)[Event.COMPLETED] == 1


def test_slot_released_at_completion_is_reused(rig: Rig) -> None:
    rig.reset(Policy.ESA)
    nxt = next(
        s for s in range(6, 200) if slot_hash(LOW.job, s, POOL) == slot_hash(LOW.job, 5, POOL)
    )
    rig.run([contrib(LOW, 5, 0), contrib(LOW, 5, 1), contrib(LOW, nxt, 0, 2)])
    assert events(rig, LOW)[Event.FALLBACK] == 0
    assert rig.model.slots[slot_hash(LOW.job, 5, POOL)].owner == (LOW.job << 32) | nxt


def test_atp_release_by_ps_result(rig: Rig) -> None:
    rig.reset(Policy.ATP)
    rig.run([contrib(LOW, 5, 0), contrib(LOW, 5, 1), contrib(LOW, 5, 1, flags=Flag.RETX)])
    ps = Packet(PacketType.PS_RESULT, LOW.job, 5, 0b11, vals(2), count=2)
    got = rig.run([(ps, LOW.ps_for(5))])
    assert sorted(s.port for s in got) == [1, 2]
    assert events(rig, LOW)[Event.RELEASED_BY_PS] == 1


def test_ps_result_from_a_worker_port_is_dropped(rig: Rig) -> None:
    rig.reset(Policy.ATP)
    ps = Packet(PacketType.PS_RESULT, LOW.job, 5, 0b11, vals(2), count=2)
    assert rig.run([(ps, LOW.workers[0])]) == []
    assert rig.counters()[1][Drop.BAD_TYPE] == 1


def test_preemption_swaps_slot_contents(rig: Rig) -> None:
    rig.reset(Policy.ESA)
    s, t = colliding()
    got = rig.run([contrib(LOW, s, 0, 9), contrib(HIGH, t, 0, 4), contrib(HIGH, t, 1, 1)])
    partial = [g for g in got if g.packet.ptype is PacketType.PARTIAL]
    assert len(partial) == 1
    p = partial[0]
    assert (p.port, p.packet.job, p.packet.seq, p.packet.bitmap) == (3, LOW.job, s, 0b01)
    assert p.packet.values == vals(9)
    result = [g.packet.values for g in got if g.packet.ptype is PacketType.RESULT]
    assert result == [vals(5)] * 3
    assert events(rig, HIGH)[Event.PREEMPT_WON] == 1
    assert events(rig, LOW)[Event.PREEMPT_SUFFERED] == 1


def test_equal_or_higher_priority_holder_means_fallback(rig: Rig) -> None:
    rig.reset(Policy.ESA)
    s, t = colliding()
    got = rig.run([contrib(HIGH, t, 0, 4), contrib(LOW, s, 1, 6)])
    assert [(g.port, g.packet.ptype, g.packet.values) for g in got] == [
        (3, PacketType.FALLBACK, vals(6))
    ]


@pytest.mark.parametrize("policy", [Policy.ATP, Policy.STATIC])
def test_no_preemption_outside_esa(rig: Rig, policy: Policy) -> None:
    rig.reset(policy)
    s, t = colliding()
    rig.run([contrib(LOW, s, 0, 9), contrib(HIGH, t, 0, 4)])
    assert events(rig, HIGH)[Event.PREEMPT_WON] == 0


def test_duplicate_is_not_added(rig: Rig) -> None:
    rig.reset(Policy.ESA)
    got = rig.run([contrib(LOW, 9, 0, 2), contrib(LOW, 9, 0, 2), contrib(LOW, 9, 1, 1)])
    assert {g.packet.values for g in got} == {vals(3)}
    assert events(rig, LOW)[Event.DUPLICATE] == 1


def test_retransmission_flushes_and_never_starts_a_slot(rig: Rig) -> None:
    rig.reset(Policy.ESA)
    got = rig.run([contrib(LOW, 9, 0, 2), contrib(LOW, 9, 0, 2, Flag.RETX)])
    assert [(g.port, g.packet.ptype, g.packet.bitmap) for g in got] == [
        (3, PacketType.PARTIAL, 0b01)
    ]
    got = rig.run([contrib(LOW, 9, 1, 5, Flag.RETX)])
    assert [(g.port, g.packet.ptype, g.packet.values) for g in got] == [
        (3, PacketType.FALLBACK, vals(5))
    ]
    assert rig.model.slots[slot_hash(LOW.job, 9, POOL)].owner == 0


def test_stale_slot_is_reclaimed(rig: Rig) -> None:
    rig.reset(Policy.ATP, stale_us=100_000)
    s, t = colliding()
    rig.run([contrib(LOW, s, 0, 9)])
    time.sleep(0.25)
    got = rig.run([contrib(HIGH, t, 0, 4)])
    assert [(g.port, g.packet.ptype, g.packet.job, g.packet.values) for g in got] == [
        (3, PacketType.PARTIAL, LOW.job, vals(9))
    ]
    assert events(rig, LOW)[Event.STALE_RECLAIMED] == 1


def test_idle_partial_is_taken_and_its_chunk_follows(rig: Rig) -> None:
    rig.reset(Policy.ESA, squat_us=100_000)
    s, t = colliding()
    rig.run([contrib(HIGH, t, 0, 9)])
    time.sleep(0.25)
    got = rig.run([contrib(LOW, s, 0, 4), contrib(HIGH, t, 1, 2)])
    assert [(g.port, g.packet.ptype, g.packet.job, g.packet.values) for g in got] == [
        (6, PacketType.PARTIAL, HIGH.job, vals(9)),
        (6, PacketType.FALLBACK, HIGH.job, vals(2)),
    ]
    high = events(rig, HIGH)
    assert (high[Event.IDLE_RECLAIMED], high[Event.FOLLOWED], high[Event.PREEMPT_WON]) == (1, 1, 0)
    assert rig.model.slots[slot_hash(LOW.job, s, POOL)].owner >> 32 == LOW.job


def test_preempted_chunk_goes_whole_to_its_ps_without_a_timer(rig: Rig) -> None:
    """The evicted partial and the chunk's later contribution both reach the
    PS at once, so the PS completes the chunk without waiting for a
    retransmission, although the slot is free again when that contribution
    arrives."""
    rig.reset(Policy.ESA)
    s, t = colliding()
    got = rig.run([contrib(LOW, s, 0, 5), contrib(HIGH, t, 0, 1), contrib(HIGH, t, 1, 2)])
    got += rig.run([contrib(LOW, s, 1, 6)])
    to_low_ps = [(g.packet.ptype, g.packet.bitmap, g.packet.values) for g in got if g.port == 3]
    assert to_low_ps == [(PacketType.PARTIAL, 0b01, vals(5)), (PacketType.FALLBACK, 0b10, vals(6))]
    assert rig.model.slots[slot_hash(LOW.job, s, POOL)].owner == 0
    low = events(rig, LOW)
    assert (low[Event.PREEMPT_SUFFERED], low[Event.FOLLOWED], low[Event.FLUSHED]) == (1, 1, 0)


def test_overflow_saturates_and_is_flagged(rig: Rig) -> None:
    rig.reset(Policy.ESA)
    big = Packet(PacketType.CONTRIB, LOW.job, 3, 1, (INT32_MAX - 1,) * wire.K, count=1)
    one = Packet(PacketType.CONTRIB, LOW.job, 3, 2, (5,) * wire.K, count=1)
    got = rig.run([(big, LOW.workers[0]), (one, LOW.workers[1])])
    assert {(g.packet.values, g.packet.flags) for g in got} == {
        ((INT32_MAX,) * wire.K, Flag.OVERFLOW)
    }


def test_unknown_job_spoofed_worker_and_switch_only_types(rig: Rig) -> None:
    rig.reset(Policy.ESA)
    unknown = Packet(PacketType.CONTRIB, 77, 1, 1, vals(1), count=1)
    outsider = Packet(PacketType.CONTRIB, LOW.job, 1, 1 << 4, vals(1), count=1)
    forged = Packet(PacketType.RESULT, LOW.job, 1, 3, vals(1), count=2)
    assert (
        rig.run([(unknown, LOW.workers[0]), (outsider, LOW.workers[0]), (forged, LOW.ps[0])]) == []
    )
    drops = rig.counters()[1]
    assert (drops[Drop.UNKNOWN_JOB], drops[Drop.SPOOFED_WORKER], drops[Drop.BAD_TYPE]) == (1, 1, 1)
    assert all(s.owner == 0 for s in rig.model.slots)


def test_static_partitions_are_private(rig: Rig) -> None:
    rig.reset(Policy.STATIC)
    got = rig.run([contrib(LOW, 2, 0, 1), contrib(HIGH, 2, 0, 1), contrib(HIGH, 2, 1, 1)])
    assert {g.packet.job for g in got} == {HIGH.job}
    assert rig.model.slots[2].owner >> 32 == LOW.job
    assert rig.model.slots[6].owner == 0


def test_esa_partitions_keep_jobs_apart_and_a_job_without_one_shares_by_priority(
    rig: Rig,
) -> None:
    """LOW (priority 1) and HIGH (5) stream through partitions of 4 slots;
    FOUR (2) has none and hashes (chunks of one slot): into LOW's partition
    it preempts, into HIGH's it falls back."""
    rig.reset(Policy.ESA, parts=(LOW.job, HIGH.job))
    assert rig.run([contrib(LOW, 2, 0), contrib(HIGH, 2, 0)]) == []
    assert (rig.model.slots[2].owner >> 32, rig.model.slots[6].owner >> 32) == (LOW.job, HIGH.job)
    into_low, into_high = (
        next(
            s for s in range(10_000) if slot_hash(FOUR.job, s, POOL) == i and one_slot(FOUR.job, s)
        )
        for i in (2, 6)
    )
    got = rig.run([contrib(FOUR, into_low, 0), contrib(FOUR, into_high, 0)])
    assert sorted((g.packet.job, g.packet.ptype, g.packet.seq) for g in got) == [
        (LOW.job, PacketType.PARTIAL, 2),
        (FOUR.job, PacketType.FALLBACK, into_high),
    ]
    assert rig.model.slots[2].owner >> 32 == FOUR.job
    assert events(rig, FOUR)[Event.PREEMPT_WON] == 1
    assert events(rig, LOW)[Event.PREEMPT_SUFFERED] == 1


def test_float_and_pull_pass_through(rig: Rig) -> None:
    rig.reset(Policy.ESA)
    fl = Packet(PacketType.FLOAT, LOW.job, 4, 1, vals(1), count=1)
    pull = Packet(PacketType.PULL, LOW.job, 4, 1, vals(0))
    got = rig.run([(fl, LOW.workers[0]), (pull, LOW.ps_for(4))])
    assert sorted((g.port, g.packet.ptype) for g in got) == [
        (1, PacketType.PULL),
        (2, PacketType.PULL),
        (3, PacketType.FLOAT),
    ]


def evictable(job: JobPlan, shards: list[int]) -> list[tuple[int, int]]:
    """For each shard in ``shards``, a seq of ``job`` of that shard and a seq
    of HIGH of one slot sharing its slot; every pair in a slot of its own."""
    out: list[tuple[int, int]] = []
    for shard in shards:
        taken = {slot_hash(job.job, s, POOL) for s, _ in out}
        out.append(
            next(
                (s, t)
                for s in range(shard, 400, len(job.ps))
                for t in range(2000)
                if slot_hash(job.job, s, POOL) == slot_hash(HIGH.job, t, POOL)
                and one_slot(HIGH.job, t)
                and slot_hash(job.job, s, POOL) not in taken
            )
        )
    return out


def test_evicted_partials_reach_the_ps_of_their_shard(rig: Rig) -> None:
    """TWO's chunks belong to its PS on port 9 (even seqs) and port 10 (odd):
    HIGH preempts three of them, and each partial, and the rest of its chunk
    after it, goes to the PS of that chunk's shard."""
    rig.reset(Policy.ESA)
    pairs = evictable(TWO, [0, 1, 1])
    got = rig.run([contrib(TWO, s, 0, s + 1) for s, _ in pairs])
    got += rig.run([contrib(HIGH, t, 0) for _, t in pairs])
    got += rig.run([contrib(TWO, s, 1, 100) for s, _ in pairs])
    to_ps = sorted((g.port, g.packet.seq, g.packet.ptype) for g in got if g.port in (9, 10))
    assert to_ps == sorted(
        (9 + s % 2, s, ptype)
        for s, _ in pairs
        for ptype in (PacketType.PARTIAL, PacketType.FALLBACK)
    )
    assert [sum(g.port == p for g in got) for p in (9, 10)] == [2, 4]
    assert all(g.ip == f"10.0.0.{g.port}" for g in got if g.port in (9, 10))
    two = events(rig, TWO)
    assert (two[Event.PREEMPT_SUFFERED], two[Event.FOLLOWED]) == (3, 3)


def test_ps_result_and_pull_only_from_the_ps_of_the_chunks_shard(rig: Rig) -> None:
    """A PS of shard 0 may not answer (or pull) a chunk of shard 1: its
    PS_RESULT would release the slot and reach the workers."""
    rig.reset(Policy.ATP)
    rig.run([contrib(TWO, 3, 0), contrib(TWO, 3, 1)])
    ps = Packet(PacketType.PS_RESULT, TWO.job, 3, 0b11, vals(2), count=2)
    pull = Packet(PacketType.PULL, TWO.job, 3, 0b01, vals(0))
    shard0, shard1 = TWO.ps
    assert rig.run([(ps, shard0), (pull, shard0)]) == []
    assert rig.counters()[1][Drop.BAD_TYPE] == 2
    assert rig.model.slots[slot_hash(TWO.job, 3, POOL)].owner == (TWO.job << 32) | 3
    got = rig.run([(ps, shard1), (pull, shard1)])
    assert sorted((g.port, g.packet.ptype) for g in got) == [
        (7, PacketType.PS_RESULT),
        (7, PacketType.PULL),
        (8, PacketType.PS_RESULT),
        (8, PacketType.PULL),
    ]
    assert events(rig, TWO)[Event.RELEASED_BY_PS] == 1


def test_a_result_goes_to_the_workers_and_the_ps_of_its_shard_only(rig: Rig) -> None:
    """FOUR's chunks 0..7 complete in the switch: each result makes
    fan-in + 1 copies, whatever the number of PS hosts, and each PS receives
    exactly the chunks of its shard."""
    rig.reset(Policy.ESA)
    got = rig.run([contrib(FOUR, seq, w) for seq in range(8) for w in range(2)])
    assert len(got) == 8 * (len(FOUR.workers) + 1)
    assert {
        p: sorted(g.packet.seq for g in got if g.port == p) for p in (11, 12, 13, 14, 15, 16)
    } == {
        11: list(range(8)),
        12: list(range(8)),
        13: [0, 4],
        14: [1, 5],
        15: [2, 6],
        16: [3, 7],
    }
    assert all(
        (g.ip, g.udp_port) == (f"10.0.0.{g.port}", wire.UDP_PORT) for g in got if g.port >= 13
    )


def test_float_resends_go_to_the_ps_of_their_shard(rig: Rig) -> None:
    rig.reset(Policy.ESA)
    floats = [
        (Packet(PacketType.FLOAT, FOUR.job, seq, 1, vals(seq), count=1), FOUR.workers[0])
        for seq in range(4)
    ]
    got = rig.run(floats)
    assert [(g.port, g.packet.seq) for g in got] == [(13 + seq, seq) for seq in range(4)]
