"""``python -m sim.traces``: ``replay`` a public cluster trace's window under
every scheme (table on stdout; CSV and the JCT CDFs in --out), or write a
``synth``etic trace in Philly's format."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from esa import arguments, wire
from esa.schemes import SIM_SCHEMES
from sim import engine, plots, summary, sweep
from sim.taskfile import StaleFile
from sim.traces import ALL, READERS, load
from sim.traces.point import MODERATE, point
from sim.traces.record import TraceError
from sim.traces.rules import MAX_ITERATIONS, Slice, Window, parse_window
from sim.traces.synth import write_philly
from sim.workload import MIXES

PROG = "python -m sim.traces"


def window_arg(text: str) -> Window:
    try:
        return parse_window(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("replay", help="replay a trace's window under every scheme")
    r.add_argument("--format", choices=list(READERS), required=True)
    r.add_argument(
        "--trace",
        type=Path,
        required=True,
        help="the job log (pai: pai_job_table.csv, with pai_task_table.csv beside it)",
    )
    r.add_argument(
        "--window",
        type=window_arg,
        default=ALL,
        help="START:END, seconds from the trace's first submission (default: all of it)",
    )
    r.add_argument("--pool", type=arguments.POOL_SIZE, default=MODERATE.pool, help="switch slots")
    r.add_argument(
        "--seeds",
        type=arguments.at_least("seeds", 1),
        default=sweep.SEEDS_SUBSET,
        help="model draws",
    )
    r.add_argument("--mix", choices=list(MIXES), default="mixed", help="the models drawn from")
    r.add_argument(
        "--speedup",
        type=arguments.number("speedup"),
        default=1.0,
        help="divide arrivals and runs by this",
    )
    r.add_argument(
        "--out",
        type=Path,
        default=Path("results/sim-trace"),
        help="where the tables and plot go, and each task's rows as it finishes "
        "(tasks-trace.csv), from which a rerun resumes",
    )
    engine.add_arguments(r)
    s = sub.add_parser("synth", help="write a synthetic trace in Philly's format")
    s.add_argument(
        "--jobs",
        type=int,
        default=5000,
        help="multi-GPU jobs written (and the single-GPU ones drawn between them)",
    )
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--out", type=Path, required=True)
    return ap


def describe(sl: Slice, args: argparse.Namespace) -> str:
    dropped = ", ".join(f"{d.value} {n:,}" for d, n in sl.dropped.items()) or "none"
    unit = "" if args.window == ALL else " (seconds from its first submission)"
    return (
        f"{args.format} trace {args.trace}, window {args.window}{unit}, "
        f"speedup {args.speedup:g}: {sl.submitted:,} jobs submitted, "
        f"{len(sl.jobs):,} replayed; dropped: {dropped}; on more than {wire.MAX_WORKERS} GPUs "
        f"(run with {wire.MAX_WORKERS} workers): {sl.capped:,}"
    )


def replay(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    sl = load(args.format, args.trace, args.window)
    pt = point(f"{args.format} {args.window}", sl, args.pool, args.mix, args.speedup)
    print(describe(sl, args))
    try:
        draws = [pt.specs(n) for n in range(args.seeds)]
    except ValueError as e:
        raise TraceError(f"{args.trace}: {e}") from None
    at_cap = [sum(s.iterations == MAX_ITERATIONS for s in specs) for specs in draws]
    print(
        f"fluid model, pool {pt.pool} slots, {pt.link} links, {pt.ps_shards} PS shards per job, "
        f"{len(SIM_SCHEMES)} schemes, seeds {args.seeds} (each its own draw of models from "
        f"{args.mix}); jobs at the {MAX_ITERATIONS:,}-iteration cap per seed: "
        f"{', '.join(str(n) for n in at_cap)}"
    )
    with engine.Engine(args.procs, args.scheduler) as eng:
        rows = sweep.run([pt], args.seeds, args.out / "tasks-trace.csv", eng, args.fresh, "trace")
    summaries = summary.summarise([pt], rows, args.seeds, with_bound=False)
    sweep.write_csv(args.out / "jobs.csv", rows)
    sweep.write_csv(args.out / "summary.csv", [s.row() for s in summaries])
    plots.jct_cdf(rows, args.out / "jct_cdf.png")
    print(summary.table(summaries))
    print(f"({time.monotonic() - t0:.1f} s; results in {args.out})")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "synth":
            written = write_philly(args.out, args.jobs, args.seed)
            print(
                f"{written:,} jobs ({args.jobs:,} on more than one GPU) in Philly's format "
                f"written to {args.out}"
            )
            return 0
        return replay(args)
    except (TraceError, StaleFile) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
