"""The fluid model's rate solve (sim.rates)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from esa.model import slot_hash
from esa.schemes import Scheme
from sim import rates
from sim.params import Net, spread_max_ns, spread_range_ns
from sim.placement import chain_blocked, reuse_distances, self_blocked, self_blocked_mean
from sim.rates import (
    CONVERGED,
    Flow,
    NotConverged,
    Parked,
    SolveConstants,
    solve,
)

NET = Net(ps_shards=2)
LINE = 1 / NET.pkt_ns

flows_st = st.lists(
    st.tuples(
        st.sampled_from([2, 4, 8, 16]),  # workers
        st.integers(0, 255),  # priority
        st.floats(0.0, 2e6),  # skew, ns
        st.floats(0.0, 3000.0),  # lag spread, ns
    ),
    min_size=1,
    max_size=12,
)
parked_st = st.lists(st.tuples(st.integers(0, 255), st.floats(0.0, 300.0)), max_size=6)
schemes = st.sampled_from([Scheme.ATP, Scheme.ESA_EQUAL, Scheme.ESA, Scheme.ESA_SRPT])
pools = st.sampled_from([256, 1024, 4096])


def make(spec: list[tuple[int, int, float, float]]) -> list[Flow]:
    return [Flow(w, p, skew, spread, spread) for w, p, skew, spread in spec]


def solved(
    scheme: Scheme,
    spec: list[tuple[int, int, float, float]],
    parked: list[Parked],
    pool: int,
    net: Net = NET,
) -> list[Flow]:
    flows = make(spec)
    solve(flows, parked, SolveConstants.of(scheme, net, pool), net)
    return flows


@settings(max_examples=80, deadline=None)
@given(scheme=schemes, spec=flows_st, parked=parked_st, pool=pools)
def test_rates_are_physical(
    scheme: Scheme, spec: list[tuple[int, int, float, float]], parked: list[Parked], pool: int
) -> None:
    for f in solved(scheme, spec, parked, pool):
        assert 0 < f.rate <= LINE * (1 + 1e-9)
        assert 0 <= f.to_ps < 1
        assert 0 <= f.held <= pool
        assert f.latency >= NET.path_ns(scheme) + f.lag_max - 1e-6
        assert f.queue >= 0


@settings(max_examples=40, deadline=None)
@example(scheme=Scheme.ESA_EQUAL, n=2, workers=16, skew=705.0, pool=256)
@example(scheme=Scheme.ESA_EQUAL, n=5, workers=16, skew=4503.0, pool=256)
@example(scheme=Scheme.ESA_EQUAL, n=5, workers=16, skew=2330.0, pool=256)
@example(scheme=Scheme.ESA_EQUAL, n=5, workers=16, skew=4899.0, pool=256)
@given(
    scheme=schemes,
    n=st.integers(2, 5),
    workers=st.sampled_from([4, 8, 16]),
    skew=st.floats(100.0, 2e6),
    pool=pools,
)
def test_alike_jobs_with_skew_converge_alike(
    scheme: Scheme, n: int, workers: int, skew: float, pool: int
) -> None:
    """Found by hypothesis: two jobs of 16 workers 705 ns apart, where the
    rate tips from PS-bound to line-bound, made the damped rounds circle for
    good (the loop from one job's slots through the other's share to the PS
    and its rate back to its slots has too much gain for any fixed step); the
    solve now ends at the fixed point, and alike jobs get alike answers.
    Five such jobs 4.5 us apart once got two answers (a root finder's step
    off the alike states found a root where two jobs stream and three
    queue: alike jobs now share their unknowns in the search); 2.3 and 4.9 us
    apart no method found a root from where the rounds ended, and the
    search now also starts halfway to where one more full round goes."""
    flows = solved(scheme, [(workers, 0, skew, 0.0)] * n, [], pool)
    for f in flows:
        assert 0 < f.rate <= LINE * (1 + 1e-9) and 0 <= f.to_ps < 1
        assert abs(f.rate - flows[0].rate) <= 1e-6 * flows[0].rate
        assert abs(f.to_ps - flows[0].to_ps) <= 1e-6


@settings(max_examples=60, deadline=None)
@given(spec=flows_st, pool=pools)
def test_esa_in_lockstep_holds_nothing_and_runs_at_line_rate(
    spec: list[tuple[int, int, float, float]], pool: int
) -> None:
    """Workers in step (a barrier, no lag): a chunk's contributions meet at
    once, so ESA holds no slot and every job streams at line rate."""
    lockstep = [(w, p, 0.0, 0.0) for w, p, _, _ in spec]
    for scheme in (Scheme.ESA_EQUAL, Scheme.ESA_SRPT):
        for f in solved(scheme, lockstep, [], pool):
            assert f.held == 0 and f.to_ps == 0
            assert f.rate == LINE


@settings(max_examples=60, deadline=None)
@given(spec=flows_st, pool=pools)
def test_atp_holds_its_slots_through_the_ps_round_trip(
    spec: list[tuple[int, int, float, float]], pool: int
) -> None:
    lockstep = [(w, p, 0.0, 0.0) for w, p, _, _ in spec]
    atp = solved(Scheme.ATP, lockstep, [], pool)
    assert all(f.held > 0 for f in atp)
    alone = solved(Scheme.ATP, lockstep[:1], [], 1 << 16)[0]
    hold = NET.rtt_ns(Scheme.ATP) - NET.rtt_ns(Scheme.ESA)
    assert abs(alone.held / (alone.rate * hold) - 1) < 0.01


def test_a_busy_switch_caps_every_flow_and_atp_holds_its_slots_through_its_queue() -> None:
    """A switch slower than the links: the flows together ask for no more
    than it serves, each stream's window fills its queue, and ATP's slot
    waits through that queue for the PS's answer, so ATP holds about its
    whole window; ESA's slot is released at completion and holds next to
    nothing."""
    slow = replace(NET, switch_pkt_ns=2000.0)
    spec = [(4, 0, 0.0, 500.0)] * 3
    fast_atp = solved(Scheme.ATP, spec, [], 1 << 16)
    for scheme in (Scheme.ATP, Scheme.ESA_EQUAL):
        flows = solved(scheme, spec, [], 1 << 16, slow)
        paths = SolveConstants.of(scheme, slow, 1 << 16)
        assert rates.switch_busy(flows, paths, slow) <= 1 + CONVERGED
        for f in flows:
            assert f.rate <= f.cap * (1 + CONVERGED) and f.rate * slow.pkt_ns < 0.01
            assert f.latency + f.queue == pytest.approx(f.window / f.rate, rel=CONVERGED)
            if scheme is Scheme.ATP:
                assert 0.95 * f.window < f.held <= f.window
            else:
                assert f.held < 1
    assert all(f.held < 0.5 * f.window for f in fast_atp)


@settings(max_examples=60, deadline=None)
@given(
    scheme=st.sampled_from([Scheme.ATP, Scheme.ESA_EQUAL]),
    spec=flows_st,
    pool=pools,
    extra=st.floats(10.0, 250.0),
)
def test_parked_slots_only_push_chunks_to_the_ps(
    scheme: Scheme, spec: list[tuple[int, int, float, float]], pool: int, extra: float
) -> None:
    """Without priorities, another job's parked window can only send more of
    every job's chunks to the PS, never fewer, but for one step of its own
    collisions: those follow the CRC's reuse distances, a step function of
    the chunks the job has in flight, and a parked window that pushes it to
    the PS a little more can move that count across a step."""
    base = solved(scheme, spec, [], pool)
    more = solved(scheme, spec, [(0, extra)], pool)
    for a, b in zip(base, more, strict=True):
        assert b.to_ps >= a.to_ps - hash_step(pool) - CONVERGED


def hash_step(pool: int) -> float:
    """The largest jump of ``self_blocked``: the share of a job's chunks at one
    reuse distance of the slot hash.  ``reuse_distances`` holds half of the
    seqs it hashes and marks "never" with the number it hashed, twice its
    length: that is no step."""
    dist = reuse_distances(pool)
    values, counts = np.unique(dist, return_counts=True)
    return float(counts[values < 2 * len(dist)].max()) / len(dist)


def test_the_hash_step_is_one_reuse_distance() -> None:
    assert hash_step(1024) == 640 / 8192
    assert self_blocked(1024, np.array([155.0, 156.0])).tolist() == [5 / 64, 5 / 64 + 640 / 8192]


@settings(max_examples=60, deadline=None)
@given(spec=flows_st, pool=pools, slots=st.floats(10.0, 250.0))
def test_a_job_above_every_parked_one_preempts_them(
    spec: list[tuple[int, int, float, float]], pool: int, slots: float
) -> None:
    lockstep = [(w, 200 + i % 50, 0.0, 0.0) for i, (w, _, _, _) in enumerate(spec)]
    esa = solved(Scheme.ESA, lockstep, [(10, slots)], pool)
    equal = solved(Scheme.ESA_EQUAL, lockstep, [(128, slots)], pool)
    assert all(f.to_ps == 0 and f.rate == LINE for f in esa)
    assert all(f.to_ps > 0 for f in equal)


def test_static_jobs_are_bound_by_their_partition() -> None:
    net = replace(NET, lag_ns=0.0, jitter_ns=0.0)
    paths = SolveConstants.of(Scheme.STATIC_EQUAL, net, 1024)
    rtt = net.path_ns(Scheme.STATIC_EQUAL)
    flows = [Flow(4, 0, 0.0, 0.0, 0.0, part=p) for p in (1024, 64, 0)]
    solve(flows, [], paths, net)
    full, small, none = flows
    assert full.rate == LINE and full.to_ps == 0
    assert small.rate == 64 / rtt
    assert none.to_ps == 1 and none.rate < LINE


def test_a_window_of_its_partition_falls_back_behind_a_late_chunk() -> None:
    """With spread, a job whose window is its partition lets chunk ``seq +
    part`` out while ``seq``'s partial holds the slot, and that chunk goes
    to its PS: more of them with more workers (a wider spread); a window
    well below its partition seldom has both out."""
    net = replace(NET, lag_ns=0.0, ps_shards=1)
    paths = SolveConstants.of(Scheme.STATIC_BDP, net, 1 << 16)
    part = net.bdp_partition(1 << 16)

    def alone(workers: int, part: int) -> Flow:
        f = Flow(
            workers,
            0,
            0.0,
            spread_range_ns(net.jitter_ns, workers),
            spread_max_ns(net.jitter_ns, workers),
            part=part,
        )
        solve([f], [], paths, net)
        return f

    fits = [alone(w, part) for w in (4, 8, 16)]
    assert 0 < fits[0].to_ps < fits[1].to_ps
    assert fits[0].rate > fits[1].rate > fits[2].rate
    assert fits[2].rate < fits[2].window / (paths.lat_ok + fits[2].lag_max)
    assert alone(8, 2 * part).to_ps < fits[1].to_ps / 20


def test_self_collisions_are_the_switchs_hash() -> None:
    """The share of a job's chunks whose slot one of its last ``h`` chunks
    holds, counted directly on the CRC-32 slot hash."""
    pool = 1024
    slots = [slot_hash(7, s, pool) for s in range(40 * pool)]
    for h in (84, 139, 279, 690):
        tail = range(20 * pool, 40 * pool)
        direct = np.mean([slots[s] in slots[s - h : s] for s in tail])
        assert abs(float(self_blocked(pool, np.array([float(h)]))[0]) - direct) < 0.03
    assert self_blocked(pool, np.array([83.0]))[0] == 0


def placed_out(pool: int, hold: int, chunks: int = 40_000) -> float:
    """Share of a lone job's chunks that find the switch's CRC slot held by
    one of its own earlier chunks, placed one by one, a taken slot held for
    the next ``hold`` chunks and a chunk kept out taking none (ATP)."""
    free_at: dict[int, int] = {}
    out = 0
    for seq in range(chunks):
        slot = slot_hash(1, seq, pool)
        if free_at.get(slot, -1) > seq:
            out += 1
        else:
            free_at[slot] = seq + hold
    return out / chunks


@pytest.mark.parametrize("pool", [256, 1024])
@pytest.mark.parametrize("share", [0.15, 0.3, 0.45, 0.8, 2.0])
def test_atps_own_collisions_are_a_renewal_per_slot(pool: int, share: float) -> None:
    """``chain_blocked`` against the chunks placed one by one: within 0.04
    (the chains' gaps are taken as independent), where counting every chunk
    of a hold (``self_blocked_mean``) was up to 0.4 above."""
    hold = round(share * pool)
    assert chain_blocked(pool, hold) == pytest.approx(placed_out(pool, hold), abs=0.04)


def test_a_lost_marker_strands_chunks_only_where_contributions_spread() -> None:
    """A slot keeps one job's marker of each kind (``slot_gone`` for a
    chunk that fell back, ``slot_evicted`` for one evicted): a chunk that
    went to the PS is stranded when another job's chunk of the same kind
    replaces the marker before its last contribution came and that
    contribution finds the slot free; the job's own later chunks keep it
    covered.  Here the other job's chunks only fall back, so the evicted
    third of the second job's keeps its marker.  Nothing is stranded when
    a chunk's contributions arrive together, nor in a job alone."""
    pool = 1024
    rate = np.array([LINE, 0.5 * LINE])
    to_ps, blocked = np.array([0.2, 0.3]), np.array([0.2, 0.1])
    span = np.array([0.0, 2000.0])
    esa = SolveConstants.of(Scheme.ESA_EQUAL, NET, pool)
    share, wait, keep = esa.stranded(rate, to_ps, blocked, span, occupied=0.25)
    fell = LINE * 0.2 / pool
    exposed = 2000.0 * fell * 0.1 / 0.3
    assert share[0] == 0
    assert share[1] == pytest.approx(0.3 * -np.expm1(-exposed) * 0.75)
    alone, _, _ = esa.stranded(rate[1:], to_ps[1:], blocked[1:], span[1:], occupied=0.25)
    assert list(alone) == [0]
    claim = pool / (1.5 * LINE)
    assert wait == pytest.approx(min(esa.pull, esa.squat + claim))
    assert keep == min(esa.squat, wait)
    atp = SolveConstants.of(Scheme.ATP, NET, pool)
    share, wait, keep = atp.stranded(rate, to_ps, blocked, span, occupied=1.5)
    assert atp.squat == 0 and wait == keep == atp.pull and list(share) == [0, 0]
    assert atp.pull == NET.ps_stall_ns + 4 * NET.hop_ns + 4 * NET.pkt_ns + NET.ps_ns


