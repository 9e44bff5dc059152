"""The switch rules as stated by esa.model: one test per rule, exact outputs."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esa import wire
from esa.job import MAX_PS_SHARDS
from esa.model import (
    INT32_MAX,
    JobConfig,
    Out,
    Output,
    Packet,
    SwitchModel,
    borrowed_slot,
    chunk_crc,
    route_key,
    second_hash,
    slot_hash,
)
from esa.spec import DEFAULT_SQUAT_US, GONE_SPAN, Drop, Event, Policy, Verdict, owner_key
from esa.wire import Flag, PacketType

POOL = 8
LOW, HIGH = 1, 2
PS_PORT = 9


def vals(x: int) -> tuple[int, ...]:
    return tuple(x + i for i in range(wire.K))


def contrib(job: int, seq: int, worker: int, x: int = 1, flags: int = 0) -> Packet:
    return Packet(PacketType.CONTRIB, job, seq, 1 << worker, vals(x), flags=flags, count=1)


def one_slot(job: int, seq: int) -> bool:
    """The chunk's second hash is its first: under ESA it has one slot."""
    return second_hash(job, seq, POOL) == slot_hash(job, seq, POOL)


def colliding_seqs() -> tuple[int, int]:
    """A LOW seq and a HIGH seq that map to the same slot, each of one slot
    (``one_slot``), so that neither has a second to go to."""
    for s in range(1000):
        for t in range(1000):
            if (
                slot_hash(LOW, s, POOL) == slot_hash(HIGH, t, POOL)
                and one_slot(LOW, s)
                and one_slot(HIGH, t)
            ):
                return s, t
    raise AssertionError("no collision")


def next_in_slot(job: int, seq: int) -> int:
    """The next seq of ``job`` whose chunk has only the slot of (job, seq)."""
    idx = slot_hash(job, seq, POOL)
    return next(
        t
        for t in range(seq + 1, seq + 10**6)
        if slot_hash(job, t, POOL) == idx and one_slot(job, t)
    )


def switch(policy: Policy = Policy.ESA, fan_in: int = 2, parts: bool | None = None) -> SwitchModel:
    """LOW and HIGH, each with a partition of 4 slots if ``parts`` (by
    default under STATIC only; ATP ignores them)."""
    sw = SwitchModel(pool_size=POOL, policy=policy, stale_us=1000)
    mask = (1 << fan_in) - 1
    part = 4 if (policy is Policy.STATIC if parts is None else parts) else 0
    sw.add_job(LOW, JobConfig(fan_in, mask, 1, ps_ports=(PS_PORT,), part_base=0, part_size=part))
    sw.add_job(HIGH, JobConfig(fan_in, mask, 5, ps_ports=(PS_PORT,), part_base=4, part_size=part))
    return sw


def test_claim_add_complete_releases_and_multicasts() -> None:
    sw = switch()
    assert sw.process(contrib(LOW, 7, 0, 10), 0).verdict is Verdict.CLAIM
    res = sw.process(contrib(LOW, 7, 1, 100), 1)
    assert res.verdict is Verdict.COMPLETE
    (out,) = res.outputs
    assert out.to is Out.ALL
    assert out.packet.ptype is PacketType.RESULT
    assert out.packet.values == tuple(110 + 2 * i for i in range(wire.K))
    assert (out.packet.bitmap, out.packet.count, out.packet.flags) == (0b11, 2, 0)
    assert sw.slots[slot_hash(LOW, 7, POOL)].owner == 0
    ev = sw.events(LOW)
    assert (ev[Event.AGGREGATED], ev[Event.COMPLETED]) == (2, 1)


def test_atp_holds_until_ps_result() -> None:
    sw = switch(Policy.ATP)
    sw.process(contrib(LOW, 7, 0), 0)
    res = sw.process(contrib(LOW, 7, 1), 1)
    assert res.outputs[0].to is Out.PS
    assert res.outputs[0].packet.flags == Flag.HOLD
    assert sw.process(contrib(LOW, 7, 1, flags=Flag.RETX), 2).verdict is Verdict.FALLBACK
    ps = Packet(PacketType.PS_RESULT, LOW, 7, 0b11, vals(0), count=2)
    res = sw.process(ps, 3, in_port=PS_PORT)
    assert res.verdict is Verdict.PS_RELEASE
    assert res.outputs[0].to is Out.WORKERS
    assert sw.slots[slot_hash(LOW, 7, POOL)].owner == 0


def test_ps_result_only_from_ps_port() -> None:
    sw = switch()
    ps = Packet(PacketType.PS_RESULT, LOW, 7, 0b11, vals(0), count=2)
    assert sw.process(ps, 0, in_port=1).drop is Drop.BAD_TYPE


