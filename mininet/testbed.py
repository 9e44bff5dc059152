"""One policy's run: Mininet with a BMv2 switch, the controller, PSes and workers."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import verify
from bmv2_switch import Bmv2Switch
from mininet.link import TCLink
from mininet.log import setLogLevel
from mininet.net import Mininet
from mininet.node import Host
from report import JobResult
from scenario import JobSpec, Scenario

from controller.admin import AdminClient
from esa import wire

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
SWITCH_IP, SWITCH_MAC = "10.0.0.254", "02:00:00:00:00:fe"


@dataclass
class Member:
    name: str
    index: int
    ip: str
    mac: str
    port: int
    udp_port: int


def plan(scenario: Scenario) -> dict[int, tuple[list[Member], Member]]:
    """Hosts of each job: its workers and its PS, numbered as switch ports."""
    out: dict[int, tuple[list[Member], Member]] = {}
    port = 0

    def member(name: str, index: int, udp: int | None) -> Member:
        nonlocal port
        port += 1
        return Member(
            name, index, f"10.0.0.{port}", f"02:00:00:00:00:{port:02x}", port, udp or 40000 + port
        )

    for job in scenario.jobs:
        workers = [member(f"j{job.job}w{i}", i, None) for i in range(job.workers)]
        out[job.job] = (workers, member(f"ps{job.job}", -1, wire.UDP_PORT))
    return out


class Testbed:
    def __init__(
        self, scenario: Scenario, json_path: Path, p4info: Path, logs: Path, work: Path
    ) -> None:
        """``work``: a private directory for sockets and state; ``logs``: kept."""
        self.scenario = scenario
        self.work = work
        self.admin = f"unix:{work / 'esa-ctl.sock'}"
        self.json_path, self.p4info = json_path, p4info
        self.logs = logs
        logs.mkdir(parents=True, exist_ok=True)
        self.jobs = plan(scenario)
        self.net: Any = None
        self.ctl: subprocess.Popen[bytes] | None = None
        self.procs: list[subprocess.Popen[str]] = []

    def __enter__(self) -> Testbed:
        link = self.scenario.link
        opts: dict[str, Any] = {}
        if link.bw_mbps:
            opts["bw"] = link.bw_mbps
        if link.delay_ms:
            opts["delay"] = f"{link.delay_ms}ms"
        if link.loss_pct:
            opts["loss"] = link.loss_pct
        setLogLevel("critical")  # Mininet's resource-limit notices are not ours to fix
        net = Mininet(topo=None, build=False, controller=None, link=TCLink, autoSetMacs=False)
        self.net = net
        sw = net.addSwitch("s1", cls=Bmv2Switch, log_dir=str(self.logs), work_dir=str(self.work))
        for workers, ps in self.jobs.values():
            for m in (*workers, ps):
                h = net.addHost(m.name, ip=f"{m.ip}/24", mac=m.mac)
                net.addLink(h, sw, port2=m.port, **opts)
        net.build()
        net.start()
        net.staticArp()
        for _, ps in self.jobs.values():
            host = net.get(ps.name)
            host.cmd(f"ip neigh replace {SWITCH_IP} lladdr {SWITCH_MAC} dev {ps.name}-eth0")
        for h in net.hosts:
            for off in ("tx", "rx"):
                h.cmd(f"ethtool -K {h.name}-eth0 {off} off >/dev/null 2>&1")
        self._start_controller()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        for p in self.procs:
            _stop(p)
        if self.ctl is not None:
            _stop(self.ctl)
        if self.net is not None:
            self.net.stop()

    def _topology(self) -> Path:
        hosts = {
            m.name: {"port": m.port, "mac": m.mac, "ip": m.ip, "udp_port": m.udp_port}
            for workers, ps in self.jobs.values()
            for m in (*workers, ps)
        }
        path = self.logs / "topology.json"
        path.write_text(json.dumps({"pool_size": self.scenario.pool_size, "hosts": hosts}))
        return path

    def _start_controller(self) -> None:
        db = self.work / "esa-ctl.db"
        cmd = [
            PY, "-m", "controller.cli", "--admin", self.admin, "serve",
            "--switch", "127.0.0.1:9559", "--p4json", str(self.json_path),
            "--p4info", str(self.p4info), "--topology", str(self._topology()), "--db", str(db),
        ]  # fmt: skip
        with open(self.logs / "controller.log", "wb") as log:
            # its own session: a Ctrl-C reaches the run, which stops it in order
            self.ctl = subprocess.Popen(
                cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + 30
        while self.ctl_cmd("status", check=False).returncode != 0:
            if self.ctl.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"controller did not start; see {self.logs / 'controller.log'}")
            time.sleep(0.3)

    def ctl_cmd(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(
            [PY, "-m", "controller.cli", "--admin", self.admin, *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        if check and res.returncode != 0:
            raise RuntimeError(f"esa-ctl {' '.join(args)}: {res.stderr.strip()}")
        return res

    def _admit(self, job: JobSpec) -> None:
        workers, ps = self.jobs[job.job]
        prio = (
            ["--size", str(job.volume_bytes)]
            if job.priority is None
            else ["--priority", str(job.priority)]
        )
        self.ctl_cmd(
            "admit", str(job.job), "--workers", *[w.name for w in workers], "--ps", ps.name, *prio
        )

    def _popen(self, host_name: str, cmd: list[str], log: str) -> subprocess.Popen[str]:
        host: Host = self.net.get(host_name)
        with open(self.logs / log, "w") as err:
            p: subprocess.Popen[str] = host.popen(
                cmd, cwd=str(ROOT), stdout=subprocess.PIPE, stderr=err, text=True
            )
        self.procs.append(p)
        return p

    def run(self, policy: str, live: bool) -> dict[int, JobResult]:
        s = self.scenario
        self.ctl_cmd("policy", policy, "--stale-us", str(s.stale_us))
        for job in s.jobs:
            self._admit(job)
        pses = {}
        for job in s.jobs:
            _, ps = self.jobs[job.job]
            pses[job.job] = self._popen(
                ps.name,
                [PY, "-m", "hosts.ps_cli", "--bind", f"{ps.ip}:{ps.udp_port}",
                 "--job", f"{job.job}:{job.workers}", "--switch-addr", SWITCH_IP, "--json"],
                f"ps{job.job}.log",
            )  # fmt: skip
        time.sleep(0.5)
        workers: dict[tuple[int, int], subprocess.Popen[str]] = {}
        started = time.monotonic()
        for job in s.jobs:
            members, ps = self.jobs[job.job]
            for m in members:
                workers[(job.job, m.index)] = self._popen(
                    m.name,
                    [PY, "-m", "hosts.worker_cli", "--job", str(job.job), "--index", str(m.index),
                     "--fan-in", str(job.workers), "--ps", ps.ip, "--bind", f"{m.ip}:{m.udp_port}",
                     "--iters", str(job.iterations), "--size", str(job.values),
                     "--window", str(s.window), "--rto", str(s.rto_s), "--seed", str(verify.SEED),
                     "--bound", str(verify.BOUND), "--json"],
                    f"{m.name}.log",
                )  # fmt: skip
        admin = AdminClient(self.admin)
        specs = {j.job: j for j in s.jobs}

        def report_progress(job: int, done: int) -> None:
            """Automatic priorities follow each job's remaining volume (SRPT)."""
            spec = specs[job]
            if spec.priority is None:
                remaining = spec.volume_bytes * (spec.iterations - done) // spec.iterations
                admin.call("Progress", {"job": job, "remaining": remaining})

        try:
            reports = follow(
                workers, {j.job: j.iterations for j in s.jobs}, started, live, report_progress
            )
        finally:
            admin.close()
        stats = json.loads(self.ctl_cmd("stats", "--json").stdout)
        for job_id, p in pses.items():
            p.send_signal(signal.SIGTERM)
            out, _ = p.communicate(timeout=10)
            (self.logs / f"ps{job_id}.json").write_text(out)
        return {
            job.job: JobResult.build(job, reports, stats, verify.exact(job, reports))
            for job in s.jobs
        }


