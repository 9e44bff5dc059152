"""The packet-level simulator: its switch is esa.model, and it is deterministic."""

from __future__ import annotations

from dataclasses import replace

import pytest

from esa.spec import Event, Verdict
from sim.packet import PacketSim
from sim.params import JobSpec, Net, Scheme

NET = Net(hop_ns=500, window=64)
JOBS = [
    JobSpec(1, 4, 32 * 600, 2, priority=10, arrival_s=0.0, compute_s=20e-6),
    JobSpec(2, 3, 32 * 400, 2, priority=200, arrival_s=5e-6, compute_s=20e-6),
    JobSpec(3, 2, 32 * 800, 2, priority=100, arrival_s=10e-6, compute_s=20e-6),
]


def run(scheme: Scheme, pool: int = 64, seed: int = 0) -> PacketSim:
    sim = PacketSim(JOBS, pool, scheme, NET, seed)
    sim.run()
    return sim


@pytest.mark.parametrize("scheme", [Scheme.ATP, Scheme.ESA, Scheme.ESA_SRPT])
def test_switch_counters_are_the_models(scheme: Scheme) -> None:
    sim = run(scheme)
    for spec in JOBS:
        ev = sim.switch.events(spec.job_id)
        v = {verdict: sim.verdicts[(spec.job_id, verdict)] for verdict in Verdict}
        assert ev[Event.COMPLETED] == v[Verdict.COMPLETE]
        assert ev[Event.FALLBACK] == v[Verdict.FALLBACK]
        assert ev[Event.PREEMPT_WON] == v[Verdict.PREEMPT]
        assert ev[Event.RELEASED_BY_PS] == v[Verdict.PS_RELEASE]
        assert ev[Event.FLUSHED] == v[Verdict.FLUSH]
        # every chunk of every iteration completed exactly once: in the switch or at the PS
        total = spec.chunks * spec.iterations
        assert ev[Event.COMPLETED] + sim.ps_completed[spec.job_id] == total


def test_contention_exercises_every_path() -> None:
    esa, atp = run(Scheme.ESA_SRPT), run(Scheme.ATP)
    esa_v = {v for (_, v), n in esa.verdicts.items() if n}
    atp_v = {v for (_, v), n in atp.verdicts.items() if n}
    assert {Verdict.PREEMPT, Verdict.FALLBACK, Verdict.FLUSH, Verdict.COMPLETE} <= esa_v
    assert {Verdict.PS_RELEASE, Verdict.FALLBACK, Verdict.COMPLETE} <= atp_v
    assert Verdict.PREEMPT not in atp_v and Verdict.PS_RELEASE not in esa_v


def test_static_partitions_never_collide() -> None:
    sim = run(Scheme.STATIC, pool=256)
    assert all(n == 0 for (_, v), n in sim.verdicts.items() if v is Verdict.FALLBACK)
    assert sum(sim.ps_completed.values()) == 0


def test_seeded_runs_are_identical() -> None:
    a, b, c = (PacketSim(JOBS, 64, Scheme.ESA_AGING, NET, s).run() for s in (3, 3, 4))
    assert a == b
    assert c != a


def test_large_pool_has_no_contention() -> None:
    for scheme in (Scheme.ATP, Scheme.ESA):
        sim = run(scheme, pool=4096)
        assert all(n == 0 for (_, v), n in sim.verdicts.items() if v is Verdict.FALLBACK)


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


def test_host_timers_recover_every_chunk() -> None:
    """With the hosts' retransmission timeout and the PS's stalled-chunk
    pull, a slow switch makes workers resend; still every chunk of every
    iteration completes exactly once."""
    net = replace(NET, switch_pkt_ns=2_000.0, rto_ns=50_000.0, ps_stall_ns=200_000.0)
    sim = PacketSim(JOBS, 64, Scheme.ESA_SRPT, net)
    sim.run()
    assert sum(w.retransmits for job in sim.jobs.values() for w in job.workers) > 0
    for spec in JOBS:
        ev = sim.switch.events(spec.job_id)
        assert ev[Event.COMPLETED] + sim.ps_completed[spec.job_id] == spec.chunks * spec.iterations
