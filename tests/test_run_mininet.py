"""`make run` end to end, shortened: Mininet, BMv2, controller, PSes, workers."""

from __future__ import annotations

import json
import subprocess
import sys
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