def follow(
    workers: dict[tuple[int, int], subprocess.Popen[str]],
    iterations: dict[int, int],
    started: float,
    live: bool,
    on_progress: Callable[[int, int], None],
) -> dict[tuple[int, int], dict[str, Any]]:
    """Wait for every worker, showing per-job progress and passing each job's
    completed iterations to ``on_progress``; returns the workers' JSON reports."""
    done_iters = {key: 0 for key in workers}
    last_json: dict[tuple[int, int], dict[str, Any]] = {}
    streams: dict[IO[str], tuple[int, int]] = {
        p.stdout: key for key, p in workers.items() if p.stdout is not None
    }
    open_streams = set(streams)
    next_draw = 0.0
    reported = dict.fromkeys(iterations, 0)
    while open_streams:
        ready, _, _ = select.select(list(open_streams), [], [], 0.2)
        for stream in ready:
            line = stream.readline()
            key = streams[stream]
            if not line:
                open_streams.discard(stream)
            elif line.startswith("iter "):
                done_iters[key] += 1
                job = key[0]
                done = min(v for (j, _), v in done_iters.items() if j == job)
                if done > reported[job]:
                    reported[job] = done
                    on_progress(job, done)
            elif line.startswith("{"):
                last_json[key] = json.loads(line)
        if live and time.monotonic() >= next_draw:
            next_draw = time.monotonic() + 0.5
            parts = []
            for job, total in iterations.items():
                done = min(v for (j, _), v in done_iters.items() if j == job)
                parts.append(f"job {job}: {done}/{total}")
            elapsed = time.monotonic() - started
            sys.stderr.write(f"\r  {elapsed:6.1f} s  " + "  ".join(parts) + "   ")
            sys.stderr.flush()
    if live:
        sys.stderr.write("\n")
    for key, p in workers.items():
        if p.wait() != 0 or key not in last_json:
            raise RuntimeError(f"worker {key} failed (exit {p.returncode}); see its log")
    return last_json


def _stop(p: subprocess.Popen[Any]) -> None:
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
