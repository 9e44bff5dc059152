"""The multi-rack packet model: a chain of switch models, ToRs under a spine (sim.tiers)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esa import wire
from esa.job import JobSpec
from esa.model import Packet
from esa.schemes import Scheme
from esa.spec import Event, Verdict
from sim import tier_report
from sim.control import FabricPartitions, Partitions
from sim.packet import PacketSim
from sim.params import Net
from sim.racks import RackJob, Racks, place
from sim.tiers import TierSim, TierSwitch

NET = Net(hop_ns=500, ps_shards=2, barrier=True, jitter_ns=0.0, rto_ns=0.0)
"""Mechanisms in isolation: no spread of a chunk's contributions, no retransmission timer."""
FABRIC = Racks(racks=3, hosts_per_rack=4, oversubscription=2.0)


def spec(
    job: int, workers: int, chunks: int, priority: int = 100, arrival_s: float = 0.0
) -> JobSpec:
    return JobSpec(job, workers, 32 * chunks, 2, priority, arrival_s, compute_s=20e-6, jitter=0.01)


CROSS = [
    RackJob(spec(1, 4, 300, 10), (0, 0, 1, 1)),
    RackJob(spec(2, 6, 200, 200, 5e-6), (1, 1, 1, 2, 2, 2)),
    RackJob(spec(3, 3, 400, 120, 10e-6), (2, 0, 0)),
]
"""Three jobs across racks; job 3 has a lone worker in rack 2."""


def run(
    jobs: list[RackJob], pool: int, scheme: Scheme, fabric: Racks = FABRIC, net: Net = NET
) -> TierSim:
    sim = TierSim(jobs, pool, scheme, net, fabric)
    sim.run()
    return sim


def completions(sim: TierSim, rj: RackJob) -> int:
    """Chunks completed by the job's top switch, and at its PS."""
    jid = rj.spec.job
    top = sim.spine if sim.paths[jid].via_spine else sim.tors[rj.ps_rack]
    return top.model.events(jid)[Event.COMPLETED] + sim.ps_completed[jid]


def assert_every_chunk_completed_once(sim: TierSim, jobs: list[RackJob]) -> None:
    for rj in jobs:
        assert completions(sim, rj) == rj.spec.chunks * rj.spec.iterations


def test_a_job_inside_one_rack_is_its_tors_alone_as_on_one_switch() -> None:
    """Its ToR is ``sim.packet``'s one switch: the same JCT to the last
    nanosecond, nothing crosses an uplink, the spine sees nothing."""
    job = spec(1, 4, 500)
    for scheme in (Scheme.ESA, Scheme.ATP, Scheme.STATIC_BDP):
        sim = TierSim([RackJob(job, (1, 1, 1, 1))], 256, scheme, NET, FABRIC)
        assert sim.run() == PacketSim([job], 256, scheme, NET).run()
        assert sim.uplink_packets() == (0, 0)
        assert not sim.spine.verdicts
        assert sim.tors[1].model.events(1)[Event.COMPLETED] == 1000


