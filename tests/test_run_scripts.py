"""A user's own DDP script through ``make run --script``, on the reference
switch and on BMv2: a script with more steps than the scenario's
``iterations`` runs to its end under every scheme, exact, and the table
shows the steps it ran; a script that hangs after a few steps is stopped,
the reason naming the stall (``runner.stall``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from runner import scenario as scn
from runner.paths import ROOT
from runner.world import PY

SCRIPT = ROOT / "tests" / "data" / "ddp_steps.py"
STEPS = 24
"""one epoch: 1,500 training images, 750 per worker, in batches of 32."""
CHUNKS = 43
"""per step: the net's 1,370 parameters in one bucket, 32 values a chunk."""
SCENARIO = {
    "train": "torch",
    "pool_size": 16,
    "window": 16,
    "jobs": [{"job": 1, "workers": 2, "values": 1370, "iterations": 6, "size_hint": True}],
}
"""One job of two workers with an automatic priority, sized by the scenario
at 6 iterations: the script runs 24 steps."""
SWITCHES = [
    pytest.param("model", marks=pytest.mark.model),
    pytest.param("bmv2", marks=pytest.mark.bmv2),
]
RUN_S = 600.0
"""what one scheme's run may take, at most, before the test gives up."""


def _run(
    tmp_path: Path, switch: str, schemes: tuple[str, ...], *flags: str
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    pytest.importorskip("torch", reason="needs torch: pip install -e '.[torch]'")
    pytest.importorskip("sklearn", reason="needs scikit-learn: pip install -e '.[torch]'")
    path = tmp_path / "script.json"
    path.write_text(json.dumps({**SCENARIO, "schemes": list(schemes)}))
    out = tmp_path / "run"
    res = subprocess.run(
        [PY, "-m", "runner", "--quiet", "--out", str(out), "--switch", switch,
         "--scenario", str(path), "--script", str(SCRIPT), *flags],
        capture_output=True, text=True, timeout=RUN_S * len(schemes), check=False, cwd=ROOT,
    )  # fmt: skip
    return res, json.loads((out / "jobs.json").read_text())


@pytest.mark.parametrize("switch", SWITCHES)
def test_a_script_with_more_steps_than_iterations_runs_to_its_end(
    tmp_path: Path, switch: str
) -> None:
    res, rows = _run(tmp_path, switch, scn.SCHEMES, "--script-args", "--epochs 1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.endswith(
        "every worker ended with the same parameters as its peers (bit for bit)\n"
    )
    assert [(r["scheme"], r["switch"], r["status"], r["exact"], r["reason"]) for r in rows] == [
        (p, switch, "done", True, "") for p in scn.SCHEMES
    ]
    assert [(r["iterations"], r["values"], r["chunks"]) for r in rows] == [
        (STEPS, 1370, STEPS * CHUNKS)
    ] * len(scn.SCHEMES)
    assert all(r["iter_per_s"] == pytest.approx(STEPS / r["jct_s"]) for r in rows)
    shown = f"   1   done     1370 {STEPS:>10} "
    assert sum(ln.startswith(shown) for ln in res.stdout.splitlines()) == len(scn.SCHEMES)
    for scheme in scn.SCHEMES:
        for w in (0, 1):
            log = (tmp_path / "run" / "logs" / scheme / f"j1w{w}.log").read_text().splitlines()
            assert json.dumps({"rank": w, "steps": STEPS}) in log, "the script ran to its end"
            relayed = json.loads(log[-1].removeprefix("report: "))
            assert (relayed["steps"], "grads_sha256" in relayed) == (STEPS, True)


@pytest.mark.parametrize("switch", SWITCHES)
def test_a_script_that_hangs_is_stopped_naming_the_stall(tmp_path: Path, switch: str) -> None:
    res, [row] = _run(
        tmp_path, switch, ("esa",), "--script-args", "--epochs 1 --hang-after 3", "--stall", "10"
    )
    why = "no step summed and no chunk through the switch for 10 s after 3 steps; stopped"
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"job 1 FAILED: {why}\n" in res.stdout
    assert res.stderr.endswith(f"run: esa: job 1 failed: {why}\n")
    assert (row["status"], row["reason"], row["iterations"], row["exact"]) == (
        "failed", why, 3, False
    )  # fmt: skip
    for w in (0, 1):
        log = (tmp_path / "run" / "logs" / "esa" / f"j1w{w}.log").read_text()
        assert f"rank {w}: hanging after 3 steps\n" in log
