"""The Mininet run's scenario parsing and result tables (no network needed)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "mininet"))

import report
import scenario as scn

DEFAULT = Path(__file__).resolve().parent.parent / "mininet" / "scenarios" / "default.json"


def test_default_scenario_loads() -> None:
    s = scn.load(DEFAULT)
    assert s.policies == ("esa", "atp", "static")
    assert len(s.jobs) >= 2
    assert len({j.values for j in s.jobs}) > 1, "the default run mixes job sizes"
    assert all(j.priority is None for j in s.jobs)


@pytest.mark.parametrize(
    ("job", "message"),
    [
        ({"job": 0, "workers": 2, "values": 1, "iterations": 1}, "job id 0 is outside"),
        ({"job": 1, "workers": 1, "values": 1, "iterations": 1}, "workers must be 2..32"),
        ({"job": 1, "workers": 33, "values": 1, "iterations": 1}, "workers must be 2..32"),
        ({"job": 1, "workers": 2, "values": 0, "iterations": 1}, "must be positive"),
        ({"job": 1, "workers": 2, "values": 1, "iterations": 1, "priority": 256}, "priority"),
        ({"job": 1, "workers": 2, "values": 1, "iterations": 1, "colour": 1}, "unknown field"),
    ],
)
def test_bad_job_entries_are_rejected(job: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        scn.parse_job(job)


def test_overrides(tmp_path: Path) -> None:
    ap = argparse.ArgumentParser()
    scn.add_overrides(ap)
    args = ap.parse_args(["--pool", "16", "--policies", "esa,atp", "--scale", "0.5", "--loss", "5"])
    s = scn.apply_overrides(scn.load(DEFAULT), args)
    base = scn.load(DEFAULT)
    assert (s.pool_size, s.policies, s.link.loss_pct) == (16, ("esa", "atp"), 5.0)
    assert [j.values for j in s.jobs] == [j.values // 2 for j in base.jobs]


def test_unknown_policy_is_rejected(tmp_path: Path) -> None:
    raw = json.loads(DEFAULT.read_text())
    raw["policies"] = ["esa", "fifo"]
    path = tmp_path / "s.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="unknown policy 'fifo'"):
        scn.load(path)


def test_tables_and_files(tmp_path: Path) -> None:
    s = scn.load(DEFAULT)
    workers = {
        (j.job, w): {"jct_s": 2.0 * j.job + w, "counters": {"retransmitted": 1}}
        for j in s.jobs
        for w in range(j.workers)
    }
    stats = {"jobs": {str(j.job): {"completed": 10, "fallback": 3} for j in s.jobs}}
    results = {
        p: {j.job: report.JobResult.build(j, workers, stats, exact=True) for j in s.jobs}
        for p in ("esa", "atp")
    }
    r1 = results["esa"][1]
    assert (r1.jct_s, r1.fallbacks, r1.retransmits) == (3.0, 3, 2)
    table = report.comparison_table(s, results)
    assert "average JCT atp / esa: 1.00" in table
    runs = {p: [r, r] for p, r in results.items()}
    written = report.write(tmp_path, s, results, runs)
    assert [p.name for p in written] == ["jobs.csv", "jobs.json", "rounds.json", "jct.png"]
    assert len(json.loads((tmp_path / "jobs.json").read_text())) == 2 * len(s.jobs)
    assert len(json.loads((tmp_path / "rounds.json").read_text())) == 4 * len(s.jobs)


def test_mean_over_rounds() -> None:
    s = scn.load(DEFAULT)
    job = s.jobs[0]
    stats = {"jobs": {str(job.job): {"completed": 10, "fallback": 4}}}

    def one(jct: float, exact: bool) -> report.JobResult:
        workers = {(job.job, 0): {"jct_s": jct, "counters": {"retransmitted": 2}}}
        return report.JobResult.build(job, workers, stats, exact=exact)

    mean = report.mean_of([{job.job: one(2.0, True)}, {job.job: one(4.0, False)}])[job.job]
    assert (mean.jct_s, mean.fallbacks, mean.retransmits, mean.exact) == (3.0, 4, 2, False)
    table = report.rounds_table({"esa": [{job.job: one(2.0, True)}, {job.job: one(4.0, True)}]})
    assert "esa:   2.00   4.00   mean 3.00" in table
