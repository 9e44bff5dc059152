"""Rule L (docs/dataplane.md, "Lending"): under ESA a job with a home whose
home slot is busy borrows a slot outside its home, hashed over the rest of
the pool; stated by esa.model, one test per step and per race, exact
outputs and counters."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from esa import wire
from esa.model import (
    JobConfig,
    Out,
    Output,
    Packet,
    Result,
    SwitchModel,
    borrowed_slot,
    chunk_crc,
    home_second,
    slot_hash,
)
from esa.spec import Event, Policy, Verdict, owner_key
from esa.wire import Flag, PacketType

POOL = 16
A, B = 1, 2
"""A's home is slots 0-3, B's 4-7; slots 8-15 are in no home."""
PRIO = {A: 1, B: 5}
PS_PORT = 9
CHILD = 7
"""A's child switch, whose sum carries worker bit 1 (for T2)."""


def vals(x: int) -> tuple[int, ...]:
    return tuple(x + i for i in range(wire.K))


def total(*xs: int) -> tuple[int, ...]:
    return tuple(sum(v) for v in zip(*(vals(x) for x in xs), strict=True))


def contrib(job: int, seq: int, worker: int, x: int = 1, flags: int = 0) -> Packet:
    return Packet(PacketType.CONTRIB, job, seq, 1 << worker, vals(x), flags=flags, count=1)


def switch(b_prio: int = PRIO[B], stale_us: int = 1000, squat_us: int = 0) -> SwitchModel:
    sw = SwitchModel(pool_size=POOL, policy=Policy.ESA, stale_us=stale_us, squat_us=squat_us)
    sw.add_job(A, JobConfig(2, 0b11, PRIO[A], ps_ports=(PS_PORT,), part_base=0, part_size=4))
    sw.add_job(B, JobConfig(2, 0b11, b_prio, ps_ports=(PS_PORT,), part_base=4, part_size=4))
    return sw


def seq_at(job: int, home: int, borrowed: int | None = None) -> int:
    """The first seq of ``job`` whose home slot is ``home`` and whose
    borrowed slot is ``borrowed`` (any, if None)."""
    base = 0 if job == A else 4
    return next(
        s
        for s in range(10_000)
        if base + s % 4 == home and borrowed in (None, borrowed_slot(job, s, POOL, base, 4))
    )


def busy(sw: SwitchModel, job: int, slot: int, now: int = 0) -> None:
    """The job's own chunk claims ``slot`` of its home: the second home
    slot h' of the chunks whose home slot h is half the home away."""
    base = 0 if job == A else 4
    assert home_second(seq_at(job, slot), base, 4) == base + (slot - base + 2) % 4
    assert sw.process(contrib(job, seq_at(job, slot), 0), now).verdict is Verdict.CLAIM


def markers(sw: SwitchModel, idx: int) -> tuple[int, int]:
    """The slot's marker and its victims' marker (``Slot.gone``, ``Slot.evicted``)."""
    return sw.slots[idx].gone, sw.slots[idx].evicted


def owner(sw: SwitchModel, idx: int) -> tuple[int, int] | None:
    o = sw.slots[idx].owner
    return (o >> 32, o & 0xFFFFFFFF) if o else None


def outs(res: Result) -> list[tuple[Out, PacketType, int, int, int, tuple[int, ...]]]:
    return [
        (o.to, o.packet.ptype, o.packet.job, o.packet.seq, o.packet.bitmap, o.packet.values)
        for o in res.outputs
    ]


def counts(sw: SwitchModel, job: int) -> dict[Event, int]:
    return {e: n for e, n in sw.events(job).items() if n}


@pytest.mark.parametrize(
    ("job", "seq", "part_base", "part_size", "outside", "g"),
    [
        (1, 0, 0, 4, 7, 11),  # a home at the pool's start: always past it
        (1, 1, 0, 4, 1, 5),
        (2, 1, 4, 4, 1, 1),  # a home inside: below it as hashed,
        (2, 3, 4, 4, 5, 9),  # at or above its base past it
        (3, 0, 12, 4, 3, 3),  # a home at the pool's end: as hashed
        (3, 1, 12, 4, 1, 1),
        (1, 0, 0, 15, 0, 15),  # one slot outside
    ],
)
def test_the_borrowed_slot_is_hashed_over_the_pool_outside_the_home(
    job: int, seq: int, part_base: int, part_size: int, outside: int, g: int
) -> None:
    assert chunk_crc(job, seq) % (POOL - part_size) == outside
    assert borrowed_slot(job, seq, POOL, part_base, part_size) == g


