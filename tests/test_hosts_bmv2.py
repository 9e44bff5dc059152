"""Workers and PSes through real BMv2, every scheme, 5% loss each way on
every link (nftables random drop) and a pool small enough to force
fallbacks and preemptions: the loss must really happen, and every worker
must still receive every exact sum, bit for bit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runner import scenario as scn

pytestmark = pytest.mark.bmv2


def test_lossy_small_pool_sums_are_exact(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "runner", "--quiet", "--out", str(tmp_path),
         "--scenario", str(scn.SCENARIOS / "lossy.json")],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    rows = json.loads((tmp_path / "jobs.json").read_text())
    assert {r["scheme"] for r in rows} == {"esa", "atp", "static"}
    for scheme in ("esa", "atp", "static"):
        mine = [r for r in rows if r["scheme"] == scheme]
        assert all(r["dropped"] > 0 for r in mine), f"{scheme}: the links dropped nothing"
        assert sum(r["retx"] for r in mine) > 0, f"{scheme}: nothing was resent"
        assert sum(r["fallback"] for r in mine) > 0, f"{scheme}: nothing reached the PS"
    assert "every worker received every exact sum (bit for bit)" in res.stdout
    assert all(r["exact"] for r in rows)
    assert sum(r["won"] for r in rows if r["scheme"] == "esa") > 0
    assert sum(r["won"] for r in rows if r["scheme"] != "esa") == 0
