"""The fluid model agrees with the packet model (sim.calibrate's scenarios)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from esa.job import JobSpec
from esa.schemes import SIM_SCHEMES, Scheme
from sim import calibrate, fluid
from sim.curves import MAY_RISE, RISE_TOLERANCE
from sim.entry import mean_jct, run_scenario
from sim.params import Net
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
    low = TOLERANCE
    if scheme is Scheme.ATP:  # ATP's windows outgrow the pool: ATP_OPTIMISM's case
        assert net.window_for(scheme) * len(jobs) > 1024
        low = ATP_OPTIMISM
    assert -low <= coarse / exact - 1 <= TOLERANCE
    unbound = mean_jct(run_scenario(jobs, 1024, scheme, calibrate.US_SKEW.net, model="fluid"))
    assert coarse > 2 * unbound


def test_a_job_alone_takes_compute_plus_line_rate_streams() -> None:
    """Nothing to share: every scheme that aggregates in the switch gives the
    uncontended iteration time; without aggregation the PS's one link
    carries every worker's packets."""
    net = Net(barrier=True)
    job = JobSpec(1, 4, 32 * 100_000, 3, compute_s=0.01)
    ideal = job.iterations * ideal_iteration_s(job, net)
    for scheme in SIM_SCHEMES:
        jct = fluid.simulate([job], 4096, scheme, net)[1]
        if scheme is Scheme.PS_ONLY:
            through_ps = job.compute_s + job.workers * job.chunks * net.pkt_ns * 1e-9
            assert through_ps * job.iterations < jct < through_ps * job.iterations * 1.01
        else:
            assert ideal < jct < ideal * 1.01


@pytest.mark.parametrize("scheme", [Scheme.ESA, Scheme.ATP])
def test_a_window_bound_stream_ends_when_its_last_window_is_answered(scheme: Scheme) -> None:
    """A window of 8 chunks on a path whose bandwidth-delay product is far
    larger: the stream runs at 8 chunks per round trip, and its last chunk
    is answered one window's send time after the rate says it is sent, not
    a whole round trip (the packet model, chunk by chunk, agrees to 0.1 %)."""
    net = Net(barrier=True, window=8, jitter_ns=0.0)
    assert net.bdp_window(scheme) > 30 * net.window
    job = JobSpec(1, 4, 32 * 2000, 3, compute_s=1e-4)
    exact = mean_jct(run_scenario([job], 4096, scheme, net, model="packet"))
    coarse = mean_jct(run_scenario([job], 4096, scheme, net, model="fluid"))
    assert abs(coarse / exact - 1) <= 1e-3


LONE_PS_JOBS = [
    pytest.param(Scheme.ATP, 4, 2000, 0.02, id="atp-4"),
    pytest.param(Scheme.ATP, 8, 2000, 0.02, id="atp-8"),
    pytest.param(Scheme.PS_ONLY, 4, 1000, 0.03, id="ps-only-4"),
    pytest.param(Scheme.PS_ONLY, 16, 1000, 0.03, id="ps-only-16"),
]
"""scheme, workers, chunks, tolerance: a lone job on one PS host."""


@pytest.mark.parametrize(("scheme", "workers", "chunks", "tol"), LONE_PS_JOBS)
def test_a_lone_job_through_one_ps_host_is_the_packet_models(
    scheme: Scheme, workers: int, chunks: int, tol: float
) -> None:
    """ATP: its slots are held through the PS's queue, and its own chunks
    keep out what the packet model's do (``chain_blocked``); counted as
    every chunk of a hold holding its slot, the fluid model was 24 % and
    35 % slower with 4 and 8 workers (with 16 the packet model's workers
    resend behind their own PS queue, docs/sim-validation.md, "ATP's
    chains, and a window that only queues").  ``ps-only``: its workers keep
    twice their share of the PS path's window in flight
    (``Net.ps_window``), so none resends behind its own queue (with the
    path's whole window the packet model was 56 % slower at 16 workers);
    within 3 %, the fluid model's common optimism of 1-3 %."""
    net = Net(ps_shards=1, barrier=True, ps_stall_adapts=True)
    jobs = [JobSpec(1, workers, 32 * chunks, 1, compute_s=20e-6)]
    coarse = mean_jct(run_scenario(jobs, 1024, scheme, net, model="fluid"))
    exact = mean_jct(run_scenario(jobs, 1024, scheme, net, model="packet"))
    assert coarse == pytest.approx(exact, rel=tol)


