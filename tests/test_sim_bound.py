"""The bound under a point's pool (sim.bound): never above any scheme's
mean JCT, never below ``ideal``'s."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, reject, settings
from hypothesis import strategies as st

from esa.job import JobSpec
from esa.schemes import SIM_SCHEMES, Scheme
from sim import bound, fluid
from sim.entry import mean_jct, run_scenario
from sim.params import Net
from sim.rates import NotConverged
from sim.workload import WorkloadSpec, make_jobs

ROUNDING = 1e-9
"""Where the bound is a job's own time alone (nothing to share) it is the
same sum as the fluid model's, in another order."""


def fluid_mean(jobs: list[JobSpec], pool: int, scheme: Scheme, net: Net) -> float:
    return float(np.mean(list(fluid.simulate(jobs, pool, scheme, net).values())))


def fluid_mean_or_reject(jobs: list[JobSpec], pool: int, scheme: Scheme, net: Net) -> float:
    """``fluid_mean``; a case whose rate solve does not converge is no case
    for the bound (one job of 2 workers in a home of 64 slots, no barrier,
    2 us of lag and no spread is one: ``sim.rates``' step in
    ``modulo_blocked`` without spread)."""
    try:
        return fluid_mean(jobs, pool, scheme, net)
    except NotConverged:
        reject()


@st.composite
def workloads(draw: st.DrawFn) -> tuple[list[JobSpec], int, Net]:
    """A few jobs of 2-8 workers, 2,000-8,000 chunks and 1-3 iterations
    arriving within 2 ms, 1-256 slots, 1 or 2 PS hosts; with or without the
    barrier, link lag, spread, the squat timeout and ESA's homes.

    Each stream is longer than any scheme's window (at most 1,340 chunks
    here), as every workload's is (hundreds of thousands): the fluid model
    ends a window-bound stream one window's send time after its rate says
    it is sent, so over a shorter stream a small window would beat
    ``ideal``'s, and the bound, which takes the least over every window,
    would be below ``ideal``."""
    n = draw(st.integers(1, 4))
    arrivals = sorted(draw(st.lists(st.floats(0.0, 2e-3), min_size=n, max_size=n)))
    jobs = [
        JobSpec(
            i + 1,
            draw(st.sampled_from((2, 4, 8))),
            32 * draw(st.integers(2000, 8000)),
            draw(st.integers(1, 3)),
            priority=draw(st.integers(1, 255)),
            arrival_s=arrival,
            compute_s=draw(st.floats(1e-4, 2e-3)),
        )
        for i, arrival in enumerate(arrivals)
    ]
    pool = draw(st.sampled_from((1, 4, 16, 64, 256)))
    net = Net(
        barrier=draw(st.booleans()),
        ps_shards=draw(st.sampled_from((1, 2))),
        lag_ns=draw(st.sampled_from((0.0, 2000.0))),
        jitter_ns=draw(st.sampled_from((0.0, 1000.0, 5000.0))),
        squat_us=draw(st.sampled_from((None, 0))),
    )
    if draw(st.booleans()):
        net = replace(net, esa_homes=True, esa_home_size=min(pool, net.line_hold))
    return jobs, pool, net


@settings(max_examples=40, deadline=None)
@given(case=workloads())
def test_no_scheme_beats_the_bound_and_the_bound_never_beats_ideal(
    case: tuple[list[JobSpec], int, Net],
) -> None:
    jobs, pool, net = case
    floor = bound.mean_jct(jobs, pool, net)
    for scheme in SIM_SCHEMES:
        jct = fluid_mean_or_reject(jobs, pool, scheme, net)
        if scheme is Scheme.IDEAL:
            assert floor >= jct * (1 - ROUNDING)
        else:
            assert floor <= jct * (1 + ROUNDING), scheme


@settings(max_examples=20, deadline=None)
@given(case=workloads())
def test_more_memory_never_raises_the_bound(case: tuple[list[JobSpec], int, Net]) -> None:
    jobs, _, net = case
    floors = [bound.mean_jct(jobs, pool, net) for pool in (1, 16, 256, 4096)]
    assert all(b <= a * (1 + ROUNDING) for a, b in itertools.pairwise(floors))


