"""Workers and PS on real UDP sockets (127.0.0.1) through a switch thread
running the switch model; and the two CLIs as processes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from bench import call_latency
from esa import model
from esa.job import Workers
from esa.spec import Policy
from hosts import quant
from hosts.loopswitch import LoopSwitch
from hosts.ps import ParameterServer
from hosts.transport import UdpTransport
from hosts.worker import Worker
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
        sw.add_job(j, model.JobConfig(f, (1 << f) - 1, priority=j, ps_port=1))
    switch = LoopSwitch(
        sw,
        ps={j: ps_t.addr for j in jobs},
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
                key[0], key[1], jobs[key[0]], switch.addr, worker_ts[key], rto=0.02,
                control=worker_cs[key], control_addr=ps_c.addr,
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


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(LOCAL)
        return int(s.getsockname()[1])


def test_clis_as_processes() -> None:
    ports = [free_port() for _ in range(4)]
    ps_addr, workers = ("127.0.0.1", ports[0]), [("127.0.0.1", p) for p in ports[1:3]]
    control = f"127.0.0.1:{ports[3]}"
    sw = model.SwitchModel(pool_size=16, policy=Policy.ESA)
    sw.add_job(4, model.JobConfig(2, 0b11, priority=1, ps_port=1))
    switch = LoopSwitch(sw, ps={4: ps_addr}, workers={4: workers}).start()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    sw_arg = f"127.0.0.1:{switch.addr[1]}"
    ps_cmd = ["-m", "hosts.ps_cli", "--bind", f"127.0.0.1:{ports[0]}", "--job", "4:2"]
    ps_cmd += ["--control-bind", control]
    ps_cmd += ["--switch-addr", sw_arg, "--duration", "20", "--json"]
    procs = [
        subprocess.Popen([sys.executable, *ps_cmd], stdout=subprocess.PIPE, text=True, env=env)
    ]
    for i, port in enumerate(ports[1:3]):
        cmd = ["-m", "hosts.worker_cli", "--job", "4", "--index", str(i), "--fan-in", "2"]
        cmd += ["--ps", sw_arg, "--bind", f"127.0.0.1:{port}", "--iters", "3", "--size", "3000"]
        cmd += ["--rto", "0.05", "--linger", "0.2", "--json", "--control", control]
        procs.append(
            subprocess.Popen([sys.executable, *cmd], stdout=subprocess.PIPE, text=True, env=env)
        )
    try:
        outs = [p.communicate(timeout=60)[0] for p in procs[1:]]
    finally:
        procs[0].terminate()
        ps_out = procs[0].communicate(timeout=10)[0]
        switch.stop()
    assert [p.returncode for p in procs[1:]] == [0, 0]
    for i, out in enumerate(outs):
        lines = out.strip().splitlines()
        assert [ln.split(":")[0] for ln in lines[:3]] == ["iter 0", "iter 1", "iter 2"]
        report = json.loads(lines[-1])
        assert (report["job"], report["worker"], report["iters"]) == (4, i, 3)
        assert report["jct_s"] >= sum(report["iter_s"]) > 0
        assert report["counters"]["delivered"] == 3 * quant.chunks(3000)
    ps_counters = json.loads(ps_out.strip().splitlines()[-1])["ps"]
    assert junk(ps_counters["dropped"]) == {} and ps_counters["calls_agreed"] == 3


def test_agreement_costs_about_a_round_trip() -> None:
    """The CALL / GO exchange before each call, measured on sockets: well
    under a millisecond here (``python -m bench.call_latency`` prints it)."""
    without, agreed = call_latency.extra_latency(calls=60, size=32)
    assert without > 0 and agreed - without < 0.005
