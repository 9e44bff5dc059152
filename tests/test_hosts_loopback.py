"""Workers and PS hosts on real UDP sockets (127.0.0.1) through a switch
thread running the switch model; and the two CLIs as processes."""

from __future__ import annotations

import json
import os
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
from hosts import quant
from hosts.drops import Drop
from hosts.ps import ParameterServer
from hosts.transport import UdpTransport
from hosts.worker import Worker
from testbed.loopjob import free_port
from testbed.looprig import LoopRig, in_threads
from testbed.loopswitch import LoopSwitch
from tests.test_hosts_e2e import expected, junk

LOCAL = ("127.0.0.1", 0)
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("policy", "loss"), [(Policy.ESA, 0.0), (Policy.ATP, 0.05)])
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
            t.join(timeout=60)
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

        in_threads(*[partial(run, i) for i in range(2)], timeout=60, reraise=True)
    scale = quant.job_scale(1.0, 2)
    for it in range(3):
        want = expected([inputs[0][it], inputs[1][it]], scale)
        assert all(np.array_equal(results[i][it], want) for i in range(2))
    float_shard = (2 * quant.chunks(2000) + 1) % shards
    pses = rig.loop.pses
    assert [ps.counters.float_completed for ps in pses] == [
        int(s == float_shard) for s in range(shards)
    ]
    for s, ps in enumerate(pses):
        assert junk(ps.counters.dropped) == {} and ps.counters.dropped[Drop.SHARD] == 0
        assert ps.counters.calls_agreed == 3
        assert {seq % shards for _, seq in ps.done} <= {s}


@pytest.mark.parametrize("shards", [1, 2])
def test_clis_as_processes(shards: int) -> None:
    local = "127.0.0.1"
    ps_ports = [free_port() for _ in range(shards)]
    controls = [f"{local}:{free_port()}" for _ in range(shards)]
    workers = [(local, free_port()) for _ in range(2)]
    sw = model.SwitchModel(pool_size=16, policy=Policy.ESA)
    sw.add_job(4, model.JobConfig(2, 0b11, priority=1, ps_ports=tuple(range(1, shards + 1))))
    ps = {4: tuple((local, p) for p in ps_ports)}
    switch = LoopSwitch(sw, ps=ps, workers={4: workers}).start()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    sw_arg = f"{local}:{switch.addr[1]}"
    procs = []
    for s, port in enumerate(ps_ports):
        cmd = ["-m", "hosts.ps_cli", "--bind", f"{local}:{port}", "--job", "4:2"]
        cmd += ["--control-bind", controls[s], "--shard", str(s), "--shards", str(shards)]
        cmd += ["--switch-addr", sw_arg, "--duration", "20", "--json"]
        procs.append(
            subprocess.Popen([sys.executable, *cmd], stdout=subprocess.PIPE, text=True, env=env)
        )
    for i, (_, port) in enumerate(workers):
        cmd = ["-m", "hosts.worker_cli", "--job", "4", "--index", str(i), "--fan-in", "2"]
        cmd += ["--ps", ",".join([sw_arg] * shards), "--bind", f"{local}:{port}"]
        cmd += ["--iters", "3", "--size", "3000", "--rto", "0.05", "--linger", "0.2", "--json"]
        cmd += ["--control", ",".join(controls)]
        procs.append(
            subprocess.Popen([sys.executable, *cmd], stdout=subprocess.PIPE, text=True, env=env)
        )
    try:
        outs = [p.communicate(timeout=60)[0] for p in procs[shards:]]
    finally:
        for p in procs[:shards]:
            p.terminate()
        ps_outs = [p.communicate(timeout=10)[0] for p in procs[:shards]]
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
    under a millisecond here (``python -m bench.call_latency`` prints it)."""
    without, agreed = call_latency.extra_latency(calls=60, size=32)
    assert without > 0 and agreed - without < 0.005