def test_preemption_swaps_contents() -> None:
    sw = switch()
    low_seq, high_seq = colliding_seqs()
    sw.process(contrib(LOW, low_seq, 0, 5), 0)
    res = sw.process(contrib(HIGH, high_seq, 1, 50), 1)
    assert res.verdict is Verdict.PREEMPT
    (out,) = res.outputs
    assert out.to is Out.PS
    assert (out.packet.ptype, out.packet.job, out.packet.seq) == (PacketType.PARTIAL, LOW, low_seq)
    assert (out.packet.bitmap, out.packet.count, out.packet.values) == (0b01, 1, vals(5))
    slot = sw.slots[slot_hash(HIGH, high_seq, POOL)]
    assert slot.values == list(vals(50))
    assert sw.events(HIGH)[Event.PREEMPT_WON] == 1
    assert sw.events(LOW)[Event.PREEMPT_SUFFERED] == 1


def test_lower_or_equal_priority_falls_back() -> None:
    sw = switch()
    low_seq, high_seq = colliding_seqs()
    sw.process(contrib(HIGH, high_seq, 0), 0)
    res = sw.process(contrib(LOW, low_seq, 0, 3), 1)
    assert res.verdict is Verdict.FALLBACK
    assert res.outputs[0].packet.ptype is PacketType.FALLBACK
    assert res.outputs[0].packet.values == vals(3)
    # the holder completes and frees the slot; LOW's chunk, already partly at
    # its PS, must not start a sum there that could never complete
    assert sw.process(contrib(HIGH, high_seq, 1), 2).verdict is Verdict.COMPLETE
    assert sw.process(contrib(LOW, low_seq, 1, 4), 3).verdict is Verdict.FALLBACK
    assert sw.slots[slot_hash(LOW, low_seq, POOL)].owner == 0
    assert sw.events(LOW)[Event.FOLLOWED] == 1


def test_atp_never_preempts() -> None:
    sw = switch(Policy.ATP)
    low_seq, high_seq = colliding_seqs()
    sw.process(contrib(LOW, low_seq, 0), 0)
    assert sw.process(contrib(HIGH, high_seq, 0), 1).verdict is Verdict.FALLBACK


def test_duplicate_and_retransmission_flush() -> None:
    sw = switch(fan_in=3)
    sw.process(contrib(LOW, 7, 0, 1), 0)
    assert sw.process(contrib(LOW, 7, 0, 1), 1).verdict is Verdict.DUPLICATE
    res = sw.process(contrib(LOW, 7, 0, 1, flags=Flag.RETX), 2)
    assert res.verdict is Verdict.FLUSH
    assert res.outputs[0].packet.ptype is PacketType.PARTIAL
    assert res.outputs[0].packet.values == vals(1)
    assert sw.slots[slot_hash(LOW, 7, POOL)].owner == 0
    assert sw.process(contrib(LOW, 7, 1, flags=Flag.RETX), 3).verdict is Verdict.FALLBACK


def test_stale_slot_is_reclaimed() -> None:
    sw = switch()
    low_seq, high_seq = colliding_seqs()
    sw.process(contrib(HIGH, high_seq, 0, 4), 0)
    assert sw.process(contrib(LOW, low_seq, 0), 500).verdict is Verdict.FALLBACK
    res = sw.process(contrib(LOW, next_in_slot(LOW, low_seq), 0), 1001)
    assert res.verdict is Verdict.RECLAIM
    assert (res.outputs[0].packet.job, res.outputs[0].packet.values) == (HIGH, vals(4))
    assert sw.events(HIGH)[Event.STALE_RECLAIMED] == 1


def test_saturation_is_flagged() -> None:
    sw = switch()
    big = Packet(PacketType.CONTRIB, LOW, 7, 1, (INT32_MAX,) * wire.K)
    sw.process(big, 0)
    res = sw.process(Packet(PacketType.CONTRIB, LOW, 7, 2, (1,) * wire.K), 1)
    assert res.outputs[0].packet.values == (INT32_MAX,) * wire.K
    assert res.outputs[0].packet.flags == Flag.OVERFLOW
    assert sw.events(LOW)[Event.OVERFLOW] == 1


def test_unknown_job_spoofed_worker_and_bad_type() -> None:
    sw = switch()
    assert sw.process(contrib(99, 1, 0), 0).drop is Drop.UNKNOWN_JOB
    assert sw.process(contrib(LOW, 1, 5), 0).drop is Drop.SPOOFED_WORKER
    two_bits = Packet(PacketType.CONTRIB, LOW, 1, 0b11, vals(0))
    assert sw.process(two_bits, 0).drop is Drop.SPOOFED_WORKER
    assert sw.process(Packet(PacketType.RESULT, LOW, 1, 1, vals(0)), 0).drop is Drop.BAD_TYPE
    assert sw.drops[Drop.SPOOFED_WORKER] == 2
    assert sw.events(LOW)[Event.SPOOFED] == 2


