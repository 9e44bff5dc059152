"""``python -m sim.check`` (``make sim-check``): every goal line ``make sim``
prints, judged again on reduced points in the fluid model and in the packet
model, side by side, each disagreement named.

A reduced point is a ``make sim`` point (``sim.sweep.SUBSET``'s judged
points, 1 and 2 PS hosts per job, and the pool and shard curves of
``sim.curves``) with fewer values per iteration, fewer iterations and fewer
jobs.  Both models run the same jobs, so a verdict that differs is the
models' difference; whether it is also the full point's depends on what
the reduction keeps.  The goal lines are ``sim.summary``'s and
``sim.curves``'s functions on the reduced points' means; the 8-PS rows of
``make sim`` are shown there, not judged, and not run here.

What decides the verdicts, and how the reduction keeps it (the check
prints the three ratios per point, reduced and full):

* pool over window: kept exactly (the point's network, so its windows,
  and its pool; also its PS hosts, load, burst, spread and lag).
* an iteration over the retransmission timeout (``Net.rto_for``, 8 round
  trips of the PS path): a chunk that falls back and waits out a timeout
  costs its job a timeout; at the full points an iteration of the smallest
  model streams 167-515 timeouts (100 G) or 16-38 (400 G / 5 us), so a few
  timeouts cost little.  Every model's values and compute time are scaled
  (``WorkloadSpec.scale``) so that an iteration of the mix's smallest model
  streams ``RTOS`` timeouts.  The scale used to be set in chunks (256):
  0.07 timeouts at 100 G, 0.005 at 400 G, where one timeout doubled a
  job's time and put ESA 2.1 times behind at ``overload 1 PS`` in the
  packet model.  There (6 jobs, one iteration, before rule L), the better
  of ``static-bdp`` and ``static-fb`` over ESA went 0.48, 0.82, 0.94,
  0.95, 0.99 at 0.07, 0.25, 0.5, 1 and 2 timeouts in the packet model,
  1.03-1.09 in the fluid model: from half a timeout on the packet model's
  ratio moves 5 %, less than the two models differ, so ``RTOS`` is 0.5.
* an iteration over the window: a window is one round trip of the PS path,
  so this is 8 times the last ratio (4 at 100 G): an iteration fills its window and
  streams at line rate for most of it, as at the full point.
* ``MAX_CHUNKS``: at 400 G / 5 us a timeout is 13 times as many packets as
  at 100 G, so the same ratio there would cost more than every 100 G point
  together; the iteration is capped at half a window there, and those four
  points are the least faithful (an iteration does not fill its window).
* paid for with ``JOBS`` jobs (the point's load sets their arrival rate;
  under the burst of 8 at overload they arrive together) of one iteration
  each (the compute phase before a job's stream is kept, the gaps between
  iterations are not), one seed: what two cores run in about 40 minutes
  (``python -m bench.packet_rate``: 30,000-50,000 packets a CPU second).
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
from sim.packet import PacketSim
from sim.params import BASELINES
from sim.summary import CONTROLLER_ESA, JctStats, Summary
from sim.sweep import SUBSET, Point
from sim.taskfile import StaleFile, TaskFile, fingerprint
from sim.workload import MIXES, MODELS, WorkloadSpec, concurrency, make_jobs

RTOS = 0.5
"""An iteration of the mix's smallest model streams this many of the point's
retransmission timeouts (``Net.rto_for``) at line rate, so 8 times as many
windows (a timeout is 8 round trips of the path through the PS, a window
one), unless ``MAX_CHUNKS`` is fewer."""
MAX_CHUNKS = 3000
"""At most this many chunks an iteration of the smallest model: half a
window at 400 G / 5 us hops, where a timeout is 13 times as many packets as
at 100 G / 1 us."""
ITERATIONS = (1, 1)
JOBS = 4
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
    runs_as: str = ""
    """the name its runs are stored under: an earlier point's of the plan
    where the two differ in name and flags only (the shard curve's 1 and 2
    PS hosts are judged points too), else its own."""

    @property
    def run_name(self) -> str:
        return self.runs_as or self.point.name

    def same_runs(self) -> tuple[object, ...]:
        """What decides its runs: the point but its name and flags, and the reduction."""
        point = replace(self.point, name="", sensitivity=False)
        return (point, self.scale, self.jobs, self.iterations)

    def workload(self) -> WorkloadSpec:
        return replace(
            self.point.workload(), jobs=self.jobs, iterations=self.iterations, scale=self.scale
        )

    def specs(self, seed: int) -> list[JobSpec]:
        return make_jobs(self.workload(), self.point.net(), seed)

    def ratios(self) -> tuple[float, float, float, float]:
        """Pool over window, and an iteration of the mix's smallest model
        over the window and over the retransmission timeout, reduced and at
        the full point: (pool/window, iteration/window reduced, full,
        iteration/RTO reduced); iteration/RTO at the full point is the
        reduced one over ``scale``."""
        net = self.point.net()
        window = net.window_for(Scheme.ESA)
        full = smallest_chunks(self.point)
        chunks = full * self.scale
        return (
            self.point.pool / window,
            chunks / window,
            full / window,
            chunks * net.pkt_ns / net.rto_for(),
        )


def smallest_chunks(pt: Point) -> float:
    """Chunks an iteration of the smallest model of ``pt``'s mix, unreduced."""
    return min(MODELS[m].params_m for m in MIXES[pt.mix]) * 1e6 / wire.K


