"""The packet model against the committed Mininet + BMv2 runs (sim.replay)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from esa.schemes import Scheme
from esa.spec import DEFAULT_SQUAT_US
from sim import replay
from sim.entry import mean_jct

EARLIER_RUN = replay.REFERENCE_RUN.parent / "default_run_earlier"
"""An earlier ``make run`` of the same scenario: the run-to-run spread."""


@pytest.fixture(scope="module")
def simulated() -> dict[str, dict[int, float]]:
    return replay.simulate(replay.load(replay.REFERENCE_RUN))


def test_calibration_comes_from_the_scenario() -> None:
    run = replay.load(replay.REFERENCE_RUN)
    assert run.pool == 64 and run.net.window == 32
    assert run.net.rto_ns == pytest.approx(0.05e9)
    assert len(run.jobs) == 3 and not run.net.static_fit_window
    assert run.net.squat_us_for(Scheme.ESA) == 0, "the recorded runs predate the squat rule"
    assert run.net.switch_pkt_ns == pytest.approx(1e9 / replay.SWITCH_PKT_PER_S)
    assert all(j.priority is None for j in run.jobs), "the controller's automatic rank"
    assert replay.SIMULATED_AS["esa"] is Scheme.ESA


@pytest.mark.parametrize("run_dir", [replay.REFERENCE_RUN, EARLIER_RUN])
def test_simulator_agrees_with_the_measured_runs(
    run_dir: Path, simulated: dict[str, dict[int, float]]
) -> None:
    run = replay.load(run_dir)
    result = replay.compare(run.schemes, run.measured, simulated)
    assert result.ok, result.failures
    sim = {p: mean_jct(simulated[p]) for p in run.schemes}
    meas = {p: mean_jct(run.measured[p]) for p in run.schemes}
    for p in ("atp", "static"):
        ratio_error = (sim[p] / sim["esa"]) / (meas[p] / meas["esa"]) - 1
        assert abs(ratio_error) <= replay.RATIO_TOLERANCE
    assert sim["esa"] < sim["atp"] and meas["esa"] < meas["atp"]


def test_a_disagreeing_run_exits_non_zero(tmp_path: Path) -> None:
    """A run where ATP beat ESA: the simulator disagrees, and says so."""
    shutil.copy(replay.REFERENCE_RUN / "scenario.json", tmp_path)
    rows = json.loads((replay.REFERENCE_RUN / "jobs.json").read_text())
    for r in rows:
        if r["policy"] == "atp":
            r["jct_s"] *= 0.5
    (tmp_path / "jobs.json").write_text(json.dumps(rows))
    run = replay.load(tmp_path)
    assert replay.main([str(tmp_path)]) == 1
    assert mean_jct(run.measured["atp"]) < mean_jct(run.measured["esa"])


def test_a_run_with_a_failed_job_is_refused(tmp_path: Path) -> None:
    """A failed job's time is how long it ran before it was stopped: no JCT."""
    shutil.copy(replay.REFERENCE_RUN / "scenario.json", tmp_path)
    rows = json.loads((replay.REFERENCE_RUN / "jobs.json").read_text())
    rows[1]["status"] = "failed"
    (tmp_path / "jobs.json").write_text(json.dumps(rows))
    with pytest.raises(
        ValueError, match=r"failed jobs, whose times compare with nothing: \['esa job 2'\]"
    ):
        replay.load(tmp_path)


def test_the_switch_costs_can_be_given(capsys: pytest.CaptureFixture[str]) -> None:
    """A switch that sums 3,000 packets a second and forwards four in the
    time it sums one: 333 us per summed packet, 83 us per forwarded one."""
    assert replay.main([str(replay.REFERENCE_RUN), "--forward-ratio", "0.5"]) == 2
    assert "--forward-ratio >= 1" in capsys.readouterr().err
    code = replay.main([str(replay.REFERENCE_RUN), "--switch-rate", "3000", "--forward-ratio", "4"])
    assert code in (0, 1)
    assert "switch 333 us/packet summed, 83 us forwarded" in capsys.readouterr().out


def test_a_run_with_the_default_squat_timeout_is_simulated_with_it() -> None:
    """``make run`` writes ``squat_us: null`` for each policy's default; an
    older run has no key (it predates the rule)."""
    scenario = json.loads((replay.REFERENCE_RUN / "scenario.json").read_text())
    assert "squat_us" not in scenario
    assert replay.net_for(scenario).squat_us_for(Scheme.ESA) == 0
    net = replay.net_for({**scenario, "squat_us": None})
    assert net.squat_us_for(Scheme.ESA) == DEFAULT_SQUAT_US
    assert replay.net_for({**scenario, "squat_us": 700}).squat_us_for(Scheme.ESA) == 700


def test_a_run_written_with_the_new_words_reads_as_the_old(tmp_path: Path) -> None:
    """A run recorded before ``"schemes"``, rows' ``"scheme"`` and
    ``size_hint`` (``policies``, ``policy``, ``priority: null``) and the same
    run written as ``make run`` writes it now load alike."""
    scenario = json.loads((replay.REFERENCE_RUN / "scenario.json").read_text())
    scenario["schemes"] = scenario.pop("policies")
    for job in scenario["jobs"]:
        del job["priority"]
        job["size_hint"] = True
    rows = json.loads((replay.REFERENCE_RUN / "jobs.json").read_text())
    for r in rows:
        r["scheme"] = r.pop("policy")
    (tmp_path / "scenario.json").write_text(json.dumps(scenario))
    (tmp_path / "jobs.json").write_text(json.dumps(rows))
    assert replay.load(tmp_path) == replay.load(replay.REFERENCE_RUN)


@pytest.mark.parametrize(
    ("job", "priority"),
    [({"priority": None}, None), ({}, None), ({"size_hint": True}, None), ({"priority": 7}, 7)],
)
def test_a_job_without_a_priority_ran_at_the_automatic_rank(
    job: dict[str, object], priority: int | None
) -> None:
    raw = {"job": 1, "workers": 2, "values": 64, "iterations": 3, **job}
    assert replay.recorded_job(raw).priority == priority


def test_a_scheme_the_simulator_has_not_is_named_with_its_stand_in(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``static`` (SwitchML's partitions of the run's part_size) runs as
    ``static-equal``; the output says so, and of no other scheme."""
    assert replay.simulated_as(["esa", "atp", "static", "static-equal", "esa-equal"]) == [
        "static: simulated as static-equal (the simulator has no static)"
    ]
    assert replay.main([str(replay.REFERENCE_RUN)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:3] == [
        "static: simulated as static-equal (the simulator has no static)",
        f"{'scheme':<8}{'measured s':>12}{'simulated s':>13}{'error':>8}",
    ]
