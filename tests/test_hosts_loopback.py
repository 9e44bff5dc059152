"""Workers and PS hosts on real UDP sockets (127.0.0.1) through a switch
thread running the switch model; and the two CLIs as processes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from functools import partial
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from bench import call_latency
from esa import model
from esa.job import Workers
from esa.spec import Policy
from hosts.net import quant
from hosts.net.drops import HostDrop
from hosts.net.transport import Addr, UdpTransport
from hosts.ps.parameter_server import ParameterServer
from hosts.worker.agent import Worker
from testbed.looprig import LoopRig, in_threads
from testbed.loopswitch import LoopSwitch
from tests.test_hosts_e2e import expected, junk
from tests.wait import LIMIT_S

LOCAL = ("127.0.0.1", 0)
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("policy", "loss"), [(Policy.ESA, 0.0), (Policy.ATP, 0.05), (Policy.ESA, 0.2)]
)
def test_two_jobs_over_loopback(policy: Policy, loss: float) -> None:
    jobs = {1: 2, 2: 3}
    ps_t, ps_c = UdpTransport(LOCAL), UdpTransport(LOCAL)
    worker_ts = {(j, i): UdpTransport(LOCAL) for j, f in jobs.items() for i in range(f)}
    worker_cs = {k: UdpTransport(LOCAL) for k in worker_ts}
    sw = model.SwitchModel(pool_size=8, policy=policy)
    for j, f in jobs.items():
        sw.add_job(j, model.JobConfig(f, (1 << f) - 1, priority=j, ps_ports=(1,)))
    switch = LoopSwitch(
        sw,
        ps={j: (ps_t.addr,) for j in jobs},
        workers={j: [worker_ts[j, i].addr for i in range(f)] for j, f in jobs.items()},
        loss=loss,
        seed=1,
    ).start()
    specs = {j: Workers.of(f) for j, f in jobs.items()}
    ps = ParameterServer(ps_t, switch.addr, specs, stall=0.05, control=ps_c)
    stop = threading.Event()
    ps_thread = threading.Thread(target=ps.serve, args=(stop.is_set,))
    ps_thread.start()
    rng = np.random.default_rng(7)
    inputs = {k: [rng.uniform(-1, 1, 1000).astype(np.float32) for _ in range(3)] for k in worker_ts}
    inputs[1, 0][1][5] = 4.0
    results: dict[tuple[int, int], list[npt.NDArray[np.float32]]] = {}
    errors: list[BaseException] = []

    def run(key: tuple[int, int]) -> None:
        try:
            w = Worker(
                key[0], key[1], jobs[key[0]], (switch.addr,), worker_ts[key], rto=0.02,
                control=worker_cs[key], control_addrs=(ps_c.addr,),
            )  # fmt: skip
            results[key] = [w.allreduce(x) for x in inputs[key]]
            w.linger(0.3)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,)) for k in worker_ts]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=LIMIT_S)
    finally:
        stop.set()
        ps_thread.join()
        switch.stop()
        for tr in [ps_t, ps_c, *worker_ts.values(), *worker_cs.values()]:
            tr.close()
    assert errors == []
    for j, f in jobs.items():
        scale = quant.job_scale(1.0, f)
        for it in range(3):
            want = expected([inputs[j, i][it] for i in range(f)], scale)
            for i in range(f):
                assert np.array_equal(results[j, i][it], want)
    assert ps.counters.float_completed == 1
    assert junk(ps.counters.dropped) == {}
    assert ps.counters.calls_agreed == 2 * 3
    assert (switch.lost > 0) == (loss > 0)


@pytest.mark.parametrize("shards", [1, 2])
def test_two_workers_and_their_ps_shards_sum_exactly(shards: int) -> None:
    rng = np.random.default_rng(3)
    inputs = [[rng.uniform(-1, 1, 2000).astype(np.float32) for _ in range(3)] for _ in range(2)]
    inputs[0][2][33] = 5.0
    results: dict[int, list[npt.NDArray[np.float32]]] = {}
    with LoopRig(2, job=6, shards=shards, pool=8, loss=0.02) as rig:
        ws = [rig.worker(i, rto=0.02) for i in range(2)]

        def run(i: int) -> None:
            results[i] = [ws[i].allreduce(x) for x in inputs[i]]
            ws[i].linger(0.3)

        in_threads(*[partial(run, i) for i in range(2)], timeout=LIMIT_S, reraise=True)
    scale = quant.job_scale(1.0, 2)
    for it in range(3):
        want = expected([inputs[0][it], inputs[1][it]], scale)
        assert all(np.array_equal(results[i][it], want) for i in range(2))
    offset = ws[0].cur.offset if ws[0].cur is not None else None
    assert offset is not None and all(w.cur is not None and w.cur.offset == offset for w in ws)
    float_shard = (offset + 2 * quant.chunks(2000) + 1) % shards
    pses = rig.loop.pses
    assert [ps.counters.float_completed for ps in pses] == [
        int(s == float_shard) for s in range(shards)
    ]
    for s, ps in enumerate(pses):
        assert junk(ps.counters.dropped) == {} and ps.counters.dropped[HostDrop.SHARD] == 0
        assert ps.counters.calls_agreed == 3
        assert {seq % shards for _, seq in ps.done} <= {s}


def bound(proc: subprocess.Popen[str], prefix: str) -> list[Addr]:
    """The addresses a host CLI reports on its first line (``PREFIX HOST:PORT,
    control on HOST:PORT...``) once it has bound them."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    m = re.match(rf"{prefix} ([\d.]+):(\d+), control on ([\d.]+):(\d+)", line)
    assert m is not None, f"{prefix}: {line!r}"
    return [(m[1], int(m[2])), (m[3], int(m[4]))]


