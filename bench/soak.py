"""The soak: jobs training on the reference switch for minutes while
processes are killed and restarted, the controller is doubled and
commanded at random, and every outcome is checked.

    make soak SOAK_ARGS="--minutes 10 --seed 1 --jobs 4"
    .venv/bin/python -m bench.soak --minutes 1 --seed 7 --jobs 2 --every 3

Everything runs on 127.0.0.1 (the namespace's, with ``--net``), in
processes of the soak's own: the reference switch (``testbed.loopref``: its
P4Runtime server and pipeline behind a UDP socket) or, with ``--switch
bmv2``, BMv2 (``simple_switch_grpc`` on a veth pair per host in the soak's
namespace, which ``bench.soak_bridge`` joins to the hosts' sockets; the
controller pushes its program, built for the pool), the controller
(``esa-ctl serve`` on a state file and an admin socket in the soak's work
directory), and per job (fan-in 2-4, 1-2 PS shards, drawn from the seed) a
PS process per shard and a training worker process per index
(``bench.soak_hosts``).  The soak binds every host's sockets and holds
them, so a process started again is where the last one was.

The fault schedule is drawn from the seed (``bench.soak_plan``): one of
each kind first, then at random, on average one every ``--every`` seconds:

- kill -9 of a worker: its peers must fail their call within its deadline,
  naming it; the job is then started again, every worker in a new epoch
  (docs/agreement.md: a job started again after its workers were killed is
  accepted once they have been silent for ``LIVE_TTL``), and must train on;
- kill -9 of a PS shard, at any moment or timed into a call in flight
  (proved: a worker had every GO of that call before the kill and its sum
  after), started again on its sockets: the calls go on;
- kill -9 of the controller, and of the switch process, each started
  again: within a bound the switch holds exactly what the controller's
  state file says, and every job completes calls again;
- a second ``esa-ctl serve`` on the same state file: refused, naming the
  running one, nothing changed;
- ``esa-ctl admit``, ``remove``, ``prio`` and ``policy``: accepted, and the
  switch agrees with the state after each;
- as root with nftables and tc (``--net``), in a network namespace of the
  soak's own around its loopback (``bench.soak_net``): loss bursts, a
  host's link down and up, duplicated datagrams, reordered datagrams (held
  back in a slow htb class, then drained, none dropped): no call fails.

Checked throughout and printed at the end: every completed call's sum
bit-exact (against numpy's sum of the same gradients); every failed call
failed with a named error within its deadline, naming the right workers
(``bench.soak_checks.judge``); the entries after every restart; at the end
no slot held (the jobs' last calls sweep the pool), no process left, and
the memory and descriptors of every process that lived ``--min-life``
seconds flat within the bounds.  Exit status 0 when every invariant held.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from bench.soak_bridge import host_side, switch_side
from bench.soak_checks import (
    Failure,
    Growth,
    RunFaults,
    disagreement,
    growth,
    judge,
    left_behind,
    sample,
)
from bench.soak_net import Net, missing_net
from bench.soak_plan import (
    NETWORK,
    SPARE_HOSTS,
    SPARE_JOB,
    Fault,
    JobLayout,
    Kind,
    layouts,
    schedule,
)
from controller.api.admin import AdminClient, AdminError
from controller.world.fabric import Device, Fabric
from esa.toolchain import compile_p4
from hosts.agreement import auth
from runner.devices.bmv2 import Bmv2, missing_bmv2
from runner.devices.netns import entered
from runner.paths import ROOT
from runner.verify import expected_digest

PY = sys.executable
LOCAL = "127.0.0.1"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
P4INFO = ROOT / "p4src" / "esa.p4info.txtpb"
P4_SOURCE = ROOT / "p4src" / "esa.p4"
SWITCHES = {
    "ref": "the reference switch (testbed.loopref)",
    "bmv2": "BMv2 (simple_switch_grpc, its ports bridged by bench.soak_bridge)",
}
CONTROLLER_ELECTION_ID = 10
CONTROLLER_INTERVAL_S = 0.5
"""How often the controller checks the switch: bounds the re-sync."""
START_S = 60.0
"""A process must be up (the switch, a PS, the controller answering) within this."""
RESYNC_S = 30.0
"""After a restart, the switch must agree with the state within this."""
RECOVER_S = 60.0
"""After a fault (a killed worker: after its job's deadline), every job
struck must complete a call again within this."""
PS_CACHE = 2048
"""Finished chunks a PS keeps to answer retransmissions: four calls of the
largest size.  ``esa-ps``'s default, 65,536, takes minutes of calls to
fill, and a PS's memory grows by about 30 MiB meanwhile (bounded, as
designed, but no flat line to judge a leak by)."""
BMV2_RSS_BOUND_MIB = 64
"""How much BMv2's RSS may grow over one life: its first P4Runtime reads
with a program loaded, which the soak's checks make, grow it by about
54 MiB and then no more (100 reads of the soak's entries: +54 MiB; the
next 400: +1.8 MiB; 2026-12-07, at 4068d29, machine E, loaded, the
performance build); with no reads it grew 1.4 MiB in 3.3 minutes of
4 jobs' calls."""
DRAIN_S = 10.0
"""After a reorder burst, the slow class must have sent every datagram it
held within this."""
SAMPLE_S = 2.0
WARM_S = 10.0


def _seed(*parts: int) -> int:
    """A run's gradient seed, from the soak's seed, the job and the run."""
    h = 0
    for p in parts:
        h = (h * 1_000_003 + p) % (1 << 31)
    return h


@dataclass
class Proc:
    """One process the soak started (one incarnation of a role)."""

    name: str
    kind: str
    popen: subprocess.Popen[str]
    started: float
    killed: bool = False
    samples: list[tuple[float, int, int]] = field(default_factory=list)
    lines: queue.Queue[str] = field(default_factory=queue.Queue)

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        self.killed = True
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait()


