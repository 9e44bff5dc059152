"""The packet-level simulator: its switch is esa.model, its hosts follow Net."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest

from bench.sim_loss import shrink
from controller.world.partition import partition
from esa.job import JobSpec, ps_shard
from esa.schemes import Scheme
from esa.spec import GONE_SPAN, Event, Verdict
from sim import calibrate
from sim.hostsim import Deadlock
from sim.hoststate import SimplexLink
from sim.packet import SUMMED, PacketSim
from sim.params import Net
from sim.sweep import REGIMES

NET = Net(hop_ns=500, window=64, jitter_ns=0.0, rto_ns=0.0)
"""Mechanisms in isolation: no spread of a chunk's contributions, no retransmission timer."""
JOBS = [
    JobSpec(1, 4, 32 * 600, 2, priority=10, arrival_s=0.0, compute_s=20e-6, jitter=0.01),
    JobSpec(2, 3, 32 * 400, 2, priority=200, arrival_s=5e-6, compute_s=20e-6, jitter=0.01),
    JobSpec(3, 2, 32 * 800, 2, priority=100, arrival_s=10e-6, compute_s=20e-6, jitter=0.01),
]


def run(scheme: Scheme, pool: int = 64, net: Net = NET, jobs: list[JobSpec] = JOBS) -> PacketSim:
    sim = PacketSim(jobs, pool, scheme, net)
    sim.run()
    return sim


def assert_every_chunk_completed_once(sim: PacketSim) -> None:
    for job in sim.jobs.values():
        ev = sim.switch.events(job.spec.job)
        total = job.spec.chunks * job.spec.iterations
        assert ev[Event.COMPLETED] + sim.ps_completed[job.spec.job] == total


@pytest.mark.parametrize("scheme", [Scheme.ATP, Scheme.ESA, Scheme.ESA_SRPT])
def test_switch_counters_are_the_models(scheme: Scheme) -> None:
    sim = run(scheme)
    for spec in JOBS:
        ev = sim.switch.events(spec.job)
        v = {verdict: sim.verdicts[(spec.job, verdict)] for verdict in Verdict}
        assert ev[Event.COMPLETED] == v[Verdict.COMPLETE]
        assert ev[Event.FALLBACK] == v[Verdict.FALLBACK]
        assert ev[Event.PREEMPT_WON] == v[Verdict.PREEMPT]
        assert ev[Event.RELEASED_BY_PS] == v[Verdict.PS_RELEASE]
        assert ev[Event.FLUSHED] == v[Verdict.FLUSH]
    assert_every_chunk_completed_once(sim)


def test_a_job_that_takes_over_a_wire_id_starts_past_its_predecessors_markers() -> None:
    """The second job leases the first one's wire id once it finished: its
    seqs start ``GONE_SPAN`` past the first one's last, so the markers the
    first left in the slots (S13) cover none of its chunks, as with the
    hosts' random epoch offsets, and it runs as fast (from seq 0 it would
    follow those markers to the PS with nearly every chunk)."""
    jobs = [
        JobSpec(1, 4, 32 * 500, 2, priority=10, arrival_s=0.0, compute_s=20e-6, jitter=0.01),
        JobSpec(2, 4, 32 * 500, 2, priority=10, arrival_s=2e-3, compute_s=20e-6, jitter=0.01),
    ]
    sim = PacketSim(jobs, 16, Scheme.ESA_EQUAL, replace(NET, jitter_ns=1000.0))
    jct = sim.run()
    first, second = sim.jobs[1], sim.jobs[2]
    assert first.wire == second.wire == 1 and first.finish is not None
    assert second.admitted_at > first.finish
    chunks = 500 * 2  # per job, over its iterations: each base is now past them
    assert second.workers[0].base - chunks == first.workers[0].base + GONE_SPAN
    assert sim.ps_completed[1] > 0
    assert sim.ps_completed[2] <= 1.1 * sim.ps_completed[1]
    assert jct[2] <= 1.05 * jct[1]


