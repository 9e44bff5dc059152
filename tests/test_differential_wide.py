"""Differential test on jobs of three and four workers (``WIDE_JOBS``): a
contribution, a retransmission too (rule S7 under ESA and STATIC), can add
itself to a partial that stays incomplete, a path two-worker jobs never
take.  BMv2 and esa.model see the same packets; every output frame and
every counter must be the same."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from controller.world.topology import Host
from esa import wire
from esa.model import Packet, Result, slot_hash
from esa.spec import Event, Policy, Verdict
from esa.wire import Flag, PacketType
from tests.dataplane import POOL, QUAD_HIGH, TRIO_LOW, WIDE_JOBS, Rig

pytestmark = pytest.mark.bmv2

BASES = {5: 2**32 - 5, 6: 0, 7: 1000}
"""Each job's first seq: job 5's wrap around 2^32 within the trace."""


def stream(seed: int, n: int, window: int = 3) -> list[tuple[Packet, Host]]:
    """The wide jobs streaming chunks over lossy, duplicating, reordering
    links: each worker sends its chunks in order, at most ``window`` ahead
    of its job's slowest worker; a contribution is lost (never sent), or
    arrives late and out of order, or twice; a worker retransmits (RETX) a
    recent chunk it sent, most often one of the oldest it has not seen
    answered (lost or late), so resends often meet a partial still waiting
    for other workers; now and then the PS answers a chunk."""
    rng = random.Random(seed)
    jobs = list(WIDE_JOBS.values())
    nxt = {(j.job, w): 0 for j in jobs for w in range(len(j.workers))}
    late: list[tuple[Packet, Host]] = []
    sent: list[tuple[int, int, int]] = []
    missing: list[tuple[int, int, int]] = []
    out: list[tuple[Packet, Host]] = []

    def contrib(job: int, i: int, w: int, flags: int = 0) -> tuple[Packet, Host]:
        seq = (BASES[job] + i) % 2**32
        values = tuple(rng.randrange(-(2**20), 2**20) for _ in range(wire.K))
        return Packet(PacketType.CONTRIB, job, seq, 1 << w, values, flags, 1), WIDE_JOBS[
            job
        ].workers[w]

    while len(out) < n:
        roll = rng.random()
        if roll < 0.15 and late:
            out.append(late.pop(rng.randrange(len(late))))
        elif roll < 0.3 and missing and rng.random() < 0.8:
            job, i, w = missing.pop(rng.randrange(min(3, len(missing))))
            out.append(contrib(job, i, w, Flag.RETX))
        elif roll < 0.3 and sent:
            job, i, w = rng.choice(sent[-12:])
            out.append(contrib(job, i, w, Flag.RETX))
        elif roll < 0.33:
            plan = rng.choice(jobs)
            seq = (BASES[plan.job] + rng.randrange(max(1, nxt[(plan.job, 0)]))) % 2**32
            fan_in = len(plan.workers)
            ps = Packet(
                PacketType.PS_RESULT, plan.job, seq, (1 << fan_in) - 1, (0,) * wire.K, count=fan_in
            )
            out.append((ps, plan.ps_for(seq)))
        else:
            plan = rng.choice(jobs)
            w = rng.randrange(len(plan.workers))
            i = nxt[(plan.job, w)]
            if i - min(nxt[(plan.job, v)] for v in range(len(plan.workers))) >= window:
                continue
            nxt[(plan.job, w)] = i + 1
            sent.append((plan.job, i, w))
            fate = rng.random()
            if fate < 0.3:
                missing.append((plan.job, i, w))
            if fate < 0.15:
                continue  # lost
            pkt = contrib(plan.job, i, w)
            if fate < 0.3:
                late.append(pkt)
            else:
                out.append(pkt)
                if fate > 0.9:
                    late.append(pkt)  # duplicated
    return out


INTO_SLOTS = (Verdict.CLAIM, Verdict.RECLAIM, Verdict.PREEMPT, Verdict.ADD, Verdict.COMPLETE)
"""The verdicts that count ``Event.AGGREGATED``: a contribution went into a slot."""


def retx_added(results: list[tuple[Packet, Result]]) -> list[int]:
    """Where a retransmission added itself to a partial it left incomplete (S7)."""
    return [
        i
        for i, (pkt, res) in enumerate(results)
        if pkt.flags & Flag.RETX and res.verdict is Verdict.ADD
    ]


def fate(results: list[tuple[Packet, Result]], i: int) -> Verdict | None:
    """What ended the partial packet ``i`` added to: the verdict of the
    first later packet that completed it, sent it to the PS (a flush, a
    preemption, a reclaim) or released it (a PS result); None if it was
    still in its slot when the trace ended."""
    chunk = (results[i][0].job, results[i][0].seq)
    for pkt, res in results[i + 1 :]:
        mine = (pkt.job, pkt.seq) == chunk
        if mine and res.verdict in (Verdict.COMPLETE, Verdict.FLUSH, Verdict.PS_RELEASE):
            return res.verdict
        if any(
            (o.packet.job, o.packet.seq) == chunk and o.packet.ptype is PacketType.PARTIAL
            for o in res.outputs
        ):
            return res.verdict
    return None


def followed(results: list[tuple[Packet, Result]], i: int) -> bool:
    """Whether a later contribution of the chunk packet ``i`` added to fell back."""
    chunk = (results[i][0].job, results[i][0].seq)
    return any(
        (pkt.job, pkt.seq) == chunk and res.verdict is Verdict.FALLBACK
        for pkt, res in results[i + 1 :]
    )


@pytest.mark.parametrize(
    ("policy", "parts", "fates"),
    [
        (Policy.ESA, None, {Verdict.COMPLETE, Verdict.FLUSH}),
        (Policy.ESA, (5, 6, 7), {Verdict.COMPLETE, Verdict.FLUSH}),
        (Policy.STATIC, None, {Verdict.COMPLETE, Verdict.PS_RELEASE}),
    ],
)
def test_resends_add_to_incomplete_partials_alike(
    wide_rig: Rig, policy: Policy, parts: tuple[int, ...] | None, fates: set[Verdict]
) -> None:
    """ESA (hashed, and with partitions) and STATIC: retransmissions add
    themselves to partials that stay incomplete, which later complete, are
    flushed (a duplicate resend, S3) or released (a PS result), and whose
    chunks' later contributions fall back; the switch does frame for frame what the model does."""
    wide_rig.reset(policy, parts=parts)
    got = wide_rig.run(stream(seed=30 + int(policy) + len(parts or ()), n=600))
    assert len(got) > 100
    added = retx_added(wide_rig.results)
    ends = Counter(fate(wide_rig.results, i) for i in added)
    assert len(added) >= 10
    assert fates <= set(ends)
    assert any(followed(wide_rig.results, i) for i in added)
    into_slots = sum(res.verdict in INTO_SLOTS for _, res in wide_rig.results)
    assert sum(wide_rig.model.events(j)[Event.AGGREGATED] for j in WIDE_JOBS) == into_slots