@dataclass
class Run:
    """One run of a job: its worker processes, from call 0, in an epoch of
    their own."""

    number: int
    seed: int
    workers: list[Proc]
    started: float
    faults: RunFaults = field(default_factory=RunFaults)
    failures: list[Failure] = field(default_factory=list)
    begun: dict[int, tuple[int, float]] = field(default_factory=dict)
    """worker index -> its latest call begun, and when (epoch seconds)."""
    streaming: dict[int, tuple[int, float]] = field(default_factory=dict)
    """worker index -> its latest call that streamed (every GO), and when."""
    summed: dict[int, int] = field(default_factory=dict)
    """worker index -> its latest call with a sum."""

    def in_flight(self) -> set[tuple[int, int]]:
        """(worker, call) of the calls streaming now: every GO, no sum yet."""
        return {
            (i, call) for i, (call, _) in self.streaming.items() if self.summed.get(i, -1) < call
        }

    draining_since: float | None = None
    ended: bool = False


@dataclass
class Job:
    layout: JobLayout
    ps: list[Proc]
    key_file: Path
    run: Run | None = None
    runs: int = 0
    stopping: bool = False


@dataclass
class Event:
    """A fault carried out, and what it showed."""

    fault: Fault
    at: float
    """seconds into the soak."""
    ok: bool = True
    note: str = ""
    recover_s: float | None = None
    t: float = 0.0
    """epoch seconds of the fault (a kill: when the process died)."""
    back: float = 0.0
    """epoch seconds when the restarted process was up (a PS, the switch)."""
    in_flight: bool = False
    """a PS kill that met a call in flight: a worker had every GO of the
    call before the kill and its sum after."""
    resumed: bool = False
    """a PS kill after which a worker resumed its call with the new PS."""
    streaming: set[tuple[int, int]] = field(default_factory=set)
    """a PS kill: the (worker, call) in flight in its job's run when it struck."""
    run: int = 0
    """a worker kill: the run of its job it struck."""
    held: int = 0
    """a reorder burst: the datagrams it held back."""