def reduce(
    pt: Point,
    rtos: float = RTOS,
    jobs: int = JOBS,
    iterations: tuple[int, int] = ITERATIONS,
    max_chunks: float = MAX_CHUNKS,
) -> Reduced:
    """``pt`` scaled so that an iteration of its mix's smallest model streams
    ``rtos`` retransmission timeouts at line rate, or ``max_chunks`` chunks
    if fewer."""
    net = pt.net()
    chunks = min(rtos * net.rto_for() / net.pkt_ns, max_chunks)
    return Reduced(pt, chunks / smallest_chunks(pt), jobs, iterations)


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
    "timeouts": int,
}
"""One row per job; ``packets``: the contributions the run's workers send
once each (every chunk of every worker and iteration); ``timeouts``: the
run's retransmission timeouts, every worker's (the packet model; 0 in the
fluid model, which has none)."""


def key(task: Task) -> tuple[object, ...]:
    red, seed, scheme, model = task
    return (red.run_name, seed, scheme.value, model)


def run_one(task: Task) -> list[dict[str, object]]:
    red, seed, scheme, model = task
    specs = red.specs(seed)
    timeouts = 0
    if model == "packet":
        sim = PacketSim(specs, red.point.pool, scheme, red.point.net(), seed)
        jct = sim.run()
        timeouts = sim.retransmits()
    else:
        jct = run_scenario(specs, red.point.pool, scheme, red.point.net(), model, seed)
    packets = sum(s.workers * s.chunks * s.iterations for s in specs)
    return [
        {
            "point": red.run_name,
            "seed": seed,
            "scheme": scheme.value,
            "model": model,
            "job": s.job,
            "jct_s": jct[s.job],
            "packets": packets,
            "timeouts": timeouts,
        }
        for s in specs
    ]


@dataclass(frozen=True)
class Plan:
    judged: list[Reduced]
    pools: list[Reduced]
    shards: list[Reduced]

    def tasks(self, seeds: int) -> list[Task]:
        """Every run the goals read, each once."""
        every = [(r, JUDGED_SCHEMES) for r in self.judged]
        every += [(r, SIM_SCHEMES) for r in self.pools + self.shards]
        tasks = [
            (r, seed, sc, model)
            for model in MODELS_RUN
            for r, schemes in every
            for seed in range(seeds)
            for sc in schemes
        ]
        return list({key(t): t for t in reversed(tasks)}.values())[::-1]


def plan(rtos: float = RTOS, jobs: int = JOBS, iterations: tuple[int, int] = ITERATIONS) -> Plan:
    first: dict[tuple[object, ...], str] = {}

    def red(pts: list[Point]) -> list[Reduced]:
        out = []
        for p in pts:
            r = reduce(p, rtos, jobs, iterations)
            out.append(replace(r, runs_as=first.setdefault(r.same_runs(), p.name)))
        return out

    return Plan(
        red([p for p in SUBSET if not p.sensitivity]),
        red(curves.pool_points()),
        red(curves.shard_points()),
    )


