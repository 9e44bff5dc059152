"""The simulator applies the controller's priority rules (controller.priority)."""

from __future__ import annotations

from dataclasses import replace

from controller.priority import srpt_priority
from esa.model import JobConfig
from esa.spec import MAX_PRIORITY
from sim import fluid
from sim.packet import PacketSim
from sim.params import JobSpec, Net, Scheme
from sim.priority import priority

NET = Net(hop_ns=500, window=64)
SMALL = JobSpec(1, 2, 32 * 100, 2, priority=5)
LARGE = JobSpec(2, 2, 32 * 10_000, 2, priority=250)


def test_srpt_prefers_the_smaller_job() -> None:
    small = priority(Scheme.ESA_SRPT, SMALL, NET, 0, 0.0)
    large = priority(Scheme.ESA_SRPT, LARGE, NET, 0, 0.0)
    assert small > large
    assert priority(Scheme.ESA, SMALL, NET, 0, 0.0) == 5


def test_srpt_is_the_controllers_rule_on_the_declared_bytes() -> None:
    assert priority(Scheme.ESA_SRPT, LARGE, NET, 0, 0.0) == srpt_priority(4 * 32 * 10_000 * 2)
    after_one = priority(Scheme.ESA_SRPT, LARGE, NET, 1, 0.0)
    assert after_one == srpt_priority(4 * 32 * 10_000) > priority(Scheme.ESA_SRPT, LARGE, NET, 0, 0)
    # without progress reports only the size hint given at admission counts
    hint_only = replace(NET, report_progress=False)
    assert priority(Scheme.ESA_SRPT, LARGE, hint_only, 1, 0.0) == priority(
        Scheme.ESA_SRPT, LARGE, NET, 0, 0.0
    )


def test_aging_grows_with_time_since_admission_until_the_maximum() -> None:
    net = replace(NET, aging_period_s=2.0)
    ages = [0.0, 1.9, 2.0, 4.0, 10.0, 1e4]
    prios = [priority(Scheme.ESA_AGING, LARGE, net, 0, a) for a in ages]
    base = priority(Scheme.ESA_SRPT, LARGE, net, 0, 0.0)
    assert prios[:2] == [base, base]
    assert prios[1] < prios[2] < prios[3] < prios[4]
    assert prios[4] == base + 5
    assert prios[-1] == MAX_PRIORITY
    # SRPT alone does not age
    assert priority(Scheme.ESA_SRPT, LARGE, net, 0, 1e4) == base


def test_no_job_starves_under_aging() -> None:
    """A large job among a stream of small ones, a pool smaller than the
    windows: under aging the controller raises the large job's priority in
    the switch's job table while it waits (beyond what SRPT alone gives it),
    and every job finishes."""
    net = replace(NET, aging_period_s=2e-6, tick_s=1e-6)
    jobs = [JobSpec(1, 4, 32 * 3000, 3, arrival_s=0.0, compute_s=5e-6)] + [
        JobSpec(i, 4, 32 * 200, 2, arrival_s=4e-6 * i, compute_s=5e-6) for i in range(2, 8)
    ]
    sim = PacketSim(jobs, 64, Scheme.ESA_AGING, net)
    seen: list[int] = []
    add_job = sim.switch.add_job

    def spy(job: int, cfg: JobConfig) -> None:
        if job == 1:
            seen.append(cfg.priority)
        add_job(job, cfg)

    sim.switch.add_job = spy  # type: ignore[method-assign]
    jct = sim.run()
    assert all(t > 0 for t in jct.values())
    srpt_only = {priority(Scheme.ESA_SRPT, jobs[0], net, i, 0.0) for i in range(3)}
    assert max(seen) > max(srpt_only)
    small = priority(Scheme.ESA_SRPT, jobs[1], net, 0, 0.0)
    assert max(seen) > small, "aging lifts the large job above the small ones"
    coarse = fluid.simulate(jobs, 64, Scheme.ESA_AGING, net)
    assert all(t > 0 for t in coarse.values())
