"""``sim.check``: the reduced points and the goal lines side by side."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from esa import wire
from sim import check, curves
from sim.sweep import SUBSET, Point
from sim.workload import MIXES, MODELS, WorkloadSpec


def test_a_reduced_point_keeps_the_network_pool_and_load() -> None:
    pt = next(p for p in SUBSET if p.name == "overload 1 PS")
    red = check.reduce(pt, chunks=100, jobs=5, iterations=(1, 2))
    specs = red.specs(0)
    smallest = min(MODELS[m].params_m for m in MIXES[pt.mix]) * 1e6
    assert red.point is pt
    assert red.workload() == WorkloadSpec(
        mix=pt.mix, jobs=5, load=pt.load, burst=pt.burst, iterations=(1, 2), scale=red.scale
    )
    assert round(smallest * red.scale) == 100 * wire.K
    assert len(specs) == 5
    assert all(1 <= s.iterations <= 2 for s in specs)


def test_verdicts_side_by_side() -> None:
    fluid = ["a 1.2: MET", "b: MET; c: MET", "d (shown)", "e: NOT MET"]
    packet = ["a 1.3: MET", "b: NOT MET; c: MET", "d (shown)", "e: no goal"]
    lines, differ = check.side_by_side(fluid, packet)
    assert differ == 2
    assert lines == [
        "goal 1: same verdict: MET",
        "  fluid : a 1.2: MET",
        "  packet: a 1.3: MET",
        "goal 2: DISAGREE: fluid MET, MET, packet NOT MET, MET",
        "  fluid : b: MET; c: MET",
        "  packet: b: NOT MET; c: MET",
        "goal 3: shown, not judged",
        "  fluid : d (shown)",
        "  packet: d (shown)",
        "goal 4: DISAGREE: fluid NOT MET, packet -",
        "  fluid : e: NOT MET",
        "  packet: e: no goal",
    ]


def test_the_check_runs_and_prints_both_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def tiny(chunks: int, jobs: int, iterations: tuple[int, int]) -> check.Plan:
        def red(pts: list[Point]) -> list[check.Reduced]:
            return [check.reduce(p, chunks, jobs, iterations) for p in pts]

        return check.Plan(
            red([SUBSET[0]]), red(curves.pool_points()[:2]), red(curves.shard_points()[:2])
        )

    monkeypatch.setattr(check, "plan", tiny)
    args = ["--chunks", "4", "--jobs", "2", "--iterations", "1", "1", "--procs", "0"]
    assert check.main([*args, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("1 judged points and the curves (2 pools, 2 shard counts)")
    head = ["point", "best", "base", "/", "esa-aging", "srpt", "/", "equal", "best", "baseline"]
    assert out[2].split() == head
    assert out[4].startswith(SUBSET[0].name)
    goals = [n for n, line in enumerate(out) if re.match(r"goal \d+: ", line)]
    assert len(goals) >= 5
    for n in goals:
        assert out[n + 1].startswith("  fluid : ")
        assert out[n + 2].startswith("  packet: ")
    differ = sum("DISAGREE" in out[n] for n in goals)
    assert f"goal lines whose verdicts differ between the models: {differ}" in out