def test_static_uses_own_partition_only() -> None:
    sw = switch(Policy.STATIC)
    sw.process(contrib(LOW, 1, 0), 0)
    sw.process(contrib(HIGH, 1, 0), 0)
    assert sw.slots[1].owner >> 32 == LOW
    assert sw.slots[5].owner >> 32 == HIGH


def test_esa_jobs_with_partitions_stream_through_them() -> None:
    """Each job in its home; a busy home slot tries the chunk's second home
    slot, then borrows (rule L, tests/test_model_lend.py) a free slot outside
    the home, so seq 17, which shares LOW's slot 1 with seq 1, whose second
    slot 3 seq 3 holds and whose borrowed slot 5 HIGH holds, falls back."""
    sw = switch(Policy.ESA, parts=True)
    assert sw.process(contrib(LOW, 3, 0), 0).verdict is Verdict.CLAIM
    assert sw.process(contrib(LOW, 1, 0), 0).verdict is Verdict.CLAIM
    assert sw.process(contrib(HIGH, 1, 0), 0).verdict is Verdict.CLAIM
    assert (sw.slots[1].owner >> 32, sw.slots[5].owner >> 32) == (LOW, HIGH)
    assert borrowed_slot(LOW, 17, POOL, 0, 4) == 5
    res = sw.process(contrib(LOW, 17, 0), 0)
    assert (res.verdict, [o.to for o in res.outputs]) == (Verdict.FALLBACK, [Out.PS])
    assert sw.process(contrib(LOW, 1, 1), 1).verdict is Verdict.COMPLETE
    assert sw.slots[1].owner == 0


def hashed_into(job: int, slots: range) -> int:
    """The first seq of ``job`` of one slot (``one_slot``) whose hash lands
    in ``slots``."""
    return next(s for s in range(1000) if slot_hash(job, s, POOL) in slots and one_slot(job, s))


def test_esa_a_job_without_a_partition_shares_the_pool_by_priority() -> None:
    sw = switch(Policy.ESA, parts=True)
    sw.add_job(HIGH, replace(sw.jobs[HIGH], part_base=0, part_size=0))
    high = hashed_into(HIGH, range(4))
    idx = slot_hash(HIGH, high, POOL)
    assert sw.process(contrib(LOW, idx, 0), 0).verdict is Verdict.CLAIM
    second = (idx + 2) % 4
    assert sw.process(contrib(LOW, second, 0), 0).verdict is Verdict.CLAIM
    # HIGH hashes into LOW's partition and preempts LOW's partial there
    res = sw.process(contrib(HIGH, high, 0), 1)
    assert res.verdict is Verdict.PREEMPT
    assert [(o.to, o.packet.job, o.packet.ptype) for o in res.outputs] == [
        (Out.PS, LOW, PacketType.PARTIAL)
    ]
    assert sw.slots[idx].owner >> 32 == HIGH
    # LOW's next chunk there finds HIGH's higher priority, and its own chunk
    # at its second home slot: it borrows its slot outside its home (rule L, L5)
    lent = idx + 4
    res = sw.process(contrib(LOW, lent, 0), 2)
    assert (res.verdict, res.outputs) == (Verdict.CLAIM, ())
    assert borrowed_slot(LOW, lent, POOL, 0, 4) == 4
    assert sw.slots[4].owner == owner_key(LOW, lent)
    assert sw.events(LOW)[Event.LENT] == 1
    # HIGH completes there and frees LOW's slot for LOW's next chunk
    assert sw.process(contrib(HIGH, high, 1), 3).verdict is Verdict.COMPLETE
    assert sw.process(contrib(LOW, idx + 8, 0), 4).verdict is Verdict.CLAIM


def expected_sum(bitmap: int) -> tuple[int, ...]:
    """Values of a sum of workers' contributions where worker w sends vals(w + 1)."""
    ws = [w for w in range(32) if bitmap >> w & 1]
    return tuple(sum(v) for v in zip(*(vals(w + 1) for w in ws), strict=True))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(list(Policy)), st.booleans())
