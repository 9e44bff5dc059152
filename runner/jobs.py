"""One scheme's run of the scenario's jobs: arrivals, PSes, workers, progress,
faults, the slot timeline, and each job's result.

Each job is admitted when it arrives (``arrival_s``), so static partitions
go to jobs in arrival order, and removed when its workers are done, so its
partition goes to a later job.  The workers report every iteration (a
training job's: every DDP step, and the example's epochs) on stdout; the
run turns a job's slowest worker's count into the job's remaining volume
for the controller's automatic priorities.  A job whose worker was killed
or failed, or which stalls (``runner.stall``), ends as failed with the
reason (the workers' own last words where they have them), never as a hang.
"""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from esa import progress
from esa.job import JobSpec
from runner import stall, torchjobs, verify
from runner.ctl import Ctl
from runner.faults import Fault
from runner.inject import FaultEvent, Injector
from runner.lines import Lines
from runner.network import JobHosts
from runner.report import JobResult
from runner.scenario import TORCH, Scenario
from runner.timeline import EVENTS, Sample, Timeline
from runner.torchworker import EPOCH, STEP
from runner.world import PY, World

MOVED = ("completed", "fallback")
"""the switch's counters of a job's chunks going through it (``runner.stall``)."""
DRAW_S = 0.5
PS_START_S = 120.0
"""how long the PSes of a run may take to start listening (a loaded machine)."""
PS_STOP_S = 60.0
"""how long a PS may take to stop and print its report before it is killed."""


@dataclass
class RunningWorker:
    index: int
    proc: subprocess.Popen[str]
    log: Path
    steps: int = 0
    """iterations finished (``iter`` lines), or DDP steps its hook summed (``step``)."""
    epochs: int = 0
    """the example's epochs (``epoch`` lines)."""
    report: dict[str, Any] | None = None
    open: bool = True
    killed_by: Fault | None = None


@dataclass
class RunningJob:
    spec: JobSpec
    started: float
    watch: stall.Watch
    by_epochs: bool = False
    """its ``iterations`` are the example's epochs, not steps."""
    workers: dict[int, RunningWorker] = field(default_factory=dict)
    reported: int = 0
    ended: float = 0.0
    done: bool = False
    failed: str = ""

    @property
    def steps(self) -> int:
        """Steps every worker summed."""
        return min(w.steps for w in self.workers.values())

    @property
    def iters(self) -> int:
        """What its ``iterations`` count, every worker's: steps, or the example's epochs."""
        return min(w.epochs if self.by_epochs else w.steps for w in self.workers.values())


LINKS_FILE = "links.json"
"""Per host of a run with lossy links, the frames its loss rules dropped
each way (``World.loss_drops``), in the scheme's logs."""


@dataclass(frozen=True)
class SchemeRun:
    results: dict[int, JobResult]
    samples: list[Sample]
    faults: list[FaultEvent]
    killed: set[int]
    """jobs a fault killed a worker of: their failure is the expected outcome."""


def last_words(log: Path) -> str:
    """The last non-empty line a process wrote to ``log``."""
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    return lines[-1] if lines else "(no output)"


def worker_command(s: Scenario, job: JobSpec, hosts: JobHosts, index: int) -> list[str]:
    me = hosts.workers[index]
    cmd = [
        PY, "-m", "hosts.programs.worker_cli", "--job", str(job.job), "--index", str(index),
        "--fan-in", str(job.workers), "--ps", hosts.ps_addresses,
        "--bind", f"{me.ip}:{me.udp_port}",
        "--iters", str(job.iterations), "--size", str(job.values),
        "--window", str(s.window), "--rto", str(s.rto_s), "--seed", str(verify.SEED),
        "--bound", str(verify.BOUND), "--timeout", f"{s.timeout_s:g}", "--json",
    ]  # fmt: skip
    if job.compute_s:
        cmd += ["--compute", f"{job.compute_s:g}", "--jitter", f"{job.jitter:g}"]
    return cmd