@pytest.mark.parametrize("shards", [1, 2])
def test_clis_as_processes(shards: int) -> None:
    """Every host binds port 0 and reports what it got; the switch learns
    the addresses before it forwards a datagram (what the hosts send it
    before waits in its socket)."""
    local = "127.0.0.1"
    sw = model.SwitchModel(pool_size=16, policy=Policy.ESA)
    sw.add_job(4, model.JobConfig(2, 0b11, priority=1, ps_ports=tuple(range(1, shards + 1))))
    ps: dict[int, tuple[Addr, ...]] = {}
    workers: dict[int, list[Addr]] = {}
    switch = LoopSwitch(sw, ps=ps, workers=workers)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    sw_arg = "{}:{}".format(*switch.addr)
    procs = []
    try:
        for s in range(shards):
            cmd = ["-m", "hosts.programs.ps_cli", "--bind", f"{local}:0", "--job", "4:2"]
            cmd += ["--control-bind", f"{local}:0", "--shard", str(s), "--shards", str(shards)]
            cmd += ["--switch-addr", sw_arg, "--duration", str(LIMIT_S), "--json"]
            procs.append(
                subprocess.Popen([sys.executable, *cmd], stdout=subprocess.PIPE, text=True, env=env)
            )
        pses = [bound(p, "PS on") for p in procs]
        controls = ",".join("{}:{}".format(*control) for _, control in pses)
        for i in range(2):
            cmd = [
                "-m",
                "hosts.programs.worker_cli",
                "--job",
                "4",
                "--index",
                str(i),
                "--fan-in",
                "2",
            ]
            cmd += ["--ps", ",".join([sw_arg] * shards), "--bind", f"{local}:0"]
            cmd += ["--iters", "3", "--size", "3000", "--rto", "0.05", "--linger", "0.2"]
            cmd += ["--json", "--control", controls]
            procs.append(
                subprocess.Popen([sys.executable, *cmd], stdout=subprocess.PIPE, text=True, env=env)
            )
        ps[4] = tuple(data for data, _ in pses)
        workers[4] = [bound(p, "worker on")[0] for p in procs[shards:]]
        switch.start()
        outs = [p.communicate(timeout=LIMIT_S)[0] for p in procs[shards:]]
    finally:
        for p in procs[:shards]:
            p.terminate()
        ps_outs = [p.communicate(timeout=LIMIT_S)[0] for p in procs[:shards]]
        for p in procs[shards:]:
            if p.poll() is None:
                p.kill()
                p.wait()
        switch.stop()
    assert [p.returncode for p in procs[shards:]] == [0, 0]
    for i, out in enumerate(outs):
        lines = out.strip().splitlines()
        assert [ln.split(":")[0] for ln in lines[:3]] == ["iter 0", "iter 1", "iter 2"]
        report = json.loads(lines[-1])
        assert (report["job"], report["worker"], report["iters"]) == (4, i, 3)
        assert report["jct_s"] >= sum(report["iter_s"]) > 0
        assert report["counters"]["delivered"] == 3 * quant.chunks(3000)
    for ps_out in ps_outs:
        counters = json.loads(ps_out.strip().splitlines()[-1])["ps"]
        assert junk(counters["dropped"]) == {} and counters["dropped"]["shard"] == 0
        assert counters["calls_agreed"] == 3


def test_agreement_costs_about_a_round_trip() -> None:
    """The CALL / GO exchange before each call, measured on sockets: well
    under a millisecond on an idle machine (``python -m bench.call_latency``
    prints it).  The bound leaves room for a loaded machine's scheduling
    and still fails a call that waits out a timer (a retransmission
    timeout, a PS stall: 50 ms here)."""
    without, agreed = call_latency.extra_latency(calls=60, size=32)
    assert without > 0 and agreed - without < 0.025
