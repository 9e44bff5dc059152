"""The sweep's workload, summary and goal verdicts (sim.workload, sim.sweep, sim.summary)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esa.job import JobSpec
from esa.schemes import SIM_SCHEMES, Scheme
from sim import curves, rates, summary, sweep
from sim.params import BASELINES, ESA_SCHEMES, Net
from sim.summary import JctStats, Summary
from sim.workload import WorkloadSpec, compute_times, concurrency, make_jobs

NET = Net()


@settings(max_examples=40, deadline=None)
@given(burst=st.integers(1, 9), jobs=st.integers(1, 40), seed=st.integers(0, 1000))
def test_arrivals_come_in_bursts(burst: int, jobs: int, seed: int) -> None:
    specs = make_jobs(WorkloadSpec(jobs=jobs, load=4.0, burst=burst), NET, seed)
    arrivals = [s.arrival_s for s in specs]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0.0
    groups = [arrivals[i : i + burst] for i in range(0, jobs, burst)]
    assert all(len(set(g)) == 1 for g in groups)
    assert len(set(arrivals)) == len(groups)


@settings(max_examples=40, deadline=None)
@given(
    spans=st.lists(st.tuples(st.floats(0.0, 100.0), st.integers(1, 50)), min_size=1, max_size=20)
)
def test_concurrency_is_what_a_running_job_sees(spans: list[tuple[float, int]]) -> None:
    jobs = [
        JobSpec(i + 1, 2, 32, its, arrival_s=a, compute_s=1.0) for i, (a, its) in enumerate(spans)
    ]
    c = concurrency(jobs, NET)
    assert 1.0 - 1e-9 <= c <= len(jobs) + 1e-9
    together = [replace(j, arrival_s=0.0, iterations=7) for j in jobs]
    assert abs(concurrency(together, NET) - len(jobs)) < 1e-9
    apart = [replace(j, arrival_s=100.0 * i, iterations=7) for i, j in enumerate(jobs)]
    assert abs(concurrency(apart, NET) - 1.0) < 1e-9


def means_stats(m: dict[Scheme, float]) -> dict[Scheme, JctStats]:
    return {s: JctStats(v, (v, v), 2 * v) for s, v in m.items()}


def a_summary(
    name: str, pool: int, conc: float, means: dict[Scheme, float], floor: float | None = None
) -> Summary:
    """A point whose bound under its pool is ``floor`` (default: ``ideal``'s mean)."""
    floor = means[Scheme.IDEAL] if floor is None else floor
    return Summary(
        sweep.Point(name, "mixed", 4.0, pool), conc, 139, means_stats(means), (floor, floor)
    )


def means(
    base: float, esa: float, equal: float | None = None, atp: float | None = None
) -> dict[Scheme, float]:
    """Every baseline at ``base`` (ATP at ``atp``), every ESA variant at
    ``esa`` but ESA-equal at ``equal``; the bounds around them."""
    out = {s: base for s in BASELINES} | {s: esa for s in ESA_SCHEMES}
    if atp is not None:
        out[Scheme.ATP] = atp
    if equal is not None:
        out[Scheme.ESA_EQUAL] = equal
    return out | {Scheme.PS_ONLY: 2 * base, Scheme.IDEAL: 0.5 * esa}


def test_the_goals_are_judged_as_stated() -> None:
    ok = [
        # best baseline 12, ESA 10, the bound 9.5: ESA takes 2 / 2.5 of the
        # gap; of the gap to ideal (0.5 * 10 = 5), 2 / 7
        a_summary("hot", 1024, 10.0, means(12.0, 10.0, equal=11.2, atp=14.0), floor=9.5),
        a_summary("cold", 4096, 2.0, means(10.0, 10.05, equal=10.05), floor=9.9),
    ]
    ok[0].by[Scheme.ESA_SRPT] = JctStats(10.0, (10.0, 10.0), 20.0)
    lines = summary.goals(ok)
    assert lines == [
        "esa-aging / best baseline at most 1.005 (cold, against atp), best baseline / "
        "esa-aging 0.995 .. 1.200 over 2 points; goal: never more than 1% behind: MET",
        "where best baseline / bound >= 1.2 (1 points): esa-aging takes 80% .. 80% of best "
        "baseline - bound (of best baseline - ideal 29% .. 29%); least at hot (best baseline "
        "12.00 s, esa-aging 10.00, bound 9.50); goal >= 75%: MET",
        "ESA-SRPT / ESA-equal: 0.893 .. 1.000; where ESA-equal / bound >= 1.1 (1 points) at most "
        "0.893 (hot), goal <= 0.9: MET; at the other 1 points ESA-equal / bound at most 1.015: "
        "below 1.1, no rule could show 0.9 there",
    ]

    bad = [
        a_summary("hot", 1024, 10.0, means(10.0, 10.5, equal=11.0, atp=10.2)),
        a_summary("cold", 4096, 2.0, means(10.0, 10.6, equal=10.5, atp=9.9)),
    ]
    lines = summary.goals(bad)
    assert all(line.endswith("NOT MET") or "NOT MET;" in line for line in lines)
    assert lines[0].endswith("NOT MET; behind at hot, cold")
    assert "esa-aging takes -" in lines[1] and lines[1].endswith("NOT MET; short at hot, cold")


def test_reduced_jcts_are_printed_in_a_unit_that_shows_them() -> None:
    """``sim.check``'s reduced points last microseconds: goal 2 printed them
    as 0.00 s."""
    hot = a_summary("hot", 1024, 10.0, means(180e-6, 150e-6, atp=170e-6), floor=120e-6)
    assert "(best baseline 170.00 us, esa-aging 150.00, bound 120.00)" in summary.goals([hot])[1]
    assert summary.in_unit(12.0, 10.0, 9.5) == ("s", ["12.00", "10.00", "9.50"])
    assert summary.in_unit(0.0042, 0.0009) == ("ms", ["4.20", "0.90"])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(1e-9, 1e4), min_size=1, max_size=4))