def summaries(
    points: list[Reduced],
    schemes: tuple[Scheme, ...],
    rows: list[dict[str, object]],
    model: str,
    seeds: int,
) -> list[Summary]:
    """``summary.Summary`` of each reduced point in one model, under the
    point's own name and flags, so the goal functions read it as they read
    ``make sim``'s; of ``schemes``, those run at it."""
    jct: dict[tuple[str, str, int], list[float]] = {}
    for r in rows:
        if r["model"] == model:
            k = (str(r["point"]), str(r["scheme"]), int(str(r["seed"])))
            jct.setdefault(k, []).append(float(str(r["jct_s"])))
    out = []
    for red in points:
        pt, name, by = red.point, red.run_name, {}
        for sc in schemes:
            if (name, sc.value, 0) not in jct:
                continue
            by[sc] = JctStats.of([jct[(name, sc.value, s)] for s in range(seeds)])
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


def timeout_lines(points: list[Reduced], rows: list[dict[str, object]]) -> list[str]:
    """Per point whose packet runs timed out, each such scheme and its
    timeouts: where the reduction's grain lies.  A reduced job streams for a
    few timeouts, so one chunk left to its workers' timeout (a partial
    stranded in a slot, or a sum queued past the timeout) moves its JCT by
    tens of per cent where the full point's iterations hide it."""
    counts: dict[str, dict[str, int]] = {}
    for r in rows:
        if r["model"] == "packet" and int(str(r["timeouts"])) > 0:
            counts.setdefault(str(r["point"]), {})[str(r["scheme"])] = int(str(r["timeouts"]))
    out, seen = [], set()
    for red in points:
        name = red.run_name
        if name in seen or name not in counts:
            continue
        seen.add(name)
        by = counts[name]
        shown = ", ".join(f"{sc} {by[sc]:,}" for sc in sorted(by, key=lambda s: -by[s]))
        out.append(f"{red.point.name}: {shown}")
    return out or ["no packet run timed out"]


def ratios_table(points: list[Reduced]) -> list[str]:
    """What the reduction keeps, per judged point: the pool over the window
    (the full point's), an iteration of the mix's smallest model over the
    window and over the retransmission timeout, reduced and full."""
    lines = [
        f"{'point':<28}{'pool/window':>12}{'iteration/window':>20}{'iteration/RTO':>18}",
        f"{'':<28}{'':>12}{'reduced':>10}{'full':>10}{'reduced':>9}{'full':>9}",
    ]
    for r in points:
        pool, it, full, rto = r.ratios()
        lines.append(
            f"{r.point.name:<28}{pool:>12.2f}{it:>10.1f}{full:>10,.0f}{rto:>9.2f}"
            f"{rto / r.scale:>9,.0f}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.check", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--rtos",
        type=arguments.number("rtos"),
        default=RTOS,
        help="retransmission timeouts an iteration of the mix's smallest model streams "
        f"(default {RTOS:g})",
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
    pl = plan(args.rtos, args.jobs, tuple(args.iterations))
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
    read = ((pl.judged, JUDGED_SCHEMES), (pl.pools, SIM_SCHEMES), (pl.shards, SIM_SCHEMES))
    by_model = {m: [summaries(p, s, rows, m, args.seeds) for p, s in read] for m in MODELS_RUN}
    packets = sum(int(str(store.done[key(t)][0]["packets"])) for t in tasks if t[3] == "packet")
    scales = sorted({f"{r.scale:.2g}" for r in pl.judged + pl.pools + pl.shards})
    print(
        f"{len(pl.judged)} judged points and the curves ({len(pl.pools)} pools, {len(pl.shards)} "
        f"shard counts), reduced: {args.jobs} jobs, {args.iterations[0]}-{args.iterations[1]} "
        f"iterations, values and compute x {' / '.join(scales)} (an iteration of the smallest "
        f"model streams {args.rtos:g} retransmission timeouts), {args.seeds} seed; fluid and "
        f"packet model, {len(tasks) // 2} runs each ({', '.join(s.value for s in JUDGED_SCHEMES)}"
        f" at the judged points, every scheme on the curves), {packets:,} contributions in the "
        "packet runs"
    )
    print()
    print("\n".join(ratios_table(pl.judged)))
    print()
    print("\n".join(ratio_table(by_model["fluid"][0], by_model["packet"][0])))
    print()
    lines, differ = side_by_side(goal_lines(*by_model["fluid"]), goal_lines(*by_model["packet"]))
    print("\n".join(lines))
    print()
    print(f"goal lines whose verdicts differ between the models: {differ}")
    print()
    print("retransmission timeouts in the packet runs (a job's every worker's, summed):")
    print("\n".join(timeout_lines(pl.judged + pl.pools + pl.shards, rows)))
    print(f"({time.monotonic() - t0:.0f} s; rows in {args.out / 'tasks.csv'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
