"""What a priority rank buys (sim.ranks)."""

from __future__ import annotations

from dataclasses import replace

from esa.schemes import Scheme
from sim import sweep
from sim.ranks import RankStats, study
from sim.rates import Flow


def flow(prio: int, rate: float, to_ps: float) -> Flow:
    return Flow(4, prio, 0.0, 0.0, 0.0, rate=rate, to_ps=to_ps)


def test_ranks_are_averaged_over_time_highest_priority_first() -> None:
    stats = RankStats()
    stats.observe(0.0, [flow(10, 0.5, 0.4), flow(200, 1.0, 0.0)], tx=1.0)
    stats.observe(30.0, [flow(10, 0.25, 0.8)], tx=1.0)
    stats.observe(40.0, [], tx=1.0)
    stats.finish()
    assert stats.rows() == [
        ("0", (0.0 * 30 + 0.8 * 10) / 40, (1.0 * 30 + 0.25 * 10) / 40),
        ("1", 0.4, 0.5),
    ]


def test_under_srpt_the_top_rank_sends_the_fewest_chunks_to_its_ps() -> None:
    pt = replace(next(p for p in sweep.REGIMES if p.name == "overload-small-pool"), jobs=8)
    _, equal = study(pt, Scheme.ESA_EQUAL, seeds=1)
    _, srpt = study(pt, Scheme.ESA_SRPT, seeds=1)
    top = srpt.rows()[0]
    assert top[0] == "0" and all(top[1] < other[1] for other in srpt.rows()[1:])
    assert top[1] < equal.rows()[0][1]
