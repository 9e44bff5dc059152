"""``make run --train torch`` without a network: the scenario, what each
worker is started with (the example or the user's script, under
``runner.torchworker``), what that relays to the run, and a job's
result and table row; and, on the reference switch in Mininet, a user's
own DDP script run end to end."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from runner import batch, report, torchjobs
from runner import main as run_main
from runner import network as topo_mod
from runner import scenario as scn
from runner.jobs import SchemeRun
from runner.paths import ROOT
from runner.switches import BMV2
from runner.world import PY
from tests.wait import until

TORCH = scn.SCENARIOS / "torch.json"
USER_SCRIPT = ROOT / "examples" / "ddp_user_script.py"


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


WORKER_ENV = {
    "RANK": "1", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29500", "GLOO_SOCKET_IFNAME": "h2-eth0", "OMP_NUM_THREADS": "1",
    "ESA_JOB": "1", "ESA_PS": "10.0.0.3:58784", "ESA_BIND": "10.0.0.2:58784",
    "ESA_WINDOW": "16", "ESA_RTO": "0.05", "ESA_TIMEOUT": "30",
}  # fmt: skip
"""What worker 1 of torch.json's job 1 is started with: torchrun's variables,
Gloo on its Mininet interface and the job's ESA settings."""
ENV = ["env", *(f"{k}={v}" for k, v in WORKER_ENV.items())]


def _worker_command(s: scn.Scenario, job: int = 1) -> list[str]:
    hosts = topo_mod.assign(s, topo_mod.load(s.topology))[job]
    spec = next(j.spec for j in s.jobs if j.spec.job == job)
    return torchjobs.worker_command(s, spec, hosts, hosts.workers[1])


def test_a_worker_is_started_as_torchrun_would() -> None:
    s = torchjobs.prepare(scn.load(TORCH))
    assert _worker_command(s) == [
        *ENV, PY, "-m", "runner.torchworker", "--epochs", "--",
        PY, "-m", "examples.torch_digits",
        "--esa", "--epochs", "3", "--hidden", "64", "--bucket-cap-mb", "0.001", "--seed", "0",
    ]  # fmt: skip


def test_a_users_script_is_started_as_the_example_is() -> None:
    flags = ("--script", "examples/ddp_user_script.py", "--script-args", "--epochs 2 --lr 0.005")
    s = scn.apply_overrides(scn.load(TORCH), _overrides(*flags))
    assert (s.script, s.script_args) == (str(USER_SCRIPT), ("--epochs", "2", "--lr", "0.005"))
    assert torchjobs.prepare(s) is s, "a script's jobs keep their values"
    # every step counts, with a size hint (job 1) or without, whatever its iterations
    assert _worker_command(s) == [
        *ENV, PY, "-m", "runner.torchworker", "--",
        PY, str(USER_SCRIPT), "--epochs", "2", "--lr", "0.005",
    ]  # fmt: skip
    static = scn.with_specs(s, lambda j: replace(j, priority=100))
    assert _worker_command(static) == _worker_command(s)
    module = replace(static, script="examples.torch_digits", script_args=("--esa",))
    assert _worker_command(module)[len(ENV) + 4 :] == [PY, "-m", "examples.torch_digits", "--esa"]


