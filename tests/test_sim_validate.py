"""The packet model against the committed Mininet + BMv2 runs (sim.validate)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sim import validate
from sim.params import Scheme
from sim.scenario import mean_jct

EARLIER_RUN = validate.REFERENCE_RUN.parent / "default_run_earlier"
"""An earlier ``make run`` of the same scenario: the run-to-run spread."""


@pytest.fixture(scope="module")
def simulated() -> dict[str, dict[int, float]]:
    return validate.simulate(validate.load(validate.REFERENCE_RUN))


def test_calibration_comes_from_the_scenario() -> None:
    run = validate.load(validate.REFERENCE_RUN)
    assert run.pool == 64 and run.net.window == 32
    assert run.net.rto_ns == pytest.approx(0.05e9)
    assert len(run.jobs) == 3 and not run.net.static_fit_window
    assert run.net.squat_us_for(Scheme.ESA) == 0, "the recorded runs predate the squat rule"
    assert run.net.switch_pkt_ns == pytest.approx(1e9 / validate.SWITCH_PKT_PER_S)
    assert all(j.priority is None for j in run.jobs), "the controller's automatic rank"
    assert validate.SCHEMES["esa"] is Scheme.ESA


@pytest.mark.parametrize("run_dir", [validate.REFERENCE_RUN, EARLIER_RUN])
def test_simulator_agrees_with_the_measured_runs(
    run_dir: Path, simulated: dict[str, dict[int, float]]
) -> None:
    run = validate.load(run_dir)
    result = validate.compare(run.policies, run.measured, simulated)
    assert result.ok, result.failures
    sim = {p: mean_jct(simulated[p]) for p in run.policies}
    meas = {p: mean_jct(run.measured[p]) for p in run.policies}
    for p in ("atp", "static"):
        ratio_error = (sim[p] / sim["esa"]) / (meas[p] / meas["esa"]) - 1
        assert abs(ratio_error) <= validate.RATIO_TOLERANCE
    assert sim["esa"] < sim["atp"] and meas["esa"] < meas["atp"]


def test_a_disagreeing_run_exits_non_zero(tmp_path: Path) -> None:
    """A run where ATP beat ESA: the simulator disagrees, and says so."""
    shutil.copy(validate.REFERENCE_RUN / "scenario.json", tmp_path)
    rows = json.loads((validate.REFERENCE_RUN / "jobs.json").read_text())
    for r in rows:
        if r["policy"] == "atp":
            r["jct_s"] *= 0.5
    (tmp_path / "jobs.json").write_text(json.dumps(rows))
    run = validate.load(tmp_path)
    assert validate.main([str(tmp_path)]) == 1
    assert mean_jct(run.measured["atp"]) < mean_jct(run.measured["esa"])
