"""The controller's priority rules for ESA."""

from __future__ import annotations

from esa.spec import MAX_PRIORITY
from sim import fluid
from sim.packet import PacketSim
from sim.params import JobSpec, Net, Scheme
from sim.priority import aging_bonus, priority, srpt_priority

NET = Net(hop_ns=500, window=64)
SMALL = JobSpec(1, 2, 32 * 100, 2, priority=5)
LARGE = JobSpec(2, 2, 32 * 10_000, 2, priority=250)


def test_srpt_prefers_the_smaller_job() -> None:
    small = priority(Scheme.ESA_SRPT, SMALL, NET, 0, 0.0)
    large = priority(Scheme.ESA_SRPT, LARGE, NET, 0, 0.0)
    assert small > large
    assert priority(Scheme.ESA, SMALL, NET, 0, 0.0) == 5


def test_srpt_rises_as_a_job_progresses() -> None:
    assert priority(Scheme.ESA_SRPT, LARGE, NET, 1, 0.0) > priority(
        Scheme.ESA_SRPT, LARGE, NET, 0, 0.0
    )
    assert srpt_priority(0) == MAX_PRIORITY
    assert 1 <= srpt_priority(10**12) < MAX_PRIORITY


def test_aging_grows_with_waiting_until_the_maximum() -> None:
    ideal = LARGE.ideal_iteration_s(NET)
    waits = [ideal * k for k in (0.5, 1.0, 2.0, 4.0, 1000.0)]
    prios = [priority(Scheme.ESA_AGING, LARGE, NET, 0, w) for w in waits]
    assert prios[0] == prios[1] == priority(Scheme.ESA_SRPT, LARGE, NET, 0, 0.0)
    assert prios[1] < prios[2] < prios[3]
    assert prios[-1] == MAX_PRIORITY
    assert aging_bonus(2 * ideal, ideal) == 16


def test_no_job_starves_under_aging() -> None:
    """A large job among a stream of small ones, a pool smaller than the
    windows: under aging the controller raises the large job's priority in
    the switch's job table while it waits (beyond what SRPT alone gives it),
    and every job finishes."""
    jobs = [JobSpec(1, 4, 32 * 3000, 3, arrival_s=0.0, compute_s=5e-6)] + [
        JobSpec(i, 4, 32 * 200, 2, arrival_s=4e-6 * i, compute_s=5e-6) for i in range(2, 8)
    ]
    sim = PacketSim(jobs, 64, Scheme.ESA_AGING, NET)
    seen: list[int] = []
    add_job = sim.switch.add_job

    def spy(job: int, cfg: object) -> None:
        if job == 1:
            seen.append(cfg.priority)  # type: ignore[attr-defined]
        add_job(job, cfg)  # type: ignore[arg-type]

    sim.switch.add_job = spy  # type: ignore[method-assign]
    jct = sim.run()
    assert all(t > 0 for t in jct.values())
    srpt_only = {priority(Scheme.ESA_SRPT, jobs[0], NET, i, 0.0) for i in range(3)}
    aged = [p for p in seen if p not in srpt_only]
    assert aged and max(aged) > max(srpt_only)
    coarse = fluid.simulate(jobs, 64, Scheme.ESA_AGING, NET)
    assert all(t > 0 for t in coarse.values())