def test_a_script_in_the_scenario_file() -> None:
    raw = {**scn.as_json(scn.load(TORCH)), "script": "examples/ddp_user_script.py",
           "script_args": ["--epochs", "2"]}  # fmt: skip
    s = scn.from_json(raw)
    assert (s.script, s.script_args) == (str(USER_SCRIPT), ("--epochs", "2"))
    assert scn.from_json(scn.as_json(s)) == s
    assert scn.from_json(scn.as_json(scn.load(TORCH))).script == ""


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ("--train", "torch", "--script", str(ROOT / "examples" / "nope.py")),
            f"scenario: script {ROOT}/examples/nope.py: no such file",
        ),
        (
            ("--train", "torch", "--script", "examples.nope"),
            "scenario: script examples.nope: no such file or module (a file's name ends in .py)",
        ),
        (
            ("--script", str(USER_SCRIPT)),
            f"scenario: script {USER_SCRIPT}: a script runs under train torch (--train torch)",
        ),
        (
            ("--train", "torch", "--script-args", "--epochs 2"),
            "scenario: script_args without a script",
        ),
        (
            ("--train", "torch", "--script", str(USER_SCRIPT), "--script-args", "'--epochs 2"),
            'scenario: script_args "\'--epochs 2": No closing quotation',
        ),
    ],
)
def test_a_script_that_can_not_run_is_refused(flags: tuple[str, ...], message: str) -> None:
    with pytest.raises(ValueError) as info:
        scn.apply_overrides(scn.load(scn.DEFAULT), _overrides(*flags))
    assert str(info.value) == message


def test_a_script_module_is_found_where_the_workers_run() -> None:
    assert scn.module_found("examples.torch_digits")
    assert scn.module_found("runner.torchworker")
    assert not scn.module_found("examples.nope")
    assert not scn.module_found("examples.torch_digits.nope")
    assert not scn.module_found("not a module")
    with pytest.raises(ValueError) as info:
        scn.from_json({**scn.as_json(scn.load(TORCH)), "script_args": "--epochs 2"})
    assert str(info.value) == "scenario: script_args must be a list of strings"


def test_make_run_names_a_missing_script(capsys: pytest.CaptureFixture[str]) -> None:
    missing = ROOT / "examples" / "nope.py"
    assert run_main.main(["--train", "torch", "--script", str(missing)]) == 2
    assert capsys.readouterr() == ("", f"run: scenario: script {missing}: no such file\n")


def _hook_report(rank: int, seconds: float, **digest: str) -> dict[str, Any]:
    """What a worker's hook wrote at exit (``hosts.torch.hook``), as relayed."""
    counters = {"delivered": 2064, "retransmitted": rank, "spurious": 0}
    return {"job": 2, "rank": rank, "steps": 48, "allreduces": 48, "values": 1370,
            "seconds": seconds, "window": 16, "counters": counters, **digest}  # fmt: skip


def test_a_scripts_result_comes_from_its_hooks_reports() -> None:
    job = scn.load(TORCH).jobs[1].spec
    reports = {(2, 0): _hook_report(0, 2.0, params_sha256="ab"),
               (2, 1): _hook_report(1, 2.5, params_sha256="ab")}  # fmt: skip
    r = torchjobs.result(job, reports, {"completed": 2064}, dropped=0)
    assert r == report.JobResult(
        job=2, values=1370, iterations=48, jct_s=2.5, iter_per_s=48 / 2.5, chunks=2064,
        in_switch=1.0, fallback=0, won=0, lost=0, retx=1, early=0, dropped=0, exact=True,
        accuracy=None,
    )  # fmt: skip
    assert "accuracy" not in report.job_table("esa", {2: r}, BMV2.label)
    told = {**reports, (2, 0): {**reports[2, 0], "accuracy": 0.875}}
    assert torchjobs.result(job, told, {}, dropped=0).accuracy == 0.875
    sums = {k: {**{n: v for n, v in r.items() if n != "params_sha256"}, "grads_sha256": "cd"}
            for k, r in reports.items()}  # fmt: skip
    assert torchjobs.result(job, sums, {}, dropped=0).exact
    for other in (
        {(2, 1): _hook_report(1, 2.5, params_sha256="ef")},
        {(2, 1): _hook_report(1, 2.5, grads_sha256="ab")},
        {(2, 1): _hook_report(1, 2.5)},
    ):
        assert not torchjobs.result(job, {**reports, **other}, {}, dropped=0).exact, other
    assert not torchjobs.result(job, {(2, 0): reports[2, 0]}, {}, dropped=0).exact