def test_jcts_share_the_largest_unit_their_largest_fills(seconds: list[float]) -> None:
    unit, shown = summary.in_unit(*seconds)
    scale = dict(summary.UNITS)[unit]
    assert shown == [f"{v * scale:.2f}" for v in seconds]
    top = max(seconds) * scale
    assert top >= 1 or unit == "us"
    assert unit == "s" or top < 1000


def test_a_bound_under_the_pool_excuses_what_ideal_would_not() -> None:
    """Against ``ideal`` (5 s) there would be headroom and room for
    priorities; the bound under the pool (10.2 s) leaves neither."""
    hot = a_summary("hot", 1024, 10.0, means(12.0, 10.4, equal=10.5), floor=10.2)
    assert hot.by[Scheme.IDEAL].mean == 5.2
    _, room, prio = summary.goals([hot])
    assert room == "best baseline / bound below 1.2 at every point: no headroom goal"
    assert prio == (
        "ESA-SRPT / ESA-equal: 0.990 .. 0.990; ESA-equal / bound at most 1.029: below 1.1 at "
        "every point, so no rule could show 0.9: no priority goal"
    )


def test_goals_without_room_say_so() -> None:
    tight = a_summary("tight", 1024, 10.0, means(10.0, 10.0), floor=9.8)
    _, room, prio = summary.goals([tight])
    assert room == "best baseline / bound below 1.2 at every point: no headroom goal"
    assert prio == (
        "ESA-SRPT / ESA-equal: 1.000 .. 1.000; ESA-equal / bound at most 1.020: below 1.1 at "
        "every point, so no rule could show 0.9: no priority goal"
    )


def test_the_goals_judge_esa_as_the_controller_runs_it() -> None:
    """A better ESA variant does not stand in for the controller's."""
    hot = means(12.0, 13.0, equal=9.0)
    line = summary.goals([a_summary("hot", 1024, 10.0, hot)])[0]
    assert "best baseline / esa-aging 0.923 .. 0.923" in line and line.endswith("behind at hot")


def test_sensitivity_points_are_shown_not_judged() -> None:
    good = a_summary("hot", 1024, 10.0, means(14.0, 10.0, equal=12.0), floor=9.0)
    good.by[Scheme.ESA_SRPT] = JctStats(10.0, (10.0, 10.0), 20.0)
    worse = replace(good, point=replace(good.point, name="hot 8 PS", sensitivity=True))
    worse = replace(worse, by=means_stats(means(9.0, 10.0)))
    assert all(line.endswith("MET") and "NOT" not in line for line in summary.goals([good, worse]))
    assert "hot 8 PS" in summary.table([good, worse])


def test_the_table_shows_the_bound_beside_ideal() -> None:
    """Each point's bound (mean ± sd over seeds) after the schemes, ``-``
    where it was not computed (a trace's points); the CSV row has it too."""
    shown = a_summary("hot", 1024, 10.0, means(14.0, 10.0))
    shown = replace(shown, bound=(8.0, 9.0))
    bare = replace(shown, point=replace(shown.point, name="trace"), bound=())
    head, _, hot, _, trace, _ = summary.table([shown, bare]).splitlines()
    assert head.split()[-3:] == ["bound", "base/", "SRPT/"]
    assert hot.split()[-3:] == ["8.50±0.50", "1.400", "1.000"]
    assert trace.split()[-3:] == ["-", "1.400", "1.000"]
    assert (shown.row()["bound_mean"], shown.row()["bound_sd"]) == (8.5, 0.5)
    assert "bound_mean" not in bare.row()


