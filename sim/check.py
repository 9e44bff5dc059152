"""``python -m sim.check`` (``make sim-check``): every goal line ``make sim``
prints, judged again on reduced points in the fluid model and in the packet
model, side by side, each disagreement named.

A reduced point is a ``make sim`` point (``sim.sweep.SUBSET``'s judged
points, 1 and 2 PS hosts per job, and the pool and shard curves of
``sim.curves``) with fewer values per iteration and fewer iterations: its
network, pool, PS hosts, load, burst and spreads are the point's, so its
pool-to-window ratio is too; every model's values and compute time are
scaled (``WorkloadSpec.scale``) so that the smallest model of the mix
streams ``CHUNKS`` chunks an iteration, jobs run ``ITERATIONS``
iterations (log-uniform) and there are ``JOBS`` of them, ``SEEDS`` seed.
Both models run the same jobs, so a verdict that differs is the models'
difference, not the reduction's.  The goal lines are ``sim.summary``'s and
``sim.curves``'s functions on the reduced points' means.  The 8-PS rows
of ``make sim`` are shown there, not judged, and not run here.

What the reduction changes: an iteration of the smallest model is about
half an ESA window at 100 G (464 packets) and a 24th of one at 400 G and
5 us hops (6,213), so there a job's iteration ends before its window
fills and it holds less of the pool than at the full point.  The packet
model's cost (``python -m bench.packet_rate``) sets the reduction: the
check is to run in minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from esa import arguments, wire
from esa.job import JobSpec
from esa.schemes import SIM_SCHEMES, Scheme
from sim import bound, curves, summary
from sim.engine import Engine, add_arguments
from sim.entry import Model, run_scenario
from sim.params import BASELINES
from sim.summary import CONTROLLER_ESA, JctStats, Summary
from sim.sweep import SUBSET, Point
from sim.taskfile import StaleFile, TaskFile, fingerprint
from sim.workload import MIXES, MODELS, WorkloadSpec, concurrency, make_jobs

CHUNKS = 256
"""Chunks an iteration of the smallest model of a point's mix."""
ITERATIONS = (1, 2)
JOBS = 12
SEEDS = 1
MODELS_RUN: tuple[Model, ...] = ("fluid", "packet")
JUDGED_SCHEMES = (*BASELINES, CONTROLLER_ESA, Scheme.ESA_SRPT, Scheme.ESA_EQUAL, Scheme.IDEAL)
"""What ``summary.goals`` reads at a judged point (not ``ps-only``, the
dearest in packets, nor plain ``esa``); the curves' goals read every scheme."""


@dataclass(frozen=True)
class Reduced:
    point: Point
    scale: float
    jobs: int = JOBS
    iterations: tuple[int, int] = ITERATIONS

    def workload(self) -> WorkloadSpec:
        return replace(
            self.point.workload(), jobs=self.jobs, iterations=self.iterations, scale=self.scale
        )

    def specs(self, seed: int) -> list[JobSpec]:
        return make_jobs(self.workload(), self.point.net(), seed)


def reduce(
    pt: Point, chunks: int = CHUNKS, jobs: int = JOBS, iterations: tuple[int, int] = ITERATIONS
) -> Reduced:
    smallest = min(MODELS[m].params_m for m in MIXES[pt.mix]) * 1e6 / wire.K
    return Reduced(pt, chunks / smallest, jobs, iterations)


Task = tuple[Reduced, int, Scheme, Model]
"""a reduced point, a seed, a scheme, a model."""
COLUMNS: dict[str, type] = {
    "point": str,
    "seed": int,
    "scheme": str,
    "model": str,
    "job": int,
    "jct_s": float,
    "packets": int,
}
"""One row per job; ``packets``: the contributions the run's workers send
once each (every chunk of every worker and iteration)."""


def key(task: Task) -> tuple[object, ...]:
    red, seed, scheme, model = task
    return (red.point.name, seed, scheme.value, model)