def _report(rank: int, seconds: float, sha: str) -> dict[str, Any]:
    counters = {"delivered": 500, "retransmitted": rank + 2, "spurious": rank}
    return {"rank": rank, "accuracy": 0.95, "seconds": seconds, "steps": 46,
            "params_sha256": sha, "counters": counters}  # fmt: skip


def test_a_jobs_result_and_row() -> None:
    s = torchjobs.prepare(scn.load(TORCH))
    job = s.jobs[0].spec
    events = {"completed": 400, "fallback": 7, "preempt_won": 1, "preempt_suffered": 2}
    same = {(1, 0): _report(0, 9.0, "ab"), (1, 1): _report(1, 11.5, "ab")}
    r = torchjobs.result(job, same, events, dropped=3)
    assert r == report.JobResult(
        job=1, values=job.values, iterations=46, jct_s=11.5, iter_per_s=46 / 11.5, chunks=500,
        in_switch=0.8, fallback=7, won=1, lost=2, retx=5, early=1, dropped=3, exact=True,
        accuracy=0.95,
    )  # fmt: skip
    differ = {**same, (1, 1): _report(1, 11.5, "cd")}
    wrong = torchjobs.result(job, differ, events, dropped=0)
    assert not wrong.exact
    table = report.job_table("esa", {1: r}, BMV2.label).splitlines()
    assert table[1].endswith(" exact accuracy")
    assert table[2].endswith("  yes    0.950")
    run = SchemeRun({1: wrong}, [], [], set())
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
    assert "accuracy" not in report.job_table("esa", {job.job: r}, BMV2.label)


# -- runner.torchworker: between a worker's script and the run ----------

FAKE_SCRIPT = """
import json, os, sys
steps = int(os.environ["ESA_PROGRESS_FD"])
print("epoch 1/2: loss 1.0", flush=True)
for step in range(1, 8):
    os.write(steps, f"{step}\\n".encode())
print('{"accuracy": 0.5}', flush=True)
print("epoch 2/2: loss 0.5", flush=True)
print('{"rank": 0, "accuracy": 0.75}')
print("no newline at the end", end="")
with open(os.environ["ESA_REPORT"], "w") as f:
    json.dump({"steps": 7, "seconds": 1.5, "params_sha256": "ab"}, f)
sys.exit(int(sys.argv[1]))
"""
"""A script whose hook finished seven steps and wrote its report."""
SCRIPT_SAYS = [
    "epoch 1/2: loss 1.0", '{"accuracy": 0.5}', "epoch 2/2: loss 0.5",
    '{"rank": 0, "accuracy": 0.75}', "no newline at the end",
]  # fmt: skip
STEPS = [f"step {n}" for n in range(1, 8)]
"""every step the hook summed, relayed: the run counts them all."""
RELAYED = {"steps": 7, "seconds": 1.5, "params_sha256": "ab", "accuracy": 0.75}


def _relay(*opts: str, script: list[str], code: int = 0) -> subprocess.CompletedProcess[str]:
    cmd = [PY, "-m", "runner.torchworker", *opts, "--", PY, *script, str(code)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False, cwd=ROOT)


def _progress(stdout: str, start: str) -> list[str]:
    """The relayed lines that start with ``start`` (steps and epochs come
    from two pipes, so only each kind's own order is defined)."""
    return [ln for ln in stdout.splitlines() if ln.startswith(start)]


@pytest.mark.parametrize(
    ("opts", "epochs"),
    [((), []), (("--epochs",), ["epoch 1/2: loss 1.0", "epoch 2/2: loss 0.5"])],
)
def test_the_run_reads_every_step_and_the_hooks_report(
    opts: tuple[str, ...], epochs: list[str]
) -> None:
    res = _relay(*opts, script=["-c", FAKE_SCRIPT])
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert (_progress(res.stdout, "step "), _progress(res.stdout, "epoch ")) == (STEPS, epochs)
    assert (len(lines), lines[-1]) == (len(STEPS) + len(epochs) + 1, json.dumps(RELAYED))
    assert res.stderr.splitlines() == [*SCRIPT_SAYS, f"report: {json.dumps(RELAYED)}"]


