"""A job started again and again, and its PS killed mid-call, on 127.0.0.1.

    .venv/bin/python -m bench.restarts --runs 10

The real CLIs as processes (``esa-ps``, ``esa-worker``; the switch model
between them, ``testbed.loopswitch``), one job of two workers:

1. **Restarts**: the job runs ``--runs`` times in a row under the same id
   against the same PS, each run new worker processes (new nonces) with
   new gradients; each run's sums must be exact (docs/agreement.md: a job
   started again after its workers exited is accepted at once).
2. **PS kills**: ``--runs`` runs in which the PS is killed (SIGKILL) 0 to
   0.2 s after the first call ended, while the second one starts and
   streams, and started again on the same ports half a second later.
   The call in progress must end exact or fail with a named error within
   its deadline; every call after it exact.  A run whose call
   failed is followed by a fresh run, whose calls must all be exact.

It prints one line per run and a summary; it exits 1 if a sum was wrong or
a call ended otherwise than the agreement promises.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import IO

from esa import model
from esa.job import JobSpec
from esa.spec import Policy
from hosts.net.transport import Addr
from runner.paths import ROOT
from runner.verify import expected_digests
from testbed.loopswitch import LoopSwitch

JOB, FAN_IN = 7, 2
LOCAL = "127.0.0.1"
TIMEOUT_S = 20.0
"""Each call's deadline (``esa-worker --timeout``)."""
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _spawn(args: list[str], err: int | IO[str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.PIPE, stderr=err, text=True, env=ENV
    )


def _bound(proc: subprocess.Popen[str], prefix: str) -> tuple[Addr, Addr]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    m = re.match(rf"{prefix} ([\d.]+):(\d+), control on ([\d.]+):(\d+)", line)
    if m is None:
        raise RuntimeError(f"{prefix}: {line!r}")
    return (m[1], int(m[2])), (m[3], int(m[4]))


class Rig:
    """A switch model thread and one PS process, which ``kill_ps`` ends and
    ``start_ps`` starts again on the same ports."""

    def __init__(self) -> None:
        sw = model.SwitchModel(pool_size=64, policy=Policy.ESA)
        sw.add_job(JOB, model.JobConfig(FAN_IN, (1 << FAN_IN) - 1, priority=1, ps_ports=(1,)))
        self.ps_addrs: dict[int, tuple[Addr, ...]] = {}
        self.workers: dict[int, list[Addr]] = {}
        self.switch = LoopSwitch(sw, ps=self.ps_addrs, workers=self.workers).start()
        self.data: Addr = (LOCAL, 0)
        self.control: Addr = (LOCAL, 0)
        self.ps: subprocess.Popen[str] | None = None
        self.start_ps()

    def start_ps(self) -> None:
        args = ["-m", "hosts.programs.ps_cli", "--bind", "{}:{}".format(*self.data)]
        args += ["--control-bind", "{}:{}".format(*self.control), "--job", f"{JOB}:{FAN_IN}"]
        args += ["--switch-addr", "{}:{}".format(*self.switch.addr)]
        self.ps = _spawn(args, subprocess.DEVNULL)
        self.data, self.control = _bound(self.ps, "PS on")
        self.ps_addrs[JOB] = (self.data,)

    def kill_ps(self) -> None:
        assert self.ps is not None
        self.ps.send_signal(signal.SIGKILL)
        self.ps.wait()

    def close(self) -> None:
        if self.ps is not None and self.ps.poll() is None:
            self.ps.terminate()
            self.ps.wait()
        self.switch.stop()


@dataclass
class Run:
    """One run's workers: their reports, the error a failed one printed,
    and the iterations every worker finished."""

    reports: list[dict[str, object]]
    errors: list[str]
    finished: int
    seconds: float


def run_job(rig: Rig, seed: int, iters: int, size: int, kill_after: float | None) -> Run:
    """Two worker processes, ``iters`` calls of ``size`` values each;
    ``kill_after``: seconds after worker 0 finished its first call to kill
    the PS (the second call streams then), which starts again 0.5 s later."""
    procs = []
    for i in range(FAN_IN):
        args = ["-m", "hosts.programs.worker_cli", "--job", str(JOB), "--index", str(i)]
        args += ["--fan-in", str(FAN_IN), "--ps", "{}:{}".format(*rig.switch.addr)]
        args += ["--control", "{}:{}".format(*rig.control), "--bind", f"{LOCAL}:0"]
        args += ["--iters", str(iters), "--size", str(size), "--seed", str(seed)]
        args += ["--rto", "0.05", "--timeout", str(TIMEOUT_S), "--linger", "0.3", "--json"]
        procs.append(_spawn(args, subprocess.PIPE))
    start = time.monotonic()
    rig.workers[JOB] = [_bound(p, "worker on")[0] for p in procs]
    first = ""
    if kill_after is not None:
        assert procs[0].stdout is not None
        first = procs[0].stdout.readline()
        time.sleep(kill_after)
        rig.kill_ps()
        time.sleep(0.5)
        rig.start_ps()
    outs = [p.communicate(timeout=TIMEOUT_S * (iters + 2)) for p in procs]
    seconds = time.monotonic() - start
    reports, errors, done = [], [], []
    for k, (out, err) in enumerate(outs):
        lines = ((first if k == 0 else "") + out).strip().splitlines()
        done.append(sum(ln.startswith("iter ") for ln in lines))
        if lines and lines[-1].startswith("{"):
            reports.append(json.loads(lines[-1]))
        if err.strip():
            errors.append(err.strip().splitlines()[-1])
    return Run(reports, errors, min(done), seconds)


def exact_calls(run: Run, seed: int, iters: int, size: int) -> list[bool]:
    """Per call every worker finished: did each get the exact sum?"""
    want = expected_digests(JobSpec(JOB, FAN_IN, size, iters), seed)
    got = [r.get("sha256", []) for r in run.reports]
    return [
        len(got) == FAN_IN and all(isinstance(g, list) and g[k] == want[k] for g in got)
        for k in range(run.finished)
    ]


def restarts(rig: Rig, runs: int, iters: int, size: int) -> bool:
    ok = True
    for n in range(runs):
        run = run_job(rig, seed=100 + n, iters=iters, size=size, kill_after=None)
        exact = exact_calls(run, 100 + n, iters, size)
        good = run.finished == iters and all(exact) and not run.errors
        ok &= good
        print(
            f"restart {n + 1:2}: {sum(exact)}/{iters} calls exact in {run.seconds:.2f} s"
            + ("" if good else f"  FAILED: {run.errors}"),
            flush=True,
        )
    return ok


def kills(rig: Rig, runs: int, iters: int, size: int) -> tuple[bool, int, int]:
    """(as promised, interrupted calls that completed exact, that failed named)."""
    ok, completed, failed = True, 0, 0
    for n in range(runs):
        seed = 200 + n
        run = run_job(rig, seed, iters, size, kill_after=0.05 * (n % 5))
        exact = exact_calls(run, seed, iters, size)
        if run.finished == iters:
            good = all(exact)
            completed += good
            verdict = f"{sum(exact)}/{iters} calls exact, none failed"
        else:
            after = run_job(rig, seed + 1000, 2, size, kill_after=None)
            after_exact = exact_calls(after, seed + 1000, 2, size)
            named = bool(run.errors) and all("job" in e for e in run.errors)
            good = all(exact) and named and after.finished == 2 and all(after_exact)
            failed += named
            verdict = (
                f"{sum(exact)}/{run.finished} calls before the failure exact; "
                f"failed: {run.errors[0] if run.errors else '(no error printed)'}; "
                f"the next run {sum(after_exact)}/2 exact"
            )
        ok &= good
        print(
            f"PS kill {n + 1:2}: {verdict} ({run.seconds:.2f} s)"
            + ("" if good else "  NOT AS PROMISED"),
            flush=True,
        )
    return ok, completed, failed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.restarts", description=__doc__)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--iters", type=int, default=4)
    ap.add_argument("--size", type=int, default=64_000, help="values per call")
    args = ap.parse_args(argv)
    rig = Rig()
    try:
        restarted = restarts(rig, args.runs, args.iters, args.size)
        killed, completed, failed = kills(rig, args.runs, args.iters, args.size)
    finally:
        rig.close()
    print(
        f"restarts: {'all exact' if restarted else 'NOT all exact'}; PS kills: the interrupted "
        f"call completed exact {completed} times, failed with a named error {failed} times; "
        + ("every promise kept" if killed else "a promise BROKEN")
    )
    return 0 if restarted and killed else 1


if __name__ == "__main__":
    raise SystemExit(main())
