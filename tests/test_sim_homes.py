"""ESA's homes in the packet model (``Net.esa_homes``, ``sim.homes``)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esa.schemes import Scheme
from runner import scenario as scn
from sim import fluid, homes, packet
from sim.calibrate import SPREAD
from sim.control import Partitions
from sim.headroom import placement_loss, spread_holds
from sim.params import spread_max_ns, spread_range_ns
from sim.placement import modulo_blocked
from sim.rates import (
    CONVERGED,
    Flow,
    Lending,
    SolveConstants,
    lend_offers,
    lent_share,
    solve,
)
from sim.sweep import REGIMES
from sim.workload import beyond_compute, lags
from tests.test_sim_fluid import TOLERANCE


def test_esa_homes_go_to_the_highest_priority_jobs_first() -> None:
    parts = Partitions(Scheme.ESA, 2, 1, homes=True)
    for job in (1, 2, 3):
        parts.request(job)
    assert parts.layout({1: 20, 2: 100, 3: 200}) == {1: (0, 0), 2: (0, 1), 3: (1, 1)}
    assert Partitions(Scheme.ESA, 2, 1).layout() == {}
    hashed = Partitions(Scheme.ESA, 2, 1)
    hashed.request(1)
    assert hashed.layout({1: 5}) == {1: (0, 0)}
    static = Partitions(Scheme.STATIC_EQUAL, 2, 1, homes=True)
    for job in (1, 2, 3):
        static.request(job)
    assert static.layout({1: 20, 2: 100, 3: 200}) == {1: (0, 1), 2: (1, 1), 3: (0, 0)}


def test_homes_go_to_the_top_ranks_down_to_three_quarters_the_least_home() -> None:
    """``Net.esa_home_size``: a least home of 6 in a 10-slot pool has room
    for two homes of 3/4 of that or more, so the two highest ranks split
    the pool and the third hashes; an outranked holder loses its home; with
    a least home of 4 all three have one, the slot left over to the top
    rank."""
    parts = Partitions(Scheme.ESA, 10, 1, homes=True, home_size=6)
    for job in (1, 2, 3):
        parts.request(job)
    assert parts.layout({1: 20, 2: 100, 3: 200}) == {3: (5, 5), 2: (0, 5), 1: (0, 0)}
    assert parts.layout({1: 150, 2: 100, 3: 200}) == {3: (5, 5), 1: (0, 5), 2: (0, 0)}
    parts.release(3)
    assert parts.layout({1: 150, 2: 100}) == {1: (0, 5), 2: (5, 5)}
    roomy = Partitions(Scheme.ESA, 10, 1, homes=True, home_size=4)
    for job in (1, 2, 3):
        roomy.request(job)
    assert roomy.layout({1: 20, 2: 100, 3: 200}) == {1: (0, 3), 2: (3, 3), 3: (6, 4)}


ROOMY = scn.from_json(
    {
        "pool_size": 16,
        "link": {"bw_mbps": 0.25},
        "window": 8,
        "jobs": [
            {"job": 1, "workers": 2, "values": 8192, "iterations": 4, "priority": 20},
            {"job": 2, "workers": 3, "values": 8192, "iterations": 4, "priority": 100},
            {"job": 3, "workers": 4, "values": 8192, "iterations": 4, "priority": 200},
        ],
    }
)
"""Three jobs of fan-in 2, 3 and 4 in a 16-slot pool: a home for each."""


def test_with_lagging_workers_homes_match_the_equal_split_and_hashing_loses() -> None:
    """On 0.25 Mbit/s links with workers up to 10 ms apart: every job has a
    home, so ESA places chunks as the equal split does until a job
    finishes, where the equal split recuts the others' partitions (their
    chunks in flight strand) and ESA's homes stay put: 6.08 s both (the
    equal split 6.11 s against the homes' 6.10 before a worker's timer ran
    for its timeout as it is when it comes due); hashing lets the jobs'
    held slots collide, which a chunk's second hashed slot makes rarer
    (6.16 s, where one slot was 20 % behind; 6.37 s before the workers
    learnt their timeout from sums of first sends alone, which ended the
    hashed jobs' spurious timeouts)."""
    avg = homes.compare(ROOMY, 10.0)
    assert avg["esa homes"] <= avg["static-equal"]
    assert avg["esa hashed"] > 1.01 * avg["esa homes"]


def test_srpt_scenario_one_priority_lends_what_srpt_ranked() -> None:
    """mininet/scenarios/srpt.json (two short jobs of fan-in 4 behind a long
    one, 2 slots): with workers in step a slot is held for no time and one
    priority for all ties SRPT; with workers up to 3 ms apart a busy home
    borrows the idle one (rule L), which SRPT's short jobs used to take from
    the long one by rank: one priority comes within 1 % of SRPT, and both
    stay ahead of hashing (5.15 s against 5.25; 5.17 against 5.42 before a
    worker's timer ran for its timeout as it is when it comes due, 10 % or
    more ahead before the workers learnt their timeout from sums of first
    sends alone: both ended spurious timeouts of the hashed jobs)."""
    s = scn.load(scn.SCENARIOS / "srpt.json")
    in_step = homes.compare(s, 0.0)
    assert in_step["esa homes"] == in_step["esa-equal homes"]
    lagging = homes.compare(s, 3.0)
    assert abs(lagging["esa homes"] / lagging["esa-equal homes"] - 1) < 0.01
    assert max(lagging["esa homes"], lagging["esa-equal homes"]) < 0.99 * lagging["esa hashed"]


def test_modulo_blocked_without_spread_counts_the_chunks_each_hold_keeps_out() -> None:
    # 100 chunks 10 ns apart: chunks 50 apart share a pair of slots, one
    # every 500 ns; a hold under 1 us leaves the other slot free
    assert modulo_blocked(100, 10.0, 999.0, 8, 0.0) == 0.0
    # held past two of them: of every three chunks at the pair, one is kept out
    assert modulo_blocked(100, 10.0, 1001.0, 8, 0.0) == pytest.approx(1 / 3)
    # a home of one slot: a chunk every 10 ns, each held 25 ns, keeps two out
    assert modulo_blocked(1, 10.0, 25.0, 8, 0.0) == pytest.approx(2 / 3)
    assert modulo_blocked(100, 10.0, 1001.0, 8, 0.0, free=0.5) == pytest.approx(1 - 0.5 * 2 / 3)
    shares = [modulo_blocked(h, 15.0, 2600.0, 8, 1000.0) for h in (64, 128, 256, 512, 1024)]
    assert shares == sorted(shares, reverse=True)
    assert shares[0] > 0.6 and 0.0 < shares[-1] < 1e-3


@pytest.mark.parametrize("workers", [2, 3, 8, 32])
@pytest.mark.parametrize("laps", [0.1, 0.5, 1.0, 1.5, 2.0])
def test_modulo_blocked_is_the_placement_of_h_then_h_prime(workers: int, laps: float) -> None:
    """Against ``sim.headroom.placement_loss``, which places 100,000 chunks
    one by one on ``seq mod s``, else ``(seq + s // 2) mod s``, each held
    for the range of its workers' spread: an even home of ``laps`` mean
    holds (the model's chain is exact there, up to the draws)."""
    jitter, gap = 1000.0, 14.64
    holds = spread_holds(workers, jitter, 100_000)
    mean = float(holds.mean())
    home = max(2, 2 * round(laps * mean / gap / 2))
    _, _, placed = placement_loss(holds, gap, home)
    assert modulo_blocked(home, gap, mean, workers, jitter) == pytest.approx(placed, abs=0.005)


@settings(max_examples=200, deadline=None)
@given(
    home=st.integers(1, 4096),
    gap=st.floats(0.1, 1e4),
    hold=st.floats(0.0, 1e6),
    workers=st.integers(1, 32),
    jitter=st.floats(0.0, 1e4),
)
def test_modulo_blocked_is_a_share_that_a_larger_home_never_raises(
    home: int, gap: float, hold: float, workers: int, jitter: float
) -> None:
    share = modulo_blocked(home, gap, hold, workers, jitter)
    assert 0.0 <= share <= 1.0
    assert modulo_blocked(2 * home, gap, hold, workers, jitter) <= share


def test_the_fluid_model_runs_esa_homes_and_never_gives_ideal_one() -> None:
    pt = replace(REGIMES[1], ps_shards=1, jobs=8)
    specs, net = pt.specs(0), pt.net()
    homes = replace(net, esa_homes=True)
    assert fluid.simulate(specs, pt.pool, Scheme.IDEAL, homes) == fluid.simulate(
        specs, pt.pool, Scheme.IDEAL, net
    )
    assert fluid.simulate(specs, pt.pool, Scheme.ESA, homes) != fluid.simulate(
        specs, pt.pool, Scheme.ESA, net
    )


HOMES_OPTIMISM = (0.08, 0.15)
"""The fluid model's error on the next case, a listed exception to issue
35's 5 % (docs/sim-calibration.md, "Homes with one PS host"): it was
within 1 % while its homes kept a chunk out whenever the chunk one lap back
still held its slot, which overstated the share kept out (0.89 of an
8-worker job's chunks where 0.60 are, at a home of half the mean hold) and
so made up for what it leaves out.  With a home's two slots solved exactly
(``sim.placement.modulo_blocked``) it is 11.3 % optimistic: a PS-bound
job's window lets its first sends run ahead of the PS's rate (0.81 of the
line on packets against the fluid model's solved 0.63), so its chunks
come closer together, find their slots held more often (0.30 of them to
the PS against 0.21) and the PS link's queue drains after the stream (38
us an iteration after the last first send, against 13).  Pinned, so a
change to either model that moves the error shows here."""


def test_with_one_ps_host_homes_beat_the_equal_split_in_both_models() -> None:
    """docs/simulator.md, "Fewer PS hosts than workers": the calibration's
    spread case with one PS host per job and 256 slots (homes of 64)."""
    net = replace(SPREAD.net, barrier=True, ps_shards=1)
    jobs = list(SPREAD.jobs)
    homes = replace(net, esa_homes=True)
    exact = {
        "homes": beyond_compute(SPREAD.jobs, packet.simulate(jobs, 256, Scheme.ESA, homes)),
        "equal": beyond_compute(SPREAD.jobs, packet.simulate(jobs, 256, Scheme.STATIC_EQUAL, net)),
    }
    coarse = {
        "homes": beyond_compute(SPREAD.jobs, fluid.simulate(jobs, 256, Scheme.ESA, homes)),
        "equal": beyond_compute(SPREAD.jobs, fluid.simulate(jobs, 256, Scheme.STATIC_EQUAL, net)),
    }
    assert exact["homes"] < 0.8 * exact["equal"]
    assert coarse["homes"] < 0.8 * coarse["equal"]
    low, high = HOMES_OPTIMISM
    assert low < 1 - coarse["homes"] / exact["homes"] < high


LONE = replace(SPREAD.net, barrier=True, ps_shards=1, esa_homes=True)
"""The next tests' case: ``calibrate.SPREAD``'s second job streaming alone in
a home of 64 slots of 256 (the others in compute), one PS host: at line rate
it would hold 220 slots as guests, more than the 192 outside its home."""


def lone_flow() -> Flow:
    spec = SPREAD.jobs[1]
    lag = lags(spec, LONE, 0)
    spread = float(lag.max() - lag.min()) + spread_range_ns(LONE.jitter_ns, spec.workers)
    lag_max = float(lag.max()) + spread_max_ns(LONE.jitter_ns, spec.workers)
    return Flow(spec.workers, 200, 0.0, spread, lag_max, part=64)


def test_a_job_lending_alone_is_solved_to_a_fixed_point_of_its_own_guests() -> None:
    """Its own guests do not count against it in ``lend_offers`` (all 192
    slots outside its home are free of the others), its solve ends where
    solving again from it stays, its guests fit outside its home, and its
    share lent is ``lent_share`` at its solved state: not all of it (at line
    rate its guests would hold more slots than there are), not none."""
    paths = SolveConstants.of(Scheme.ESA, LONE, 256)
    f = lone_flow()
    solve([f], [], paths, LONE)
    (offer,) = lend_offers([f], [], [], paths)
    assert (offer.share, offer.outside, offer.evicted) == (1.0, 192, 0.0)
    again = replace(f)
    solve([again], [], paths, LONE)
    assert again.rate == pytest.approx(f.rate, rel=3 * CONVERGED)
    assert again.to_ps == pytest.approx(f.to_ps, abs=3 * CONVERGED)
    assert 0.0 < f.lent < 192.0
    hold = paths.hold(f.rate, f.latency, 0.0, f.lag_spread)[0]
    blocked = modulo_blocked(64, 1 / f.rate, hold, f.workers, paths.jitter)
    share = lent_share(offer, blocked, f.rate * hold)
    assert 0.1 < share < 0.9
    assert f.lent == pytest.approx(blocked * share * f.rate * hold, rel=3 * CONVERGED)


@settings(max_examples=200, deadline=None)
@given(
    free=st.floats(0.0, 1.0),
    evicted=st.floats(0.0, 1.0),
    outside=st.sampled_from([64, 192, 768, 960]),
    blocked=st.floats(0.0, 1.0),
    sent=st.floats(0.0, 2000.0),
)
def test_a_jobs_own_guests_only_lower_its_share_lent(
    free: float, evicted: float, outside: int, blocked: float, sent: float
) -> None:
    """``lent_share``: at most what the others leave free, and lower the
    more chunks it keeps out and the more it has in flight, as each of
    those may hold the borrowed slot."""
    offer = Lending(free, evicted, free * outside, 0.0, outside)
    share = lent_share(offer, blocked, sent)
    assert 0.0 <= share <= free
    assert lent_share(offer, min(1.0, 2 * blocked), sent) <= share
    assert lent_share(offer, blocked, 2 * sent) <= share
    assert lent_share(offer, 0.0, sent) == free


def test_with_fixed_homes_lending_leaves_srpt_no_gain_in_both_models() -> None:
    """Homes of 128 slots for the top ranks of 256, the other jobs hashed,
    one PS host: a chunk its busy home keeps out borrows a free slot outside
    it (rule L), so the ranks no longer decide who streams at line rate:
    SRPT gains nothing over one priority in either model (at 9a6b519 it
    costs 4.8 % in the packet model, 1.8 % in the fluid model; the goal of
    issue 34, SRPT at 0.90 of one priority, is not met, and a rule that
    makes the ranks pay here must say so in docs/sim-results.md); the fluid
    model's homes, guests and hashed jobs meet as the packet model's do
    (``sim.rates.solve_pool``), within the calibration's tolerance.

    On packets SRPT costs 13.6 % since a worker's timer runs for its
    timeout as it is when it comes due (4.3 % before): a rank change that
    gives a home to the rising job takes it from the falling one, whose
    chunks in flight strand astride the move (7 contributions in the old
    home's slot, the late ones in a hashed slot) until their workers'
    timeout, which has grown with the PS's queue (docs/sim-results.md,
    "Priorities"); the fluid model moves a home for free (1.1 %), so it
    agrees with the packet model within the tolerance under one priority
    and is 21 % optimistic under SRPT (within it before)."""
    net = replace(SPREAD.net, barrier=True, ps_shards=1, esa_homes=True, esa_home_size=128)
    jobs = list(SPREAD.jobs)
    runs = {
        (model, scheme): beyond_compute(SPREAD.jobs, model.simulate(jobs, 256, scheme, net))
        for model in (packet, fluid)
        for scheme in (Scheme.ESA_SRPT, Scheme.ESA_EQUAL)
    }
    for model, most in ((packet, 1.15), (fluid, 1.06)):
        ratio = runs[model, Scheme.ESA_SRPT] / runs[model, Scheme.ESA_EQUAL]
        assert 0.98 < ratio < most, model.__name__
    assert abs(runs[fluid, Scheme.ESA_EQUAL] / runs[packet, Scheme.ESA_EQUAL] - 1) < TOLERANCE
