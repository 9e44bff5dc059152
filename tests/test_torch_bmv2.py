"""The DDP hook on real BMv2: ``make run --train torch`` with one job of two
workers on Mininet hosts (the controller as ``esa-ctl serve``, a PS, Gloo
over the hosts' links), against the same training with Gloo's all-reduce."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs torch: pip install -e '.[torch]'")
pytest.importorskip("sklearn", reason="needs scikit-learn: pip install -e '.[torch]'")

from hosts.net import quant
from runner import scenario as scn
from runner import torchjobs
from tests.test_torch_hook import finish, launch, reports

pytestmark = pytest.mark.bmv2

SCENARIO = {
    "train": "torch",
    "pool_size": 64,
    "schemes": ["esa"],
    "window": 16,
    "jobs": [{"job": 1, "workers": 2, "values": 2410, "iterations": 3, "priority": 100}],
}
"""Three epochs of the digits MLP with 32 hidden units (2,410 parameters)."""


def run_on_bmv2(tmp_path: Path, scenario: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``make run`` of ``scenario``'s one job on BMv2: what it printed and the job's row."""
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(scenario))
    out = tmp_path / "run"
    res = subprocess.run(
        [sys.executable, "-m", "runner", "--quiet", "--out", str(out),
         "--scenario", str(path), "--switch", "bmv2"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    [row] = json.loads((out / "jobs.json").read_text())
    return res.stdout, row


def test_ddp_training_through_bmv2_matches_gloo(tmp_path: Path) -> None:
    stdout, row = run_on_bmv2(tmp_path, SCENARIO)
    assert "every worker ended with the same parameters as its peers (bit for bit)" in stdout
    assert " exact accuracy\n" in stdout
    assert (row["scheme"], row["switch"], row["exact"]) == ("esa", "bmv2", True)
    assert row["status"] == "done"
    # 3 epochs of 23 steps; DDP's first step sums one bucket, later ones one per layer
    steps = 3 * 23
    assert row["chunks"] == quant.chunks(2410) + (steps - 1) * (
        quant.chunks(330) + quant.chunks(2080)
    )
    assert row["in_switch"] > 0.5, "the switch summed most chunks"

    job = torchjobs.prepare(scn.load(tmp_path / "scenario.json")).jobs[0]
    [gloo, _] = reports(finish(launch(2, torchjobs.train_args(job.spec), lambda rank: {})))
    assert gloo["accuracy"] > 0.9, "the task is learnable"
    assert abs(row["accuracy"] - gloo["accuracy"]) <= 0.01, (row["accuracy"], gloo["accuracy"])


BACKEND_SCENARIO = {
    **SCENARIO,
    "script": "examples/backend_digits.py",
    "script_args": ["--ddp", "--epochs", "3", "--hidden", "32", "--bucket-cap-mb", "0.001"],
}
"""The same training as ``SCENARIO``'s, by DDP without a hook on the ``esa``
process group (``hosts.torch.backend``): a user's script to the run."""


def test_ddp_without_a_hook_through_the_esa_backend_on_bmv2(tmp_path: Path) -> None:
    _, row = run_on_bmv2(tmp_path, BACKEND_SCENARIO)
    assert (row["scheme"], row["switch"], row["status"], row["exact"]) == (
        "esa", "bmv2", "done", True
    )  # fmt: skip
    # every all-reduce is a step of the group: one bucket in DDP's first step, two after
    steps = 3 * 23
    assert (row["iterations"], row["values"]) == (1 + (steps - 1) * 2, 2410)
    assert row["chunks"] == quant.chunks(2410) + (steps - 1) * (
        quant.chunks(330) + quant.chunks(2080)
    )
    assert row["in_switch"] > 0.5, "the switch summed most chunks"
    assert row["accuracy"] > 0.9, "the script's own accuracy line"
