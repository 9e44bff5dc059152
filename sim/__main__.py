"""``python -m sim``: the sweep; table and goals on stdout, CSV and PNG in --out."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from sim import plots, report, sweep
from sim.params import SQUAT_RTTS, Scheme


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim", description=__doc__)
    ap.add_argument("--full", action="store_true", help="the full grid and the sensitivity runs")
    ap.add_argument("--seeds", type=int, default=sweep.SEEDS)
    ap.add_argument("--out", type=Path, default=Path("results/sim"))
    ap.add_argument("--procs", type=int, default=2)
    args = ap.parse_args(argv)
    points = sweep.full() if args.full else list(sweep.SUBSET)
    t0 = time.monotonic()
    rows = sweep.run(points, args.seeds, args.procs)
    summaries = report.summarise(points, rows, args.seeds)
    sweep.write_csv(args.out / "jobs.csv", rows)
    sweep.write_csv(args.out / "summary.csv", [s.row() for s in summaries])
    plots.jct_cdf(rows, args.out / "jct_cdf.png")
    plots.gain(summaries, args.out / "gain.png")
    net = points[0].net()
    links = {pt.link: pt.net() for pt in points if not pt.sensitivity}
    windows = "; ".join(
        f"{link} esa {n.window_for(Scheme.ESA)} atp {n.window_for(Scheme.ATP)}"
        for link, n in links.items()
    )
    print(
        f"{len(points)} points x {args.seeds} seeds x {len(Scheme)} schemes, fluid model, "
        f"{'barrier' if net.barrier else 'no barrier'}, {net.ps_shards} PS shards per job, "
        f"squat timeout {SQUAT_RTTS} round trips; windows (packets, each scheme's own "
        f"bandwidth-delay product): {windows}"
    )
    print(report.table(summaries))
    print()
    for line in report.goals(summaries):
        print(line)
    print(f"({time.monotonic() - t0:.1f} s; results in {args.out})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
