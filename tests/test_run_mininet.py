"""`make run` end to end, shortened: Mininet, BMv2, controller, PSes, workers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.bmv2 import ROOT

pytestmark = pytest.mark.bmv2


def test_short_run_prints_tables_and_writes_results(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = subprocess.run(
        [sys.executable, str(ROOT / "mininet" / "run.py"), "--quiet", "--out", str(out),
         "--policies", "esa,atp", "--iterations", "1", "--scale", "0.25"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert "policy esa" in res.stdout and "policy atp" in res.stdout
    assert "average JCT atp / esa:" in res.stdout
    rows = json.loads((out / "jobs.json").read_text())
    assert sorted((r["policy"], r["job"]) for r in rows) == [
        (p, j) for p in ("atp", "esa") for j in (1, 2, 3)
    ]
    assert all(r["jct_s"] > 0 for r in rows)
    assert (out / "jct.png").stat().st_size > 0
    assert json.loads((out / "scenario.json").read_text())["pool_size"] == 64


def test_ctrl_c_stops_everything_it_started(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run = subprocess.Popen(
        [sys.executable, str(ROOT / "mininet" / "run.py"), "--quiet", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not list(out.glob("logs/esa/j*w*.log")):
        assert run.poll() is None and time.monotonic() < deadline, "workers never started"
        time.sleep(0.2)
    os.killpg(run.pid, signal.SIGINT)  # a terminal's Ctrl-C
    output, _ = run.communicate(timeout=60)
    assert run.returncode == 130, output
    assert "run: interrupted; everything it started is stopped" in output
    # The run inside (PID 1 of the run's PID namespace, the only process whose
    # command line holds ``out`` besides the controller) is gone, so is every
    # process of that namespace, and with its network namespace every link.
    left = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True, check=False)
    assert left.stdout == "", f"processes left behind: {left.stdout}"