def test_contention_exercises_every_path() -> None:
    """ESA's chunks have two slots each (h and h'): in 64 slots these jobs
    nearly never find both held, so ESA runs them in 16, where it preempts."""
    esa, atp = run(Scheme.ESA_SRPT, pool=16), run(Scheme.ATP)
    esa_v = {v for (_, v), n in esa.verdicts.items() if n}
    atp_v = {v for (_, v), n in atp.verdicts.items() if n}
    assert {Verdict.PREEMPT, Verdict.FALLBACK, Verdict.COMPLETE} <= esa_v
    assert {Verdict.PS_RELEASE, Verdict.FALLBACK, Verdict.COMPLETE} <= atp_v
    assert Verdict.PREEMPT not in atp_v


def test_equal_priorities_never_preempt() -> None:
    sim = run(Scheme.ESA_EQUAL)
    assert {cfg.priority for cfg in sim.switch.jobs.values()} <= {128}
    assert sum(n for (_, v), n in sim.verdicts.items() if v is Verdict.PREEMPT) == 0
    assert sum(n for (_, v), n in sim.verdicts.items() if v is Verdict.FALLBACK) > 0
    assert_every_chunk_completed_once(sim)


def test_windows_are_each_schemes_bandwidth_delay_product() -> None:
    """The round trip of the slowest path a scheme's chunks take, with the
    latest of a job of 8 workers' contributions once they spread (1 + 1/2 +
    ... + 1/8 of the mean spread): ATP's through the PS; ESA's through the
    PS too with the barrier (where a chunk that fell back goes), through the
    switch alone without it (where early workers park their window);
    STATIC's through the switch."""
    net = Net(jitter_ns=0.0)
    assert net.bdp_window(Scheme.STATIC_BDP) == 139
    assert net.window_for(Scheme.ESA) == net.bdp_window(Scheme.ESA) == 139
    assert net.window_for(Scheme.ATP) == net.bdp_window(Scheme.ATP) == 279
    assert replace(net, barrier=True).bdp_window(Scheme.ESA) == 279
    assert net.bdp_window(Scheme.IDEAL) == 279
    spread = Net()
    extra = 1000.0 * sum(1 / k for k in range(1, 9))
    assert spread.bdp_window(Scheme.ESA) == math.ceil((net.rtt_ns(Scheme.ESA) + extra) / net.pkt_ns)
    in_step = replace(spread, barrier=True).bdp_window(Scheme.ESA_EQUAL)
    assert in_step == math.ceil((net.rtt_ns(Scheme.ATP) + extra) / net.pkt_ns)
    for scheme in (Scheme.ESA, Scheme.ATP):
        sim = PacketSim(JOBS, 4096, scheme, net)
        assert {j.window for j in sim.jobs.values()} == {net.window_for(scheme)}
    assert replace(net, window=512).window_for(Scheme.ATP) == 512


def test_static_bdp_partitions_never_collide_and_a_job_waits_for_one() -> None:
    """One BDP partition in the pool: the jobs run one after the other."""
    net = replace(NET, window=0)
    assert 128 // net.bdp_partition(128) == 1
    sim = run(Scheme.STATIC_BDP, pool=128, net=net)
    assert all(n == 0 for (_, v), n in sim.verdicts.items() if v is Verdict.FALLBACK)
    assert sum(sim.ps_completed.values()) == 0
    spans = sorted((j.admitted_at, j.finish or 0.0) for j in sim.jobs.values())
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))


def test_static_fb_streams_through_the_ps_until_a_partition_frees() -> None:
    net = replace(NET, window=0)
    sim = run(Scheme.STATIC_FB, pool=128, net=net)
    fell_back = {j for (j, v), n in sim.verdicts.items() if v is Verdict.FALLBACK and n}
    assert fell_back and 1 not in fell_back, "the first job has a partition from the start"
    assert all(sim.ps_completed[j] > 0 for j in fell_back)
    assert_every_chunk_completed_once(sim)
    admitted = sorted(j.admitted_at for j in sim.jobs.values())
    assert admitted == sorted(j.arrival_s * 1e9 for j in JOBS), "nobody waits to start"


