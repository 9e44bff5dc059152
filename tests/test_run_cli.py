"""``make run RUN_ARGS=--cli`` through a pseudo-terminal, as a user types it:
the prompt, a job of the scenario by name, a job by hand with esa-ctl,
esa-ps and esa-worker on the hosts and its counters in the controller's
Prometheus metrics, the logs and captures, and nothing left behind after
``exit``.  On BMv2 and on the reference switch."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from esa.job import JobSpec
from hosts.net.pcap_dump import dump
from runner import lock
from runner.paths import ROOT
from runner.verify import SEED, expected_digests
from tests.pty_session import PtySession

SCENARIO = {
    "description": "one job of two workers",
    "pool_size": 16,
    "schemes": ["esa"],
    "topology": "single",
    "window": 8,
    "jobs": [
        {"job": 1, "workers": 2, "values": 4096, "iterations": 3, "priority": 100},
        {"job": 2, "workers": 2, "values": 4096, "iterations": 10000, "priority": 100,
         "worker_hosts": ["h7", "h8"], "ps_hosts": ["h9"]},
    ],
}  # fmt: skip
PROMPT = "mininet> "
LIMIT_S = 300
"""the outer limit of every wait for the program: each returns as soon as
what it waits for shows, so only a run that went wrong waits this long."""
LABELS = {"bmv2": "BMv2 (simple_switch_grpc)", "model": "reference switch (esa.model)"}


@pytest.mark.parametrize(
    "switch",
    [pytest.param("bmv2", marks=pytest.mark.bmv2), pytest.param("model", marks=pytest.mark.model)],
)
def test_a_job_from_the_prompt(tmp_path: Path, switch: str) -> None:
    scenario, out = tmp_path / "one.json", tmp_path / "cli"
    scenario.write_text(json.dumps(SCENARIO))
    argv = [sys.executable, "-m", "runner", "--cli", "--pcap",
            "--scenario", str(scenario), "--out", str(out), "--switch", switch]  # fmt: skip
    env = {**os.environ, "HOME": str(tmp_path), "TERM": "dumb"}
    term = PtySession(argv, env, str(ROOT))
    try:
        term.expect(
            rf"\*\*\* ESA: switch s1 is the {re.escape(LABELS[switch])}, 16 slots, scheme esa",
            LIMIT_S,
        )
        term.expect(r"job 1 +run job 1 of one.json now \(workers on h1 h2, PS on h3\)", LIMIT_S)
        term.expect(
            r"metrics +the controller's Prometheus metrics, http://127\.0\.0\.1:\d+/metrics\n",
            LIMIT_S,
        )
        term.expect(PROMPT, LIMIT_S)
        work = Path(json.loads((out / lock.PIDFILE).read_text())["work"])
        assert work.is_dir()

        term.send("job 1")
        term.expect(rf"policy esa; switch: {re.escape(LABELS[switch])}\n", LIMIT_S)
        term.expect(r"job 1: done in [0-9.]+ s; every sum exact \(bit for bit\)\n", LIMIT_S)
        term.expect(PROMPT, LIMIT_S)

        # Ctrl-C stops a job, not the world
        term.send("job 2")
        term.expect(r"job 2: [1-9][0-9]*/10000", LIMIT_S)
        os.write(term.fd, b"\x03")
        term.expect(
            r"job: interrupted; its PSes and workers are stopped and it is removed\n", LIMIT_S
        )
        term.expect(PROMPT, LIMIT_S)
        term.send("h9 pgrep -f hosts.programs.ps_cli || echo no PS")
        term.expect(r"\nno PS\n", LIMIT_S)
        term.expect(PROMPT, LIMIT_S)

        # by hand: esa-ctl from the prompt, the PS and workers in the hosts' shells
        term.send("esa admit 9 --workers h4 h5 --ps h6 --priority 100")
        term.expect(r"9 +100 +static +0\+16 +h6 +h4,h5\n", LIMIT_S)  # its home: the whole pool
        term.expect(PROMPT, LIMIT_S)
        term.send("h6 esa-ps --job 9:2 --switch-addr 10.0.0.254 > /dev/null 2>&1 &")
        term.expect(PROMPT, LIMIT_S)
        common = f"--job 9 --fan-in 2 --ps h6 --iters 3 --size 4096 --seed {SEED}"
        term.send(f"h5 esa-worker --index 1 {common} > /dev/null 2>&1 &")
        term.expect(PROMPT, LIMIT_S)
        term.send(f"h4 esa-worker --index 0 {common} --json")
        report = json.loads(term.expect(r'\{"job": 9, .*\}\n', LIMIT_S).group(0))
        assert report["sha256"] == expected_digests(JobSpec(9, 2, 4096, 3))
        term.expect(PROMPT, LIMIT_S)
        term.send("h1 esa-ctl jobs")
        term.expect(r"9 +100 +static +0\+16 +h6 +h4,h5\n", LIMIT_S)  # its home: the whole pool
        term.expect(PROMPT, LIMIT_S)
        # the controller's Prometheus metrics: job 9's sums, completed in the switch
        term.send('metrics esa_job_completed_total job="9"')
        term.expect(r'\nesa_job_completed_total\{job="9",switch="s1"\} [1-9][0-9]*\.0\n', LIMIT_S)
        term.expect(PROMPT, LIMIT_S)
        term.send("esa remove 9")
        term.expect(PROMPT, LIMIT_S)
        term.send("esa jobs")
        term.expect(r"no jobs\n", LIMIT_S)
        term.expect(PROMPT, LIMIT_S)
        # BMv2's registers over Thrift (simple_switch_CLI runs from the world),
        # the reference switch's over P4Runtime
        term.send("esa slots")
        term.expect(r"\n0 of 16 slots held\n", LIMIT_S)
        term.expect(PROMPT, LIMIT_S)

        term.send("exit")
        assert term.wait(LIMIT_S) == 0, term.seen
    finally:
        term.close()
        if (out / lock.PIDFILE).exists():  # the test failed half-way: end the world too
            lock.stop(out)
    assert "run: the prompt is closed; everything the run started is stopped" in term.seen

    # what the run leaves: logs and captures, and nothing else
    logs = out / "logs"
    assert (logs / "s1.log").stat().st_size > 0
    requests = (logs / "s1-p4runtime-requests.txt").read_text()
    assert requests.count("/p4.v1.P4Runtime/SetForwardingPipelineConfig\n") == 1
    assert "/p4.v1.P4Runtime/Write\n" in requests
    text = io.StringIO()
    dump(out / "pcaps" / "s1-eth1_in.pcap", 2, text)
    contribs = [ln for ln in text.getvalue().splitlines() if "CONTRIB   job 1 " in ln]
    assert len(contribs) >= 3 * 4096 // 32, "h1 sent every chunk of job 1 through port 1"
    assert all("10.0.0.1:58784 > 10.0.0.3:58784" in ln for ln in contribs)
    assert (out / "pcaps" / "s1-eth4_out.pcap").stat().st_size > 24
    assert not (out / lock.PIDFILE).exists()
    assert not work.exists()
    left = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True, check=False)
    assert left.stdout == "", f"processes left behind: {left.stdout}"