def test_every_sum_is_exact_and_no_contribution_is_lost(
    seed: int, policy: Policy, parts: bool
) -> None:
    """Random traffic of two jobs, with retransmissions, with and without
    partitions: every sum leaving the switch holds each of its workers
    exactly once, and every worker that sent is in a sum that left or in a
    slot still holding its chunk."""
    rng = random.Random(seed)
    sw = switch(policy, fan_in=3, parts=parts)
    sent: dict[tuple[int, int], set[int]] = {}
    covered: dict[tuple[int, int], int] = {}
    for t in range(200):
        job, seq, w = rng.choice((LOW, HIGH)), rng.randrange(6), rng.randrange(3)
        key = (job, seq)
        flags = Flag.RETX if w in sent.get(key, set()) else 0
        sent.setdefault(key, set()).add(w)
        res = sw.process(contrib(job, seq, w, w + 1, flags=flags), t * 100)
        for o in res.outputs:
            p = o.packet
            assert p.values == expected_sum(p.bitmap)
            assert p.count == bin(p.bitmap).count("1")
            covered[(p.job, p.seq)] = covered.get((p.job, p.seq), 0) | p.bitmap
            if p.ptype is PacketType.RESULT and p.flags & Flag.HOLD:
                ps = Packet(PacketType.PS_RESULT, p.job, p.seq, p.bitmap, p.values)
                sw.process(ps, t * 100, in_port=PS_PORT)
    for s in sw.slots:
        if s.owner:
            key = (s.owner >> 32, s.owner & 0xFFFFFFFF)
            covered[key] = covered.get(key, 0) | s.bitmap
    for key, workers in sent.items():
        assert covered.get(key, 0) == sum(1 << w for w in workers), key


def test_idle_incomplete_partial_is_taken_and_its_chunk_follows() -> None:
    sw = switch()
    sw.squat_us, sw.stale_us = 200, 10**6
    low_seq, high_seq = colliding_seqs()
    sw.process(contrib(HIGH, high_seq, 0, 4), 0)
    assert sw.process(contrib(LOW, low_seq, 0), 200).verdict is Verdict.FALLBACK
    res = sw.process(contrib(LOW, next_in_slot(LOW, low_seq), 0, 7), 201)
    assert res.verdict is Verdict.RECLAIM
    (out,) = res.outputs
    assert (out.to, out.packet.ptype, out.packet.job, out.packet.seq) == (
        Out.PS,
        PacketType.PARTIAL,
        HIGH,
        high_seq,
    )
    assert (out.packet.bitmap, out.packet.count, out.packet.values) == (0b01, 1, vals(4))
    assert sw.events(HIGH)[Event.IDLE_RECLAIMED] == 1
    assert sw.events(HIGH)[Event.STALE_RECLAIMED] == 0
    # HIGH's second worker finds its chunk gone: it follows the partial to the PS,
    # even though HIGH outranks the slot's new holder.
    res = sw.process(contrib(HIGH, high_seq, 1, 9), 300)
    assert res.verdict is Verdict.FALLBACK
    assert res.outputs[0].packet.values == vals(9)
    ev = sw.events(HIGH)
    assert (ev[Event.FOLLOWED], ev[Event.FALLBACK], ev[Event.PREEMPT_WON]) == (1, 1, 0)


def test_idle_rule_spares_a_complete_held_slot() -> None:
    sw = switch(Policy.ATP)
    sw.squat_us, sw.stale_us = 200, 10**6
    low_seq, high_seq = colliding_seqs()
    sw.process(contrib(HIGH, high_seq, 0), 0)
    sw.process(contrib(HIGH, high_seq, 1), 1)
    assert sw.process(contrib(LOW, low_seq, 0), 5000).verdict is Verdict.FALLBACK


def test_squat_timeout_defaults_per_policy() -> None:
    assert SwitchModel(policy=Policy.ESA).squat_us == DEFAULT_SQUAT_US > 0
    assert SwitchModel(policy=Policy.ATP).squat_us == 0
    assert SwitchModel(policy=Policy.STATIC).squat_us == 0
    assert SwitchModel(policy=Policy.ATP, squat_us=300).squat_us == 300


def test_preempted_chunk_never_starts_a_slot_again() -> None:
    sw = switch()
    low_seq, high_seq = colliding_seqs()
    sw.process(contrib(LOW, low_seq, 0, 5), 0)
    assert sw.process(contrib(HIGH, high_seq, 0), 1).verdict is Verdict.PREEMPT
    assert sw.process(contrib(HIGH, high_seq, 1), 2).verdict is Verdict.COMPLETE
    # the slot is free now, but LOW's chunk already left it: no fresh sum
    # that could never reach the fan-in
    res = sw.process(contrib(LOW, low_seq, 1, 6), 3)
    assert res.verdict is Verdict.FALLBACK
    assert sw.slots[slot_hash(LOW, low_seq, POOL)].owner == 0
    assert sw.events(LOW)[Event.FOLLOWED] == 1
    # any other chunk still claims the slot as usual
    idx = slot_hash(LOW, low_seq, POOL)
    other = next(t for t in range(high_seq + 1, 10**6) if slot_hash(HIGH, t, POOL) == idx)
    assert sw.process(contrib(HIGH, other, 0), 4).verdict is Verdict.CLAIM