def test_a_recut_delays_a_job_with_chunks_in_the_switch_not_one_computing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """STATIC_EQUAL recuts the pool when a second job arrives, moving the
    first's partition: while the first streams, its chunks straddling the
    write strand until its workers' timeout, and its iteration ends later,
    by at most that timeout; while it computes nothing of it is in the
    switch to strand."""
    net = Net(barrier=True)
    first = JobSpec(1, 8, 32 * 20_000, 1, compute_s=1e-5)

    def first_jct(arrival_s: float) -> float:
        second = JobSpec(2, 8, 32 * 20_000, 1, arrival_s=arrival_s, compute_s=1e-5)
        return fluid.simulate([first, second], 2048, Scheme.STATIC_EQUAL, net)[1]

    charged = {t: first_jct(t) for t in (5e-6, 1e-4)}
    monkeypatch.setattr(fluid.FluidSim, "_strand_at_recut", lambda self, j: None)
    free = {t: first_jct(t) for t in (5e-6, 1e-4)}
    assert charged[5e-6] == free[5e-6]
    assert 0 < charged[1e-4] - free[1e-4] <= net.rto_for() * 1e-9


POOLS = (1, 16, 256, 4096)


SEED_112 = pytest.param(112, 8, id="112-8")
"""Once 1.1 % slower for ESA-equal with 16 slots than with 1, from stranding
under a marker of one chunk per slot, while ESA's window was sized for the
switch path alone and bound as chunks fell back (docs/simulator.md; under
that window with today's marker:
``test_seed_112_under_the_switch_paths_window_stays_within_the_tolerance``)."""


@pytest.mark.parametrize(
    ("seed", "shards"),
    [pytest.param(s, n) for s in (0, 1) for n in (1, 2, 8)] + [SEED_112],
)
def test_more_memory_never_slows_a_scheme_and_one_slot_never_beats_no_aggregation(
    seed: int, shards: int
) -> None:
    """Physics: a scheme's mean JCT does not rise with the pool, but where a
    STATIC partition of a few slots is slower than none (its window is the
    partition: ``sim.curves.MAY_RISE``); with a pool of one slot no scheme
    beats ``ps-only``, and ``ideal`` is the fastest of all."""
    net = Net(barrier=True, ps_shards=shards)
    jobs = make_jobs(WorkloadSpec(mix="comm-heavy", jobs=6, load=8.0, burst=3), net, seed)
    jobs = [replace(j, iterations=min(j.iterations, 8)) for j in jobs]
    mean = {
        (scheme, pool): float(np.mean(list(fluid.simulate(jobs, pool, scheme, net, seed).values())))
        for scheme in SIM_SCHEMES
        for pool in POOLS
    }
    tol = 1 + RISE_TOLERANCE
    for scheme in SIM_SCHEMES:
        curve = [mean[(scheme, pool)] for pool in POOLS]
        if scheme not in MAY_RISE:
            assert all(b <= a * tol for a, b in itertools.pairwise(curve)), scheme
        if scheme is not Scheme.IDEAL:
            assert mean[(scheme, 1)] * tol >= mean[(Scheme.PS_ONLY, 1)], scheme
        assert all(mean[(Scheme.IDEAL, pool)] <= mean[(scheme, pool)] * tol for pool in POOLS)


def test_seed_112_under_the_switch_paths_window_stays_within_the_tolerance() -> None:
    """Seed 112's breach, where ESA's window was the switch path's: 16
    slots 1.1 % slower than 1 for ESA-equal, as the stranding term grew with
    the pool (docs/simulator.md).  The marker keeps a job's highest seq
    gone, so only the other jobs' markings strand a chunk: the curve rises
    0.6 %, within the tolerance."""
    net = Net(barrier=True, ps_shards=8)
    net = replace(net, window=replace(net, barrier=False).bdp_window(Scheme.ESA_EQUAL))
    assert net.window < Net(barrier=True).bdp_window(Scheme.ESA_EQUAL)
    jobs = make_jobs(WorkloadSpec(mix="comm-heavy", jobs=6, load=8.0, burst=3), net, 112)
    jobs = [replace(j, iterations=min(j.iterations, 8)) for j in jobs]
    curve = [
        float(np.mean(list(fluid.simulate(jobs, pool, Scheme.ESA_EQUAL, net, 112).values())))
        for pool in (1, 4, 16)
    ]
    assert all(b <= a * (1 + RISE_TOLERANCE) for a, b in itertools.pairwise(curve))
    assert curve[-1] <= curve[0] * (1 + RISE_TOLERANCE)