def test_a_job_without_a_partition_keeps_its_paths_ps_window() -> None:
    """A job whose every chunk goes to its PS keeps twice its workers'
    share of its own path's window (``Net.static_window``, ``ps_window``),
    as on one switch: in one rack the same JCT as ``sim.packet``'s; across
    racks the share of the longer path's window."""
    net = replace(NET, ps_shards=1)
    job = spec(1, 4, 500)
    alone = TierSim([RackJob(job, (1, 1, 1, 1))], 256, Scheme.PS_ONLY, net, FABRIC)
    assert alone.run() == PacketSim([job], 256, Scheme.PS_ONLY, net).run()
    cross = TierSim([RackJob(job, (0, 0, 1, 1))], 256, Scheme.PS_ONLY, net, FABRIC)
    cross.run()
    whole = cross.paths[1].window(Scheme.ATP)
    assert whole > net.window_for(Scheme.ATP)
    assert cross.jobs[1].window == net.ps_window(4, whole) == 2 * -(-whole // 4)


def test_two_tiers_send_one_partial_per_rack_up_and_one_result_per_rack_down() -> None:
    """No contention: each aggregating ToR completes its rack's sum of every
    chunk, a lone worker's contribution goes up as its rack's, the spine
    completes every chunk; up the uplinks goes one packet per rack and chunk,
    down one per rack and chunk plus the PS's copy (ESA).  Without ToR
    aggregation every contribution crosses its uplink."""
    sim = run(CROSS, 4096, Scheme.ESA)
    chunks = {rj.spec.job: rj.spec.chunks * rj.spec.iterations for rj in CROSS}
    up = sum(chunks[rj.spec.job] * len(rj.used) for rj in CROSS)
    assert sim.uplink_packets() == (up, up + sum(chunks.values()))
    for rj in CROSS:
        jid = rj.spec.job
        assert sim.spine.model.events(jid)[Event.COMPLETED] == chunks[jid]
        assert sim.ps_completed[jid] == 0
        for r in rj.used:
            tor = sim.tors[r].model.events(jid)[Event.COMPLETED]
            assert tor == (chunks[jid] if rj.rack_mask(r).bit_count() > 1 else 0)
    flat = run(CROSS, 4096, Scheme.ESA, replace(FABRIC, tor_aggregation=False))
    contributions = sum(chunks[rj.spec.job] * rj.spec.workers for rj in CROSS)
    assert flat.uplink_packets()[0] == contributions
    assert all(not t.verdicts for t in flat.tors)
    assert_every_chunk_completed_once(flat, CROSS)


@pytest.mark.parametrize(
    "scheme", [Scheme.ATP, Scheme.STATIC_BDP, Scheme.STATIC_FB, Scheme.ESA, Scheme.ESA_SRPT]
)
@pytest.mark.parametrize("tor_aggregation", [True, False])
def test_every_chunk_completes_once_and_the_counters_are_the_models(
    scheme: Scheme, tor_aggregation: bool
) -> None:
    sim = run(CROSS, 64, scheme, replace(FABRIC, tor_aggregation=tor_aggregation))
    assert_every_chunk_completed_once(sim, CROSS)
    for s in [*sim.tors, sim.spine]:
        for rj in CROSS:
            ev = s.model.events(rj.spec.job)
            v = {verdict: s.verdicts[(rj.spec.job, verdict)] for verdict in Verdict}
            assert ev[Event.COMPLETED] == v[Verdict.COMPLETE]
            assert ev[Event.FALLBACK] == v[Verdict.FALLBACK]
            assert ev[Event.PREEMPT_WON] == v[Verdict.PREEMPT]
            assert ev[Event.RELEASED_BY_PS] == v[Verdict.PS_RELEASE]


def test_each_tier_takes_its_policys_paths() -> None:
    """Links that lag each other by up to a microsecond make chunks hold
    their slots at both tiers: ESA preempts at the ToRs and at the spine,
    and falls back at both; ATP's ToRs hold a rack's completed sum until the
    spine's result passes down (S12), and never preempt."""
    net = replace(NET, lag_ns=1000.0)
    esa, atp = run(CROSS, 64, Scheme.ESA, net=net), run(CROSS, 64, Scheme.ATP, net=net)

    def seen(sim: TierSim, tier: str) -> set[Verdict]:
        switches = [sim.spine] if tier == "spine" else sim.tors
        return {v for s in switches for (_, v), n in s.verdicts.items() if n}

    for tier in ("tor", "spine"):
        assert {Verdict.PREEMPT, Verdict.FALLBACK, Verdict.COMPLETE} <= seen(esa, tier)
        assert Verdict.PREEMPT not in seen(atp, tier)
    assert Verdict.PS_RELEASE in seen(atp, "tor") and Verdict.PS_RELEASE in seen(atp, "spine")
    for sim in (esa, atp):
        assert_every_chunk_completed_once(sim, CROSS)


def test_a_rack_that_fell_back_is_sent_up_by_the_ps() -> None:
    """STATIC_FB, one partition at each ToR and two at the spine: job 2
    finds none at rack 1's ToR, so its workers there send every
    contribution to the PS (rule S1), which sends the rack's sum up to the
    spine in the ToR's place; the spine adds it to rack 2's and completes."""
    jobs = [
        RackJob(spec(1, 4, 300), (0, 0, 1, 1)),
        RackJob(spec(2, 4, 300, arrival_s=1e-6), (1, 1, 2, 2)),
    ]
    big = TierSim(jobs, 1 << 12, Scheme.STATIC_FB, NET, FABRIC)
    tor, spine = big.tors[0].parts.size, big.spine.parts.size
    sim = TierSim(jobs, tor, Scheme.STATIC_FB, NET, FABRIC, spine_pool=2 * spine)
    sim.run()
    assert sim.tors[1].model.events(2)[Event.FALLBACK] > 0
    assert sim.proxied[2] > 0
    assert sim.spine.model.events(2)[Event.COMPLETED] > 0
    assert_every_chunk_completed_once(sim, jobs)


@settings(max_examples=40, deadline=None)
@given(
    spread=st.integers(1, 5),
    workers=st.lists(st.integers(1, 16), min_size=1, max_size=10),
    racks=st.integers(1, 6),
)
def test_place_spreads_each_job_evenly(spread: int, workers: list[int], racks: int) -> None:
    specs = [JobSpec(i + 1, w, 32, 1) for i, w in enumerate(workers)]
    for k, rj in enumerate(place(specs, Racks(racks=racks), spread)):
        n = min(spread, rj.spec.workers, racks)
        assert len(rj.used) == n and rj.ps_rack == k % racks == rj.racks[0]
        sizes = [rj.rack_mask(r).bit_count() for r in rj.used]
        assert max(sizes) - min(sizes) <= 1 and sum(sizes) == rj.spec.workers


@settings(max_examples=60, deadline=None)
@given(
    trace=st.lists(
        st.one_of(st.just(None), st.frozensets(st.sampled_from("abc"), min_size=1)),
        min_size=1,
        max_size=30,
    )
)
def test_static_bdp_admits_across_the_fabric_first_come_first_served(
    trace: list[frozenset[str] | None],
) -> None:
    """A job arrives (the switches it uses) or the oldest running one ends
    (None).  A job runs only with a partition at every switch it uses, jobs
    start in arrival order, and the first waiting job does not fit."""
    pools = {"a": 2, "b": 1, "c": 3}
    switches = {s: Partitions(Scheme.STATIC_BDP, n, 1) for s, n in pools.items()}
    uses: dict[int, tuple[str, ...]] = {}
    parts = FabricPartitions(Scheme.STATIC_BDP, switches, uses)
    started: list[int] = []
    for step in trace:
        if step is None:
            if parts.running:
                started += parts.release(parts.running[0])
        else:
            jid = len(uses) + 1
            uses[jid] = tuple(sorted(step))
            if parts.request(jid):
                started.append(jid)
        assert started == sorted(started)
        for s, p in switches.items():
            layout = p.layout()
            assert {j for j in parts.running if s in uses[j]} == set(layout)
            assert all(size == 1 for _, size in layout.values())
            assert len({base for base, _ in layout.values()}) == len(layout) <= pools[s]
        if parts.waiting:
            head = parts.waiting[0]
            assert not all(switches[s].free for s in uses[head])


def test_the_uplink_is_oversubscribed() -> None:
    assert FABRIC.uplink_ns(NET) == pytest.approx(NET.pkt_ns / 2)
    assert Racks(hosts_per_rack=8, oversubscription=1.0).uplink_ns(NET) == NET.pkt_ns / 8


def test_the_tier_report_compares_each_setting_and_the_uplinks() -> None:
    """Scheme ``k`` of the report (ATP first, ESA-equal fourth) takes
    ``k + 1`` x 100 us on one switch, twice that on the spine alone, 1.5x
    with two tiers; the uplinks carry 300/200 and 100/150 packets."""
    rows = [
        tier_report.Row(s, t, 2 * t, 1.5 * t, (300, 200), (100, 150))
        for s, t in zip(tier_report.SCHEMES, [1e-4 * (k + 1) for k in range(7)], strict=True)
    ]
    lines = tier_report.table(rows)
    first = ["atp", "100", "200", "150", "300", "/", "200", "100", "/", "150", "3.00"]
    assert lines[2].split() == first
    assert lines[-3:] == [
        f"{label}: best baseline (atp) / best ESA (esa-equal) 0.250"
        for label in ("one switch", "spine only", "two tiers")
    ]


def renumbered(jobs: list[RackJob], ids: tuple[int, ...]) -> list[RackJob]:
    """``jobs`` under the numbers ``ids``, without compute jitter (its draw
    follows the job's number)."""
    return [
        replace(rj, spec=replace(rj.spec, job=jid, jitter=0.0))
        for rj, jid in zip(jobs, ids, strict=True)
    ]


class WatchedTiers(TierSim):
    """The fabric model, noting every job id its switch models are given."""

    seen: set[int]

    def _process(self, s: TierSwitch, pkt: Packet, in_port: int) -> None:
        self.seen.add(pkt.job)
        self.seen.update(s.model.jobs)
        super()._process(s, pkt, in_port)


@pytest.mark.parametrize("scheme", [Scheme.ESA, Scheme.ATP, Scheme.STATIC_BDP])
def test_the_fabric_model_runs_any_job_number_on_a_leased_wire_id(scheme: Scheme) -> None:
    """Jobs numbered far above the wire's 255 run as the same jobs numbered
    1, 2, 3: the same JCTs, counters and uplink packets, and the switches
    see only the wire ids 1..3."""
    small, big = renumbered(CROSS, (1, 2, 3)), renumbered(CROSS, (1000, 5000, 70_000))
    a = TierSim(small, 256, scheme, NET, FABRIC)
    before = a.run()
    b = WatchedTiers(big, 256, scheme, NET, FABRIC)
    b.seen = set()
    jct = b.run()
    assert jct == {1000: before[1], 5000: before[2], 70_000: before[3]}
    assert b.seen == {1, 2, 3}
    assert b.uplink_packets() == a.uplink_packets()
    assert {j: b.jobs[j].wire for j in jct} == {1000: 1, 5000: 2, 70_000: 3}
    new = dict(zip((1, 2, 3), (1000, 5000, 70_000), strict=True))
    for sa, sb in zip([*a.tors, a.spine], [*b.tors, b.spine], strict=True):
        assert sb.verdicts == Counter({(new[j], v): n for (j, v), n in sa.verdicts.items()})
    assert b.proxied == Counter({new[j]: n for j, n in a.proxied.items()})


def test_fabric_jobs_beyond_the_wire_ids_wait_for_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """With two wire ids, three jobs arriving together: the third waits for
    the first id freed and takes it (a run that strands a job raises
    ``Deadlock``)."""
    monkeypatch.setattr(wire, "MAX_JOB_ID", 2)
    together = [replace(rj, spec=replace(rj.spec, arrival_s=0.0)) for rj in CROSS]
    sim = WatchedTiers(renumbered(together, (300, 400, 500)), 256, Scheme.ESA, NET, FABRIC)
    sim.seen = set()
    assert set(sim.run()) == {300, 400, 500}
    assert sim.seen == {1, 2}
    assert [sim.jobs[j].admitted_at for j in (300, 400)] == [0.0, 0.0]
    first = min((300, 400), key=lambda j: sim.jobs[j].finish or 0.0)
    assert sim.jobs[500].admitted_at == sim.jobs[first].finish
    assert sim.jobs[500].admitted_at > 0
    assert sim.jobs[500].wire == sim.jobs[first].wire


def test_more_fabric_jobs_at_once_than_wire_ids_wait_first_come_first_served() -> None:
    """300 jobs across two racks arrive together: 255 run at once on the
    ids 1..255, the other 45 wait and start in arrival order as ids free."""
    jobs = [RackJob(spec(1000 + i, 2, 4, arrival_s=0.0), (0, 1)) for i in range(300)]
    sim = TierSim(jobs, 256, Scheme.ESA, NET, FABRIC)
    assert len(sim.run()) == 300
    runs = [sim.jobs[rj.spec.job] for rj in jobs]
    assert all(j.admitted_at == 0.0 for j in runs[:255])
    assert sorted(j.wire for j in runs[:255]) == list(range(1, 256))
    late = [j.admitted_at for j in runs[255:]]
    assert all(t > 0 for t in late) and late == sorted(late)
    assert {j.wire for j in runs} == set(range(1, 256))


def test_the_fabric_leases_one_wire_id_before_any_partition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """STATIC_BDP with two wire ids and one partition per switch: the second
    job holds an id and waits for a partition, the third waits for an id;
    each starts as the one before it ends."""
    monkeypatch.setattr(wire, "MAX_JOB_ID", 2)
    switches = {s: Partitions(Scheme.STATIC_BDP, 1, 1) for s in "ab"}
    uses = {500: ("a",), 600: ("a", "b"), 700: ("b",)}
    parts = FabricPartitions(Scheme.STATIC_BDP, switches, uses)
    assert [parts.request(j) for j in (500, 600, 700)] == [True, False, False]
    assert list(parts.waiting) == [600] and list(parts.leases.waiting) == [700]
    assert parts.release(500) == [600]
    assert parts.wire(700) == 1 and list(parts.waiting) == [700]
    assert parts.release(600) == [700]
    assert parts.running == [700] and parts.wire(700) == 1