def test_a_resent_contribution_adds_itself_but_under_atp_flushes() -> None:
    """S6 and S7: a retransmission new to its chunk's partial joins it under
    ESA and STATIC (the chunk's other contributions still come to the slot),
    and under ATP flushes the partial, with it, to the PS."""
    for policy in (Policy.ESA, Policy.STATIC):
        sw = switch(policy, fan_in=3)
        sw.process(contrib(LOW, 7, 0, 1), 0)
        assert sw.process(contrib(LOW, 7, 1, 1, flags=Flag.RETX), 1).verdict is Verdict.ADD
        assert sw.process(contrib(LOW, 7, 2, 1), 2).verdict is Verdict.COMPLETE
    sw = switch(Policy.ATP, fan_in=3)
    sw.process(contrib(LOW, 7, 0, 1), 0)
    res = sw.process(contrib(LOW, 7, 1, 1, flags=Flag.RETX), 1)
    assert res.verdict is Verdict.FLUSH
    assert [(o.to, o.packet.ptype, o.packet.bitmap) for o in res.outputs] == [
        (Out.PS, PacketType.PARTIAL, 0b011)
    ]


@given(
    policy=st.sampled_from([Policy.ESA, Policy.STATIC, Policy.ATP]),
    resent=st.lists(st.booleans(), min_size=3, max_size=3),
    order=st.permutations(range(3)),
)
def test_a_sum_says_whether_a_resent_contribution_went_into_it(
    policy: Policy, resent: list[bool], order: list[int]
) -> None:
    """A slot keeps RETX in its state (RESENT) and the sum that leaves it
    carries the flag: the RESULT (ATP: with HOLD) or, under ATP, the
    partial a retransmission flushes.  Workers take no timing sample from
    a sum that waited for a resend, and the PS flags its answer HOLD only
    without one."""
    sw = switch(policy, fan_in=3)
    outs: list[Output] = []
    for n, w in enumerate(order):
        flags = Flag.RETX if resent[w] and n > 0 else 0
        outs += sw.process(contrib(LOW, 7, w, 1, flags=flags), n).outputs
        if outs:
            break
    (out,) = outs
    joined = [resent[w] and n > 0 for n, w in enumerate(order)][: out.packet.bitmap.bit_count()]
    want = Flag.RETX if any(joined) else 0
    if policy is Policy.ATP and out.packet.ptype is PacketType.RESULT:
        want |= Flag.HOLD
    assert out.packet.flags == want


def test_a_sum_that_goes_up_is_never_flagged_resent() -> None:
    """Below the top a complete sum leaves as a CONTRIB, where RETX would
    make it a retransmission at the parent: the flag stays behind."""
    sw = SwitchModel(pool_size=POOL, policy=Policy.ESA, stale_us=1000)
    sw.add_job(LOW, JobConfig(2, 0b11, 1, ps_ports=(PS_PORT,), up_port=7))
    sw.process(contrib(LOW, 7, 0, 1), 0)
    (out,) = sw.process(contrib(LOW, 7, 1, 1, flags=Flag.RETX), 1).outputs
    assert (out.to, out.packet.ptype, out.packet.flags) == (Out.UP, PacketType.CONTRIB, 0)


def test_flushed_chunk_sends_late_first_sends_to_the_ps() -> None:
    sw = switch(fan_in=3)
    sw.process(contrib(LOW, 7, 0, 1), 0)
    assert sw.process(contrib(LOW, 7, 0, 1, flags=Flag.RETX), 1).verdict is Verdict.FLUSH
    res = sw.process(contrib(LOW, 7, 2, 1), 2)
    assert res.verdict is Verdict.FALLBACK
    assert sw.events(LOW)[Event.FOLLOWED] == 1
    assert sw.slots[slot_hash(LOW, 7, POOL)].owner == 0


def walled_in() -> SwitchModel:
    """ESA, each job in its home, HIGH's home held by HIGH's chunks and
    LOW's slot 2 by LOW's chunk 2: a busy slot 0 of LOW's home has neither
    its second home slot (2) nor a slot to borrow (rule L) and falls back."""
    sw = switch(parts=True)
    for seq in range(4):
        assert sw.process(contrib(HIGH, seq, 0), 0).verdict is Verdict.CLAIM
    assert sw.process(contrib(LOW, 2, 0), 0).verdict is Verdict.CLAIM
    return sw


