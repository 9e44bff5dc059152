"""``sim.check``: the reduced points and the goal lines side by side."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from esa import wire
from esa.schemes import SIM_SCHEMES, Scheme
from sim import check, curves
from sim.params import RTO_RTTS
from sim.sweep import SUBSET, Point
from sim.workload import MIXES, MODELS, WorkloadSpec


def test_a_reduced_point_keeps_the_network_pool_and_load() -> None:
    pt = next(p for p in SUBSET if p.name == "overload 1 PS")
    red = check.reduce(pt, rtos=2.0, jobs=5, iterations=(1, 2), max_chunks=math.inf)
    specs = red.specs(0)
    net = pt.net()
    smallest = min(MODELS[m].params_m for m in MIXES[pt.mix]) * 1e6
    assert red.point is pt
    assert red.workload() == WorkloadSpec(
        mix=pt.mix, jobs=5, load=pt.load, burst=pt.burst, iterations=(1, 2), scale=red.scale
    )
    assert smallest * red.scale / wire.K * net.pkt_ns == pytest.approx(2 * net.rto_for())
    assert len(specs) == 5
    assert all(1 <= s.iterations <= 2 for s in specs)


@pytest.mark.parametrize("pt", [p for p in SUBSET if not p.sensitivity], ids=lambda p: p.name)
def test_the_reduction_keeps_the_pool_to_window_and_iteration_ratios(pt: Point) -> None:
    """Every judged point: the pool over the window is the full point's, an
    iteration of the smallest model streams ``rtos`` timeouts, so 8 windows
    (a timeout is 8 round trips of the PS path, a window one)."""
    red = check.reduce(pt, rtos=3.0, max_chunks=math.inf)
    pool, it, full, rto = red.ratios()
    window = pt.net().window_for(Scheme.ESA)
    assert pool == pt.pool / window
    assert rto == pytest.approx(3.0)
    assert it == pytest.approx(3.0 * RTO_RTTS, rel=0.02)
    assert full * red.scale == pytest.approx(it)


def test_the_chunks_an_iteration_are_capped() -> None:
    pt = next(p for p in SUBSET if p.name == "large-bdp 1 PS")
    _, it, _, rto = check.reduce(pt, rtos=3.0, max_chunks=1000).ratios()
    assert it * pt.net().window_for(Scheme.ESA) == pytest.approx(1000)
    assert rto == pytest.approx(1000 * pt.net().pkt_ns / pt.net().rto_for())


def test_points_that_differ_in_name_only_run_once() -> None:
    """The shard curve's 1 and 2 PS hosts and the pool curve's 256, 1,024
    and 16,384 slots are judged points: their runs are the judged points',
    each run once, with the schemes only the curves read added."""
    pl = check.plan(rtos=0.01)
    keys = [check.key(t) for t in pl.tasks(1)]
    assert len(keys) == len(set(keys))
    runs = {r.point.name: r.run_name for r in pl.pools + pl.shards}
    assert runs == {
        "overload 1 PS pool 8": "overload 1 PS pool 8",
        "overload 1 PS pool 64": "overload 1 PS pool 64",
        "overload 1 PS pool 256": "overload-small-pool 1 PS",
        "overload 1 PS pool 1024": "overload 1 PS",
        "overload 1 PS pool 4096": "overload 1 PS pool 4096",
        "overload 1 PS pool 16384": "overload-large-pool 1 PS",
        "overload 1 PS pool 65536": "overload 1 PS pool 65536",
        "overload 1 PS": "overload 1 PS",
        "overload 2 PS": "overload 2 PS",
        "overload 4 PS": "overload 4 PS",
        "overload 8 PS": "overload 8 PS",
    }
    judged = len(pl.judged) * len(check.JUDGED_SCHEMES)
    curves_only = 6 * len(SIM_SCHEMES)
    added = 4 * (len(SIM_SCHEMES) - len(check.JUDGED_SCHEMES))
    assert len(keys) == 2 * (judged + curves_only + added)


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


def test_the_timeouts_of_the_packet_runs_are_named_per_point() -> None:
    """Per point (once where two share their runs) the schemes whose packet
    runs timed out, most first; the fluid model's rows never count."""
    pl = check.plan(rtos=0.01)
    small, shared = pl.pools[0], pl.pools[3]  # pool 8; pool 1,024 runs as "overload 1 PS"

    def row(red: check.Reduced, scheme: str, model: str, timeouts: int) -> dict[str, object]:
        return {"point": red.run_name, "scheme": scheme, "model": model, "timeouts": timeouts}

    rows = [
        row(small, "ps-only", "packet", 1200),
        row(small, "esa", "packet", 34000),
        row(small, "atp", "packet", 0),
        row(small, "esa", "fluid", 7),
        row(shared, "static-equal", "packet", 32),
        row(shared, "static-equal", "packet", 32),
    ]
    judged = next(r for r in pl.judged if r.run_name == shared.run_name)
    assert check.timeout_lines([small, shared, judged], rows) == [
        "overload 1 PS pool 8: esa 34,000, ps-only 1,200",
        "overload 1 PS pool 1024: static-equal 32",
    ]
    assert check.timeout_lines([small], [row(small, "esa", "fluid", 7)]) == [
        "no packet run timed out"
    ]


def test_the_check_runs_and_prints_both_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def tiny(rtos: float, jobs: int, iterations: tuple[int, int]) -> check.Plan:
        def red(pts: list[Point]) -> list[check.Reduced]:
            return [check.reduce(p, rtos, jobs, iterations) for p in pts]

        return check.Plan(
            red([SUBSET[0]]), red(curves.pool_points()[:2]), red(curves.shard_points()[:2])
        )

    monkeypatch.setattr(check, "plan", tiny)
    args = ["--rtos", "0.001", "--jobs", "2", "--iterations", "1", "1", "--procs", "0"]
    assert check.main([*args, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("1 judged points and the curves (2 pools, 2 shard counts)")
    assert out[2].split() == ["point", "pool/window", "iteration/window", "iteration/RTO"]
    assert out[4].split()[0:2] == SUBSET[0].name.split()[0:2]
    head = ["point", "best", "base", "/", "esa-aging", "srpt", "/", "equal", "best", "baseline"]
    assert out[6].split() == head
    assert out[8].startswith(SUBSET[0].name)
    goals = [n for n, line in enumerate(out) if re.match(r"goal \d+: ", line)]
    assert len(goals) >= 5
    for n in goals:
        assert out[n + 1].startswith("  fluid : ")
        assert out[n + 2].startswith("  packet: ")
    differ = sum("DISAGREE" in out[n] for n in goals)
    assert f"goal lines whose verdicts differ between the models: {differ}" in out
    at = out.index("retransmission timeouts in the packet runs (a job's every worker's, summed):")
    named = out[at + 1 : -1]
    assert named and all(": " in line or line == "no packet run timed out" for line in named)
    assert out[-1].startswith("(") and out[-1].endswith("tasks.csv)")