def run_one(task: Task) -> list[dict[str, object]]:
    red, seed, scheme, model = task
    specs = red.specs(seed)
    jct = run_scenario(specs, red.point.pool, scheme, red.point.net(), model, seed)
    packets = sum(s.workers * s.chunks * s.iterations for s in specs)
    return [
        {
            "point": red.point.name,
            "seed": seed,
            "scheme": scheme.value,
            "model": model,
            "job": s.job,
            "jct_s": jct[s.job],
            "packets": packets,
        }
        for s in specs
    ]


@dataclass(frozen=True)
class Plan:
    judged: list[Reduced]
    pools: list[Reduced]
    shards: list[Reduced]

    def tasks(self, seeds: int) -> list[Task]:
        every = [(r, JUDGED_SCHEMES) for r in self.judged]
        every += [(r, SIM_SCHEMES) for r in self.pools + self.shards]
        return [
            (r, seed, sc, model)
            for model in MODELS_RUN
            for r, schemes in every
            for seed in range(seeds)
            for sc in schemes
        ]


def plan(chunks: int = CHUNKS, jobs: int = JOBS, iterations: tuple[int, int] = ITERATIONS) -> Plan:
    def red(pts: list[Point]) -> list[Reduced]:
        return [reduce(p, chunks, jobs, iterations) for p in pts]

    return Plan(
        red([p for p in SUBSET if not p.sensitivity]),
        red(curves.pool_points()),
        red(curves.shard_points()),
    )


def summaries(
    points: list[Reduced], rows: list[dict[str, object]], model: str, seeds: int
) -> list[Summary]:
    """``summary.Summary`` of each reduced point in one model, under the
    point's own name and flags, so the goal functions read it as they read
    ``make sim``'s; the schemes not run at it left out."""
    jct: dict[tuple[str, str, int], list[float]] = {}
    for r in rows:
        if r["model"] == model:
            k = (str(r["point"]), str(r["scheme"]), int(str(r["seed"])))
            jct.setdefault(k, []).append(float(str(r["jct_s"])))
    out = []
    for red in points:
        pt, by = red.point, {}
        for sc in SIM_SCHEMES:
            if (pt.name, sc.value, 0) not in jct:
                continue
            by[sc] = JctStats.of([jct[(pt.name, sc.value, s)] for s in range(seeds)])
        conc = float(np.mean([concurrency(red.specs(s), pt.net()) for s in range(seeds)]))
        floors = tuple(bound.mean_jct(red.specs(s), pt.pool, pt.net(), s) for s in range(seeds))
        out.append(Summary(pt, conc, pt.net().bdp_window(Scheme.STATIC_BDP), by, floors))
    return out


VERDICT = re.compile(r"\b(NOT MET|MET)\b")


def verdicts(line: str) -> tuple[str, ...]:
    """The verdicts a goal line states, in order (a line may judge two goals)."""
    return tuple(VERDICT.findall(line))


def goal_lines(judged: list[Summary], pools: list[Summary], shards: list[Summary]) -> list[str]:
    """What ``make sim`` prints under its tables, in its order."""
    return summary.goals(judged) + curves.pool_goals(pools) + curves.shard_lines(shards)


def side_by_side(fluid: list[str], packet: list[str]) -> tuple[list[str], int]:
    """Each goal line in both models and whether their verdicts agree; the
    number of lines whose verdicts differ."""
    out, differ = [], 0
    for n, (f, p) in enumerate(zip(fluid, packet, strict=True), 1):
        vf, vp = verdicts(f), verdicts(p)
        if not vf and not vp:
            tag = "shown, not judged"
        elif vf == vp:
            tag = f"same verdict: {', '.join(vf)}"
        else:
            differ += 1
            tag = f"DISAGREE: fluid {', '.join(vf) or '-'}, packet {', '.join(vp) or '-'}"
        out += [f"goal {n}: {tag}", f"  fluid : {f}", f"  packet: {p}"]
    return out, differ