def test_a_slot_remembers_the_highest_gone_seq_of_a_job() -> None:
    """Chunks 0, 4 and 8 of a job share a slot of its partition; 4 and 8
    fall back around 0.  Chunk 4 stays gone when 8 goes: its next
    contribution follows it to the PS rather than claiming the slot chunk 0
    frees, where it could never complete (the marker keeps the job's
    highest gone seq, and covers the seqs behind it)."""
    sw = walled_in()
    assert sw.process(contrib(LOW, 0, 0), 0).verdict is Verdict.CLAIM
    assert sw.process(contrib(LOW, 4, 0), 1).verdict is Verdict.FALLBACK
    assert sw.process(contrib(LOW, 8, 0), 2).verdict is Verdict.FALLBACK
    assert sw.process(contrib(LOW, 0, 1), 3).verdict is Verdict.COMPLETE
    assert sw.process(contrib(LOW, 4, 1), 4).verdict is Verdict.FALLBACK
    assert sw.process(contrib(LOW, 8, 1), 5).verdict is Verdict.FALLBACK
    assert sw.slots[0].owner == 0 and sw.slots[0].gone == (LOW << 32) | 8
    assert sw.events(LOW)[Event.FOLLOWED] == 2
    # the marker never goes back: a partial of 0 that leaves (a late
    # retransmission of a chunk complete here goes on to the PS) keeps 8
    assert sw.process(contrib(LOW, 0, 1, flags=Flag.RETX), 6).verdict is Verdict.FALLBACK
    assert sw.slots[0].gone == (LOW << 32) | 8
    # a later chunk claims the slot as usual
    assert sw.process(contrib(LOW, 12, 0), 7).verdict is Verdict.CLAIM


def test_the_marker_covers_seqs_behind_it_across_the_wrap_and_within_its_span() -> None:
    """Serial-number arithmetic: a marker at seq 4 covers 2^32 - 4, the
    chunk before the wrap; it covers ``GONE_SPAN`` seqs, its own and those
    behind it, and nothing ahead of it (the next chunks claim as usual)."""
    # chunks of slot 0 (seq mod 4 = 0) just before the wrap, and the one
    # farthest behind 4 that the marker covers
    for before in (2**32 - 4, 4 - (GONE_SPAN - 4) + 2**32):
        sw = walled_in()
        sw.process(contrib(LOW, before, 0), 0)
        assert sw.process(contrib(LOW, 4, 0), 1).verdict is Verdict.FALLBACK
        assert sw.process(contrib(LOW, before, 1, flags=Flag.RETX), 2).verdict is Verdict.COMPLETE
        assert sw.process(contrib(LOW, before, 0), 3).verdict is Verdict.FALLBACK
        assert sw.slots[0].gone == (LOW << 32) | 4
    for outside in (8, 4 - GONE_SPAN + 2**32):
        sw = walled_in()
        sw.process(contrib(LOW, 4, 0, flags=Flag.RETX), 0)
        assert sw.slots[0].gone == (LOW << 32) | 4
        assert sw.process(contrib(LOW, outside, 0), 1).verdict is Verdict.CLAIM


def test_another_jobs_chunk_replaces_the_marker_the_residual_case() -> None:
    """The marker keeps one job: where two jobs share a slot (hashed), the
    second job's chunk that goes to the PS from it replaces the first's
    marker, and the first chunk's next contribution starts a partial that
    can not complete (it waits for a timer or the PS's pull)."""
    sw = switch()
    low_seq, high_seq = colliding_seqs()
    sw.process(contrib(HIGH, high_seq, 0), 0)
    assert sw.process(contrib(LOW, low_seq, 0), 1).verdict is Verdict.FALLBACK
    assert sw.process(contrib(HIGH, high_seq, 0, flags=Flag.RETX), 2).verdict is Verdict.FLUSH
    assert sw.slots[slot_hash(LOW, low_seq, POOL)].gone == (HIGH << 32) | high_seq
    assert sw.process(contrib(LOW, low_seq, 1), 3).verdict is Verdict.CLAIM


def test_atp_marks_a_chunk_that_falls_back_from_its_held_slot() -> None:
    """S2: a copy of a chunk that ATP holds complete goes to the PS, and
    marks the slot: once the PS's result has released it, a later copy
    follows to the PS rather than claiming the slot as a partial no one
    will complete."""
    sw = switch(Policy.ATP)
    sw.process(contrib(LOW, 7, 0), 0)
    sw.process(contrib(LOW, 7, 1), 1)
    assert sw.process(contrib(LOW, 7, 0), 2).verdict is Verdict.FALLBACK
    ps = Packet(PacketType.PS_RESULT, LOW, 7, 0b11, vals(0), count=2)
    assert sw.process(ps, 3, in_port=PS_PORT).verdict is Verdict.PS_RELEASE
    assert sw.process(contrib(LOW, 7, 0), 4).verdict is Verdict.FALLBACK
    assert sw.slots[slot_hash(LOW, 7, POOL)].owner == 0
    assert sw.events(LOW)[Event.FOLLOWED] == 1