class Runner:
    def __init__(
        self,
        world: World,
        ctl: Ctl,
        timeline: Timeline,
        specs: tuple[JobSpec, ...],
        t0: float,
        live: bool,
    ) -> None:
        self.world, self.ctl, self.timeline = world, ctl, timeline
        self.s = world.scenario
        self.specs = specs
        self.t0, self.live = t0, live
        self.jobs: dict[int, RunningJob] = {}
        self.streams: dict[int, tuple[int, int]] = {}
        """each worker's stdout descriptor: (job, worker index)."""
        self.reader = Lines()
        self.events: dict[int, dict[str, int]] = {}
        self.next_draw = 0.0
        self.bar = progress.bar(
            "jobs", sum(s.iterations for s in specs), "iterations", quiet=not live
        )
        self.lines = live and bool(self.bar.disable)
        """not at a terminal: a line as each job starts and ends, no bar."""

    # -- arrivals and kills --

    def arrive(self, spec: JobSpec) -> None:
        hosts = self.world.jobs[spec.job]
        self.ctl.admit(spec, hosts.placement)
        now = time.monotonic()
        unit = "step" if self.s.train == TORCH else "iteration"
        watch = stall.Watch(stall.limit_s(self.s, spec), unit, now, (0, self._moved(spec.job)))
        job = RunningJob(spec, now, watch, torchjobs.counts_epochs(self.s))
        for m in hosts.workers:
            log = self.world.logs / f"{m.role}.log"
            if self.s.train == TORCH:
                cmd = torchjobs.worker_command(self.s, spec, hosts, m)
            else:
                cmd = worker_command(self.s, spec, hosts, m.index)
            p = self.world.popen(m.name, cmd, log.name)
            job.workers[m.index] = RunningWorker(m.index, p, log)
            if p.stdout is not None:
                self.streams[p.stdout.fileno()] = (spec.job, m.index)
        self.jobs[spec.job] = job
        self._say(f"job {spec.job}: started")

    def kill(self, job: int, index: int, fault: Fault) -> bool:
        """For the fault injector: kill one worker for good."""
        running = self.jobs.get(job)
        w = running.workers.get(index) if running else None
        if w is None or w.proc.poll() is not None:
            return False
        w.killed_by = fault
        w.proc.kill()
        return True

    def stop_workers(self) -> None:
        """Kill the workers still running (none once ``loop`` returned)."""
        for job in self.jobs.values():
            for w in job.workers.values():
                if w.proc.poll() is None:
                    w.proc.kill()
                    w.proc.wait()
                if w.proc in self.world.procs:
                    self.world.procs.remove(w.proc)

    # -- the loop --

    def loop(self) -> None:
        pending = sorted(self.specs, key=lambda j: j.arrival_s)
        try:
            while pending or any(not j.done for j in self.jobs.values()):
                while pending and time.monotonic() - self.t0 >= pending[0].arrival_s:
                    self.arrive(pending.pop(0))
                if self.streams:
                    ready, _, _ = select.select(list(self.streams), [], [], 0.2)
                    for fd in ready:
                        self._read(fd)
                else:
                    time.sleep(0.2)
                for job in self.jobs.values():
                    if not job.done:
                        self._check(job)
                self.ctl.flush()
                self._draw()
            self.next_draw = 0.0
            self._draw()
        finally:
            self.bar.close()

    def _read(self, fd: int) -> None:
        """Every line a worker wrote since the last read (``runner.lines``)."""
        job_id, index = self.streams[fd]
        job = self.jobs[job_id]
        w = job.workers[index]
        whole, ended = self.reader.take(fd)
        for line in whole:
            self._line(job_id, job, w, line)
        if ended:
            del self.streams[fd]
            w.open = False
            w.proc.wait()

    def _line(self, job_id: int, job: RunningJob, w: RunningWorker, line: str) -> None:
        if line.startswith(("iter ", STEP, EPOCH)):
            if line.startswith(EPOCH):
                w.epochs += 1
            else:
                w.steps += 1
            done = min(job.iters, job.spec.iterations)
            if done > job.reported:
                job.reported = done
                if job.spec.priority is None:
                    self.ctl.progress(job_id, job.spec.remaining_bytes(done))
        elif line.startswith("{"):
            w.report = json.loads(line)

    def _moved(self, job: int) -> int:
        """Chunks of ``job`` through the switch so far (the timeline's last read)."""
        return sum(self.timeline.total(job, e) for e in MOVED)

    def _check(self, job: RunningJob) -> None:
        now = time.monotonic()
        summed = sum(w.steps for w in job.workers.values())
        job.watch.see(now, summed, self._moved(job.spec.job))
        why = job.watch.stalled(now, job.steps)
        if why and not job.failed:
            job.failed = "; ".join(x for x in (self._failure(job), why) if x)
            for w in job.workers.values():
                if w.proc.poll() is None:
                    w.proc.kill()
        if any(w.open for w in job.workers.values()):
            return
        job.done, job.ended = True, now
        if not job.failed:
            job.failed = self._failure(job)
        self.timeline.counters()
        self.events[job.spec.job] = {e: self.timeline.total(job.spec.job, e) for e in EVENTS}
        self.ctl.remove(job.spec.job)
        self._say(f"job {job.spec.job}: {'FAILED' if job.failed else 'done'}")

    def _failure(self, job: RunningJob) -> str:
        """Why the workers that ended failed ("" if none did): once all
        ended, why the job did not finish."""
        why = []
        for w in job.workers.values():
            if w.open:
                continue
            if w.killed_by is not None:
                why.append(f"worker {w.index} killed by fault {w.killed_by}")
            elif w.proc.returncode != 0:
                why.append(f"worker {w.index} exited {w.proc.returncode}: {last_words(w.log)}")
            elif w.report is None:
                why.append(f"worker {w.index} printed no report")
        return "; ".join(why)

    def _say(self, text: str) -> None:
        if self.lines:
            elapsed = time.monotonic() - self.t0
            print(f"  {elapsed:6.1f} s  {text}", file=sys.stderr, flush=True)

    def _draw(self) -> None:
        """At a terminal, every ``DRAW_S``: the iterations done of all jobs
        as a bar, each job's state after it."""
        if self.bar.disable or time.monotonic() < self.next_draw:
            return
        self.next_draw = time.monotonic() + DRAW_S
        slots = self.timeline.slots_now
        parts, iters = [], 0
        for spec in self.specs:
            job = self.jobs.get(spec.job)
            if job is None:
                parts.append(f"job {spec.job}: at {spec.arrival_s:g} s")
                continue
            finished = job.done and not job.failed
            iters += spec.iterations if finished else min(job.iters, spec.iterations)
            if job.done:
                parts.append(f"job {spec.job}: {'FAILED' if job.failed else 'done'}")
            else:
                held = f" [{slots.get(spec.job, 0)} slots]" if self.timeline.slots_seen else ""
                done = f"step {job.steps}" if self.s.script else f"{job.iters}/{spec.iterations}"
                parts.append(f"job {spec.job}: {done}{held}")
        self.bar.n = iters
        self.bar.set_postfix_str("  ".join(parts), False)
        self.bar.refresh()

    # -- results --

    def results(self) -> dict[int, JobResult]:
        reports = {
            (j, w.index): w.report
            for j, job in self.jobs.items()
            for w in job.workers.values()
            if w.report is not None
        }
        out = {}
        for spec in self.specs:
            job = self.jobs[spec.job]
            events = self.events.get(spec.job, {})
            dropped = self.world.dropped([m.name for m in self.world.jobs[spec.job].members])
            if job.failed:
                out[spec.job] = JobResult.failure(
                    spec, job.ended - job.started, job.failed, events, dropped, job.steps
                )
            elif self.s.train == TORCH:
                out[spec.job] = torchjobs.result(spec, reports, events, dropped)
            else:
                exact = verify.exact(spec, reports)
                out[spec.job] = JobResult.build(spec, reports, events, exact, dropped)
        return out


