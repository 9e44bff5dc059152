"""Differential test of rule L (docs/dataplane.md, "Lending"): jobs with
homes under ESA whose windows exceed their homes borrow the idle homes of
others, the owners come back and evict their guests, and contributions
around a lent slot are lost, duplicated and reordered.  BMv2 and esa.model
see the same packets; every output frame and every counter must be the
same, and every chunk ends whole: completed once in the switch, or every
piece of it at its PS."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace

import pytest

from controller.world.topology import Host
from esa import wire
from esa.model import Out, Packet, Result, borrowed_slot, second_hash, slot_hash
from esa.spec import Event, Policy, Verdict, owner_key
from esa.wire import Flag, PacketType
from tests.dataplane import JOBS, POOL, QUAD_HIGH, TRIO_LOW, TRIO_MID, WIDE_JOBS, Jobs, Rig
from tests.test_differential import stream

pytestmark = pytest.mark.bmv2


def c(job: int, seq: int, w: int, flags: int = 0) -> tuple[Packet, Host]:
    pkt = Packet(PacketType.CONTRIB, job, seq, 1 << w, (seq * 8 + w,) * wire.K, flags, 1)
    return pkt, WIDE_JOBS[job].workers[w]


def endings(
    results: list[tuple[Packet, Result]], jobs: Jobs
) -> dict[tuple[int, int], tuple[int, int]]:
    """Chunk -> (sums of it that left a slot complete, the worker bits of
    it that reached its PS as fallbacks and partials)."""
    ends: dict[tuple[int, int], tuple[int, int]] = {}
    for pkt, res in results:
        if pkt.ptype is PacketType.CONTRIB:
            ends.setdefault((pkt.job, pkt.seq), (0, 0))
        for o in res.outputs:
            key = (o.packet.job, o.packet.seq)
            done, bits = ends.get(key, (0, 0))
            if o.packet.ptype is PacketType.RESULT and o.to is Out.ALL:
                done += 1
            elif o.packet.ptype in (PacketType.FALLBACK, PacketType.PARTIAL):
                assert not bits & o.packet.bitmap, f"chunk {key}: a worker at the PS twice"
                bits |= o.packet.bitmap
            ends[key] = done, bits
    return ends


def assert_whole(
    results: list[tuple[Packet, Result]], jobs: Jobs, only: tuple[int, ...] | None = None
) -> None:
    """Every chunk (of the jobs ``only`` names, or of every job), all of
    whose workers' contributions reached the switch, ended once, in the
    switch or whole at its PS: never split."""
    for key, (done, bits) in endings(results, jobs).items():
        if only is not None and key[0] not in only:
            continue
        mask = (1 << len(jobs[key[0]].workers)) - 1
        assert (done, bits) in ((1, 0), (0, mask)), f"chunk {key}: {done} results, PS {bits:b}"


def borrowed(job: int, seq: int, jobs: Jobs = WIDE_JOBS) -> int:
    """The slot outside its home that the chunk borrows (rule L)."""
    plan = jobs[job]
    g = borrowed_slot(job, seq, POOL, plan.part_base, plan.part_size)
    assert g is not None
    return g


def test_a_window_beyond_its_home_borrows_idle_homes(wide_rig: Rig) -> None:
    """Job 5 (three workers, home 0-3) opens twelve chunks while the other
    homes sit idle: chunks 0-3 claim the home, each later one borrows its
    slot outside the home when that is free, else it falls back; then the
    other workers complete every chunk."""
    wide_rig.reset(Policy.ESA, parts=(5, 6, 7))
    trace = [c(5, seq, w) for w in range(3) for seq in range(12)]
    wide_rig.run(trace)
    first = [res.verdict for _, res in wide_rig.results[:12]]
    lent = [s for s in range(4, 12) if first[s] is Verdict.CLAIM]
    assert first[:4] == [Verdict.CLAIM] * 4
    taken: set[int] = set()
    for s in range(4, 12):
        g = borrowed(5, s)
        assert 4 <= g < POOL
        assert (s in lent) is (g not in taken), s
        taken.add(g)
    assert len(lent) == len(taken) >= 4
    ev = wide_rig.model.events(5)
    assert (ev[Event.LENT], ev[Event.COMPLETED]) == (len(lent), 4 + len(lent))
    assert ev[Event.FALLBACK] == 3 * (8 - len(lent))
    assert_whole(wide_rig.results, WIDE_JOBS)


@contextmanager
def planned(rig: Rig, jobs: Jobs) -> Iterator[None]:
    """The rig with ``jobs`` while in the block."""
    was = rig.jobs
    rig.jobs = jobs
    try:
        yield
    finally:
        rig.jobs = was


def ranked(rig: Rig, priority: int | None) -> AbstractContextManager[None]:
    """The rig's jobs, all of ``priority`` if it is given, while in the block."""
    if priority is None:
        return planned(rig, rig.jobs)
    return planned(rig, {j: replace(plan, priority=priority) for j, plan in rig.jobs.items()})