SHARDED = 3
SHARD_PORTS = (20, 21, 22, 23)


def sharded(policy: Policy = Policy.ESA) -> SwitchModel:
    """``switch`` and job SHARDED (priority 3) with four PS hosts."""
    sw = switch(policy)
    sw.add_job(SHARDED, JobConfig(2, 0b11, 3, ps_ports=SHARD_PORTS))
    return sw


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from((PS_PORT, *SHARD_PORTS)))
def test_ps_result_and_pull_only_from_the_ps_of_the_chunks_shard(seq: int, port: int) -> None:
    sw = sharded()
    ps = Packet(PacketType.PS_RESULT, SHARDED, seq, 0b11, vals(0), count=2)
    pull = Packet(PacketType.PULL, SHARDED, seq, 0, vals(0))
    mine = port == SHARD_PORTS[seq % 4]
    for pkt in (ps, pull):
        res = sw.process(pkt, 0, in_port=port)
        assert res.drop is (None if mine else Drop.BAD_TYPE)
        assert [o.to for o in res.outputs] == ([Out.WORKERS] if mine else [])
    assert sw.drops[Drop.BAD_TYPE] == (0 if mine else 2)
    assert sw.events(SHARDED)[Event.PS_RESULT] == int(mine)


def test_an_evicted_partial_is_addressed_by_its_own_chunk() -> None:
    """Out.PS goes to the PS of the packet's chunk: the evicted chunk's job
    and seq, whatever the chunk that evicted it."""
    sw = sharded()
    seq, high = next(
        (s, t)
        for s in range(1, 1000)
        for t in range(1000)
        if s % 4 == 3
        and slot_hash(SHARDED, s, POOL) == slot_hash(HIGH, t, POOL)
        and one_slot(HIGH, t)
    )
    sw.process(contrib(SHARDED, seq, 0, 5), 0)
    (out,) = sw.process(contrib(HIGH, high, 0), 1).outputs
    assert (out.to, out.packet.job, out.packet.seq) == (Out.PS, SHARDED, seq)
    assert sw.jobs[SHARDED].ps_port(out.packet.seq) == SHARD_PORTS[3]


def test_a_chunk_without_a_route_is_dropped_whether_to_its_ps_or_to_all() -> None:
    """The switch finds the PS, and the group of a result to all, in the
    ``ps_route`` entry of the chunk's shard."""
    sw = sharded()
    sw.ps_routes.discard(route_key(SHARDED, 1))
    sw.process(contrib(SHARDED, 1, 0), 0)
    res = sw.process(contrib(SHARDED, 1, 1), 1)
    assert (res.verdict, res.outputs) == (Verdict.COMPLETE, ())
    fl = Packet(PacketType.FLOAT, SHARDED, 9, 1, vals(0))
    assert sw.process(fl, 2).outputs == ()
    assert sw.drops[Drop.NO_PS_ROUTE] == 2
    sw.process(contrib(SHARDED, 2, 0), 3)
    assert [o.to for o in sw.process(contrib(SHARDED, 2, 1), 4).outputs] == [Out.ALL]


def test_routes_follow_the_job() -> None:
    sw = sharded()
    keys = {route_key(SHARDED, low) for low in range(MAX_PS_SHARDS)}
    assert keys <= sw.ps_routes
    sw.remove_job(SHARDED)
    assert not keys & sw.ps_routes and route_key(LOW, 0) in sw.ps_routes
    assert route_key(SHARDED, 2**32 - 1) == (SHARDED, MAX_PS_SHARDS - 1)


@pytest.mark.parametrize("ports", [(), (1, 2, 3), (1, 2, 3, 4, 5, 6)])
def test_a_job_has_1_2_4_or_8_ps_hosts(ports: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match=rf"^{len(ports)} PS ports: a job has 1, 2, 4 or 8"):
        JobConfig(2, 0b11, 1, ps_ports=ports)


@pytest.mark.parametrize(
    ("job", "seq", "pool", "h", "h2"),
    [
        (1, 0, 1024, 19, 162),  # CRC 0x8ca28813: 0x8ca2 mod 1024
        (2, 7, 16, 0, 6),  # CRC 0x55666760: 0x5566 mod 16
        (3, 2**32 - 1, 8, 0, 1),  # CRC 0x28d9fb90: 0x28d9 mod 8
    ],
)
def test_the_second_hash_is_the_crcs_high_half_modulo_the_pool(
    job: int, seq: int, pool: int, h: int, h2: int
) -> None:
    assert (slot_hash(job, seq, pool), second_hash(job, seq, pool)) == (h, h2)
    assert second_hash(job, seq, pool) == (chunk_crc(job, seq) >> 16) % pool


