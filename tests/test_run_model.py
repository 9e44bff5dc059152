"""``make run`` on a machine without the P4 toolchain: the default scenario,
shortened, on the reference switch, every sum exact; and ``make stop`` for
a run whose launcher was killed.  These need root and Mininet only, so they
run in CI."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from runner import lock
from runner import scenario as scn
from runner.paths import ROOT
from runner.switches import BMV2_BINARIES
from tests.wait import LIMIT_S, until

pytestmark = pytest.mark.model

RUN = [sys.executable, "-m", "runner", "--quiet"]
LABEL = "reference switch (esa.model)"


def without_toolchain() -> dict[str, str]:
    """This environment with every PATH entry holding p4c or BMv2 left out."""
    path = os.environ.get("PATH", "").split(os.pathsep)
    kept = [d for d in path if not any((Path(d) / b).exists() for b in BMV2_BINARIES)]
    env = {**os.environ, "PATH": os.pathsep.join(kept)}
    for tool in ("mnexec", "unshare"):
        if shutil.which(tool, path=env["PATH"]) is None:
            pytest.skip(f"{tool} shares a directory with the P4 toolchain")
    return env


def test_make_run_without_the_toolchain_completes_on_the_reference_switch(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    res = subprocess.run(
        [*RUN, "--out", str(out), "--iterations", "2", "--scale", "0.25"],
        capture_output=True, text=True, timeout=300, check=False, env=without_toolchain(),
        cwd=ROOT,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stderr.startswith(
        "run: 'p4c-bm2-ss' not found on PATH (see README.md, Prerequisites): running on the "
        f"{LABEL} instead of BMv2"
    )
    for scheme in scn.DEFAULT_SCHEMES:
        assert f"scheme {scheme}; switch: {LABEL}\n" in res.stdout
    assert f"JCT per job (s); switch: {LABEL}\n" in res.stdout
    assert res.stdout.endswith("every worker received every exact sum (bit for bit)\n")
    jobs = [j.spec.job for j in scn.load(scn.DEFAULT).jobs]
    rows = json.loads((out / "jobs.json").read_text())
    assert sorted((r["scheme"], r["job"]) for r in rows) == sorted(
        (p, j) for p in scn.DEFAULT_SCHEMES for j in jobs
    )
    assert all(r["exact"] and r["status"] == "done" and r["switch"] == "model" for r in rows)
    # every sum the switch completed reached the job's PS too, on links that
    # dropped nothing (ESA and STATIC send the PS's copy from the switch's
    # address, which the PS takes it from, on hosts left as Linux sets them)
    for r in rows:
        logs = out / "logs" / r["scheme"]
        got = sum(json.loads(f.read_text())["ps"]["switch_results"]
                  for f in logs.glob(f"j{r['job']}ps*.json"))  # fmt: skip
        switch = round(r["in_switch"] * r["chunks"])
        assert got == switch or r["dropped"] > 0, (r["scheme"], r["job"], got, switch)
    assert any(r["scheme"] == "esa" and r["in_switch"] > 0 and r["dropped"] == 0 for r in rows)
    assert json.loads((out / "scenario.json").read_text())["switch"] == "model"
    with (out / "slots.csv").open() as f:
        samples = list(csv.DictReader(f))
    held = [int(s["slots"]) for s in samples]
    # every sample read the registers; whether one caught a slot held is
    # the machine's timing (a slot lives microseconds under ESA), so what
    # the registers hold is checked exactly in tests/test_refswitch.py,
    # test_the_run_timeline_reads_the_slots_over_p4runtime
    assert held and min(held) >= 0, "the reference switch serves its slot registers over P4Runtime"
    assert max(int(s["completed"]) for s in samples) > 0
    assert (out / "slots.png").stat().st_size > 0
    switch_log = (out / "logs" / "esa" / "s1.log").read_text()
    assert switch_log.count("refswitch ports 1@s1-eth1 ") == 1
    assert "refswitch stopped: " in switch_log.splitlines()[-1]
    assert not (out / lock.PIDFILE).exists()


def test_make_stop_ends_a_run_whose_launcher_died(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run = subprocess.Popen(
        [*RUN, "--out", str(out), "--switch", "model", "--scenario",
         str(scn.SCENARIOS / "priority.json"), "--schemes", "esa", "--iterations", "1000"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    until(lambda: run.poll() is not None or list(out.glob("logs/esa/j*w*.log")), "workers")
    assert run.poll() is None, "the run ended before its workers started"
    rec = lock.read(out)
    assert rec is not None and rec.world is not None
    os.kill(run.pid, signal.SIGKILL)  # the launcher dies; its world goes on
    run.wait()
    assert rec.world.alive and Path(rec.work).is_dir()
    res = subprocess.run(
        ["make", "-s", "stop", f"RUN_ARGS=--out {out} --schemes esa"],
        capture_output=True, text=True, timeout=LIMIT_S, check=False, cwd=ROOT,
    )  # fmt: skip
    assert (res.returncode, res.stderr) == (0, "")
    assert res.stdout == (
        f"{out}: stopped the run (world pid {rec.world.pid}) and all it started\n"
        f"{out}: removed the run's work directory {rec.work}\n"
        f"{out}: removed run.pid (pid {run.pid})\n"
    )
    assert not rec.world.alive
    left = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True, check=False)
    assert left.stdout == "", f"processes left behind: {left.stdout}"
    again = subprocess.run(["make", "-s", "stop", f"RUN_ARGS=--out {out}"], capture_output=True,
                           text=True, timeout=LIMIT_S, check=False, cwd=ROOT)  # fmt: skip
    assert again.stdout == f"{out}: no run\n"


def test_a_job_on_two_ps_hosts(tmp_path: Path) -> None:
    """shards.json, shortened, on a pool of one slot so that both jobs'
    chunks fall back (with the scenario's 16 slots, whether job 1 ever
    reaches its PS hosts depends on which job holds the slots): job 1's
    chunks go to the PS on h5 or h6 by their low bit (one PS process per
    shard), each PS takes its own chunks only, and every sum is exact."""
    out = tmp_path / "run"
    res = subprocess.run(
        [*RUN, "--out", str(out), "--switch", "model", "--scenario",
         str(scn.SCENARIOS / "shards.json"), "--schemes", "esa", "--iterations", "2",
         "--scale", "0.25", "--pool", "1", "--part-size", "0"],
        capture_output=True, text=True, timeout=300, check=False, cwd=ROOT,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    rows = json.loads((out / "jobs.json").read_text())
    assert sorted(r["job"] for r in rows) == [1, 2]
    assert all(r["exact"] and r["status"] == "done" for r in rows)
    logs = out / "logs" / "esa"
    for shard in (0, 1):
        ps = json.loads((logs / f"j1ps{shard}.json").read_text().splitlines()[-1])["ps"]
        assert ps["switch_results"] + ps["completed"] > 0
        assert ps["other_shard_results"] == 0
    assert sorted(p.name for p in logs.glob("j*ps*.json")) == [
        "j1ps0.json", "j1ps1.json", "j2ps0.json"
    ]  # fmt: skip
    ran = json.loads((out / "scenario.json").read_text())["jobs"]
    assert [(j["worker_hosts"], j["ps_hosts"]) for j in ran] == [
        (["h1", "h2", "h3", "h4"], ["h5", "h6"]),
        (["h7", "h8"], ["h9"]),
    ]