def start_pses(
    world: World, specs: tuple[JobSpec, ...], pses: dict[str, subprocess.Popen[str]]
) -> None:
    """One PS per job and shard, on the shard's host, into ``pses`` by role
    as each starts (so that all those started are stopped however this
    ends); returns once each says it listens."""
    for job in specs:
        shards = world.jobs[job.job].ps
        for ps in shards:
            pses[ps.role] = world.popen(
                ps.name,
                [PY, "-m", "hosts.programs.ps_cli", "--bind", f"{ps.ip}:{ps.udp_port}",
                 "--job", f"{job.job}:{job.workers}", "--shard", str(ps.index),
                 "--shards", str(len(shards)), "--switch-addr", world.jobs[job.job].switch_addr,
                 "--json"],
                f"{ps.role}.log",
            )  # fmt: skip
    deadline = time.monotonic() + PS_START_S
    for role, p in pses.items():
        assert p.stdout is not None
        ready, _, _ = select.select([p.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready or not p.stdout.readline().startswith("PS on "):
            raise RuntimeError(f"PS {role} did not start: {last_words(world.logs / f'{role}.log')}")


def stop_pses(world: World, pses: dict[str, subprocess.Popen[str]]) -> None:
    """Stop the PSes; each one's final JSON report goes to ``<role>.json``."""
    for role, p in pses.items():
        p.send_signal(signal.SIGTERM)
        try:
            out, _ = p.communicate(timeout=PS_STOP_S)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        (world.logs / f"{role}.json").write_text(out)
        world.procs.remove(p)


def run_jobs(
    world: World, ctl: Ctl, specs: tuple[JobSpec, ...], scheme: str, round_no: int, live: bool
) -> SchemeRun:
    """Run ``specs`` (each admitted at its arrival) with their PSes, under
    whatever policy the controller has (``scheme``: the name the timeline's
    samples give it); the scenario's faults with them.
    Whenever it ends, also on Ctrl-C at any point, what it started is
    stopped: the fault injector, the timeline, the workers, the PSes."""
    s = world.scenario
    with ExitStack() as started:
        pses: dict[str, subprocess.Popen[str]] = {}
        started.callback(stop_pses, world, pses)
        start_pses(world, specs, pses)
        t0 = time.monotonic()
        timeline = Timeline(scheme, round_no, world.registers(), ctl.stats, s.sample_s, t0)
        runner = Runner(world, ctl, timeline, specs, t0, live)
        started.callback(runner.stop_workers)
        injector = Injector(s.faults, world, ctl, runner.kill, t0)
        timeline.start()
        started.callback(timeline.stop)
        injector.start()
        started.callback(injector.stop)
        runner.loop()
        ctl.flush()
        if drops := world.loss_drops():
            (world.logs / LINKS_FILE).write_text(json.dumps(drops, indent=1))
    killed = {j for j, job in runner.jobs.items() if any(w.killed_by for w in job.workers.values())}
    return SchemeRun(runner.results(), timeline.samples, injector.events, killed)


def run_scheme(world: World, scheme: str, round_no: int, live: bool) -> SchemeRun:
    """Run every job of the world's scenario under ``scheme``; the world is fresh."""
    s = world.scenario
    ctl = Ctl(world.admin)
    try:
        ctl.set_scheme(scheme, s.stale_us, s.squat_us, s.part_size, s.layout)
        return run_jobs(world, ctl, tuple(j.spec for j in s.jobs), scheme, round_no, live)
    finally:
        ctl.close()