@pytest.mark.parametrize("priority", [None, 1])
def test_the_owners_come_back_and_evict_their_guests(wide_rig: Rig, priority: int | None) -> None:
    """Job 5's workers 0 and 1 open chunks 0-11, borrowing slots in the homes
    of jobs 6 (priority 5) and 7 (3), or of the same priority as job 5;
    those jobs claim their free home slots, then start chunks whose home
    slots hold job 5's guests and evict them (their partials to job 5's
    PS); job 5's last worker then completes
    its chunks at home and at the slots still lent, and follows its evicted
    chunks to the PS."""
    with ranked(wide_rig, priority):
        owners_evict(wide_rig)


def owners_evict(wide_rig: Rig) -> None:
    wide_rig.reset(Policy.ESA, parts=(5, 6, 7))
    trace = [c(5, seq, w) for w in range(2) for seq in range(12)]
    wide_rig.run(trace)
    guests = [i for i, slot in enumerate(wide_rig.model.slots) if slot.owner >> 32 == 5 and i >= 4]
    owners = [
        (plan.job, slot - plan.part_base)
        for plan in (QUAD_HIGH, TRIO_MID)
        for slot in sorted(guests)
        if plan.part_base <= slot < plan.part_base + plan.part_size
    ]
    assert owners, "no guest in another job's home"
    # the owners first claim their home slots no guest holds, so that a
    # chunk whose home slot holds a guest finds its second home slot busy
    # too, and evicts (L4)
    free = [
        (plan.job, slot - plan.part_base)
        for plan in (QUAD_HIGH, TRIO_MID)
        for slot in range(plan.part_base, plan.part_base + plan.part_size)
        if slot not in guests
    ]
    wide_rig.run([c(job, seq, 0) for job, seq in free])
    assert [res.verdict for _, res in wide_rig.results[-len(free) :]] == [Verdict.CLAIM] * len(free)
    wide_rig.run([c(job, seq, 0) for job, seq in owners])
    evicting = [res for _, res in wide_rig.results[-len(owners) :]]
    assert [r.verdict for r in evicting] == [Verdict.PREEMPT] * len(owners)
    assert all(
        [(o.packet.job, o.packet.ptype) for o in r.outputs] == [(5, PacketType.PARTIAL)]
        for r in evicting
    )
    wide_rig.run([c(5, seq, 2) for seq in range(12)])
    ev5 = wide_rig.model.events(5)
    assert ev5[Event.GUEST_EVICTED] == len(owners)
    assert ev5[Event.FOLLOWED] >= len(owners)
    assert sum(wide_rig.model.events(j)[Event.PREEMPT_WON] for j in (6, 7)) == len(owners)
    assert_whole(wide_rig.results, WIDE_JOBS, only=(5,))


def test_a_lower_ranked_owner_borrows_around_a_higher_ranked_guest(wide_rig: Rig) -> None:
    """Job 6 (priority 5) opens more chunks than its home holds and lends
    in job 5's home (priority 1); job 5 may not evict it and borrows in
    turn; both complete their chunks, frame for frame alike."""
    wide_rig.reset(Policy.ESA, parts=(5, 6, 7))
    six = [c(6, seq, w) for w in range(2) for seq in range(12)]
    wide_rig.run(six)
    in_five = [
        pkt.seq
        for pkt, res in wide_rig.results
        if res.verdict is Verdict.CLAIM and borrowed(6, pkt.seq) in range(0, 4) and pkt.seq >= 4
    ]
    assert in_five, "job 6 lent no slot of job 5's home"
    wide_rig.run([c(5, seq, w) for w in range(3) for seq in range(8)])
    wide_rig.run([c(6, seq, w) for w in range(2, 4) for seq in range(12)])
    assert wide_rig.model.events(6)[Event.GUEST_EVICTED] == 0
    assert wide_rig.model.events(5)[Event.PREEMPT_WON] == 0
    assert_whole(wide_rig.results, WIDE_JOBS)


def test_a_home_of_the_whole_pool_evicts_its_guests_and_never_lends(wide_rig: Rig) -> None:
    """Job 5's home is the whole pool, so it has no slot to borrow: jobs 6
    and 7, without homes, hash into it; job 5, ranked above them, evicts
    the guests its chunks meet (L4), and its chunks whose home slot its own
    chunk holds fall back (L6); then its other workers complete or follow."""
    whole = {**WIDE_JOBS, 5: replace(TRIO_LOW, priority=9, part_size=POOL)}
    with planned(wide_rig, whole):
        wide_rig.reset(Policy.ESA, parts=(5,))
        wide_rig.run([c(job, seq, 0) for job in (6, 7) for seq in range(6)])
        guests = sum(1 for slot in wide_rig.model.slots if slot.owner >> 32 in (6, 7))
        wide_rig.run([c(5, seq, 0) for seq in range(24)])
        first = [res.verdict for _, res in wide_rig.results[-24:]]
        assert first.count(Verdict.PREEMPT) == guests > 0
        assert first[16:] == [Verdict.FALLBACK] * 8
        wide_rig.run([c(5, seq, w) for w in (1, 2) for seq in range(24)])
        ev5 = wide_rig.model.events(5)
        assert (ev5[Event.LENT], ev5[Event.PREEMPT_WON], ev5[Event.COMPLETED]) == (0, guests, 16)
        evicted = [wide_rig.model.events(j)[Event.GUEST_EVICTED] for j in (6, 7)]
        assert sum(evicted) == guests
        assert_whole(wide_rig.results, whole, only=(5,))