@pytest.mark.parametrize("scheme", [Scheme.ATP, Scheme.ESA_EQUAL, Scheme.ESA_SRPT])
def test_fluid_matches_packet_with_spread_within_its_stated_error(scheme: Scheme) -> None:
    exact, coarse = calibrate.compare(calibrate.SPREAD, 256, scheme, barrier=True)
    low = ATP_OPTIMISM if scheme is Scheme.ATP else TOLERANCE
    assert -low <= coarse / exact - 1 <= TOLERANCE


@pytest.mark.parametrize("scheme", [Scheme.ESA_EQUAL, Scheme.ESA_SRPT])
def test_fluid_lends_idle_homes_as_the_packet_model_does(scheme: Scheme) -> None:
    """Rule L on ``calibrate.LENDING`` in 256 slots (homes of 64 where a job
    holds 314 at line rate, one PS host): the packet model's switch lends a
    tenth of the chunks or more and evicts some of its guests, and the fluid
    model's time beyond compute is within the stated tolerance of it."""
    r = calibrate.lending(256, scheme)
    assert r.lent > 0.1 * r.chunks
    assert 0 < r.evicted < r.lent
    assert abs(r.coarse / r.exact - 1) <= TOLERANCE


def test_the_stall_table_shows_where_the_fluid_model_agrees_and_where_not(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``python -m sim.calibrate --stall-us``: at a PS stall of 20 us, 5 us,
    none (pulling at once) and the stall the PS learns (``learnt``), the
    fluid model is within its tolerance (+14 %, +8 %, -2 %, +9 %).  Pulling
    at once the packet model's PS pulls chunks whose contributions are on
    their way (1,252 pulls, 121 us against 113), a storm the fluid model
    leaves out; it was 5,600 pulls and 18 % beyond the fluid model before
    a victim's marker (``slot_evicted``) stopped the evicted chunks'
    later contributions from claiming slots again.  The learnt stall
    pulls less than pulling at once or after 5 us."""
    assert calibrate.main(["--stall-us", "20", "5", "0"]) == 0
    head, rule, *rows = capsys.readouterr().out.splitlines()
    assert head == "| PS stall us | packet us | fluid us | fluid's error | PS pulls |"
    assert rule == "|---|---|---|---|---|"
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    assert [c[0] for c in cells] == ["20", "5", "0", "learnt"]
    error = {c[0]: int(c[2]) / int(c[1]) - 1 for c in cells}
    pulls = {c[0]: int(c[4]) for c in cells}
    assert all(abs(e) <= TOLERANCE for e in error.values()), error
    assert pulls["learnt"] < min(pulls["5"], pulls["0"])


def brute_stranded_tail(share: float, late: float, gap: float, last: int) -> float:
    return sum(share * (1 - share) ** k * max(0.0, late - k * gap) for k in range(last))


@given(
    share=st.floats(0.0, 1.0),
    late=st.floats(-10.0, 1e4),
    gap=st.floats(0.01, 100.0),
    last=st.integers(1, 600),
)
def test_stranded_tail_is_the_expected_lateness_of_the_latest_stranded_chunk(
    share: float, late: float, gap: float, last: int
) -> None:
    got = fluid.stranded_tail(share, late, gap, last)
    want = brute_stranded_tail(share, late, gap, last)
    assert got == pytest.approx(want, rel=1e-9, abs=1e-9)
    assert 0.0 <= got <= max(late, 0.0) + 1e-9


def test_loss_slows_the_window_by_its_share_of_the_wait() -> None:
    """``fluid.lossy_rate``: a chunk that waits for a resend holds its place
    in the window ``Net.loss_wait_ns`` longer (Little's law)."""
    net = Net(loss=0.01)
    share = 1 - 0.99 ** (2 * 4)
    assert net.loss_share(4) == pytest.approx(share)
    assert net.loss_wait_ns == net.rto_for() + net.path_ns(Scheme.ATP)
    rate = fluid.lossy_rate(0.01, 100, 4, net)
    assert 1 / rate == pytest.approx(100 + share * net.loss_wait_ns / 100)
    assert fluid.lossy_rate(0.01, 100, 4, Net()) == pytest.approx(0.01)


@pytest.mark.parametrize("scheme", [Scheme.ATP, Scheme.ESA_SRPT])
def test_the_fluid_model_slows_with_loss(scheme: Scheme) -> None:
    jobs = list(calibrate.SPREAD.jobs)
    curve = [
        mean_jct(fluid.simulate(jobs, 256, scheme, replace(calibrate.SPREAD.net, loss=p)))
        for p in (0.0, 0.001, 0.01, 0.05)
    ]
    assert all(a < b for a, b in itertools.pairwise(curve))
