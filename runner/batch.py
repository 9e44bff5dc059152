"""The batch run: every scheme of the scenario in a fresh world, one after
the other (``--repeat`` rounds of them), each followed by its table, then
the comparison and the files of ``results/run/``."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from runner import report, timeline
from runner import scenario as scn
from runner.jobs import SchemeRun, run_scheme
from runner.network import Network, placed
from runner.switches import Program
from runner.world import World


def problems(scheme: str, run: SchemeRun, train: str = scn.SYNTHETIC) -> list[str]:
    """What makes the run fail: a wrong sum (a trained model that differs
    between workers), a job that failed without a fault killing one of its
    workers, a restart that did not re-sync."""
    wrong = "parameters differ between workers" if train == scn.TORCH else "sums not exact"
    out = []
    for job, r in run.results.items():
        if r.failed and job not in run.killed:
            out.append(f"{scheme}: job {job} failed: {r.reason}")
        elif not r.failed and not r.exact:
            out.append(f"{scheme}: job {job}: {wrong}")
    out += [f"{scheme}: fault {e.fault}: {e.what}" for e in run.faults if not e.ok]
    return out


class Setup:
    """What every world of this run is built from."""

    def __init__(
        self,
        args: argparse.Namespace,
        scenario: scn.Scenario,
        topo: Network,
        program: Program,
        out: Path,
        work: Path,
    ) -> None:
        self.args, self.scenario, self.topo, self.program = args, scenario, topo, program
        self.out, self.work = out, work

    def world(self, sub: Path) -> World:
        """A world whose logs (and captures, with --pcap) go under ``sub``."""
        pcaps = self.out / "pcaps" / sub if self.args.pcap else None
        work = Path(tempfile.mkdtemp(prefix="w", dir=self.work))
        logs = self.out / "logs" / sub
        trace, metrics = self.args.trace, self.args.cli
        return World(self.scenario, self.topo, self.program, logs, work, pcaps, trace, metrics)


def run_rounds(
    setup: Setup,
) -> tuple[dict[str, list[dict[int, report.JobResult]]], list[timeline.Sample], list[str]]:
    args, scenario = setup.args, setup.scenario
    label = setup.program.kind.label
    runs: dict[str, list[dict[int, report.JobResult]]] = {p: [] for p in scenario.schemes}
    samples: list[timeline.Sample] = []
    trouble: list[str] = []
    for rnd in range(args.repeat):
        for scheme in scenario.schemes:
            tag = f"round {rnd + 1}/{args.repeat}, " if args.repeat > 1 else ""
            print(f"\n=== scheme {scheme}{scn.layout_note(scenario, scheme)}: {tag}"
                  f"{len(scenario.jobs)} jobs, {scenario.pool_size} slots, {label} ===",
                  flush=True)  # fmt: skip
            sub = Path(scheme) / f"round{rnd + 1}" if args.repeat > 1 else Path(scheme)
            with setup.world(sub) as world:
                run = run_scheme(world, scheme, rnd + 1, live=not args.quiet)
            runs[scheme].append(run.results)
            samples += run.samples
            trouble += problems(scheme, run, scenario.train)
            print(report.job_table(scheme, run.results, label), flush=True)
            faults = report.fault_lines(run.faults, scenario)
            if faults:
                print(faults, flush=True)
    return runs, samples, trouble


def run_batch(setup: Setup) -> int:
    args, scenario, out = setup.args, setup.scenario, setup.out
    kind = setup.program.kind
    started = time.monotonic()
    runs, samples, trouble = run_rounds(setup)
    results = {p: report.mean_of(r) for p, r in runs.items()}
    if args.repeat > 1:
        print(report.rounds_table(runs))
    print(report.comparison_table(scenario, results, kind.label))
    written = report.write(out, scenario, results, runs, kind)
    written.append(timeline.write_csv(out / "slots.csv", samples))
    written.append(
        timeline.plot(
            out / "slots.png", samples, list(scenario.schemes), scenario.pool_size, kind.label
        )
    )
    as_run = {**scn.as_json(placed(scenario, setup.topo)), "switch": kind.name}
    (out / "scenario.json").write_text(json.dumps(as_run, indent=2))
    print(f"\nwrote {', '.join(str(p) for p in written)}")
    print(f"total time {time.monotonic() - started:.0f} s")
    return verdict(scenario.train, results, trouble)


def verdict(train: str, results: dict[str, dict[int, report.JobResult]], trouble: list[str]) -> int:
    """The run's exit status, and its last words: 1, with each of ``trouble``
    (``problems``: a failed job, a wrong sum, a fault that failed) on stderr;
    else 0, with what every worker received."""
    if trouble:
        print("run: " + "\nrun: ".join(trouble), file=sys.stderr)
        return 1
    got = (
        "ended with the same parameters as its peers"
        if train == scn.TORCH
        else "received every exact sum"
    )
    if any(r.failed for per_job in results.values() for r in per_job.values()):
        print(f"every worker of every job no fault broke {got} (bit for bit)")
    else:
        print(f"every worker {got} (bit for bit)")
    return 0