def test_a_short_pool_lifts_the_bound_above_ideal_and_a_long_one_does_not() -> None:
    """Six jobs of the communication-heavy mix, one PS host each: 16 slots
    let a job stream at a fraction of the line rate and the jobs share them,
    so the bound is well above ``ideal``, and every scheme above the bound;
    with 4,096 slots the bound is ``ideal``."""
    net = Net(barrier=True, ps_shards=1)
    jobs = make_jobs(WorkloadSpec(mix="comm-heavy", jobs=6, load=8.0, burst=3), net, 1)
    jobs = [replace(j, iterations=min(j.iterations, 4)) for j in jobs]
    ideal = fluid_mean(jobs, 16, Scheme.IDEAL, net)
    short = bound.mean_jct(jobs, 16, net)
    alone = float(np.mean([bound.needs(j, net, 16, 0).alone for j in jobs]))
    assert short > 2 * ideal
    assert short > 1.1 * alone  # the jobs share the pool: more than each alone with it
    assert all(short <= fluid_mean(jobs, 16, s, net) for s in SIM_SCHEMES if s is not Scheme.IDEAL)
    assert bound.mean_jct(jobs, 4096, net) == pytest.approx(ideal, rel=ROUNDING)


@settings(max_examples=40, deadline=None)
@given(
    chunks=st.floats(1.0, 1e6),
    least=st.floats(1.0, 200.0),
    lat0=st.floats(100.0, 20_000.0),
    window=st.integers(1, 2000),
)
def test_an_iteration_takes_the_least_over_every_window(
    chunks: float, least: float, lat0: float, window: int
) -> None:
    """``iteration_ns`` is the least, over every window, of streaming at the
    slower of the rate and the window and then waiting for the last chunk."""
    tx = 1.0
    least = max(least, tx)
    w = np.arange(1, window + 1, dtype=float)
    every = chunks * np.maximum(least, lat0 / w) + np.minimum(lat0, w * tx)
    assert bound.iteration_ns(chunks, least, lat0, tx, window) <= every.min() * (1 + ROUNDING)


PACKET_JOBS = [
    JobSpec(1, 4, 32 * 1000, 2, compute_s=5e-6),
    JobSpec(2, 8, 32 * 800, 2, arrival_s=5e-6, compute_s=5e-6),
    JobSpec(3, 2, 32 * 1200, 2, arrival_s=1e-5, compute_s=5e-6),
]
"""Three small jobs whose streams overlap: in 16 slots with spread the
bound is 5 % above the jobs' mean time alone with the pool."""


@pytest.mark.parametrize(
    ("pool", "jitter_ns", "scheme"),
    [(16, 1000.0, Scheme.ESA_AGING), (64, 0.0, Scheme.ESA_AGING), (64, 0.0, Scheme.ATP)],
    ids=["16-slots-spread-esa", "64-slots-in-step-esa", "64-slots-in-step-atp"],
)
def test_no_scheme_beats_the_bound_on_real_packets(
    pool: int, jitter_ns: float, scheme: Scheme
) -> None:
    """The packet model, where the pool is short and the bound above the
    jobs alone, and in step (no spread: the bound each job's time alone,
    and no draw of the spread can make a run luckier than its
    expectation).  The packet model answers a stream's last chunk one
    packet time sooner than the fluid model's latency counts it, whose
    physics the bound takes: that much per iteration is allowed."""
    net = Net(barrier=True, ps_shards=1, jitter_ns=jitter_ns)
    floor = bound.mean_jct(PACKET_JOBS, pool, net)
    alone = float(np.mean([bound.needs(j, net, pool, 0).alone for j in PACKET_JOBS]))
    assert floor > 1.05 * alone if jitter_ns else floor == alone
    jct = mean_jct(run_scenario(PACKET_JOBS, pool, scheme, net, model="packet"))
    per_iteration = max(j.iterations for j in PACKET_JOBS) * net.pkt_ns * 1e-9
    assert floor <= (jct + per_iteration) * (1 + ROUNDING)