def test_static_equal_is_the_controllers_split() -> None:
    """At every admission and removal the job table holds
    ``controller.world.partition`` of the running jobs."""
    sim = PacketSim(JOBS, 300, Scheme.STATIC_EQUAL, replace(NET, rto_ns=50_000.0))
    write = sim._write_jobs
    layouts = []

    def spy() -> None:
        write()
        running = list(sim.parts.running)
        table = {j: (sim.switch.jobs[j].part_base, sim.switch.jobs[j].part_size) for j in running}
        assert table == partition(300, running)
        layouts.append(table)

    sim._write_jobs = spy  # type: ignore[method-assign]
    sim.run()
    assert {1, 2, 3} <= {len(t) for t in layouts}
    assert_every_chunk_completed_once(sim)


def test_a_recut_strands_chunks_without_a_timer() -> None:
    """The controller's recut moves a running job's partition: its chunks
    whose contributions straddle the recut (the workers' links lag each
    other) never complete unless a retransmission timer recovers them."""
    jobs = [replace(j, arrival_s=0.0, compute_s=0.0) for j in JOBS[:2]]
    jobs.append(JobSpec(3, 2, 32 * 50, 1, arrival_s=2e-6))
    net = replace(NET, lag_ns=1000.0)
    with pytest.raises(Deadlock):
        run(Scheme.STATIC_EQUAL, pool=256, jobs=jobs, net=net)
    assert_every_chunk_completed_once(
        run(Scheme.STATIC_EQUAL, pool=256, jobs=jobs, net=replace(net, rto_ns=50_000.0))
    )


def test_seeded_runs_are_identical() -> None:
    a, b, c = (PacketSim(JOBS, 64, Scheme.ESA_AGING, NET, s).run() for s in (3, 3, 4))
    assert a == b
    assert c != a


def test_large_pool_has_no_contention() -> None:
    for scheme in (Scheme.ATP, Scheme.ESA):
        sim = run(scheme, pool=4096)
        assert all(n == 0 for (_, v), n in sim.verdicts.items() if v is Verdict.FALLBACK)


@pytest.mark.parametrize("scheme", [Scheme.ESA, Scheme.ATP, Scheme.STATIC_BDP])
@pytest.mark.parametrize("shards", [1, 2, 4])
def test_the_ps_is_sharded_by_seq_and_pays_for_every_result(scheme: Scheme, shards: int) -> None:
    """No contention: every chunk completes in the switch and its result
    reaches its PS shard (ESA and STATIC: a copy; ATP: the held result the
    PS answers), which spends its service time on it."""
    net = replace(NET, ps_shards=shards)
    sim = run(scheme, pool=4096, net=net)
    for job in sim.jobs.values():
        assert len(job.shards) == shards
        served = [ps.served for ps in job.shards]
        total = job.spec.chunks * job.spec.iterations
        assert sum(served) == total
        assert max(served) - min(served) <= job.spec.iterations
        for i, ps in enumerate(job.shards):
            assert ps.done and all(ps_shard(seq, shards) == i for seq in ps.done)


def test_squat_timeout_and_barrier_reach_the_switch_and_the_hosts() -> None:
    """Millisecond skew: without a barrier the early workers park their
    windows and ESA's squat timeout hands idle slots to other chunks; with
    it nothing parks, nothing is reclaimed, and every chunk completes."""
    case = calibrate.MS_SKEW
    jobs = list(case.jobs)
    idle = {}
    for barrier in (False, True):
        sim = PacketSim(jobs, 128, Scheme.ESA_EQUAL, replace(case.net, barrier=barrier))
        assert sim.switch.squat_us == case.net.squat_us_for(Scheme.ESA_EQUAL) > 0
        sim.run()
        idle[barrier] = sum(sim.switch.events(j.job)[Event.IDLE_RECLAIMED] for j in jobs)
        assert_every_chunk_completed_once(sim)
    assert idle[False] > 0 and idle[True] == 0
    assert PacketSim(jobs, 128, Scheme.ATP, case.net).switch.squat_us == 0


