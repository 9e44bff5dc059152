"""``make run --train torch`` without a network: the scenario, what each
worker is started with, and a job's result and table row."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from testbed.run import batch, report, torchjobs
from testbed.run import scenario as scn
from testbed.run import topology as topo_mod
from testbed.run.jobs import PolicyRun
from testbed.run.switches import BMV2
from testbed.run.world import PY

TORCH = scn.SCENARIOS / "torch.json"


def _overrides(*argv: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    scn.add_overrides(ap)
    return ap.parse_args(list(argv))


def test_mlp_size_and_width() -> None:
    assert [torchjobs.mlp_values(h) for h in (1, 16, 32, 64)] == [85, 1210, 2410, 4810]
    assert [torchjobs.hidden_for(v) for v in (1, 85, 1210, 2400, 4810, 32768)] == [
        1, 1, 16, 32, 64, 437,
    ]  # fmt: skip


def test_torch_scenario_and_flag() -> None:
    s = scn.load(TORCH)
    assert s.train == scn.TORCH
    assert [(j.spec.workers, j.spec.values, j.spec.iterations) for j in s.jobs] == [
        (2, 4810, 3), (2, 2410, 3), (3, 1210, 3),
    ]  # fmt: skip
    synthetic = scn.load(scn.DEFAULT)
    assert synthetic.train == scn.SYNTHETIC
    assert torchjobs.prepare(synthetic) is synthetic
    trained = torchjobs.prepare(scn.apply_overrides(synthetic, _overrides("--train", "torch")))
    assert trained.train == scn.TORCH
    assert [j.spec.values for j in trained.jobs] == [4060, 2035, 1060, 3085, 1060]
    with pytest.raises(ValueError, match="unknown train 'keras' \\(known: synthetic, torch\\)"):
        scn.check(scn.Scenario(jobs=s.jobs, train="keras"))


def test_a_worker_is_started_as_torchrun_would() -> None:
    s = torchjobs.prepare(scn.load(TORCH))
    hosts = topo_mod.assign(s, topo_mod.load(s.topology))[1]
    cmd = torchjobs.worker_command(s, s.jobs[0].spec, hosts, hosts.workers[1])
    env = {"RANK": "1", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1",
           "MASTER_PORT": "29500", "GLOO_SOCKET_IFNAME": "h2-eth0", "OMP_NUM_THREADS": "1",
           "ESA_JOB": "1", "ESA_PS": "10.0.0.3:58784", "ESA_BIND": "10.0.0.2:58784",
           "ESA_WINDOW": "16", "ESA_RTO": "0.05", "ESA_TIMEOUT": "30"}  # fmt: skip
    assert cmd == [
        "env", *(f"{k}={v}" for k, v in env.items()), PY, "-m", "examples.torch_digits",
        "--esa", "--epochs", "3", "--hidden", "64", "--bucket-cap-mb", "0.001", "--seed", "0",
    ]  # fmt: skip


def _report(rank: int, seconds: float, sha: str) -> dict[str, Any]:
    counters = {"delivered": 500, "retransmitted": rank + 2, "spurious": rank}
    return {"rank": rank, "accuracy": 0.95, "seconds": seconds, "steps": 46,
            "params_sha256": sha, "counters": counters}  # fmt: skip


def test_a_jobs_result_and_row() -> None:
    s = torchjobs.prepare(scn.load(TORCH))
    job = s.jobs[0].spec
    events = {"completed": 400, "fallback": 7, "preempt_won": 1, "preempt_suffered": 2}
    same = {(1, 0): _report(0, 9.0, "ab"), (1, 1): _report(1, 11.5, "ab")}
    r = torchjobs.result(job, same, events, lost=3)
    assert r == report.JobResult(
        job=1, jct_s=11.5, iters_per_s=46 / 11.5, chunks=500, switch_share=0.8, fallbacks=7,
        preempt_won=1, preempt_suffered=2, retransmits=5, lost=3, exact=True, accuracy=0.95,
        spurious=1,
    )  # fmt: skip
    differ = {**same, (1, 1): _report(1, 11.5, "cd")}
    wrong = torchjobs.result(job, differ, events, lost=0)
    assert not wrong.exact
    table = report.job_table("esa", s, {1: r}, BMV2.label).splitlines()
    assert table[1].endswith(" exact accuracy")
    assert table[2].endswith("  yes    0.950")
    run = PolicyRun({1: wrong}, [], [], set())
    assert batch.problems("esa", run, s.train) == ["esa: job 1: parameters differ between workers"]
    assert batch.problems("esa", run) == ["esa: job 1: sums not exact"]
    mean = report.mean_of([{1: r}, {1: report.JobResult(**{**vars(r), "accuracy": 0.85})}])
    assert mean[1].accuracy == pytest.approx(0.9)


def test_synthetic_tables_have_no_accuracy_column() -> None:
    s = scn.load(scn.DEFAULT)
    job = s.jobs[0].spec
    workers = {(job.job, 0): {"jct_s": 2.0, "counters": {"retransmitted": 0}}}
    r = report.JobResult.build(job, workers, {}, exact=True)
    assert r.accuracy is None
    assert "accuracy" not in report.job_table("esa", s, {job.job: r}, BMV2.label)