def test_a_solve_that_does_not_converge_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two rounds and no root search."""
    flows = make([(8, 0, 0.0, 3000.0), (16, 0, 0.0, 3000.0)])
    monkeypatch.setattr(rates, "ROUNDS", 2)
    monkeypatch.setattr(rates, "ROOT_METHODS", ())
    with pytest.raises(
        NotConverged, match=r"^2 flows still moving by .* after 2 rounds and a root search$"
    ):
        solve(flows, [], SolveConstants.of(Scheme.ESA_EQUAL, NET, 256), NET)


def test_two_rounds_and_the_root_search_find_the_fixed_point_of_many(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same point as 2,000 damped rounds, within what a step of
    ``CONVERGED`` leaves open on a map this steep (measured: 0.7 %)."""
    spec = [(8, 0, 0.0, 3000.0), (16, 0, 0.0, 3000.0)]
    want = solved(Scheme.ESA_EQUAL, spec, [], 256)
    monkeypatch.setattr(rates, "ROUNDS", 2)
    got = solved(Scheme.ESA_EQUAL, spec, [], 256)
    for a, b in zip(want, got, strict=True):
        assert abs(a.rate - b.rate) <= 0.01 * a.rate
        assert abs(a.to_ps - b.to_ps) <= 0.01


@settings(max_examples=60, deadline=None)
@given(pool=pools, held=st.floats(1.0, 2000.0))
def test_self_collisions_average_the_hash_over_the_chunks_in_flight(pool: int, held: float) -> None:
    """The solve's share is the exact share averaged over held +- sqrt(3 held),
    so it lies between the exact share at the two ends and never jumps."""
    half = np.sqrt(3 * held)
    lo, hi = (float(self_blocked(pool, np.array([x]))[0]) for x in (held - half, held + half))
    mean = self_blocked_mean(pool, held)
    assert lo - 1e-12 <= mean <= hi + 1e-12
    assert abs(self_blocked_mean(pool, held + 0.01) - mean) <= 2 * 0.01 / half


