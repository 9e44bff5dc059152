"""The fluid model agrees with the packet model (sim.calibrate's scenarios)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from esa.job import JobSpec
from sim import calibrate, fluid
from sim.params import Net, Scheme
from sim.scenario import mean_jct, run_scenario
from sim.workload import WorkloadSpec, compute_times, ideal_iteration_s, make_jobs

TOLERANCE = 0.15
"""Stated calibration tolerance on the time beyond compute (docs/simulator.md,
"Calibration"); the error on the whole JCT is far smaller."""
ATP_OPTIMISM = 0.25
"""In a pool smaller than its windows the fluid model can understate ATP's
collapse by up to this much: it errs in the baseline's favour."""


def test_the_millisecond_case_has_millisecond_skew() -> None:
    case = calibrate.MS_SKEW
    spread = [np.ptp(compute_times(j, 0), axis=1).max() for j in case.jobs]
    assert max(spread) > 1e-3
    assert case.net.window_for(Scheme.ESA) * len(case.jobs) > 256
    assert all(j.chunks > 5 * case.net.window_for(Scheme.ATP) for j in case.jobs)


@pytest.mark.parametrize("barrier", [False, True])
@pytest.mark.parametrize(
    "scheme", [Scheme.ATP, Scheme.STATIC_FB, Scheme.ESA_EQUAL, Scheme.ESA_SRPT]
)
def test_fluid_matches_packet_at_millisecond_skew(scheme: Scheme, barrier: bool) -> None:
    exact, coarse = calibrate.compare(calibrate.MS_SKEW, 256, scheme, barrier)
    low = ATP_OPTIMISM if scheme is Scheme.ATP else TOLERANCE
    assert -low <= coarse / exact - 1 <= TOLERANCE


@pytest.mark.parametrize("scheme", [Scheme.STATIC_BDP, Scheme.ESA])
def test_fluid_matches_packet_at_microsecond_skew(scheme: Scheme) -> None:
    exact, coarse = calibrate.compare(calibrate.US_SKEW, 256, scheme, barrier=False)
    assert abs(coarse / exact - 1) <= TOLERANCE


def test_fluid_is_seeded() -> None:
    net = Net()
    jobs = make_jobs(WorkloadSpec(jobs=6, load=4.0), net, seed=5)
    runs = [fluid.simulate(jobs, 2048, Scheme.ESA_AGING, net, seed=s) for s in (5, 5, 6)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


@pytest.mark.parametrize("scheme", [Scheme.ATP, Scheme.ESA, Scheme.STATIC_BDP])
def test_fluid_shares_a_slow_switch_like_the_packet_model(scheme: Scheme) -> None:
    """With a switch slower than the links (BMv2), both models are bound by
    the one shared switch server and agree within the stated tolerance."""
    jobs = list(calibrate.US_SKEW.jobs[:3])
    net = replace(calibrate.US_SKEW.net, switch_pkt_ns=2_000.0)
    exact = mean_jct(run_scenario(jobs, 1024, scheme, net, model="packet"))
    coarse = mean_jct(run_scenario(jobs, 1024, scheme, net, model="fluid"))
    assert abs(coarse / exact - 1) <= TOLERANCE
    unbound = mean_jct(run_scenario(jobs, 1024, scheme, calibrate.US_SKEW.net, model="fluid"))
    assert coarse > 2 * unbound


def test_a_job_alone_takes_compute_plus_line_rate_streams() -> None:
    """Nothing to share: every scheme gives the uncontended iteration time."""
    net = Net(barrier=True)
    job = JobSpec(1, 4, 32 * 100_000, 3, compute_s=0.01)
    ideal = job.iterations * ideal_iteration_s(job, net)
    for scheme in Scheme:
        jct = fluid.simulate([job], 4096, scheme, net)[1]
        assert ideal < jct < ideal * 1.01


@pytest.mark.parametrize("pool", [256, 1024])
@pytest.mark.parametrize("scheme", [Scheme.ESA_EQUAL, Scheme.ESA_SRPT])
def test_fluid_matches_packet_with_lagging_links(scheme: Scheme, pool: int) -> None:
    """The regime where the packet model once had ESA losing: since the
    data plane's S8 marker, and with the fluid model charging the chunks
    whose marker another overwrote, the two agree within the tolerance."""
    exact, coarse = calibrate.compare(calibrate.LAG, pool, scheme, barrier=True)
    assert abs(coarse / exact - 1) <= TOLERANCE