def test_an_evicted_chunk_completes_at_the_ps_without_a_timer() -> None:
    """A low-priority job's early workers park their windows; a
    higher-priority job streams through them and evicts the parked partials.
    The evicted chunks' later contributions follow them to the PS (the data
    plane's tombstone), so every chunk completes although the PS would pull
    only after a second and no worker retransmits.  (The pool is large
    enough that the parked window does not collide with itself: a chunk
    whose first contribution falls back still waits for the PS's pull.)"""
    net = replace(NET, window=0, ps_stall_ns=1e9, squat_us=0)
    jobs = [
        JobSpec(1, 4, 32 * 500, 1, priority=10, compute_s=100e-6, jitter=0.25),
        JobSpec(2, 2, 32 * 3000, 1, priority=200, arrival_s=75e-6, compute_s=1e-6),
    ]
    sim = PacketSim(jobs, 4096, Scheme.ESA, net)
    jct = sim.run()
    ev = sim.switch.events(1)
    assert ev[Event.PREEMPT_SUFFERED] > 0 and ev[Event.FOLLOWED] > 0
    assert max(jct.values()) < 1e-3
    assert_every_chunk_completed_once(sim)


def test_the_switch_is_one_shared_fifo_server() -> None:
    """A switch-bound run lasts (packets through the switch) x service time,
    whichever job sent them: the server is shared by every port."""
    service = 10_000.0
    net = replace(NET, switch_pkt_ns=service)
    jobs = [JobSpec(1, 2, 32 * 200, 2), JobSpec(2, 2, 32 * 100, 2)]
    sim = PacketSim(jobs, 4096, Scheme.ESA, net)
    jct = sim.run()
    packets = sum(sim.verdicts.values())
    assert packets == 2 * (200 + 100) * 2
    assert max(jct.values()) == pytest.approx(packets * service * 1e-9, rel=0.02)
    alone = PacketSim(jobs[1:], 4096, Scheme.ESA, net).run()[2]
    assert jct[2] > 1.5 * alone, "job 2 waits behind job 1's packets"
    fast = PacketSim(jobs, 4096, Scheme.ESA, NET).run()
    assert max(fast.values()) < 0.1 * max(jct.values())


def test_a_summed_packet_takes_the_sum_service_time() -> None:
    """With a summed packet three times as dear as a forwarded one, a run
    whose every packet is summed lasts three times as long."""
    jobs = [JobSpec(1, 2, 32 * 200, 2), JobSpec(2, 2, 32 * 100, 2)]
    net = replace(NET, switch_pkt_ns=10_000.0, switch_sum_ns=30_000.0)
    sim = PacketSim(jobs, 4096, Scheme.ESA, net)
    jct = sim.run()
    summed = sum(n for (_, verdict), n in sim.verdicts.items() if verdict in SUMMED)
    assert summed == sum(sim.verdicts.values()) == 2 * (200 + 100) * 2
    assert max(jct.values()) == pytest.approx(summed * 30_000.0 * 1e-9, rel=0.02)


def test_host_timers_recover_every_chunk() -> None:
    """With the hosts' retransmission timeout and the PS's stalled-chunk
    pull, a slow switch makes workers resend; still every chunk of every
    iteration completes exactly once."""
    net = replace(NET, switch_pkt_ns=2_000.0, rto_ns=50_000.0, ps_stall_ns=200_000.0)
    sim = run(Scheme.ESA_SRPT, net=net)
    assert sim.retransmits() > 0
    assert_every_chunk_completed_once(sim)


@pytest.mark.parametrize("scheme", [Scheme.ESA_SRPT, Scheme.ATP])
def test_a_switch_sum_after_a_resend_shows_the_timeout_spurious(scheme: Scheme) -> None:
    """A slow switch makes timeouts fire while the sums queue behind it: the
    switch's sums (ATP's through the PS, flagged HOLD) that follow a resend
    are counted as spurious, and each such sample raises the timeout above
    its floor."""
    net = replace(NET, switch_pkt_ns=2_000.0, rto_ns=50_000.0, ps_stall_ns=200_000.0)
    sim = run(scheme, net=net)
    workers = [w for job in sim.jobs.values() for w in job.workers]
    spurious = sum(w.spurious for w in workers)
    assert 0 < spurious <= sum(w.retransmits for w in workers)
    assert all(w.timeout is not None and w.timeout.value > 50_000.0 for w in workers if w.spurious)
    assert_every_chunk_completed_once(sim)


def test_ps_shards_are_a_power_of_two_as_the_switch_routes_them() -> None:
    with pytest.raises(ValueError, match="ps_shards must be 1, 2, 4 or 8"):
        Net(ps_shards=3)
    sim = PacketSim(JOBS, 64, Scheme.ESA, replace(NET, ps_shards=4))
    sim._arrive(1)
    assert sim.switch.jobs[1].ps_ports == tuple(ps.port for ps in sim.jobs[1].shards)
    assert len(set(sim.switch.jobs[1].ps_ports)) == 4