def test_atp_resends_flush_incomplete_partials(wide_rig: Rig) -> None:
    """ATP: a retransmission new to an incomplete partial flushes it, with
    itself, to the PS (S6) and never adds itself; the switch agrees.  The
    flushes beyond those of duplicate resends (S3, which count DUPLICATE
    too) are S6's."""
    wide_rig.reset(Policy.ATP)
    got = wide_rig.run(stream(seed=30 + int(Policy.ATP), n=600))
    assert len(got) > 100
    assert retx_added(wide_rig.results) == []
    verdicts = Counter(res.verdict for _, res in wide_rig.results)
    duplicates = sum(wide_rig.model.events(j)[Event.DUPLICATE] for j in WIDE_JOBS)
    flushed = sum(wide_rig.model.events(j)[Event.FLUSHED] for j in WIDE_JOBS)
    assert flushed == verdicts[Verdict.FLUSH]
    s3 = duplicates - verdicts[Verdict.DUPLICATE]
    assert flushed - s3 >= 5


def colliding(seq: int) -> int:
    """A seq of job 6 whose hashed slot is job 5's chunk ``seq``'s."""
    want = slot_hash(TRIO_LOW.job, seq, POOL)
    return next(t for t in range(1000) if slot_hash(QUAD_HIGH.job, t, POOL) == want)


def c(job: int, seq: int, w: int, flags: int = 0) -> tuple[Packet, Host]:
    pkt = Packet(PacketType.CONTRIB, job, seq, 1 << w, (seq + w,) * wire.K, flags, 1)
    return pkt, WIDE_JOBS[job].workers[w]


SCRIPT = [
    c(5, 0, 0),
    c(5, 0, 1, Flag.RETX),
    c(5, 0, 2),
    c(5, 1, 0),
    c(5, 1, 2, Flag.RETX),
    c(6, colliding(1), 0),
    c(5, 1, 1),
    c(6, colliding(1), 3, Flag.RETX),
    c(6, colliding(1), 3, Flag.RETX),
]
"""Job 5's chunk 0: a resend adds itself, the third worker completes it;
its chunk 1: a resend adds itself, job 6 (higher priority) preempts the
partial, the last worker follows it to the PS; job 6's resend adds itself
to its new partial, and the same resend again flushes it (S3)."""


CLAIM, ADD, DONE, PREEMPT = Verdict.CLAIM, Verdict.ADD, Verdict.COMPLETE, Verdict.PREEMPT
FLUSH, FALL = Verdict.FLUSH, Verdict.FALLBACK
SCRIPTED = {
    Policy.ESA: [CLAIM, ADD, DONE, CLAIM, ADD, PREEMPT, FALL, ADD, FLUSH],
    Policy.STATIC: [CLAIM, ADD, DONE, CLAIM, ADD, CLAIM, DONE, ADD, FLUSH],
    Policy.ATP: [CLAIM, FLUSH, FALL, CLAIM, FLUSH, CLAIM, FALL, FLUSH, FALL],
}
"""What ``SCRIPT`` meets: under STATIC job 6 has a partition of its own, so
nothing is preempted and job 5's chunk 1 completes; under ATP each resend
new to a partial flushes it (S6) and the chunk's later contributions follow."""
AGGREGATED = {Policy.ESA: (5, 2), Policy.STATIC: (6, 2), Policy.ATP: (2, 1)}
"""``Event.AGGREGATED`` of jobs 5 and 6 after ``SCRIPT``: the claims, the
adds (S7: the resends' too, but under ATP) and the completions."""


@pytest.mark.parametrize("policy", list(SCRIPTED))
def test_an_added_resend_completes_is_preempted_and_followed(wide_rig: Rig, policy: Policy) -> None:
    """``SCRIPT`` frame by frame on the switch and the model, each packet
    meeting the rule ``SCRIPTED`` names."""
    wide_rig.reset(policy)
    wide_rig.run(SCRIPT)
    assert [res.verdict for _, res in wide_rig.results] == SCRIPTED[policy]
    assert tuple(wide_rig.model.events(j)[Event.AGGREGATED] for j in (5, 6)) == AGGREGATED[policy]