def ratio_table(fluid: list[Summary], packet: list[Summary]) -> list[str]:
    """Per judged point the two ratios the goals read, in both models, and
    the best baseline in each; ``*`` where one model has ESA behind the
    best baseline by more than ``summary.NEVER_BEHIND`` and the other not."""
    lines = [
        f"{'point':<28}{'best base / ' + CONTROLLER_ESA.value:>22}{'srpt / equal':>20}"
        "   best baseline",
        f"{'':<28}{'fluid':>11}{'packet':>11}{'fluid':>10}{'packet':>10}   fluid / packet",
    ]
    for f, p in zip(fluid, packet, strict=True):
        behind = [1 / s.esa_gain > summary.NEVER_BEHIND for s in (f, p)]
        lines.append(
            f"{f.point.name:<28}{f.esa_gain:>11.3f}{p.esa_gain:>11.3f}"
            f"{f.priority_gain:>10.3f}{p.priority_gain:>10.3f}"
            f"   {f.best(BASELINES).value} / {p.best(BASELINES).value}"
            + (" *" if behind[0] != behind[1] else "")
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.check", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--chunks",
        type=arguments.at_least("chunks", 1),
        default=CHUNKS,
        help=f"chunks an iteration of the mix's smallest model (default {CHUNKS})",
    )
    ap.add_argument(
        "--jobs", type=arguments.at_least("jobs", 1), default=JOBS, help=f"default {JOBS}"
    )
    ap.add_argument(
        "--iterations",
        type=arguments.at_least("iterations", 1),
        nargs=2,
        metavar=("LO", "HI"),
        default=ITERATIONS,
        help=f"each job's, log-uniform (default {ITERATIONS[0]} {ITERATIONS[1]})",
    )
    ap.add_argument(
        "--seeds", type=arguments.at_least("seeds", 1), default=SEEDS, help=f"default {SEEDS}"
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=Path("results/sim-check"),
        help="where each run's rows go as it finishes (tasks.csv), from which a rerun resumes",
    )
    add_arguments(ap)
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    pl = plan(args.chunks, args.jobs, tuple(args.iterations))
    tasks = pl.tasks(args.seeds)
    try:
        store = TaskFile(
            args.out / "tasks.csv", COLUMNS, 4, fingerprint(tasks, COLUMNS), args.fresh
        )
    except StaleFile as e:
        ap.exit(2, f"{ap.prog}: {e}\n")
    todo = [t for t in tasks if key(t) not in store.done]
    # the packet runs first, the longest of them (the large windows) first
    todo.sort(key=lambda t: (t[3] != "packet", -t[0].point.net().window_for(Scheme.ESA)))
    with Engine(args.procs, args.scheduler) as eng:
        eng.run(
            run_one,
            todo,
            lambda _, rows: store.append(rows),
            "sim-check",
            len(tasks),
            lambda t: (t[3], t[2]),
        )
    rows = [r for t in tasks for r in store.done[key(t)]]
    by_model = {
        m: [summaries(pts, rows, m, args.seeds) for pts in (pl.judged, pl.pools, pl.shards)]
        for m in MODELS_RUN
    }
    packets = sum(int(str(store.done[key(t)][0]["packets"])) for t in tasks if t[3] == "packet")
    scales = sorted({f"{r.scale:.2g}" for r in pl.judged + pl.pools + pl.shards})
    print(
        f"{len(pl.judged)} judged points and the curves ({len(pl.pools)} pools, {len(pl.shards)} "
        f"shard counts), reduced: {args.jobs} jobs, {args.iterations[0]}-{args.iterations[1]} "
        f"iterations, values and compute x {' / '.join(scales)} (the smallest model "
        f"{args.chunks} chunks an iteration), {args.seeds} seed; fluid and packet model, "
        f"{len(tasks) // 2} runs each ({', '.join(s.value for s in JUDGED_SCHEMES)} at the "
        f"judged points, every scheme on the curves), {packets:,} contributions in the packet runs"
    )
    print()
    print("\n".join(ratio_table(by_model["fluid"][0], by_model["packet"][0])))
    print()
    lines, differ = side_by_side(goal_lines(*by_model["fluid"]), goal_lines(*by_model["packet"]))
    print("\n".join(lines))
    print()
    print(f"goal lines whose verdicts differ between the models: {differ}")
    print(f"({time.monotonic() - t0:.0f} s; rows in {args.out / 'tasks.csv'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