def two_slots(job: int) -> tuple[int, int, int]:
    """The first seq of ``job`` with two slots, and its slots h and h'."""
    seq = next(s for s in range(1000) if not one_slot(job, s))
    return seq, slot_hash(job, seq, POOL), second_hash(job, seq, POOL)


def seq_in(job: int, idx: int) -> int:
    """A seq of ``job`` of one slot, ``idx``."""
    return next(s for s in range(10**5) if slot_hash(job, s, POOL) == idx and one_slot(job, s))


def test_a_chunk_without_a_home_claims_its_second_hash_when_its_first_is_held() -> None:
    """HIGH's chunk finds h held by LOW (lower priority) and h' free: it
    claims h' (free before preempting), adds there, and its PS result
    releases h'."""
    sw = switch()
    seq, h, h2 = two_slots(HIGH)
    low = seq_in(LOW, h)
    sw.process(contrib(LOW, low, 0), 0)
    res = sw.process(contrib(HIGH, seq, 0, 3), 1)
    assert (res.verdict, res.outputs) == (Verdict.CLAIM, ())
    assert (sw.slots[h].owner, sw.slots[h2].owner) == (owner_key(LOW, low), owner_key(HIGH, seq))
    assert sw.process(contrib(HIGH, seq, 1, 4), 2).verdict is Verdict.COMPLETE
    sw.process(contrib(HIGH, seq, 0, 3), 3)
    ps = Packet(PacketType.PS_RESULT, HIGH, seq, 0b11, vals(0), count=2)
    assert sw.process(ps, 4, in_port=PS_PORT).verdict is Verdict.PS_RELEASE
    assert (sw.slots[h].owner, sw.slots[h2].owner) == (owner_key(LOW, low), 0)


def test_a_chunk_without_a_home_preempts_at_its_second_hash_and_follows_its_marker() -> None:
    """Both slots held: HIGH's chunk preempts LOW's at h' (h holds HIGH's
    own); LOW's chunk, marked at h', follows its partial."""
    sw = switch()
    seq, h, h2 = two_slots(HIGH)
    mine, low = seq_in(HIGH, h), seq_in(LOW, h2)
    sw.process(contrib(HIGH, mine, 0), 0)
    sw.process(contrib(LOW, low, 0, 5), 0)
    res = sw.process(contrib(HIGH, seq, 0), 1)
    assert res.verdict is Verdict.PREEMPT
    assert [(o.to, o.packet.ptype, o.packet.job, o.packet.seq) for o in res.outputs] == [
        (Out.PS, PacketType.PARTIAL, LOW, low)
    ]
    assert (sw.slots[h2].gone, sw.slots[h2].evicted) == (0, owner_key(LOW, low))
    assert sw.process(contrib(HIGH, seq, 1), 2).verdict is Verdict.COMPLETE
    res = sw.process(contrib(LOW, low, 1), 3)
    assert res.verdict is Verdict.FALLBACK
    assert sw.events(LOW)[Event.FOLLOWED] == 1


def test_a_preempted_chunk_follows_after_the_preempting_job_marks_its_slot() -> None:
    """S11's victim is marked in the victims' marker, which the preempting
    job's own markings never replace: HIGH's chunk preempts LOW's at h' and
    completes; a retransmission of HIGH's chunk of slot h' falls back
    there (S8), marking h''s marker; LOW's chunk, its one slot h' free
    again, follows its partial instead of claiming a partial that could
    never complete."""
    sw = switch()
    seq, h, h2 = two_slots(HIGH)
    mine, low = seq_in(HIGH, h), seq_in(LOW, h2)
    sw.process(contrib(HIGH, mine, 0), 0)
    sw.process(contrib(LOW, low, 0, 5), 0)
    assert sw.process(contrib(HIGH, seq, 0), 1).verdict is Verdict.PREEMPT
    assert sw.process(contrib(HIGH, seq, 1), 2).verdict is Verdict.COMPLETE
    other = seq_in(HIGH, h2)
    assert sw.process(contrib(HIGH, other, 0, flags=Flag.RETX), 3).verdict is Verdict.FALLBACK
    slot = sw.slots[h2]
    assert (slot.owner, slot.gone, slot.evicted) == (0, owner_key(HIGH, other), owner_key(LOW, low))
    res = sw.process(contrib(LOW, low, 1, 6), 4)
    assert [(o.to, o.packet.ptype, o.packet.job, o.packet.seq) for o in res.outputs] == [
        (Out.PS, PacketType.FALLBACK, LOW, low)
    ]
    assert sw.slots[h2].owner == 0
    assert sw.events(LOW)[Event.FOLLOWED] == 1