def test_a_failed_script_fails_its_worker_with_its_status() -> None:
    res = _relay(script=["-c", FAKE_SCRIPT], code=3)
    assert res.returncode == 3
    assert res.stdout.splitlines() == [*STEPS, json.dumps(RELAYED)]
    assert res.stderr.splitlines() == SCRIPT_SAYS, "the run names the script's last words"


def test_a_script_that_never_registered_the_hook_fails(tmp_path: Path) -> None:
    script = tmp_path / "plain.py"
    script.write_text('print("trained without ESA")\n')
    res = _relay(script=[str(script)])
    assert (res.returncode, res.stdout) == (1, "")
    assert res.stderr == (
        "trained without ESA\n"
        f"run: {script} ended without an ESA report: it must sum through ESA, with the ESA hook "
        "on its DDP model (hosts.torch.hook.register(model)) or the esa process group "
        "(import hosts.torch.backend; dist.init_process_group('esa'))\n"
    )


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_a_killed_worker_takes_its_script_with_it() -> None:
    sleeper = "import os, time; print(os.getpid(), flush=True); time.sleep(300)"
    cmd = [PY, "-m", "runner.torchworker", "--", PY, "-c", sleeper]
    relay = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert relay.stderr is not None
        pid = int(relay.stderr.readline())
        assert not _gone(pid)
        os.kill(relay.pid, signal.SIGKILL)  # as the run kills a worker
        until(lambda: _gone(pid), "the script's end")
    finally:
        relay.kill()
        relay.wait()


# -- a user's DDP script through make run, on the reference switch -----------

USER_SCENARIO = {
    "train": "torch",
    "pool_size": 64,
    "schemes": ["esa"],
    "window": 16,
    "jobs": [{"job": 1, "workers": 2, "values": 1370, "iterations": 48, "priority": 100}],
}
"""One job of two workers; its values and iterations only size it for the
controller (the script's net has 1,370 parameters; 2 epochs are 48 steps)."""


@pytest.mark.model
def test_a_users_ddp_script_through_the_reference_switch(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="needs torch: pip install -e '.[torch]'")
    pytest.importorskip("sklearn", reason="needs scikit-learn: pip install -e '.[torch]'")
    path = tmp_path / "user.json"
    path.write_text(json.dumps(USER_SCENARIO))
    out = tmp_path / "run"
    res = subprocess.run(
        [PY, "-m", "runner", "--quiet", "--out", str(out), "--switch", "model",
         "--scenario", str(path), "--train", "torch", "--script", "examples/ddp_user_script.py",
         "--script-args", "--epochs 2"],
        capture_output=True, text=True, timeout=600, check=False, cwd=ROOT,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.endswith(
        "every worker ended with the same parameters as its peers (bit for bit)\n"
    )
    [row] = json.loads((out / "jobs.json").read_text())
    assert (row["scheme"], row["switch"], row["status"], row["exact"]) == (
        "esa", "model", "done", True
    )  # fmt: skip
    # 1,500 training images, 750 per worker: 24 steps of one bucket (43 chunks) per epoch
    steps, chunks = 2 * 24, 2 * 24 * 43
    assert (row["values"], row["chunks"]) == (1370, chunks)
    assert row["jct_s"] > 0
    assert row["iter_per_s"] == pytest.approx(steps / row["jct_s"])
    assert row["accuracy"] > 0.8, "the script's own accuracy line"
    logs = out / "logs" / "esa"
    hashes = set()
    for w in (0, 1):
        log = (logs / f"j1w{w}.log").read_text().splitlines()
        assert f"rank {w} epoch 1: loss " in "\n".join(log), "the script's output is logged"
        relayed = json.loads(log[-1].removeprefix("report: "))
        assert (relayed["rank"], relayed["steps"], relayed["window"]) == (w, steps, 16)
        hashes.add(relayed["params_sha256"])
    assert len(hashes) == 1