def test_a_home_of_the_whole_pool_borrows_no_slot() -> None:
    assert [borrowed_slot(1, s, POOL, 0, POOL) for s in range(4)] == [None] * 4


@given(
    st.integers(0, 2**16 - 1),
    st.integers(0, 2**32 - 1),
    st.integers(2, 4096),
    st.data(),
)
def test_the_borrowed_slot_is_in_the_pool_and_never_in_the_home(
    job: int, seq: int, pool: int, data: st.DataObject
) -> None:
    part_size = data.draw(st.integers(1, pool - 1))
    part_base = data.draw(st.integers(0, pool - part_size))
    g = borrowed_slot(job, seq, pool, part_base, part_size)
    assert g is not None
    assert 0 <= g < pool
    assert not part_base <= g < part_base + part_size
    assert g - (part_size if g >= part_base else 0) == chunk_crc(job, seq) % (pool - part_size)


def test_a_home_of_the_whole_pool_evicts_its_guests_and_never_lends() -> None:
    """Rule L without a slot outside: L4 evicts a lower-ranked hashed chunk
    from the home (the chunk's second home slot held by the job), and a
    chunk whose two home slots are busy falls back (L6), marked at h."""
    sw = SwitchModel(pool_size=POOL, policy=Policy.ESA)
    sw.add_job(A, JobConfig(2, 0b11, 5, ps_ports=(PS_PORT,), part_base=0, part_size=POOL))
    sw.add_job(B, JobConfig(2, 0b11, 1, ps_ports=(PS_PORT,)))
    hashed = 0
    idx = slot_hash(B, hashed, POOL)
    sw.process(contrib(B, hashed, 0, 2), 0)
    half = (idx + POOL // 2) % POOL
    assert home_second(idx, 0, POOL) == half
    assert sw.process(contrib(A, half, 0), 0).verdict is Verdict.CLAIM
    res = sw.process(contrib(A, idx, 0), 1)
    assert res.verdict is Verdict.PREEMPT
    assert outs(res) == [(Out.PS, PacketType.PARTIAL, B, hashed, 0b01, vals(2))]
    busy = idx + POOL
    res = sw.process(contrib(A, busy, 0, 3), 2)
    assert outs(res) == [(Out.PS, PacketType.FALLBACK, A, busy, 0b01, vals(3))]
    assert [owner(sw, i) for i in range(POOL)].count(None) == POOL - 2
    assert markers(sw, idx) == (owner_key(A, busy), owner_key(B, hashed))
    assert counts(sw, A) == {Event.AGGREGATED: 2, Event.PREEMPT_WON: 1, Event.FALLBACK: 1}
    assert counts(sw, B) == {Event.AGGREGATED: 1, Event.GUEST_EVICTED: 1}


def test_l1_l2_a_busy_home_borrows_the_slot_its_chunk_hashes_to() -> None:
    sw = switch()
    home, lent = seq_at(A, 0, 11), seq_at(A, 0, 10)
    busy(sw, A, 2)
    assert sw.process(contrib(A, home, 0, 10), 0).verdict is Verdict.CLAIM
    # L5: slots 0 and 2 (h and h') hold A's own chunks; slot 10 is in no home and free
    res = sw.process(contrib(A, lent, 0, 20), 1)
    assert (res.verdict, res.outputs) == (Verdict.CLAIM, ())
    assert (owner(sw, 0), owner(sw, 10)) == ((A, home), (A, lent))
    assert (sw.slots[10].prio, sw.slots[10].bitmap, sw.slots[10].values) == (1, 1, list(vals(20)))
    # L2: the chunk's second contribution finds it at slot 10 and completes
    res = sw.process(contrib(A, lent, 1, 30), 2)
    assert res.verdict is Verdict.COMPLETE
    assert outs(res) == [(Out.ALL, PacketType.RESULT, A, lent, 0b11, total(20, 30))]
    assert owner(sw, 10) is None
    # L1: at home as before
    res = sw.process(contrib(A, home, 1, 40), 3)
    assert outs(res) == [(Out.ALL, PacketType.RESULT, A, home, 0b11, total(10, 40))]
    assert owner(sw, 0) is None
    assert counts(sw, A) == {Event.AGGREGATED: 5, Event.COMPLETED: 2, Event.LENT: 1}


def test_l3_a_chunk_marked_at_its_home_follows_whatever_the_slots_hold() -> None:
    sw = switch()
    home, held, b_home = seq_at(A, 0, 11), seq_at(A, 0, 4), seq_at(B, 4)
    sw.process(contrib(B, b_home, 0), 0)
    sw.process(contrib(A, home, 0), 0)
    busy(sw, A, 2)
    # L6: slots 0 and 2 busy, and slot 4, where `held` would borrow, holds B's chunk
    res = sw.process(contrib(A, held, 0, 5), 1)
    assert outs(res) == [(Out.PS, PacketType.FALLBACK, A, held, 0b01, vals(5))]
    assert sw.slots[0].gone == owner_key(A, held)
    assert sw.process(contrib(A, home, 1), 2).verdict is Verdict.COMPLETE
    assert sw.process(contrib(B, b_home, 1), 2).verdict is Verdict.COMPLETE
    # L3: both slots are free now, but the chunk's first piece is at the PS
    res = sw.process(contrib(A, held, 1, 6), 3)
    assert outs(res) == [(Out.PS, PacketType.FALLBACK, A, held, 0b10, vals(6))]
    assert (owner(sw, 0), owner(sw, 4)) == (None, None)
    assert counts(sw, A) == {
        Event.AGGREGATED: 3,
        Event.COMPLETED: 1,
        Event.FALLBACK: 2,
        Event.FOLLOWED: 1,
    }


@pytest.mark.parametrize(
    ("stale_us", "squat_us", "verdict", "event"),
    [
        (1000, 0, Verdict.RECLAIM, Event.STALE_RECLAIMED),
        (10**6, 200, Verdict.RECLAIM, Event.IDLE_RECLAIMED),
    ],
)
def test_l4_the_owner_reclaims_its_stale_or_idle_home_slot(
    stale_us: int, squat_us: int, verdict: Verdict, event: Event
) -> None:
    sw = switch(stale_us=stale_us, squat_us=squat_us)
    old, new = seq_at(A, 0, 11), seq_at(A, 0, 10)
    sw.process(contrib(A, old, 0, 3), 0)
    res = sw.process(contrib(A, new, 0, 4), 1001)
    assert res.verdict is verdict
    assert outs(res) == [(Out.PS, PacketType.PARTIAL, A, old, 0b01, vals(3))]
    assert (owner(sw, 0), owner(sw, 10)) == ((A, new), None)
    # the reclaimed chunk's next contribution follows its partial (L3)
    res = sw.process(contrib(A, old, 1, 5), 1002)
    assert outs(res) == [(Out.PS, PacketType.FALLBACK, A, old, 0b10, vals(5))]
    assert counts(sw, A) == {
        Event.AGGREGATED: 2,
        event: 1,
        Event.FALLBACK: 1,
        Event.FOLLOWED: 1,
    }


@pytest.mark.parametrize("b_prio", [1, 5])
def test_l4_the_owner_evicts_a_guest_of_no_higher_priority_and_the_guest_follows(
    b_prio: int,
) -> None:
    """A lends slot 5, in B's home; B, of equal or higher priority, its
    chunk's second slot 7 busy, evicts A's chunk there, and that chunk's
    next contribution follows it."""
    sw = switch(b_prio=b_prio)
    held, guest = seq_at(A, 1, 12), seq_at(A, 1, 5)
    sw.process(contrib(A, held, 0), 0)
    busy(sw, A, 3)
    assert sw.process(contrib(A, guest, 0, 7), 1).verdict is Verdict.CLAIM
    assert owner(sw, 5) == (A, guest)
    busy(sw, B, 7)
    owner_seq = seq_at(B, 5)
    res = sw.process(contrib(B, owner_seq, 0, 8), 2)
    assert res.verdict is Verdict.PREEMPT
    assert outs(res) == [(Out.PS, PacketType.PARTIAL, A, guest, 0b01, vals(7))]
    assert owner(sw, 5) == (B, owner_seq)
    assert markers(sw, 5) == (0, owner_key(A, guest))
    # L3 at g: A's chunk finds neither its piece nor its home free, and follows
    res = sw.process(contrib(A, guest, 1, 9), 3)
    assert outs(res) == [(Out.PS, PacketType.FALLBACK, A, guest, 0b10, vals(9))]
    assert counts(sw, A) == {
        Event.AGGREGATED: 3,
        Event.LENT: 1,
        Event.GUEST_EVICTED: 1,
        Event.FALLBACK: 1,
        Event.FOLLOWED: 1,
    }
    assert counts(sw, B) == {Event.AGGREGATED: 2, Event.PREEMPT_WON: 1}


def test_an_evicted_guest_follows_after_the_owner_falls_back_at_its_slot() -> None:
    """The guest's marker outlives the owner's own markings: B evicts A's
    guest from slot 5 (L4), marked in slot 5's victims' marker; B's next
    chunk of home slot 5 finds 5 and 7 busy and its g (slot 3) held, and
    falls back marked in slot 5's marker (L6); A's home frees.  The guest
    chunk's next contribution follows its partial (L3) instead of claiming
    its free home slot, where it could never complete."""
    sw = switch()
    held, guest = seq_at(A, 1, 12), seq_at(A, 1, 5)
    sw.process(contrib(A, held, 0), 0)
    busy(sw, A, 3)
    assert sw.process(contrib(A, guest, 0, 7), 1).verdict is Verdict.CLAIM
    busy(sw, B, 7)
    evicting = seq_at(B, 5)
    assert sw.process(contrib(B, evicting, 0), 2).verdict is Verdict.PREEMPT
    fell = seq_at(B, 5, 3)
    res = sw.process(contrib(B, fell, 0, 8), 3)
    assert outs(res) == [(Out.PS, PacketType.FALLBACK, B, fell, 0b01, vals(8))]
    assert markers(sw, 5) == (owner_key(B, fell), owner_key(A, guest))
    for seq in (held, seq_at(A, 3)):
        ps = Packet(PacketType.PS_RESULT, A, seq, 0b11, vals(0), count=2)
        assert sw.process(ps, 4, in_port=PS_PORT).verdict is Verdict.PS_RELEASE
    assert (owner(sw, 1), owner(sw, 3)) == (None, None)
    res = sw.process(contrib(A, guest, 1, 9), 5)
    assert outs(res) == [(Out.PS, PacketType.FALLBACK, A, guest, 0b10, vals(9))]
    assert (owner(sw, 1), owner(sw, 3), owner(sw, 5)) == (None, None, (B, evicting))
    assert counts(sw, A)[Event.FOLLOWED] == 1


def test_l5_a_higher_ranked_guest_stays_and_the_owner_borrows_in_turn() -> None:
    sw = switch()
    b_busy, b_guest = seq_at(B, 4, 10), seq_at(B, 4, 3)
    sw.process(contrib(B, b_busy, 0), 0)
    busy(sw, B, 6)
    assert sw.process(contrib(B, b_guest, 0), 1).verdict is Verdict.CLAIM
    assert owner(sw, 3) == (B, b_guest)
    # slot 3 is A's home, held by B's higher-ranked guest, and slot 1 (h')
    # by A's own chunk: A borrows slot 9
    busy(sw, A, 1)
    a_seq = seq_at(A, 3, 9)
    res = sw.process(contrib(A, a_seq, 0), 2)
    assert (res.verdict, res.outputs) == (Verdict.CLAIM, ())
    assert (owner(sw, 3), owner(sw, 9)) == ((B, b_guest), (A, a_seq))
    assert counts(sw, A) == {Event.AGGREGATED: 2, Event.LENT: 1}
    assert counts(sw, B) == {Event.AGGREGATED: 3, Event.LENT: 1}


def test_l5_a_guest_never_preempts_and_falls_back_at_its_home() -> None:
    sw = switch()
    a_home, a_lent = seq_at(A, 0, 11), seq_at(A, 0, 10)
    sw.process(contrib(A, a_home, 0), 0)
    busy(sw, A, 2)
    sw.process(contrib(A, a_lent, 0, 2), 1)
    b_home, b_seq = seq_at(B, 4, 3), seq_at(B, 4, 10)
    sw.process(contrib(B, b_home, 0), 2)
    busy(sw, B, 6, 2)
    # B's home is busy and slot 10 holds A's lower-priority guest: B falls back
    res = sw.process(contrib(B, b_seq, 0, 3), 3)
    assert outs(res) == [(Out.PS, PacketType.FALLBACK, B, b_seq, 0b01, vals(3))]
    assert (owner(sw, 4), owner(sw, 10)) == ((B, b_home), (A, a_lent))
    assert sw.slots[4].gone == owner_key(B, b_seq)
    assert sw.slots[10].gone == 0
    assert counts(sw, B) == {Event.AGGREGATED: 2, Event.FALLBACK: 1}
    assert counts(sw, A) == {Event.AGGREGATED: 3, Event.LENT: 1}


def test_l5_a_guest_reclaims_a_stale_slot_outside_its_home() -> None:
    sw = switch()
    a_lent = seq_at(A, 0, 10)
    sw.process(contrib(A, seq_at(A, 0, 11), 0), 0)
    busy(sw, A, 2)
    sw.process(contrib(A, a_lent, 0, 3), 0)
    sw.process(contrib(B, seq_at(B, 4, 3), 0), 1500)
    busy(sw, B, 6, 1500)
    b_seq = seq_at(B, 4, 10)
    res = sw.process(contrib(B, b_seq, 0, 5), 1501)
    assert res.verdict is Verdict.RECLAIM
    assert outs(res) == [(Out.PS, PacketType.PARTIAL, A, a_lent, 0b01, vals(3))]
    assert owner(sw, 10) == (B, b_seq)
    assert markers(sw, 10) == (0, owner_key(A, a_lent))
    assert counts(sw, B) == {Event.AGGREGATED: 3, Event.LENT: 1}
    assert counts(sw, A) == {Event.AGGREGATED: 3, Event.LENT: 1, Event.STALE_RECLAIMED: 1}


@pytest.mark.parametrize("home_busy", [False, True])
def test_a_retransmission_never_starts_a_slot_it_falls_back_marking_the_home(
    home_busy: bool,
) -> None:
    sw = switch()
    seq = seq_at(A, 0, 10)
    if home_busy:
        sw.process(contrib(A, seq_at(A, 0, 11), 0), 0)
    res = sw.process(contrib(A, seq, 1, 6, flags=Flag.RETX), 1)
    assert res.outputs == (
        Output(Out.PS, Packet(PacketType.FALLBACK, A, seq, 0b10, vals(6), Flag.RETX, 1)),
    )
    assert owner(sw, 10) is None
    assert sw.slots[0].gone == owner_key(A, seq)
    assert counts(sw, A).get(Event.LENT, 0) == 0


def test_race_a_chunk_that_borrowed_stays_at_g_when_its_home_frees() -> None:
    """Contribution 1 claims g because h is busy; h frees; contribution 2
    adds at g and does not claim h."""
    sw = switch()
    home, lent = seq_at(A, 0, 11), seq_at(A, 0, 10)
    sw.process(contrib(A, home, 0), 0)
    busy(sw, A, 2)
    sw.process(contrib(A, lent, 0, 2), 1)
    assert owner(sw, 10) == (A, lent)
    sw.process(contrib(A, home, 1), 2)
    assert owner(sw, 0) is None
    res = sw.process(contrib(A, lent, 1, 3), 3)
    assert outs(res) == [(Out.ALL, PacketType.RESULT, A, lent, 0b11, total(2, 3))]
    assert (owner(sw, 0), owner(sw, 10)) == (None, None)


def test_race_a_chunk_that_fell_back_follows_when_both_slots_free() -> None:
    """Contribution 1 falls back (h busy, g held); both free; contribution 2
    follows to the PS."""
    sw = switch()
    b_guest = seq_at(B, 4, 10)
    sw.process(contrib(B, seq_at(B, 4, 3), 0), 0)
    busy(sw, B, 6)
    sw.process(contrib(B, b_guest, 0), 0)
    assert owner(sw, 10) == (B, b_guest)
    home, seq = seq_at(A, 0, 11), seq_at(A, 0, 10)
    sw.process(contrib(A, home, 0), 1)
    busy(sw, A, 2, 1)
    assert sw.process(contrib(A, seq, 0, 4), 2).verdict is Verdict.FALLBACK
    sw.process(contrib(A, home, 1), 3)
    sw.process(contrib(B, b_guest, 1), 3)
    assert (owner(sw, 0), owner(sw, 10)) == (None, None)
    res = sw.process(contrib(A, seq, 1, 5), 4)
    assert outs(res) == [(Out.PS, PacketType.FALLBACK, A, seq, 0b10, vals(5))]
    assert (owner(sw, 0), owner(sw, 10)) == (None, None)
    assert sw.events(A)[Event.FOLLOWED] == 1


def test_a_ps_result_releases_a_lent_slot() -> None:
    sw = switch()
    home, lent = seq_at(A, 0, 11), seq_at(A, 0, 10)
    sw.process(contrib(A, home, 0), 0)
    busy(sw, A, 2)
    sw.process(contrib(A, lent, 0), 1)
    assert owner(sw, 10) == (A, lent)
    ps = Packet(PacketType.PS_RESULT, A, lent, 0b11, vals(0), count=2)
    res = sw.process(ps, 2, in_port=PS_PORT)
    assert res.verdict is Verdict.PS_RELEASE
    assert (owner(sw, 0), owner(sw, 10)) == ((A, home), None)
    assert sw.events(A)[Event.RELEASED_BY_PS] == 1


def test_t2_a_partial_from_another_switch_flushes_a_lent_slot() -> None:
    sw = switch()
    sw.add_job(
        A,
        JobConfig(2, 0b01, 1, (PS_PORT,), part_base=0, part_size=4, children=((CHILD, 0b10),)),
    )
    home, lent, gone = seq_at(A, 0, 11), seq_at(A, 0, 10), seq_at(A, 0, 8)
    sw.process(contrib(A, home, 0), 0)
    busy(sw, A, 2)
    sw.process(contrib(A, lent, 0, 2), 1)
    assert owner(sw, 10) == (A, lent)
    partial = Packet(PacketType.PARTIAL, A, lent, 0b10, vals(3), count=1)
    res = sw.process(partial, 2, in_port=CHILD)
    assert res.verdict is Verdict.FLUSH
    assert outs(res) == [(Out.PS, PacketType.PARTIAL, A, lent, 0b11, total(2, 3))]
    assert owner(sw, 10) is None
    assert sw.slots[10].gone == owner_key(A, lent)
    # a chunk in neither slot: it passes, marked at its home
    fallback = Packet(PacketType.FALLBACK, A, gone, 0b10, vals(4), count=1)
    res = sw.process(fallback, 3, in_port=CHILD)
    assert (res.verdict, outs(res)) == (
        Verdict.TRANSIT,
        [(Out.PS, PacketType.FALLBACK, A, gone, 0b10, vals(4))],
    )
    assert (sw.slots[0].gone, sw.slots[8].gone) == (owner_key(A, gone), 0)


@pytest.mark.parametrize("policy", [Policy.STATIC, Policy.ATP])
def test_only_esa_lends(policy: Policy) -> None:
    sw = switch()
    sw.policy = policy
    home, seq = seq_at(A, 0, 11), seq_at(A, 0, 10)
    sw.process(contrib(A, home, 0), 0)
    res = sw.process(contrib(A, seq, 0), 1)
    if policy is Policy.STATIC:
        assert res.verdict is Verdict.FALLBACK
    else:  # ATP hashes every chunk over the whole pool, never lent
        assert res.verdict is Verdict.CLAIM
        assert owner(sw, slot_hash(A, seq, POOL)) == (A, seq)
    assert sw.events(A)[Event.LENT] == 0


@pytest.mark.parametrize(
    ("seq", "part_base", "part_size", "h2"),
    [
        (0, 0, 4, 2),
        (3, 4, 4, 5),  # (3 + 2) mod 4 = 1, past the base
        (5, 8, 3, 8),  # (5 + 1) mod 3 = 0
        (2**32 - 1, 8, 3, 8),  # summed in 32 bits: (2^32 - 1 + 1) wraps to 0
        (2**32 - 2, 0, 5, 0),  # 2^32 - 2 + 2 wraps to 0 (unwrapped: 2^32 mod 5 = 1)
        (7, 0, 1, None),  # a home of one slot has no second
    ],
)
def test_the_second_home_slot_is_half_the_home_away(
    seq: int, part_base: int, part_size: int, h2: int | None
) -> None:
    assert home_second(seq, part_base, part_size) == h2


def test_a_busy_home_slot_claims_the_chunks_second_home_slot_before_borrowing() -> None:
    """L4 at h': seq 4's home slot 0 holds seq 0; its second home slot 2 is
    free, so it claims there (not its slot g outside the home), and its
    next contribution completes there."""
    sw = switch()
    sw.process(contrib(A, 0, 0, 1), 0)
    res = sw.process(contrib(A, 4, 0, 2), 1)
    assert (res.verdict, res.outputs) == (Verdict.CLAIM, ())
    assert (owner(sw, 0), owner(sw, 2)) == ((A, 0), (A, 4))
    res = sw.process(contrib(A, 4, 1, 3), 2)
    assert outs(res) == [(Out.ALL, PacketType.RESULT, A, 4, 0b11, total(2, 3))]
    assert (owner(sw, 0), owner(sw, 2)) == ((A, 0), None)
    assert counts(sw, A) == {Event.AGGREGATED: 3, Event.COMPLETED: 1}


def test_a_home_takes_a_free_second_slot_before_evicting_a_guest_at_h() -> None:
    """L4's order: free, stale or idle at h, then at h', then a guest
    evicted at h, then at h'.  B's guest holds A's slot 1; A's seq 1 finds
    slot 3 free and claims it; A's seq 5, both slots held, evicts the
    guest (of A's priority) at 1."""
    sw = switch(b_prio=PRIO[A])
    b_guest = seq_at(B, 4, 1)
    busy(sw, B, 4)
    busy(sw, B, 6)
    assert sw.process(contrib(B, b_guest, 0, 4), 0).verdict is Verdict.CLAIM
    assert owner(sw, 1) == (B, b_guest)
    assert sw.process(contrib(A, 1, 0), 1).verdict is Verdict.CLAIM
    assert (owner(sw, 1), owner(sw, 3)) == ((B, b_guest), (A, 1))
    res = sw.process(contrib(A, 5, 0, 6), 2)
    assert res.verdict is Verdict.PREEMPT
    assert outs(res) == [(Out.PS, PacketType.PARTIAL, B, b_guest, 0b01, vals(4))]
    assert (owner(sw, 1), owner(sw, 3)) == ((A, 5), (A, 1))
    assert markers(sw, 1) == (0, owner_key(B, b_guest))
    assert counts(sw, B) == {Event.AGGREGATED: 3, Event.LENT: 1, Event.GUEST_EVICTED: 1}


def test_l3_a_marker_at_the_second_home_slot_sends_the_chunk_after_its_piece() -> None:
    """Seq 4 went to the PS from slot 2, its h' (a retransmission flushed
    it); its home slot 0 is free, but its next contribution follows."""
    sw = switch()
    sw.process(contrib(A, 0, 0), 0)
    sw.process(contrib(A, 4, 0), 1)
    res = sw.process(contrib(A, 4, 0, flags=Flag.RETX), 2)
    assert res.verdict is Verdict.FLUSH
    assert sw.slots[2].gone == owner_key(A, 4)
    assert sw.process(contrib(A, 0, 1), 3).verdict is Verdict.COMPLETE
    res = sw.process(contrib(A, 4, 1, 5), 4)
    assert outs(res) == [(Out.PS, PacketType.FALLBACK, A, 4, 0b10, vals(5))]
    assert (owner(sw, 0), owner(sw, 2)) == (None, None)
    assert sw.events(A)[Event.FOLLOWED] == 1
