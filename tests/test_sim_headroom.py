"""sim.headroom: the tally of ESA's streams and the placement table."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.headroom import Gap, StreamTally, placement_loss, spread_holds
from sim.rates import Flow


def flow(part: int, rate: float, to_ps: float, held: float, lent: float = 0.0) -> Flow:
    f = Flow(workers=8, prio=1, skew=0.0, lag_spread=0.0, lag_max=0.0, part=part)
    f.rate, f.to_ps, f.held, f.lent = rate, to_ps, held, lent
    return f


def test_tally_integrates_each_side_until_the_next_solve() -> None:
    t = StreamTally(pool=100, tx=10.0)
    t.observe(0.0, [flow(64, 0.05, 0.1, 40.0, 10.0), flow(0, 0.025, 0.5, 10.0)])
    t.observe(1000.0, [flow(0, 0.1, 0.0, 90.0)])
    t.observe(1500.0, [])
    t.close(2000.0)
    assert t.time == {True: 1000.0, False: 1500.0}
    assert t.chunks == {True: 50.0, False: 25.0 + 50.0}
    assert t.excess(True) == 500.0
    assert t.excess(False) == 1500.0 - 75.0 * 10.0
    assert t.line_share(True) == 0.5
    assert t.ps_share(True) == pytest.approx(0.1)
    assert t.ps_share(False) == pytest.approx(12.5 / 75.0)
    assert t.homed_share() == 0.4
    assert t.span == 1500.0  # no job streams after 1,500 ns
    assert t.held == 60.0 * 1000.0 + 90.0 * 500.0
    # slow with 40 of 100 slots free; then at line rate with 10 free
    assert t.starved == 1000.0


def test_an_empty_tally_reads_zero() -> None:
    t = StreamTally(pool=10, tx=1.0)
    t.close(5.0)
    assert (t.line_share(True), t.ps_share(False), t.homed_share()) == (0.0, 0.0, 0.0)


def test_taken_is_the_share_of_the_gap() -> None:
    g = Gap(esa=7.0, best=10.0, best_name="static-fb", bound=6.0, jobs=32, tally=StreamTally(1, 1))
    assert g.taken == 0.75
    assert Gap(5.0, 5.0, "atp", 5.0, 1, StreamTally(1, 1)).taken == 1.0


def test_placement_with_every_hold_three_chunks_long_in_two_slots() -> None:
    # any free slot: chunks 0, 1 taken, 2 kept out, then every third kept
    # out; seq mod 2: each slot is free again only every other lap; then
    # the other slot of the two: as any free slot
    pooled, modulo, second = placement_loss(np.full(3000, 30.0), 10.0, 2)
    assert pooled == second == 1000 / 3000
    assert modulo == 1 / 2


@given(
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=200),
    st.integers(1, 50),
    st.floats(0.5, 20.0),
)
def test_no_chunk_kept_out_while_every_hold_fits_a_lap(
    shares: list[float], slots: int, gap: float
) -> None:
    holds = np.array(shares) * slots * gap
    assert placement_loss(holds, gap, slots) == (0.0, 0.0, 0.0)


def test_spread_holds_are_ranges_of_the_draws() -> None:
    holds = spread_holds(4, 1000.0, 20_000)
    assert holds.min() >= 0.0
    # the range of 4 exponentials of mean 1 us has mean H(3) = 11/6 us
    assert holds.mean() == pytest.approx(1000.0 * 11 / 6, rel=0.02)
    assert np.array_equal(holds, spread_holds(4, 1000.0, 20_000))
    assert spread_holds(1, 1000.0, 10).tolist() == [0.0] * 10
