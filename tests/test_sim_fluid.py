"""The fluid model agrees with the packet model on small scenarios."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim import fluid
from sim.params import JobSpec, Net, Scheme
from sim.scenario import mean_jct, run_scenario
from sim.sweep import QUICK, run_point
from sim.workload import WorkloadSpec, make_jobs

TOLERANCE = 0.12
"""Stated calibration tolerance on mean JCT (docs/simulator.md, "Calibration")."""

NET = Net(hop_ns=500, window=128)
JOBS = [
    JobSpec(1, 4, 32 * 1000, 2, priority=10, arrival_s=0.0, compute_s=20e-6),
    JobSpec(2, 4, 32 * 600, 2, priority=200, arrival_s=5e-6, compute_s=20e-6),
    JobSpec(3, 2, 32 * 1500, 2, priority=100, arrival_s=10e-6, compute_s=20e-6),
]


@pytest.mark.parametrize("pool", [256, 1024])
@pytest.mark.parametrize("scheme", list(Scheme))
def test_fluid_matches_packet(scheme: Scheme, pool: int) -> None:
    exact = mean_jct(run_scenario(JOBS, pool, scheme, NET, model="packet"))
    coarse = mean_jct(run_scenario(JOBS, pool, scheme.value, NET, model="fluid"))
    assert abs(coarse / exact - 1) <= TOLERANCE


def test_fluid_is_seeded() -> None:
    net = Net()
    jobs = make_jobs(WorkloadSpec(jobs=6, load=4.0), net, seed=5)
    runs = [fluid.simulate(jobs, 2048, Scheme.ESA_AGING, net, seed=s) for s in (5, 5, 6)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_sweep_point_rows() -> None:
    pt = QUICK.points()[0]
    rows = run_point((pt, 4, Net()))
    assert len(rows) == 4 * len(Scheme)
    assert all(float(str(r["jct_s"])) > 0 for r in rows)


@pytest.mark.parametrize("scheme", [Scheme.ATP, Scheme.ESA, Scheme.STATIC])
def test_fluid_shares_a_slow_switch_like_the_packet_model(scheme: Scheme) -> None:
    """With a switch slower than the links (BMv2), both models are bound by
    the one shared switch server and agree within the stated tolerance."""
    net = replace(NET, switch_pkt_ns=2_000.0)
    exact = mean_jct(run_scenario(JOBS, 1024, scheme, net, model="packet"))
    coarse = mean_jct(run_scenario(JOBS, 1024, scheme, net, model="fluid"))
    assert abs(coarse / exact - 1) <= TOLERANCE
    unbound = mean_jct(run_scenario(JOBS, 1024, scheme, NET, model="fluid"))
    assert coarse > 2 * unbound