@pytest.mark.parametrize("seed", [1, 2])
def test_lossy_streams_around_lent_slots(rig: Rig, seed: int) -> None:
    """Every job in a home of 4 slots, each worker up to 6 chunks ahead of
    its job's slowest: chunks borrow, are evicted, flushed and followed
    under loss, duplication, reordering and retransmissions."""
    rig.reset(Policy.ESA, parts=tuple(JOBS))
    got = rig.run(stream(seed=40 + seed, n=400))
    assert len(got) > 100
    total = Counter[Event]()
    for j in JOBS:
        total.update(rig.model.events(j))
    assert total[Event.LENT] > 0
    assert total[Event.GUEST_EVICTED] > 0
    assert total[Event.FOLLOWED] > 0


def test_duplicated_resent_and_late_contributions_at_a_lent_slot(wide_rig: Rig) -> None:
    """Job 5's chunk, its home slots 0 and 2 held, borrows a slot; a
    duplicate first send there is not added (S4), a resend of another
    worker adds itself (S7), the same resend again flushes the partial from
    the lent slot (S3), and the chunk's last contribution, late, follows it
    to the PS."""
    wide_rig.reset(Policy.ESA, parts=(5, 6, 7))
    lent, busy, second = 4, 0, 2
    trace = [
        c(5, second, 0),
        c(5, busy, 0),
        c(5, lent, 0),
        c(5, lent, 0),
        c(5, lent, 1, Flag.RETX),
        c(5, lent, 1, Flag.RETX),
        c(5, busy, 1),
        c(5, busy, 2),
        c(5, lent, 2),
        c(5, second, 1),
        c(5, second, 2),
    ]
    wide_rig.run(trace)
    assert [res.verdict for _, res in wide_rig.results] == [
        Verdict.CLAIM,
        Verdict.CLAIM,
        Verdict.CLAIM,
        Verdict.DUPLICATE,
        Verdict.ADD,
        Verdict.FLUSH,
        Verdict.ADD,
        Verdict.COMPLETE,
        Verdict.FALLBACK,
        Verdict.ADD,
        Verdict.COMPLETE,
    ]
    ev = wide_rig.model.events(5)
    assert (ev[Event.LENT], ev[Event.FLUSHED], ev[Event.FOLLOWED]) == (1, 1, 1)
    assert_whole(wide_rig.results, WIDE_JOBS)


def test_a_chunk_takes_its_second_slot_in_its_home_and_by_its_second_hash(wide_rig: Rig) -> None:
    """Job 5 (home 0-3) opens chunks 0 and 4, whose home slot is 0: chunk
    4 takes its second home slot 2, and both complete.  Then, no job with
    a home, job 6 opens chunks 0-7 over the pool and job 7 (lower ranked)
    chunks 0-15, so some of job 7's find their first hashed slot held by
    job 6 and take their second; every worker sends every chunk, and each
    ends whole, BMv2 and esa.model alike, frame for frame."""
    wide_rig.reset(Policy.ESA, parts=(5, 6, 7))
    wide_rig.run([c(5, 0, 0), c(5, 4, 0)])
    assert [wide_rig.model.slots[i].owner for i in (0, 2)] == [owner_key(5, 0), owner_key(5, 4)]
    wide_rig.run([c(5, seq, w) for w in (1, 2) for seq in (0, 4)])
    assert [res.verdict for _, res in wide_rig.results] == [
        Verdict.CLAIM,
        Verdict.CLAIM,
        Verdict.ADD,
        Verdict.ADD,
        Verdict.COMPLETE,
        Verdict.COMPLETE,
    ]
    assert_whole(wide_rig.results, WIDE_JOBS)
    wide_rig.reset(Policy.ESA, parts=())
    wide_rig.run([c(6, seq, 0) for seq in range(8)] + [c(7, seq, 0) for seq in range(16)])
    second = [
        seq
        for seq in range(16)
        if second_hash(7, seq, POOL) != slot_hash(7, seq, POOL)
        and wide_rig.model.slots[second_hash(7, seq, POOL)].owner == owner_key(7, seq)
    ]
    assert second, "no chunk took its second hashed slot"
    wide_rig.run([c(6, seq, w) for w in (1, 2, 3) for seq in range(8)])
    wide_rig.run([c(7, seq, w) for w in (1, 2) for seq in range(16)])
    assert_whole(wide_rig.results, WIDE_JOBS)