def test_a_spread_holds_slots_so_one_slot_no_longer_serves_a_rack() -> None:
    """With the contributions of a chunk in step, a slot is held for no time
    and a pool of one slot is as fast as a large one; once they spread, a
    slot is held from a chunk's first contribution to its last, and the
    small pool sends chunks to the PS."""
    jobs = [replace(j, iterations=1) for j in JOBS]
    still = replace(NET, window=0, barrier=True)
    spread = replace(still, jitter_ns=1000.0)
    one, many = (PacketSim(jobs, pool, Scheme.ESA_EQUAL, still).run() for pool in (1, 4096))
    assert one == many
    small = run(Scheme.ESA_EQUAL, pool=1, net=spread, jobs=jobs)
    large = run(Scheme.ESA_EQUAL, pool=4096, net=spread, jobs=jobs)
    assert sum(small.ps_completed.values()) > 0 == sum(large.ps_completed.values())
    assert all(small.jobs[j].finish > large.jobs[j].finish for j in small.jobs)  # type: ignore[operator]
    assert_every_chunk_completed_once(small)


def test_the_default_timeout_recovers_what_a_recut_strands() -> None:
    """The workers' retransmission timeout is on by default, so the recut
    that strands chunks without a timer ends with every chunk summed."""
    jobs = [replace(j, arrival_s=0.0, compute_s=0.0) for j in JOBS[:2]]
    jobs.append(JobSpec(3, 2, 32 * 50, 1, arrival_s=2e-6))
    net = Net(hop_ns=500, window=64, lag_ns=1000.0)
    assert net.rto_for() == 8 * net.rtt_ns(Scheme.ATP)
    assert_every_chunk_completed_once(run(Scheme.STATIC_EQUAL, pool=256, jobs=jobs, net=net))


@pytest.mark.parametrize("pool", [1, 64])
def test_the_bounds_run_in_the_packet_model(pool: int) -> None:
    """``ps-only`` sums nothing in the switch; ``ideal`` never collides."""
    ps_only = run(Scheme.PS_ONLY, pool=pool)
    assert sum(ps_only.ps_completed.values()) == sum(j.chunks * j.iterations for j in JOBS)
    ideal = run(Scheme.IDEAL, pool=pool)
    assert ideal.pool_size == 1 << 16
    assert sum(ideal.ps_completed.values()) == 0
    assert_every_chunk_completed_once(ideal)


def test_a_learnt_stall_follows_a_slow_switchs_queue() -> None:
    """Behind a switch slower than the links ATP's PS finds its chunks
    incomplete while their contributions queue: a stall of one uncontended
    round trip pulls them again and again, pulling at once pulls each once;
    the stall the PS learns (``hosts.timing.ps_stall``) waits for the queue, so it
    pulls least and finishes first."""
    jobs = list(calibrate.US_SKEW.jobs[:3])
    slow = replace(calibrate.US_SKEW.net, switch_pkt_ns=2_000.0)
    nets = {
        "once": slow,
        "round trip": replace(slow, ps_stall_ns=slow.rtt_ns(Scheme.ATP)),
        "learnt": replace(slow, ps_stall_adapts=True),
    }
    sims = {name: PacketSim(jobs, 1024, Scheme.ATP, net) for name, net in nets.items()}
    jct = {name: max(sim.run().values()) for name, sim in sims.items()}
    pulls = {
        name: sum(ps.pulls for j in s.jobs.values() for ps in j.shards) for name, s in sims.items()
    }
    assert pulls["learnt"] < pulls["once"] < pulls["round trip"]
    assert jct["learnt"] < jct["once"] < jct["round trip"]
    for sim in sims.values():
        assert_every_chunk_completed_once(sim)
    learnt = [ps.stall.value for j in sims["learnt"].jobs.values() for ps in j.shards if ps.stall]
    assert max(learnt) > 10 * nets["learnt"].rtt_ns(Scheme.ATP)


