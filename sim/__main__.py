"""``python -m sim``: the sweep; table and goals on stdout, CSV and PNG in --out."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from controller.world.partition import HOME_CAP, HOME_FLOOR
from esa import arguments
from esa.schemes import SIM_SCHEMES, Scheme
from sim import curves, engine, plots, summary, sweep
from sim.params import SQUAT_RTTS
from sim.taskfile import StaleFile


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim", description=__doc__)
    ap.add_argument("--full", action="store_true", help="the full grid and the sensitivity runs")
    ap.add_argument(
        "--seeds",
        type=arguments.at_least("seeds", 1),
        help=f"seeds per point (default {sweep.SEEDS_SUBSET}, with --full {sweep.SEEDS})",
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=Path("results/sim"),
        help="where the tables and plots go, and each task's rows as it finishes "
        "(tasks-sweep.csv, tasks-curves.csv), from which a rerun resumes",
    )
    engine.add_arguments(ap)
    args = ap.parse_args(argv)
    points = sweep.full() if args.full else list(sweep.SUBSET)
    args.seeds = args.seeds or (sweep.SEEDS if args.full else sweep.SEEDS_SUBSET)
    t0 = time.monotonic()
    pool_points, shard_points = curves.pool_points(), curves.shard_points()
    try:
        with engine.Engine(args.procs, args.scheduler) as eng:
            rows = sweep.run(points, args.seeds, args.out / "tasks-sweep.csv", eng, args.fresh)
            curve_rows = sweep.run(
                pool_points + shard_points,
                curves.SEEDS,
                args.out / "tasks-curves.csv",
                eng,
                args.fresh,
                "curves",
            )
    except StaleFile as e:
        ap.exit(2, f"{ap.prog}: {e}\n")
    summaries = summary.summarise(points, rows, args.seeds)
    by_pool = summary.summarise(pool_points, curve_rows, curves.SEEDS)
    by_shards = summary.summarise(shard_points, curve_rows, curves.SEEDS)
    sweep.write_csv(args.out / "jobs.csv", rows)
    sweep.write_csv(args.out / "summary.csv", [s.row() for s in summaries])
    sweep.write_csv(args.out / "curves.csv", [s.row() for s in by_pool + by_shards])
    plots.jct_cdf(rows, args.out / "jct_cdf.png")
    plots.gain(summaries, args.out / "gain.png")
    curves.plot(by_pool, by_shards, args.out / "curves.png")
    net = points[0].net()
    links = {pt.link: pt.net() for pt in points if not pt.sensitivity}
    windows = "; ".join(
        f"{link} esa {n.window_for(Scheme.ESA)} atp {n.window_for(Scheme.ATP)}"
        for link, n in links.items()
    )
    layout = (
        f"with homes: the pool split among the top ranks, each {HOME_FLOOR:g} x "
        f"{net.esa_home_size} slots or more, {HOME_CAP:g} x at most"
        if net.esa_homes
        else "hashed"
    )
    print(
        f"{len(points)} points x {args.seeds} seeds x {len(SIM_SCHEMES)} schemes, fluid model, "
        f"{'barrier' if net.barrier else 'no barrier'}, "
        f"{shard_list(points)} PS hosts per job "
        f"(judged: {shard_list([p for p in points if not p.sensitivity])}), "
        f"ESA {layout}, "
        f"each contribution's spread exponential with mean {net.jitter_ns / 1000:g} us, "
        f"squat timeout {SQUAT_RTTS} round trips; windows (packets, each scheme's own "
        f"bandwidth-delay product): {windows}"
    )
    print(summary.table(summaries))
    print()
    print(
        f"curves at {curves.BASE}, {curves.SEEDS} seed: the pool ({curves.POOL_SHARDS} PS host "
        "per job), then the PS hosts per job"
    )
    print(summary.table(by_pool + by_shards))
    print()
    solves = sum(int(str(r["solves"])) for r in rows + curve_rows if r["job"] == 1)
    lines = summary.goals(summaries) + curves.pool_goals(by_pool) + curves.shard_lines(by_shards)
    for line in lines:
        print(line)
    print(f"rate solves: {solves:,}, unconverged 0 (an unconverged solve stops the run)")
    print(f"({time.monotonic() - t0:.1f} s; results in {args.out})")
    return 0


def shard_list(points: list[sweep.Point]) -> str:
    return " and ".join(str(n) for n in sorted({p.ps_shards for p in points}))


if __name__ == "__main__":
    raise SystemExit(main())
