"""`make run` end to end, shortened: Mininet, BMv2, controller, PSes, workers."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hosts.net.pcap_dump import dump
from runner import scenario as scn
from tests.wait import LIMIT_S, until

pytestmark = pytest.mark.bmv2

RUN = [sys.executable, "-m", "runner", "--quiet"]


def test_short_run_prints_tables_and_writes_results(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = subprocess.run(
        [*RUN, "--out", str(out), "--schemes", "esa,atp", "--iterations", "1", "--scale", "0.25",
         "--pcap"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    for scheme in ("esa", "atp"):
        assert f"scheme {scheme}; switch: BMv2 (simple_switch_grpc)\n" in res.stdout
    assert "JCT per job (s); switch: BMv2 (simple_switch_grpc)\n" in res.stdout
    assert "average JCT atp / esa:" in res.stdout
    # BMv2's own captures, decoded: job 1's first worker (h1, port 1) sent every chunk
    text = io.StringIO()
    dump(out / "pcaps" / "esa" / "s1-eth1_in.pcap", 0, text)
    first = scn.load(scn.DEFAULT).jobs[0].spec
    chunks = -(-int(first.values * 0.25) // 32)
    assert text.getvalue().count(f"CONTRIB   job {first.job} ") >= chunks
    requests = (out / "logs" / "atp" / "s1-p4runtime-requests.txt").read_text()
    assert requests.count("/p4.v1.P4Runtime/SetForwardingPipelineConfig\n") == 1
    jobs = [j.spec.job for j in scn.load(scn.DEFAULT).jobs]
    rows = json.loads((out / "jobs.json").read_text())
    assert sorted((r["scheme"], r["job"]) for r in rows) == [
        (p, j) for p in ("atp", "esa") for j in jobs
    ]
    assert all(r["jct_s"] > 0 and r["exact"] and r["status"] == "done" for r in rows)
    assert (out / "jct.png").stat().st_size > 0
    assert json.loads((out / "scenario.json").read_text())["pool_size"] == 2
    with (out / "slots.csv").open() as f:
        samples = list(csv.DictReader(f))
    assert {s["scheme"] for s in samples} == {"esa", "atp"}
    # every sample read the slot registers (-1: not readable); how many slots a
    # sample finds held depends on where in a chunk's short life it falls
    assert samples and all(int(s["slots"]) >= 0 for s in samples)
    assert (out / "slots.png").stat().st_size > 0


def test_faults_are_survived_and_reported(tmp_path: Path) -> None:
    """A worker killed, then BMv2 and the controller crashed and restarted,
    under ESA: the killed worker's job fails naming why, the restarts leave
    the switch's entries as they were, the other jobs' sums are exact."""
    out = tmp_path / "run"
    res = subprocess.run(
        [*RUN, "--out", str(out), "--scenario", str(scn.SCENARIOS / "priority.json"),
         "--schemes", "esa", "--iterations", "12", "--timeout", "6",
         "--fault", "kill-worker=1:1@1", "--fault", "bmv2-restart@2",
         "--fault", "controller-restart@4"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert "killed worker 1 of job 1" in res.stdout
    failed = next(ln for ln in res.stdout.splitlines() if ln.startswith("job 1 FAILED: "))
    assert "worker 0 exited 1: esa-worker: job 1 call " in failed
    assert "worker 1 killed by fault kill-worker=1:1@1" in failed
    assert res.stdout.count("the switch holds the same") == 2, res.stdout
    rows = {r["job"]: r for r in json.loads((out / "jobs.json").read_text())}
    why = failed.removeprefix("job 1 FAILED: ")
    assert (rows[1]["status"], rows[1]["reason"], rows[1]["exact"]) == ("failed", why, False)
    assert all(rows[j]["exact"] and rows[j]["status"] == "done" for j in (2, 3))
    assert "average JCT: incomplete: job 1 failed: worker 0 exited 1: " in res.stdout
    assert "every worker of every job no fault broke received every exact sum" in res.stdout


def test_ctrl_c_stops_everything_it_started(tmp_path: Path) -> None:
    """Started with SIGINT ignored, as a script's ``&`` command is: the run
    must stop on it all the same."""
    out = tmp_path / "run"
    run = subprocess.Popen(
        [*RUN, "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip
    until(lambda: run.poll() is not None or list(out.glob("logs/esa/j*w*.log")), "workers")
    assert run.poll() is None, "the run ended before its workers started"
    os.killpg(run.pid, signal.SIGINT)  # a terminal's Ctrl-C
    output, _ = run.communicate(timeout=LIMIT_S)
    assert run.returncode == 130, output
    assert "run: interrupted; everything it started is stopped" in output
    # The run inside (PID 1 of the run's PID namespace, the only process whose
    # command line holds ``out`` besides the controller) is gone, so is every
    # process of that namespace, and with its network namespace every link.
    left = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True, check=False)
    assert left.stdout == "", f"processes left behind: {left.stdout}"


def _two_tier(tmp_path: Path, jobs: list[int]) -> Path:
    """mininet/scenarios/two-tier.json with only ``jobs``, under ESA, shortened."""
    raw = json.loads((scn.SCENARIOS / "two-tier.json").read_text())
    raw["jobs"] = [j for j in raw["jobs"] if j["job"] in jobs]
    raw["schemes"] = ["esa"]
    path = tmp_path / "two-tier.json"
    path.write_text(json.dumps(raw))
    return path


def _frames(pcap: Path, job: int, ptype: str = "") -> int:
    """ESA frames of ``job`` (of type ``ptype``, if given) in a capture (BMv2
    leaves a port that saw none empty)."""
    if pcap.stat().st_size == 0:
        return 0
    text = io.StringIO()
    dump(pcap, 0, text)
    return sum(
        f" job {job} " in line and (not ptype or f" {ptype} " in line)
        for line in text.getvalue().splitlines()
    )


def test_two_tier_run_with_a_job_inside_a_rack(tmp_path: Path) -> None:
    """A BMv2 per switch of two-tier.json under one controller: job 1 sums
    exactly on its ToR t1, whose restart the controller re-syncs alone; its
    contributions never leave the rack (the spine only carries what goes to
    and comes from its PS, h9 on the spine)."""
    out = tmp_path / "run"
    res = subprocess.run(
        [*RUN, "--out", str(out), "--scenario", str(_two_tier(tmp_path, [1])),
         "--iterations", "8", "--pcap", "--fault", "bmv2-restart=t1@0.5"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert "bmv2-restart=t1@0.5 at " in res.stdout
    assert "t1: BMv2 (simple_switch_grpc) killed and restarted empty; the switches hold " in (
        res.stdout
    )
    (row,) = json.loads((out / "jobs.json").read_text())
    assert (row["job"], row["exact"], row["status"]) == (1, True, "done")
    logs = out / "logs" / "esa"
    assert {p.name for p in logs.glob("*.log")} >= {"s1.log", "t1.log", "t2.log"}
    requests = (logs / "p4runtime-requests.txt").read_text()
    assert requests.count("/p4.v1.P4Runtime/SetForwardingPipelineConfig\n") == 4
    assert json.loads((logs / "topology.json").read_text())["switches"].keys() == {
        "s1", "t1", "t2"
    }  # fmt: skip
    pcaps = out / "pcaps" / "esa"
    assert _frames(pcaps / "t1-eth1_in.pcap", 1) > 0
    assert _frames(pcaps / "t1-eth5_out.pcap", 1, "CONTRIB") == 0
    assert _frames(pcaps / "s1-eth1_in.pcap", 1, "CONTRIB") == 0
    assert _frames(pcaps / "s1-eth3_out.pcap", 1, "RESULT") > 0


def test_two_tier_run_with_a_job_across_racks(tmp_path: Path) -> None:
    """Both jobs of two-tier.json: job 2's workers are on t1 and t2, its PS
    shards on the spine's hosts; its partial sums go up to s1, which
    completes them."""
    out = tmp_path / "run"
    res = subprocess.run(
        [*RUN, "--out", str(out), "--scenario", str(_two_tier(tmp_path, [1, 2])),
         "--iterations", "2"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    rows = {r["job"]: r for r in json.loads((out / "jobs.json").read_text())}
    assert {j: (r["exact"], r["status"]) for j, r in rows.items()} == {
        1: (True, "done"),
        2: (True, "done"),
    }
    assert rows[2]["in_switch"] > 0