def test_a_lossy_network_needs_the_workers_timeout_and_a_rate_below_one() -> None:
    with pytest.raises(ValueError, match="retransmission timeout"):
        Net(loss=0.01, rto_ns=0.0)
    with pytest.raises(ValueError, match="loss must be"):
        Net(loss=1.0)


def test_a_lossy_link_loses_what_its_seeded_draws_say() -> None:
    rng = np.random.default_rng(7)
    link = SimplexLink(1.0, 0.0, loss=0.05, loss_rng=np.random.default_rng(7))
    lost = [link.loses() for _ in range(2000)]
    assert lost == [bool(x < 0.05) for x in rng.random(2000)]
    assert link.lost == sum(lost) > 0
    with pytest.raises(ValueError, match="random generator"):
        SimplexLink(1.0, 0.0, loss=0.05)


@pytest.mark.parametrize("scheme", [Scheme.ESA_SRPT, Scheme.ATP, Scheme.STATIC_BDP])
def test_every_job_finishes_on_lossy_links_the_same_for_the_same_seed(scheme: Scheme) -> None:
    """At 5 % loss on every host link the workers' timeouts, the PS's pulls
    and its answers to resends of finished chunks recover every chunk; the
    draws are the seed's."""
    net = replace(NET, rto_ns=50_000.0, loss=0.05, ps_stall_adapts=True)
    runs = [PacketSim(JOBS, 64, scheme, net, seed) for seed in (1, 1, 2)]
    jcts = [sim.run() for sim in runs]
    assert jcts[0] == jcts[1] != jcts[2]
    sim = runs[0]
    links = [lk for j in sim.jobs.values() for w in j.workers for lk in (w.up, w.down)]
    links += [lk for j in sim.jobs.values() for ps in j.shards for lk in (ps.up, ps.down)]
    assert sum(lk.lost for lk in links) > 0.03 * sum(lk.sent for lk in links)
    assert all(job.finish is not None for job in sim.jobs.values())


def test_a_finished_jobs_ps_pulls_nothing() -> None:
    """``bench.sim_loss``'s `overload-small-pool` at 5 % loss under
    `static-equal`: a job's PS held a leftover of a chunk the switch had
    summed for every worker, and once the job had left the switch no
    worker heard its PULLs, so it pulled for ever (until its backoff's
    ``2 ** pulls`` overflowed).  A finished job's PS pulls nothing: the run
    ends when its last job does."""
    pt = replace(next(p for p in REGIMES if p.name == "overload-small-pool"), ps_shards=1, jobs=4)
    specs = [shrink(s, 4000.0, 2) for s in pt.specs(0)]
    sim = PacketSim(specs, pt.pool, Scheme.STATIC_EQUAL, replace(pt.net(), loss=0.05))
    sim.run()
    finish = [job.finish for job in sim.jobs.values()]
    assert None not in finish
    assert sim.now <= max(f for f in finish if f is not None) + 1e6
    assert all(not ps.scans for job in sim.jobs.values() for ps in job.shards)


def test_a_job_that_sends_every_chunk_to_its_ps_queues_no_more_than_two_of_its_shares() -> None:
    """A worker whose job sends every chunk to its PS (``ps-only``, a STATIC
    job without a partition) keeps twice its share of the PS path's
    bandwidth-delay product in flight (``Net.ps_window``), not the whole
    of it: 16 workers on one PS host queued 16 x 464 packets there, past
    their timeout, and resent 10,041 of 16,000 sends, 60 % slower."""
    net = Net(ps_shards=1, barrier=True, ps_stall_adapts=True)
    whole = net.window_for(Scheme.ATP)
    assert net.ps_window(16) == 2 * math.ceil(whole / 16) < whole
    assert replace(net, ps_shards=2).ps_window(16) == 2 * math.ceil(whole * 2 / 16)
    assert net.ps_window(2) == whole
    assert replace(net, window=64).ps_window(16) == 64
    assert net.static_window(Scheme.STATIC_FB, 0, 16) == net.ps_window(16)
    sim = PacketSim([JobSpec(1, 16, 32 * 1000, 1)], 1024, Scheme.PS_ONLY, net, 0)
    sim.run()
    assert sim.retransmits() == 0
    assert sim.ps_completed[1] == 1000
    assert sim.jobs[1].window == net.ps_window(16)
