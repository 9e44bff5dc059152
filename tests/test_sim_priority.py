"""The simulator applies the controller's priority rules (controller.world.priority)."""

from __future__ import annotations

from dataclasses import replace

from controller.world.priority import AUTO_TOP, Admission, priorities
from esa.job import JobSpec, Priority
from esa.model import Packet, Result
from esa.schemes import Scheme
from sim import fluid
from sim.packet import PacketSim
from sim.params import Net
from sim.priority import job_priorities

NET = Net(hop_ns=500, window=64)
SMALL = JobSpec(1, 2, 32 * 100, 2, priority=5)
LARGE = JobSpec(2, 2, 32 * 10_000, 2, priority=250)
TWIN = JobSpec(3, 2, 32 * 100, 2, priority=5)


def test_srpt_ranks_smaller_first_and_twins_by_admission() -> None:
    running = [(LARGE, 0, 0.0), (TWIN, 0, 1.0), (SMALL, 0, 1.0)]
    prios = job_priorities(Scheme.ESA_SRPT, NET, running)
    assert prios == {1: AUTO_TOP, 3: AUTO_TOP - 1, 2: AUTO_TOP - 2}
    earlier_twin = job_priorities(
        Scheme.ESA_SRPT, NET, [(LARGE, 0, 0.0), (TWIN, 0, 0.5), (SMALL, 0, 1.0)]
    )
    assert earlier_twin[3] > earlier_twin[1]
    assert job_priorities(Scheme.ESA, NET, running) == {1: 5, 2: 250, 3: 5}


def test_srpt_is_the_controllers_rule_on_the_declared_bytes() -> None:
    running = [(LARGE, 1, 0.0), (SMALL, 0, 0.0)]
    declared = [
        Admission(2, Priority.auto(4 * 32 * 10_000), 0.0),
        Admission(1, Priority.auto(4 * 32 * 100 * 2), 0.0),
    ]
    assert job_priorities(Scheme.ESA_SRPT, NET, running) == priorities(declared, 0.0)
    aging = job_priorities(Scheme.ESA_AGING, NET, running)
    assert aging == priorities(declared, NET.aging_period_s)


def test_esa_runs_each_job_in_its_own_mode() -> None:
    """Under ``esa`` a static job keeps its number and a job without one
    (None) gets the controller's automatic rank, with aging, from what it
    has left; ``esa-srpt`` ranks every job automatically."""
    auto = JobSpec(5, 2, 32 * 100, 2)
    running = [(SMALL, 0, 0.0), (LARGE, 0, 0.0), (auto, 1, 0.5)]
    declared = [
        Admission(1, Priority.static(5), 0.0),
        Admission(2, Priority.static(250), 0.0),
        Admission(5, Priority.auto(4 * 32 * 100), 0.5),
    ]
    prios = job_priorities(Scheme.ESA, NET, running)
    assert prios == priorities(declared, NET.aging_period_s) == {1: 5, 2: 250, 5: AUTO_TOP}
    assert job_priorities(Scheme.ESA_SRPT, NET, running)[2] == AUTO_TOP - 2


def test_progress_reports_move_a_job_ahead() -> None:
    half = JobSpec(4, 2, 32 * 150, 2)  # 1.5x SMALL: behind it, until it has done one iteration
    assert job_priorities(Scheme.ESA_SRPT, NET, [(SMALL, 0, 0.0), (half, 0, 0.0)])[4] < AUTO_TOP
    assert job_priorities(Scheme.ESA_SRPT, NET, [(SMALL, 0, 0.0), (half, 1, 0.0)])[4] == AUTO_TOP
    # without progress reports only the size hint given at admission counts
    hint_only = replace(NET, report_progress=False)
    assert (
        job_priorities(Scheme.ESA_SRPT, hint_only, [(SMALL, 0, 0.0), (half, 1, 0.0)])[4] < AUTO_TOP
    )


def test_aging_keeps_a_late_small_job_behind_an_old_large_one() -> None:
    net = replace(NET, aging_period_s=1.0)
    bound = net.aging_period_s * (4 * 32 * 10_000 * 2).bit_length()  # > T * log2(1 + bytes)
    late = [(LARGE, 0, 0.0), (SMALL, 0, bound)]
    soon = [(LARGE, 0, 0.0), (SMALL, 0, 0.5)]
    assert job_priorities(Scheme.ESA_SRPT, net, late)[SMALL.job] == AUTO_TOP
    assert job_priorities(Scheme.ESA_AGING, net, late)[LARGE.job] == AUTO_TOP
    assert job_priorities(Scheme.ESA_AGING, net, soon)[SMALL.job] == AUTO_TOP


def run_spied(scheme: Scheme, jobs: list[JobSpec], net: Net) -> tuple[dict[int, float], set[bool]]:
    """Run the packet simulator; at every packet the switch processes, check
    that no two running jobs share a priority, and record whether job 1 was
    ahead of job 7 while both ran."""
    sim = PacketSim(jobs, 64, scheme, net)
    table = sim.switch.jobs
    process = sim.switch.process
    first: set[bool] = set()

    def spy(pkt: Packet, now_us: int, in_port: int = 0) -> Result:
        prios = [cfg.priority for cfg in table.values()]
        assert len(set(prios)) == len(prios), prios
        if 1 in table and 7 in table:
            first.add(table[1].priority > table[7].priority)
        return process(pkt, now_us, in_port)

    sim.switch.process = spy  # type: ignore[method-assign]
    return sim.run(), first


def test_no_ties_in_the_switch_and_no_starvation_under_aging() -> None:
    """A large job among a stream of small ones, a pool smaller than the
    windows.  The switch's job table never holds two jobs on one level.
    SRPT puts the last small job ahead of the large one; under aging it
    arrives too late for that (after ``T * log2(1 + bytes)`` of the large
    job), and every job finishes."""
    net = replace(NET, aging_period_s=2e-6)
    jobs = [JobSpec(1, 4, 32 * 3000, 3, arrival_s=0.0, compute_s=5e-6, jitter=0.01)] + [
        JobSpec(i, 4, 32 * 200, 2, arrival_s=4e-6 * i, compute_s=5e-6, jitter=0.01)
        for i in range(2, 8)
    ]
    jct, srpt_first = run_spied(Scheme.ESA_SRPT, jobs, net)
    assert all(t > 0 for t in jct.values())
    assert srpt_first == {False}
    jct, aging_first = run_spied(Scheme.ESA_AGING, jobs, net)
    assert all(t > 0 for t in jct.values())
    assert aging_first == {True}
    coarse = fluid.simulate(jobs, 64, Scheme.ESA_AGING, net)
    assert all(t > 0 for t in coarse.values())