@settings(max_examples=200, deadline=None)
@given(
    pool=st.sampled_from([256, 1024, 4096]),
    homes=st.lists(
        st.tuples(
            st.integers(1, 8),  # home, eighths of the pool's share
            st.integers(0, 255),  # priority
            st.floats(0.0, 1.0),  # held, share of the home
            st.floats(0.0, 1.0),  # rate, share of the line
            st.floats(0.0, 64.0),  # lent slots
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_lend_offers_are_shares_of_the_pool_outside_the_home(
    pool: int, homes: list[tuple[int, int, float, float, float]]
) -> None:
    """Rule L: a job's chunks find their borrowed slot free as often as the
    slots outside their home are free; its guests are evicted with odds in
    [0, 1]; a job alone with nothing lent finds every slot outside its home
    free (none when its home is the whole pool) and is never evicted."""
    paths = SolveConstants.of(Scheme.ESA, NET, pool)
    share = pool // (8 * len(homes))
    flows = []
    for eighths, prio, held, rate, lent in homes:
        f = Flow(8, prio, 0.0, 2000.0, 2000.0, part=max(1, eighths * share))
        f.held, f.rate, f.lent, f.latency = held * f.part, rate * LINE, lent, paths.lat_ok
        flows.append(f)
    for f, offer in zip(flows, rates.lend_offers(flows, [], [], paths), strict=True):
        assert 0.0 <= offer.share <= 1.0
        assert 0.0 <= offer.evicted <= 1.0
        assert offer.free == pytest.approx((pool - f.part) * offer.share, rel=1e-12)
    alone = flows[0]
    alone.lent = 0.0
    (offer,) = rates.lend_offers([alone], [], [], paths)
    assert offer.share == pytest.approx(1.0 if alone.part < pool else 0.0, rel=1e-12)
    assert offer.evicted == 0.0