def test_make_sim_judges_one_and_two_ps_hosts_with_esa_homes_and_shows_eight() -> None:
    judged = [p for p in sweep.SUBSET if not p.sensitivity]
    shown = [p for p in sweep.SUBSET if p.sensitivity]
    assert {p.ps_shards for p in judged} == {1, 2} and {p.ps_shards for p in shown} == {8}
    assert len(judged) == 2 * len(sweep.REGIMES) and len(shown) == len(sweep.REGIMES)
    assert all(p.net().esa_homes for p in sweep.SUBSET)
    assert [p.name for p in shown] == [f"{r.name} 8 PS" for r in sweep.REGIMES]


def test_a_sweep_point_runs_every_scheme_on_the_same_jobs() -> None:
    pt = replace(sweep.SUBSET[1], jobs=4)
    rows = [r for scheme in SIM_SCHEMES for r in sweep.run_one((pt, 0, scheme))]
    assert len(rows) == 4 * len(SIM_SCHEMES)
    assert {r["scheme"] for r in rows} == {s.value for s in SIM_SCHEMES}
    by_job = {(r["job"], r["model"], r["iterations"]) for r in rows}
    assert len(by_job) == 4
    assert all(float(str(r["jct_s"])) > 0 for r in rows)
    stats = summary.summarise([pt], rows, seeds=1)[0]
    assert np.isclose(
        stats.by[Scheme.ESA].p99,
        max(float(str(r["jct_s"])) for r in rows if r["scheme"] == "esa"),
        rtol=0.05,
    )


@settings(max_examples=40, deadline=None)
@given(jitter=st.floats(0.0, 0.99), seed=st.integers(0, 1000))
def test_compute_times_are_drawn_within_the_jobs_jitter(jitter: float, seed: int) -> None:
    job = JobSpec(3, 8, 32, 50, compute_s=0.1, jitter=jitter)
    t = compute_times(job, seed)
    assert t.shape == (50, 8)
    assert (abs(t / 0.1 - 1) <= jitter + 1e-12).all()
    assert (compute_times(job, seed) == t).all()


def test_the_pool_curve_judges_esa_against_the_bounds_and_names_a_rise() -> None:
    curve = [
        a_summary(f"overload pool {n}", n, 8.0, means(base, esa))
        for n, base, esa in ((8, 20.0, 10.5), (64, 21.0, 8.0), (65536, 5.0, 5.05))
    ]
    curve[0].by[Scheme.PS_ONLY] = JctStats(10.0, (10.0, 10.0), 20.0)
    curve[-1].by[Scheme.IDEAL] = JctStats(5.0, (5.0, 5.0), 10.0)
    first, rises = curves.pool_goals(curve)
    assert first == (
        "pool curve (overload): esa-aging with 8 slots / ps-only 1.050, goal <= 1.1: MET; "
        "with 65536 slots / ideal 1.010, goal <= 1.02: MET"
    )
    assert rises.startswith("pool curve: JCT rises with the pool (by more than 1%) only where")
    assert "NOT MET; rises at atp 8->64" in rises and "static-bdp 8->64" in rises


def test_the_shard_curve_names_a_rise_with_more_ps_hosts() -> None:
    curve = [
        replace(
            a_summary(f"overload {n} PS", 1024, 8.0, means(8.0 / n, 5.5 if n < 8 else 6.0)),
            point=replace(sweep.Point(f"overload {n} PS", "mixed", 4.0, 1024), ps_shards=n),
        )
        for n in (1, 2, 4, 8)
    ]
    rises, _ = curves.shard_lines(curve)
    assert rises.endswith(
        "NOT MET; rises at esa-equal 4->8, esa 4->8, esa-srpt 4->8, esa-aging 4->8, ideal 4->8"
    )


def test_the_shard_curve_names_the_fewest_shards_near_ideal() -> None:
    curve = [
        replace(
            a_summary(f"overload {n} PS", 1024, 8.0, means(8.0 / n, 5.5)),
            point=replace(sweep.Point(f"overload {n} PS", "mixed", 4.0, 1024), ps_shards=n),
        )
        for n in (1, 2, 4, 8)
    ]
    for s in curve:
        s.by[Scheme.IDEAL] = JctStats(1.0, (1.0, 1.0), 2.0)
    rises, line = curves.shard_lines(curve)
    assert rises == (
        "shard curve (overload, pool 1024): no scheme slower with more PS shards "
        "(by more than 1%): MET"
    )
    assert line.endswith(
        "of ideal: atp 8, static-bdp 8, static-fb 8, static-equal 8, esa-equal >8, esa >8, "
        "esa-srpt >8, esa-aging >8, ps-only >8"
    )


def test_a_solve_that_does_not_converge_stops_the_sweep_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One round and no root search."""
    monkeypatch.setattr(rates, "ROUNDS", 1)
    monkeypatch.setattr(rates, "ROOT_METHODS", ())
    pt = replace(sweep.REGIMES[5], jobs=4)
    with pytest.raises(sweep.SolveFailed, match="point 'moderate-lag', seed 0, scheme esa-equal"):
        sweep.run_one((pt, 0, Scheme.ESA_EQUAL))