@dataclass
class Summary:
    seed: int
    seconds: float
    jobs: list[JobLayout]
    events: list[Event]
    calls_done: int = 0
    results_exact: int = 0
    mismatches: list[str] = field(default_factory=list)
    failures: list[tuple[Failure, str | None]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    slots_held: int = -1
    procs_left: list[str] = field(default_factory=list)
    growths: list[Growth] = field(default_factory=list)
    rss_bound_kib: int = 0
    fd_bound: int = 0
    min_life: float = 0.0
    network: str = ""
    """the network faults: "on", or why not."""
    namespace_left: bool = False
    switch: str = "ref"

    @property
    def ok(self) -> bool:
        return not self.violations and not self.mismatches


class Soak:
    """One soak: its jobs and schedule (from ``args``), its work directory,
    network namespace (``--net``) and sockets; ``run`` does the rest."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.seconds = args.minutes * 60
        self.quiet = quiet_tail(args)
        self.layouts = layouts(args.seed, args.jobs)
        use_net, self.network = network(args)
        self.plan = schedule(args.seed, self.seconds, self.layouts, args.every, self.quiet, use_net)
        self.work = Path(tempfile.mkdtemp(prefix="esa-soak-"))
        (self.work / "logs").mkdir()
        self.slots_held = -1
        self.log = open(self.work / "logs" / "events.jsonl", "a")  # noqa: SIM115
        """every worker's events and every fault, as they come (kept with --keep)."""
        self.procs_left: list[str] = []
        self.lock = threading.RLock()
        self.begun = threading.Condition(self.lock)
        self.procs: list[Proc] = []
        self.jobs: dict[int, Job] = {}
        self.events: list[Event] = []
        self.dones: list[tuple[float, int, int]] = []
        """(epoch seconds, job, run) of every call every worker completed exact."""
        self.calls: Counter[tuple[int, int, int]] = Counter()
        self.mismatches: list[str] = []
        self.violations: list[str] = []
        self.judged: list[tuple[Failure, str | None]] = []
        self._digests: dict[tuple[int, int, int], str] = {}
        self._stop = threading.Event()
        self.t0 = time.monotonic()
        self.grpc = f"unix:{self.work / 'p4rt.sock'}"
        self.admin = f"unix:{self.work / 'ctl.sock'}"
        self.db = self.work / "state.db"
        self.switch: Proc | None = None
        self.controller: Proc | None = None
        self.namespace_left = False
        self.net = Net() if use_net else None
        self.bridge: Proc | None = None
        self.bmv2: Bmv2 | None = None
        self.p4json: Path | None = None
        self.p4info = P4INFO
        try:
            self._sockets()
            if args.switch == "bmv2":
                self._bmv2()
        except BaseException:
            if self.net is not None:
                self.net.close()
            raise
        self._topology()

    # -- set-up ---------------------------------------------------------------

    def _sockets(self) -> None:
        """Every host's data socket (the switch's port for it) and, for the
        workers and PS hosts, its control socket; and the switch's."""

        def bound() -> socket.socket:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind((LOCAL, 0))
            return s

        names = [h for j in self.layouts for h in (*j.workers, *j.ps)] + list(SPARE_HOSTS)
        with contextlib.ExitStack() as inside:
            if self.net is not None:
                inside.enter_context(entered(self.net.name))
            self.switch_sock = bound()
            self.hosts = {n: (bound(), bound()) for n in names}
        self.port = {n: i + 1 for i, n in enumerate(names)}

    def _bmv2(self) -> None:
        """BMv2's program, built for the soak's pool, and its ports: a veth
        pair per host in the soak's namespace (``bench.soak_bridge``)."""
        assert self.net is not None
        self.p4json, self.p4info = compile_p4(P4_SOURCE, self.work / "p4", self.args.pool)
        for port in self.port.values():
            self.net.ns.add_veth(host_side(port), switch_side(port))
        ports = {port: switch_side(port) for port in self.port.values()}
        log = self.work / "logs" / "bmv2.log"
        self.bmv2 = Bmv2(ports, self.grpc, log, self.work, netns=self.net.name)

    def _topology(self) -> None:
        hosts = {
            n: {"port": p, "mac": f"02:00:00:00:{p >> 8:02x}:{p & 255:02x}", "ip": f"10.0.0.{p}"}
            for n, p in self.port.items()
        }
        self.topo = self.work / "topology.json"
        self.topo.write_text(json.dumps({"pool_size": self.args.pool, "hosts": hosts}))
        self.fabric = Fabric.load(self.topo, Device("s1", 0, self.grpc))

    def addr(self, s: socket.socket) -> str:
        host, port = s.getsockname()
        return f"{host}:{port}"

    def now(self) -> float:
        return time.monotonic() - self.t0

    def say(self, text: str, when: bool = True) -> None:
        print(f"[{self.now():7.1f} s] {text}" if when else text, flush=True)

    def violation(self, text: str) -> None:
        with self.lock:
            self.violations.append(text)
        self.say(f"VIOLATION: {text}")

    # -- processes ------------------------------------------------------------

    def spawn(
        self, name: str, kind: str, cmd: list[str], fds: Sequence[int] = (), program: str = PY
    ) -> Proc:
        log = self.work / "logs" / f"{name.replace(' ', '-')}.log"
        inside = self.net.prefix() if self.net else []
        with open(log, "a") as err:
            popen = subprocess.Popen(
                [*inside, program, *cmd], cwd=ROOT, env=ENV, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=err, text=True, pass_fds=tuple(fds),
                start_new_session=True,
            )  # fmt: skip
        p = Proc(name, kind, popen, time.monotonic())
        with self.lock:
            self.procs.append(p)
        return p

    def _read(self, p: Proc, on_line: Callable[[str], None] | None) -> None:
        """Read a process's output until it ends: each line to ``on_line``
        or, without one, to its queue."""

        def body() -> None:
            assert p.popen.stdout is not None
            for line in p.popen.stdout:
                if on_line is None:
                    p.lines.put(line)
                else:
                    on_line(line)
            p.popen.stdout.close()

        threading.Thread(target=body, name=f"read {p.name}", daemon=True).start()

    def first_line(self, p: Proc, what: str) -> str:
        try:
            return p.lines.get(timeout=START_S)
        except queue.Empty:
            raise RuntimeError(f"{what} did not start within {START_S:g} s") from None

    def start_switch(self) -> None:
        if self.bmv2 is not None:
            self.start_bmv2(self.bmv2)
            return
        fd = self.switch_sock.fileno()
        cmd = ["-m", "testbed.loopref", "--socket-fd", str(fd), "--grpc", self.grpc]
        cmd += ["--pool", str(self.args.pool)]
        cmd += [f"--port={self.port[n]}@{self.addr(d)}" for n, (d, _) in self.hosts.items()]
        self.switch = self.spawn("switch", "switch", cmd, [fd])
        self._read(self.switch, None)
        self.first_line(self.switch, "the switch")

    def start_bridge(self) -> None:
        """BMv2's ports to the hosts' sockets (``bench.soak_bridge``), for the
        whole soak."""
        fd = self.switch_sock.fileno()
        cmd = ["-m", "bench.soak_bridge", "--socket-fd", str(fd)]
        cmd += [f"--port={self.port[n]}@{self.addr(d)}" for n, (d, _) in self.hosts.items()]
        self.bridge = self.spawn("bridge", "bridge", cmd, [fd])
        self._read(self.bridge, None)
        self.first_line(self.bridge, "the bridge")

    def start_bmv2(self, bmv2: Bmv2) -> None:
        """simple_switch_grpc without a program (the controller pushes it),
        up when its P4Runtime and Thrift servers accept connections."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.grpc.removeprefix("unix:"))
        first, *rest = bmv2.command()
        self.switch = self.spawn("switch", "switch", rest, program=first)
        self._read(self.switch, lambda _line: None)
        deadline = time.monotonic() + START_S
        while not bmv2.ready():
            if not self.switch.alive or time.monotonic() > deadline:
                raise RuntimeError(f"simple_switch_grpc did not start; see {self.work / 'logs'}")
            time.sleep(0.2)

    def start_controller(self) -> None:
        cmd = ["-m", "controller", "--admin", self.admin, *self.serve_args(self.db)]
        self.controller = self.spawn("controller", "controller", cmd)
        self._read(self.controller, None)
        deadline = time.monotonic() + START_S
        while not self.controller_ready():
            if not self.controller.alive or time.monotonic() > deadline:
                raise RuntimeError(f"the controller did not start; see {self.work / 'logs'}")
            time.sleep(0.2)

    def serve_args(self, db: Path) -> list[str]:
        return [
            "serve", "--switch", self.grpc,
            *(["--p4json", str(self.p4json)] if self.p4json else ["--no-p4json"]),
            *(["--thrift-cli", shlex.join(self.bmv2.cli_command())] if self.bmv2 else []),
            "--p4info", str(self.p4info),
            "--pool-size", str(self.args.pool), "--topology", str(self.topo), "--db", str(db),
            "--interval", str(CONTROLLER_INTERVAL_S), "--election-id", str(CONTROLLER_ELECTION_ID),
        ]  # fmt: skip

    def controller_ready(self) -> bool:
        client = AdminClient(self.admin)
        try:
            return all(s.connected for s in client.status(timeout=2.0).switches)
        except AdminError:
            return False
        finally:
            client.close()

    def ctl(self, *args: str, admin: str | None = None) -> subprocess.CompletedProcess[str]:
        cmd = [PY, "-m", "controller", "--admin", admin or self.admin, *args]
        return subprocess.run(
            cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=60, check=False
        )

    def start_ps(self, job: Job, shard: int) -> Proc:
        lay = job.layout
        data, control = self.hosts[lay.ps[shard]]
        cmd = ["-m", "bench.soak_hosts", "ps", "--job", f"{lay.job}:{lay.fan_in}"]
        cmd += ["--key-file", f"{lay.job}:{job.key_file}", "--switch", self.addr(self.switch_sock)]
        cmd += ["--shard", str(shard), "--shards", str(lay.shards), "--cache", str(PS_CACHE)]
        cmd += ["--data-fd", str(data.fileno()), "--control-fd", str(control.fileno())]
        p = self.spawn(f"PS {lay.job}.{shard}", "PS", cmd, [data.fileno(), control.fileno()])
        self._read(p, None)
        self.first_line(p, p.name)
        return p

    def start_run(self, job: Job) -> None:
        """Every worker of ``job``, from call 0, on the job's next seed."""
        lay = job.layout
        job.runs += 1
        seed = _seed(self.args.seed, lay.job, job.runs)
        stop = self.work / f"stop-{lay.job}"
        controls = ",".join(self.addr(self.hosts[p][1]) for p in lay.ps)
        switch = ",".join([self.addr(self.switch_sock)] * lay.shards)
        run = Run(job.runs, seed, [], time.time())
        for i, host in enumerate(lay.workers):
            data, control = self.hosts[host]
            cmd = ["-m", "bench.soak_hosts", "worker", "--job", str(lay.job), "--index", str(i)]
            cmd += ["--fan-in", str(lay.fan_in), "--ps", switch, "--control", controls]
            cmd += ["--key-file", str(job.key_file), "--size", str(lay.size), "--seed", str(seed)]
            cmd += ["--timeout", str(self.args.timeout)]
            cmd += ["--compute", str(self.args.compute), "--stop-file", str(stop)]
            cmd += ["--data-fd", str(data.fileno()), "--control-fd", str(control.fileno())]
            name = f"worker {lay.job}.{i} run {job.runs}"
            p = self.spawn(name, "worker", cmd, [data.fileno(), control.fileno()])
            run.workers.append(p)
            self._read(p, self._worker_lines(job, run, i))
        job.run = run

    # -- what workers report ---------------------------------------------------

    def _worker_lines(self, job: Job, run: Run, index: int) -> Callable[[str], None]:
        return lambda line: self.on_worker(job, run, index, line)

    def expected(self, lay: JobLayout, seed: int, call: int) -> str:
        key = (lay.job, seed, call)
        with self.lock:
            have = self._digests.get(key)
        if have is None:
            have = expected_digest(lay.job, lay.fan_in, lay.size, seed, call)
            with self.lock:
                self._digests[key] = have
        return have

    def on_worker(self, job: Job, run: Run, index: int, line: str) -> None:
        try:
            e = json.loads(line)
        except ValueError:
            self.violation(f"job {job.layout.job} worker {index} printed {line.strip()!r}")
            return
        with self.lock:
            self.log.write(json.dumps({"job": job.layout.job, "run": run.number, "w": index, **e}))
            self.log.write("\n")
        ev, call = e.get("ev"), int(e.get("call", -1))
        if ev == "done":
            want = self.expected(job.layout, run.seed, call)
            with self.lock:
                if e.get("digest") != want:
                    self.mismatches.append(
                        f"job {job.layout.job} run {run.number} call {call} worker {index}"
                    )
                    self.say(f"SUM MISMATCH: {self.mismatches[-1]}")
                    return
                run.summed[index] = call
                self.calls[(job.layout.job, run.number, call)] += 1
                self.dones.append((float(e["t"]), job.layout.job, run.number))
                self._prove(job, run, index, e)
        elif ev in ("begin", "go"):
            with self.lock:
                (run.begun if ev == "begin" else run.streaming)[index] = (call, float(e["t"]))
                self.begun.notify_all()
        elif ev == "fail":
            with self.lock:
                run.failures.append(Failure(job.layout.job, run.number, index, e))
                self._prove(job, run, index, e)
            self.say(f"job {job.layout.job} worker {index}: {e.get('error')}")

    def _prove(self, job: Job, run: Run, index: int, e: dict[str, Any]) -> None:
        """A call that streamed before a PS's kill and ended after it proves
        that the kill met it in flight; one resumed with the restarted PS
        shows the resume (the latest kill of that shard before the call ended)."""
        resumed = int(e.get("resumed", 0))
        for ev in reversed(self.events):
            f = ev.fault
            if f.kind not in (Kind.PS_KILL, Kind.PS_KILL_IN_FLIGHT) or f.job != job.layout.job:
                continue
            if (index, e.get("call")) in ev.streaming and ev.t <= e["t"] and ev.run == run.number:
                ev.in_flight = True
            if resumed >> f.target & 1 and ev.t <= e["t"]:
                ev.resumed = True
                resumed &= ~(1 << f.target)

    # -- the jobs' keeper --------------------------------------------------------

    def keep_jobs(self) -> None:
        """Start a job's next run once every worker of the last one ended."""
        while not self._stop.wait(0.1):
            with self.lock:
                jobs = list(self.jobs.values())
            for job in jobs:
                self._keep(job)

    def _keep(self, job: Job) -> None:
        run = job.run
        if run is None or run.ended:
            return
        alive = [p for p in run.workers if p.alive]
        if len(alive) == len(run.workers):
            return
        now = time.monotonic()
        if run.draining_since is None:
            run.draining_since = now
        if alive:
            limit = self.args.timeout + self.args.compute * 2 + 15.0
            if now - run.draining_since > limit:
                for p in alive:
                    self.violation(f"{p.name} still runs {limit:g} s after a peer ended")
                    p.kill()
            return
        run.ended = True
        self._end_run(job, run)
        if not job.stopping and not self._stop.is_set():
            self.start_run(job)

    def _end_run(self, job: Job, run: Run) -> None:
        """Judge how every worker of a finished run ended."""
        with self.lock:
            failed = {f.index for f in run.failures}
            for i, p in enumerate(run.workers):
                rc = p.popen.returncode
                if p.killed or (rc == 1 and i in failed) or (rc == 0 and job.stopping):
                    continue
                self.violation(f"{p.name} ended with status {rc} without a named error")
            for f in run.failures:
                verdict = judge(f, run.faults, failed)
                self.judged.append((f, verdict))
                if verdict is not None:
                    self.violation(
                        f"job {f.job} run {f.run} worker {f.index}: {verdict}: {f.error}"
                    )

    def sample_procs(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            with self.lock:
                procs = [p for p in self.procs if p.alive]
            for p in procs:
                got = sample(p.popen.pid)
                if got is not None:
                    p.samples.append((time.monotonic() - p.started, *got))

    # -- faults -----------------------------------------------------------------

    def settle(self, bound: float) -> tuple[bool, float, str]:
        """Wait until the switch agrees with the state: (agreed, seconds, last difference)."""
        start = time.monotonic()
        diff = ""
        while time.monotonic() - start < bound:
            d = disagreement(self.grpc, self.db, self.fabric, self.args.pool)
            if d is None:
                return True, time.monotonic() - start, ""
            diff = d
            time.sleep(0.2)
        return False, bound, diff

    def wait_running(self, job: Job, bound: float) -> Run | None:
        """The job's run once every worker of it runs."""
        end = time.monotonic() + bound
        while time.monotonic() < end:
            with self.lock:
                run = job.run
                if (
                    run is not None
                    and run.draining_since is None
                    and all(p.alive for p in run.workers)
                ):
                    return run
            time.sleep(0.1)
        return None

    def wait_streaming(self, job: Job, bound: float) -> Run | None:
        """Wait until every worker of the job streams one call, all of them
        after now (each had every GO of it) and none with its sum yet."""
        since = time.time()
        end = time.monotonic() + bound
        with self.begun:
            while time.monotonic() < end:
                run = job.run
                if run is not None and run.draining_since is None:
                    going = list(run.streaming.values())
                    calls = {c for c, _ in going}
                    fresh = all(t >= since for _, t in going)
                    one = len(going) == job.layout.fan_in and fresh and len(calls) == 1
                    if one and len(run.in_flight()) == job.layout.fan_in:
                        return run
                self.begun.wait(0.2)
        return None

    def inject(self, f: Fault) -> Event:
        ev = Event(f, self.now(), t=time.time())
        with self.lock:
            self.events.append(ev)
            self.log.write(json.dumps({"fault": str(f), "t": ev.t}) + "\n")
        handler = {
            Kind.WORKER_KILL: self.kill_worker,
            Kind.PS_KILL: self.kill_ps,
            Kind.PS_KILL_IN_FLIGHT: self.kill_ps,
            Kind.CONTROLLER_KILL: self.kill_controller,
            Kind.SWITCH_KILL: self.kill_switch,
            Kind.SECOND_CONTROLLER: self.second_controller,
            Kind.LOSS_BURST: self.network_fault,
            Kind.LINK_DOWN: self.network_fault,
            Kind.DUPLICATE: self.network_fault,
            Kind.REORDER: self.reorder_burst,
        }.get(f.kind, self.command)
        handler(ev)
        with self.lock:
            self.log.write(json.dumps({"fault": str(f), "t": ev.t, "back": ev.back}) + "\n")
        if not ev.ok:
            self.violation(f"{f.kind.value}: {ev.note}")
        return ev

    def kill_worker(self, ev: Event) -> None:
        f = ev.fault
        job = self.jobs[f.job]
        run = self.wait_running(job, self.args.timeout * 2 + RECOVER_S)
        if run is None:
            ev.ok, ev.note = False, f"job {f.job} did not run again"
            return
        with self.lock:
            run.faults.victims.add(f.target)
        run.workers[f.target].kill()
        ev.t, ev.run = time.time(), run.number

    def kill_ps(self, ev: Event) -> None:
        f = ev.fault
        job = self.jobs[f.job]
        bound = self.args.timeout * 2 + RECOVER_S
        if f.kind is Kind.PS_KILL_IN_FLIGHT and self.wait_streaming(job, bound) is None:
            ev.ok, ev.note = False, f"job {f.job} streamed no call"
            return
        with self.lock:
            job.ps[f.target].kill()
            ev.t = time.time()
            if job.run is not None:
                job.run.faults.ps_restarts.append((f.target, ev.t))
                ev.run, ev.streaming = job.run.number, job.run.in_flight()
        time.sleep(f.rest)
        job.ps[f.target] = self.start_ps(job, f.target)
        ev.back = time.time()

    def kill_controller(self, ev: Event) -> None:
        assert self.controller is not None
        self.restart(ev, self.controller, self.start_controller)

    def kill_switch(self, ev: Event) -> None:
        assert self.switch is not None
        self.restart(ev, self.switch, self.start_switch)

    def restart(self, ev: Event, proc: Proc, start: Callable[[], object]) -> None:
        """kill -9 ``proc``, ``start`` it again after the fault's rest, and
        wait for the switch's entries to equal the state file."""
        proc.kill()
        ev.t = time.time()
        time.sleep(ev.fault.rest)
        start()
        ok, seconds, diff = self.settle(RESYNC_S)
        ev.back = time.time()
        ev.ok, ev.recover_s = ok, seconds
        ev.note = f"switch == state {seconds:.1f} s after the restart" if ok else diff

    def second_controller(self, ev: Event) -> None:
        """``serve`` on the running controller's state file, with an admin
        socket of its own: refused, naming the running one; nothing changed."""
        assert self.controller is not None
        before = disagreement(self.grpc, self.db, self.fabric, self.args.pool)
        admin = f"unix:{self.work / 'ctl2.sock'}"
        try:
            res = self.ctl(*self.serve_args(self.db), admin=admin)
        except subprocess.TimeoutExpired:
            ev.ok, ev.note = False, "the second controller still ran after 60 s"
            return
        err = res.stderr.strip().splitlines()[-1:] or [""]
        named = f"is in use by esa-ctl serve pid {self.controller.popen.pid}"
        after = disagreement(self.grpc, self.db, self.fabric, self.args.pool)
        ev.ok = res.returncode == 1 and named in err[0] and before is None and after is None
        ev.note = err[0] if ev.ok else f"status {res.returncode}: {err[0]}; switch: {after}"
        ev.ok = ev.ok and self.controller.alive and self.controller_ready()

    def network_fault(self, ev: Event) -> None:
        """A rule of the soak's namespace for ``rest`` seconds (``bench.soak_net``)."""
        f, net = ev.fault, self.net
        assert net is not None
        if f.kind is Kind.LOSS_BURST:
            rules = [net.loss(f.percent)]
        elif f.kind is Kind.DUPLICATE:
            rules = [net.duplicate(f.percent)]
        else:
            rules = net.link_down([s.getsockname()[1] for s in self.hosts[f.host]])
        ev.t = time.time()
        time.sleep(f.rest)
        for rule in rules:
            net.delete(rule)
        ev.back = time.time()

    def reorder_burst(self, ev: Event) -> None:
        """A share of every datagram through the slow class for ``rest``
        seconds, then its queue drained: it must have held some back and
        dropped none (``bench.soak_net``)."""
        f, net = ev.fault, self.net
        assert net is not None
        before = net.slow_class()
        rule = net.reorder(f.percent)
        ev.t = time.time()
        time.sleep(f.rest)
        net.delete(rule)
        end = time.monotonic() + DRAIN_S
        after = net.slow_class()
        while after.queued and time.monotonic() < end:
            time.sleep(0.05)
            after = net.slow_class()
        ev.back = time.time()
        ev.held, dropped = after.sent - before.sent, after.dropped - before.dropped
        ev.note = f"{ev.held} datagrams held back, {dropped} dropped, {after.queued} still queued"
        ev.ok = ev.held > 0 and dropped == 0 and after.queued == 0

    def command(self, ev: Event) -> None:
        res = self.ctl(*ev.fault.args)
        if res.returncode != 0:
            ev.ok, ev.note = False, f"status {res.returncode}: {res.stderr.strip()}"
            return
        ok, seconds, diff = self.settle(RESYNC_S)
        ev.ok, ev.recover_s = ok, seconds
        ev.note = "switch == state" if ok else diff

    # -- the soak ---------------------------------------------------------------

    def start(self) -> None:
        self.say(
            f"soak: work directory {self.work}; {SWITCHES[self.args.switch]} on "
            f"{LOCAL}, pool {self.args.pool}; {len(self.plan)} faults in {self.seconds:g} s",
            when=False,
        )
        if self.bmv2 is not None:
            self.start_bridge()
        self.start_switch()
        self.start_controller()
        for lay in self.layouts:
            prio = ["--priority", str(lay.priority)] if lay.priority is not None else []
            res = self.ctl(
                "admit", str(lay.job), "--workers", *lay.workers, "--ps", *lay.ps,
                *(prio or ["--size", str(lay.volume)]),
            )  # fmt: skip
            if res.returncode != 0:
                raise RuntimeError(f"admit {lay.job}: {res.stderr.strip()}")
            key = auth.write_key(self.work / f"job{lay.job}.key", auth.new_key())
            job = Job(lay, [], key)
            job.ps = [self.start_ps(job, s) for s in range(lay.shards)]
            self.jobs[lay.job] = job
            self.say(
                f"job {lay.job}: fan-in {lay.fan_in}, {lay.shards} PS shard(s), {lay.size} values "
                f"a call, {f'priority {lay.priority}' if lay.priority is not None else 'by size'}",
                when=False,
            )
        for job in self.jobs.values():
            self.start_run(job)
        self.t0 = time.monotonic()
        threading.Thread(target=self.keep_jobs, name="keeper", daemon=True).start()
        threading.Thread(target=self.sample_procs, name="sampler", daemon=True).start()

    def run(self) -> Summary:
        try:
            self.start()
            for f in self.plan:
                wait = f.at - self.now()
                if wait > 0:
                    time.sleep(wait)
                ev = self.inject(f)
                self.say(f"{f.kind.value}{_target(f)}: {'ok' if ev.ok else 'FAILED'}; {ev.note}")
            wait = self.seconds - self.now()
            if wait > 0:
                time.sleep(wait)
            self.finish()
        finally:
            self._stop.set()
            self.teardown()
        return self.summary()

    def finish(self) -> None:
        """No more faults: the spare job removed, ESA's policy, every job's
        last calls (which sweep the pool), then no slot held."""
        final = [("policy", "esa")]
        if SPARE_JOB in {j.job for j in self._jobs_held()}:
            final.insert(0, ("remove", str(SPARE_JOB)))
        for args in final:
            ev = Event(Fault(0, Kind.POLICY, args=args), self.now())
            self.command(ev)
            if not ev.ok:
                self.violation(f"esa-ctl {' '.join(args)} at the end: {ev.note}")
        since = time.time()
        for job in self.jobs.values():
            if not self._done_since(job, since, self.args.timeout * 2 + RECOVER_S):
                self.violation(f"job {job.layout.job} completed no call at the end")
        for job in self.jobs.values():
            job.stopping = True
            with self.lock:
                run = job.run
                last = max((c for c, _ in run.begun.values()), default=0) if run else 0
            (self.work / f"stop-{job.layout.job}").write_text(str(last + 2))
        end = time.monotonic() + self.args.timeout * 2 + RECOVER_S
        while time.monotonic() < end and not all(
            j.run is not None and j.run.ended for j in self.jobs.values()
        ):
            time.sleep(0.2)
        client = AdminClient(self.admin)
        try:
            slots = client.slots(timeout=10.0)
            self.slots_held = slots.used
            if slots.used:
                self.violation(f"{slots.used} slots held at the end: by job {slots.by_job}")
        finally:
            client.close()

    def _jobs_held(self) -> list[Any]:
        client = AdminClient(self.admin)
        try:
            return list(client.jobs(timeout=10.0).jobs)
        finally:
            client.close()

    def _done_since(self, job: Job, since: float, bound: float) -> bool:
        end = time.monotonic() + bound
        while time.monotonic() < end:
            with self.lock:
                if any(t >= since and j == job.layout.job for t, j, _ in self.dones):
                    return True
            time.sleep(0.2)
        return False

    def teardown(self) -> None:
        """Stop what runs (each process by its PID), close the sockets, and
        see that nothing is left."""
        with self.lock:
            procs = list(self.procs)
        for p in procs:
            if p.alive:
                p.popen.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                rc = p.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.violation(f"{p.name} did not stop on SIGTERM")
                p.kill()
                continue
            if not p.killed and p.kind != "worker" and rc != 0 and not self._stop_ok(p, rc):
                self.violation(f"{p.name} stopped with status {rc}")
        self.procs_left = left_behind(str(self.work))
        self.log.close()
        for d, c in self.hosts.values():
            d.close()
            c.close()
        self.switch_sock.close()
        if self.net is not None:
            self.net.close()
            self.namespace_left = self.net.left()
            if self.namespace_left:
                self.violation(f"network namespace {self.net.name} left")
        if self.args.keep or self.violations or self.mismatches:
            self.say(f"logs kept in {self.work}")
        else:
            shutil.rmtree(self.work, ignore_errors=True)

    @staticmethod
    def _stop_ok(p: Proc, rc: int) -> bool:
        return rc in (0, -signal.SIGTERM)

    # -- the summary -------------------------------------------------------------

    def summary(self) -> Summary:
        with self.lock:
            self._recoveries()
            growths = []
            rss_bound, fd_bound = self.args.rss_bound * 1024, self.args.fd_bound
            for p in self.procs:
                life = p.samples[-1][0] if p.samples else 0.0
                if life >= self.args.min_life:
                    g = growth(p.name, p.samples, WARM_S)
                    if g is not None:
                        bmv2 = p.kind == "switch" and self.bmv2 is not None
                        g.bound_kib = BMV2_RSS_BOUND_MIB * 1024 if bmv2 else int(rss_bound)
                        growths.append(g)
            for g in growths:
                if g.rss_kib > g.bound_kib or g.fds > fd_bound:
                    self.violations.append(
                        f"{g.name}: RSS grew {g.rss_kib} KiB, descriptors {g.fds}, "
                        f"over {g.seconds:.0f} s"
                    )
            if self.procs_left:
                self.violations.append(f"processes left: {self.procs_left}")
            full = sum(1 for (j, _, _), n in self.calls.items() if n == self.jobs[j].layout.fan_in)
            return Summary(
                seed=self.args.seed, seconds=self.now(), jobs=self.layouts,
                events=list(self.events), calls_done=full, results_exact=sum(self.calls.values()),
                mismatches=list(self.mismatches), failures=list(self.judged),
                violations=list(self.violations), slots_held=self.slots_held,
                procs_left=self.procs_left, growths=growths, rss_bound_kib=int(rss_bound),
                fd_bound=fd_bound, min_life=self.args.min_life, network=self.network,
                namespace_left=self.namespace_left, switch=self.args.switch,
            )  # fmt: skip

    def _recoveries(self) -> None:
        """Each kill's recovery: a call of its job (of every job, for the
        switch) completed exact after it, within ``RECOVER_S`` (a worker's:
        in a later run, after the deadline its peers waited)."""
        for ev in self.events:
            f = ev.fault
            kills = (Kind.WORKER_KILL, Kind.PS_KILL, Kind.PS_KILL_IN_FLIGHT, Kind.SWITCH_KILL,
                     Kind.CONTROLLER_KILL)  # fmt: skip
            if f.kind not in (*kills, *NETWORK) or not ev.ok:
                continue
            after = max(ev.t, ev.back)
            jobs = [f.job] if f.job else list(self.jobs)
            worst = 0.0
            for j in jobs:
                later = [
                    t for t, job, run in self.dones
                    if job == j and t > after and (f.kind is not Kind.WORKER_KILL or run > ev.run)
                ]  # fmt: skip
                bound = RECOVER_S + (self.args.timeout if f.kind is Kind.WORKER_KILL else 0)
                if not later or min(later) - ev.t > bound:
                    ev.ok = False
                    ev.note += f"; job {j} completed no call within {bound:g} s"
                    self.violations.append(f"{f.kind.value}{_target(f)}: {ev.note}")
                    break
                worst = max(worst, min(later) - (ev.back if f.kind in NETWORK else ev.t))
            if ev.ok and f.kind not in (Kind.SWITCH_KILL, Kind.CONTROLLER_KILL):
                ev.recover_s = worst
            elif ev.ok:
                ev.note += f"; every job completed a call {worst:.1f} s after the kill at most"
            if f.kind is Kind.PS_KILL_IN_FLIGHT and not ev.in_flight:
                ev.ok = False
                ev.note += "; not proved in flight"
                self.violations.append(f"{f.kind.value}{_target(f)}: {ev.note}")


def network(args: argparse.Namespace) -> tuple[bool, str]:
    """Whether the soak makes its network faults (``--net``), and how to say so."""
    if args.switch == "bmv2":
        why = missing_net() or missing_bmv2()
        if why is not None or args.net == "off":
            raise SystemExit(f"python -m bench.soak: error: --switch bmv2: {why or '--net off'}")
        return True, "on"
    if args.net == "off":
        return False, "off (--net off)"
    why = missing_net()
    if why is None:
        return True, "on"
    if args.net == "on":
        raise SystemExit(f"python -m bench.soak: error: --net on: {why}")
    return False, f"skipped: {why}"


def quiet_tail(args: argparse.Namespace) -> float:
    """The soak's last seconds, without faults: a job whose worker was
    killed last fails its call at the deadline and runs again."""
    return float(args.timeout) + 10.0


def _target(f: Fault) -> str:
    if f.kind is Kind.WORKER_KILL:
        return f" (job {f.job} worker {f.target})"
    if f.kind in (Kind.PS_KILL, Kind.PS_KILL_IN_FLIGHT):
        return f" (job {f.job} shard {f.target})"
    if f.args:
        return f" ({' '.join(f.args)})"
    if f.kind is Kind.LINK_DOWN:
        return f" ({f.host} of job {f.job}, {f.rest:g} s)"
    if f.kind in NETWORK:
        return f" ({f.percent} %, {f.rest:g} s)"
    return ""


def report(s: Summary, out: IO[str] = sys.stdout) -> None:
    """The soak's summary: faults by kind, recoveries, calls, failures, leaks."""

    def w(text: str = "") -> None:
        print(text, file=out)

    w(f"=== soak: seed {s.seed}, {len(s.jobs)} jobs, {s.seconds:.0f} s ===")
    for j in s.jobs:
        mode = f"priority {j.priority}" if j.priority is not None else f"size {j.volume}"
        w(f"job {j.job}: fan-in {j.fan_in}, PS shards {j.shards}, {j.size} values a call, {mode}")
    w(f"network faults: {s.network}")
    w("faults injected (recovered):")
    by_kind: dict[Kind, list[Event]] = {}
    for ev in s.events:
        by_kind.setdefault(ev.fault.kind, []).append(ev)
    for kind in Kind:
        evs = by_kind.get(kind, [])
        if not evs:
            skipped = kind in NETWORK and s.network != "on"
            w(f"  {kind.value:22}   0" + (f" ({s.network})" if skipped else ""))
            continue
        ok = sum(e.ok for e in evs)
        extra = ""
        times = [e.recover_s for e in evs if e.recover_s is not None]
        if kind in (Kind.CONTROLLER_KILL, Kind.SWITCH_KILL) and times:
            extra = f"; switch == state within {max(times):.1f} s at most"
        elif kind in (Kind.WORKER_KILL, Kind.PS_KILL, Kind.PS_KILL_IN_FLIGHT) and times:
            extra = f"; its job's next exact call {max(times):.1f} s after the kill at most"
        elif kind in NETWORK and times:
            whose = "its job's" if kind is Kind.LINK_DOWN else "every job's"
            extra = f"; no call failed, {whose} next exact call {max(times):.1f} s after at most"
        if kind is Kind.REORDER:
            extra += f"; {sum(e.held for e in evs)} datagrams held back"
            extra += ", none dropped" if ok == len(evs) else ""
        if kind in (Kind.PS_KILL, Kind.PS_KILL_IN_FLIGHT):
            extra += (
                f"; {sum(e.in_flight for e in evs)} met a call in flight (a worker had its "
                f"GO before and its sum after), {sum(e.resumed for e in evs)} resumed with "
                "the new PS"
            )
        if kind is Kind.SECOND_CONTROLLER:
            extra = "; refused, naming the running one" if ok == len(evs) else ""
        if kind in (Kind.ADMIT, Kind.REMOVE, Kind.PRIO, Kind.POLICY):
            extra = "; accepted, switch == state after each" if ok == len(evs) else ""
        w(f"  {kind.value:22} {len(evs):3} ({ok}{extra})")
    failed = len(s.failures)
    w(f"calls completed: {s.calls_done} (by every worker of the job; {s.results_exact} worker "
      f"results, each bit-exact)")  # fmt: skip
    w(f"calls failed: {failed} worker calls, each as promised: "
      f"{sum(v is None for _, v in s.failures)} of {failed}")  # fmt: skip
    for f, verdict in s.failures:
        w(f"  job {f.job} run {f.run} worker {f.index}: {f.error}"
          + ("" if verdict is None else f"  NOT AS PROMISED: {verdict}"))  # fmt: skip
    w(f"sum mismatches: {len(s.mismatches)}")
    for m in s.mismatches:
        w(f"  {m}")
    worst_rss = max((g.rss_kib for g in s.growths), default=0)
    worst_fd = max((g.fds for g in s.growths), default=0)
    biggest = sorted(s.growths, key=lambda g: -g.rss_kib)[:3]
    bmv2 = "; BMv2 " + str(BMV2_RSS_BOUND_MIB) if s.switch == "bmv2" else ""
    leaks = (
        (s.slots_held != 0)
        + len(s.procs_left)
        + s.namespace_left
        + sum(g.rss_kib > g.bound_kib or g.fds > s.fd_bound for g in s.growths)
    )
    w(f"leaks: {leaks} (slots held at the end {s.slots_held}; processes left {len(s.procs_left)}; "
      f"namespaces left {int(s.namespace_left)}{'' if s.network == 'on' else ' (none made)'}; "
      f"over the {len(s.growths)} processes that lived "
      f"{s.min_life:g} s or more, RSS grew {worst_rss / 1024:.1f} MiB at most (bound "
      f"{s.rss_bound_kib / 1024:g}{bmv2}), descriptors {worst_fd} "
      f"(bound {s.fd_bound}))")  # fmt: skip
    if biggest:
        w("  most RSS growth: " + ", ".join(
            f"{g.name} {g.rss_kib / 1024:.1f} MiB over {g.seconds:.0f} s" for g in biggest
        ))  # fmt: skip
    w(f"invariants: {'every one held' if s.ok else f'{len(s.violations)} VIOLATED'}")
    for v in s.violations:
        w(f"  {v}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    ap.add_argument("--minutes", type=float, default=10.0, help="how long (default 10)")
    ap.add_argument("--seed", type=int, default=1, help="jobs and faults (default 1)")
    ap.add_argument("--jobs", type=int, default=4, help="training jobs (default 4)")
    ap.add_argument("--every", type=float, default=6.0, help="mean seconds between faults (6)")
    ap.add_argument("--timeout", type=float, default=10.0, help="each call's deadline (10 s)")
    ap.add_argument("--compute", type=float, default=0.3, help="compute seconds a call (0.3)")
    ap.add_argument("--pool", type=int, default=64, help="switch slots (64)")
    ap.add_argument(
        "--min-life", type=float, default=60.0,
        help="judge RSS and descriptors of processes that lived this long (60 s)",
    )  # fmt: skip
    ap.add_argument("--rss-bound", type=float, default=8.0, help="MiB a process may grow (8)")
    ap.add_argument("--fd-bound", type=int, default=2, help="descriptors it may gain (2)")
    ap.add_argument(
        "--net", choices=("auto", "on", "off"), default="auto",
        help="network faults in a namespace of the soak's own: auto (where root and nft "
        "are), on (fail without them), off",
    )  # fmt: skip
    ap.add_argument(
        "--switch", choices=("ref", "bmv2"), default="ref",
        help="the reference switch (testbed.loopref, default) or BMv2 (simple_switch_grpc on "
        "veths in the soak's namespace: needs root, nft, tc, p4c and BMv2)",
    )  # fmt: skip
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    ap.add_argument("--schedule", action="store_true", help="print the fault schedule and exit")
    args = ap.parse_args(argv)
    if not 1 <= args.jobs <= 8:
        ap.error("--jobs must be 1..8")
    return args


def _interrupt(_sig: int, _frame: object) -> None:
    """SIGTERM as Ctrl-C: the soak stops what it started on its way out."""
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.schedule:
        jobs = layouts(args.seed, args.jobs)
        use_net, _ = network(args)
        plan = schedule(args.seed, args.minutes * 60, jobs, args.every, quiet_tail(args), use_net)
        for f in plan:
            print(f)
        return 0
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        summary = Soak(args).run()
    except KeyboardInterrupt:
        print("python -m bench.soak: interrupted; everything it started is stopped", flush=True)
        return 130
    report(summary)
    return 0 if summary.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
