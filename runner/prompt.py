"""``make cli`` (``make run RUN_ARGS=--cli``): the run's world at Mininet's prompt.

The world is the batch run's (topology, switch, controller, link
properties), with no job admitted and no PS started.  Mininet's own
commands work (``h1 ping h2``, ``xterm h1``, ``nodes``, ``net``), a host's
shell runs the project's programs (``h3 esa-ps ... &``, ``h1 esa-worker
...``, ``h1 esa-ctl jobs``: ``runner.world`` puts them on its PATH and
points ``esa-ctl`` at the controller), and four commands are added:

- ``esa ARGS``: ``esa-ctl ARGS`` against the run's controller;
- ``metrics [WORD ...]``: the controller's Prometheus metrics (``esa-ctl
  serve --metrics``, on a free port of 127.0.0.1 in the run's network
  namespace, which the banner shows), the samples whose line has every
  WORD;
- ``job N [M ...]``: run jobs of the scenario now, as the batch run does
  (admit, PS, workers, progress, removal), and print their table and
  whether every worker received every exact sum;
- ``scenario``: the scenario's jobs and the hosts they run on.

Leaving the prompt (``exit``, Ctrl-D) returns to ``runner.main``, which
stops everything as on Ctrl-C.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import urllib.request
from dataclasses import replace
from pathlib import Path

import grpc
from mininet.cli import CLI
from mininet.log import setLogLevel

from controller.api.admin import AdminClient, AdminError
from controller.api.messages import JobRef
from esa.job import JobSpec, Placement
from runner import report
from runner.ctl import Ctl
from runner.jobs import run_jobs
from runner.paths import ROOT
from runner.scenario import RunJob, Scenario
from runner.world import PY, World

METRICS_TIMEOUT_S = 30.0


def _relative(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _hosts(world: World, job: int) -> str:
    hosts = world.jobs[job]
    top = f", sums complete at {hosts.top}" if len(world.topo.switches) > 1 else ""
    return (
        f"workers on {' '.join(m.name for m in hosts.workers)}, "
        f"PS on {' '.join(m.name for m in hosts.ps)}{top}"
    )


def banner(world: World, scenario_file: Path, out: Path, scheme: str) -> str:
    """What the user sees above the first prompt: what runs, and what to type."""
    s, topo = world.scenario, world.topo
    hosts = topo.hosts
    first = s.jobs[0].spec
    example = next(j for j in range(9, 256) if j not in {job.spec.job for job in s.jobs})
    a, b, ps = hosts[0], hosts[1], hosts[2]
    pcaps = f"{_relative(out / 'pcaps')}/" if world.pcaps else "off (--pcap)"
    pair = " ".join(str(j.spec.job) for j in s.jobs[:2])
    names = [d.name for d in topo.switches]
    scrape = f'metrics job="{first.job}"'
    by_hand = topo.address(topo.top(Placement((a.name, b.name), (ps.name,))))
    if len(names) == 1:
        switches = f"switch {names[0]} is the {world.program.kind.label}, {s.pool_size} slots"
        sends = f"a PS sends what it completes to {by_hand}"
        logs = f"{names[0]}.log, {names[0]}-p4runtime-requests.txt"
    else:
        switches = (
            f"switches {', '.join(names)} are the {world.program.kind.label}, "
            f"{s.pool_size} slots each"
        )
        tops = ", ".join(f"{d.name} {d.ip}" for d in topo.switches)
        sends = f"a PS sends what it completes to its job's top switch ({tops})"
        logs = f"{'.log, '.join(names)}.log, p4runtime-requests.txt"
    lines = [
        f"*** ESA: {switches}, scheme {scheme}",
        f"*** topology {topo.name}: {len(hosts)} hosts {hosts[0].name}..{hosts[-1].name}; {sends}",
        "*** the controller is up; no job is admitted and no PS runs",
        "",
        f"  job {first.job:<18} run job {first.job} of {scenario_file.name} now "
        f"({_hosts(world, first.job)}):",
        f"  {'':<22} admit, PS, workers; waits, then says if every sum was exact",
        *(
            [f"  job {pair:<18} several jobs at once, contending for the slots"]
            if len(s.jobs) > 1
            else []
        ),
        f"  {'scenario':<22} the scenario's jobs and their hosts",
        f"  {'esa jobs':<22} the controller (esa-ctl): jobs, status, stats, slots, "
        "policy atp, prio, ...",
        f"  {f'{a.name} esa-ctl jobs':<22} the same from a host's shell",
        *(
            [
                f"  {'metrics':<22} the controller's Prometheus metrics, {world.metrics_url}",
                f"  {'':<22} in the run's network namespace ({scrape}: job {first.job}'s alone)",
            ]
            if world.metrics_url
            else []
        ),
        "",
        f"  a job by hand ({a.name} and {b.name} sum through the switch, the PS on {ps.name}):",
        f"  esa admit {example} --workers {a.name} {b.name} --ps {ps.name} --priority 100",
        f"  {ps.name} esa-ps --job {example}:2 --switch-addr {by_hand} &",
        f"  {b.name} esa-worker --job {example} --index 1 --fan-in 2 --ps {ps.ip} "
        "--iters 3 --size 4096 &",
        f"  {a.name} esa-worker --job {example} --index 0 --fan-in 2 --ps {ps.ip} "
        "--iters 3 --size 4096",
        f"  esa remove {example}",
        "",
        f"  logs: {_relative(world.logs)}/ ({logs}, controller.log, one per job part)",
        f"  pcaps: {pcaps}",
        "  exit (or Ctrl-D) stops everything",
    ]
    return "\n".join(lines)


class EsaCLI(CLI):  # type: ignore[misc]
    """Mininet's CLI with ``esa``, ``job`` and ``scenario`` (see the module's doc)."""

    def __init__(self, world: World, intro: str) -> None:
        self.world = world
        self.jobs = {j.spec.job: j for j in world.scenario.jobs}
        sys.stdout.write(intro + "\n")
        sys.stdout.flush()
        super().__init__(world.net)  # runs the prompt until exit

    def _say(self, text: str) -> None:
        self.stdout.write(text + "\n")
        self.stdout.flush()

    def do_esa(self, line: str) -> None:
        """esa ARGS: esa-ctl ARGS against this run's controller
        (esa jobs, esa stats, esa admit 9 --workers h1 h2 --ps h3, esa policy atp)."""
        try:
            argv = shlex.split(line)
        except ValueError as e:
            self._say(f"esa: {e}")
            return
        cmd = [PY, "-m", "controller", "--admin", self.world.admin, *(argv or ["--help"])]
        subprocess.run(cmd, cwd=ROOT, check=False)

    def do_metrics(self, line: str) -> None:
        """metrics [WORD ...]: the controller's Prometheus metrics, the
        samples whose line has every WORD (metrics job="1", metrics drops)."""
        url = self.world.metrics_url
        if url is None:
            self._say("metrics: the controller serves none in this run")
            return
        try:
            with urllib.request.urlopen(url, timeout=METRICS_TIMEOUT_S) as reply:
                text = reply.read().decode()
        except OSError as e:
            self._say(f"metrics: {url}: {e}")
            return
        words = line.split()
        for sample in text.splitlines():
            if not sample.startswith("#") and all(w in sample for w in words):
                self._say(sample)

    def do_scenario(self, _line: str) -> None:
        """scenario: the scenario's jobs and the hosts they run on."""
        for spec in (j.spec for j in self.jobs.values()):
            prio = "auto (SRPT)" if spec.priority is None else str(spec.priority)
            self._say(
                f"job {spec.job}: {spec.workers} workers, {spec.values} values, "
                f"{spec.iterations} iterations, priority {prio}; {_hosts(self.world, spec.job)}"
            )

    def do_job(self, line: str) -> None:
        """job N [M ...]: run these jobs of the scenario now and check their sums."""
        try:
            ids = [int(w) for w in line.split()]
            jobs = tuple(self.jobs[j] for j in ids)
        except (ValueError, KeyError):
            self._say(f"usage: job N [M ...] with N among {', '.join(map(str, self.jobs))}")
            return
        if not jobs or len(set(ids)) != len(ids):
            self._say("usage: job N [M ...], each job once")
            return
        client = AdminClient(self.world.admin)
        try:
            admitted = {j.job for j in client.jobs().jobs}
            policy = client.status().policy
        except AdminError as e:
            self._say(f"job: the controller does not answer: {e}")
            return
        finally:
            client.close()
        clash = sorted(set(ids) & admitted)
        if clash:
            self._say(f"job {clash[0]} is admitted already: esa remove {clash[0]} first")
            return
        self._run(jobs, policy)

    def _run(self, jobs: tuple[RunJob, ...], policy: str) -> None:
        world = self.world
        label = world.program.kind.label
        specs = tuple(replace(j.spec, arrival_s=0.0) for j in jobs)
        ctl = Ctl(world.admin)
        try:
            run = run_jobs(world, ctl, specs, policy, 1, live=True)
        except KeyboardInterrupt:
            self._forget(specs)
            self._say("\njob: interrupted; its PSes and workers are stopped and it is removed")
            return
        finally:
            ctl.close()
        scenario: Scenario = replace(world.scenario, jobs=jobs)
        self._say(report.job_table(policy, run.results, label, under="policy"))
        faults = report.fault_lines(run.faults, scenario)
        if faults:
            self._say(faults)
        for job, r in sorted(run.results.items()):
            if r.failed:
                self._say(f"job {job}: FAILED: {r.reason}")
            elif r.exact:
                self._say(f"job {job}: done in {r.jct_s:.2f} s; every sum exact (bit for bit)")
            else:
                self._say(f"job {job}: done in {r.jct_s:.2f} s; sums NOT exact")

    def _forget(self, specs: tuple[JobSpec, ...]) -> None:
        """Remove interrupted jobs from the controller (those it has)."""
        client = AdminClient(self.world.admin)
        try:
            for spec in specs:
                try:
                    client.remove(JobRef(spec.job))
                except AdminError as e:
                    if e.code is not grpc.StatusCode.NOT_FOUND:
                        self._say(f"job {spec.job}: could not be removed: {e}")
        finally:
            client.close()


def prompt(world: World, scenario_file: Path, out: Path) -> None:
    """Set the scenario's first scheme and run the prompt until the user leaves."""
    s = world.scenario
    scheme = s.schemes[0]
    ctl = Ctl(world.admin)
    try:
        ctl.set_scheme(scheme, s.stale_us, s.squat_us, s.part_size, s.layout)
    finally:
        ctl.close()
    setLogLevel("output")  # the prompt prints what the hosts' commands print
    EsaCLI(world, banner(world, scenario_file, out, scheme))
