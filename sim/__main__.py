"""``python -m sim``: the default sweep; table on stdout, CSV and PNG in --out."""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

from sim import plots, sweep
from sim.params import Net, Scheme


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="a three-point sweep")
    ap.add_argument("--out", type=Path, default=Path("results/sim"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--procs", type=int, default=2)
    args = ap.parse_args(argv)
    sw = sweep.QUICK if args.quick else sweep.Sweep()
    sw = dataclasses.replace(sw, seeds=(args.seed,))
    t0 = time.monotonic()
    rows = sweep.run(sw, Net(), args.procs)
    summary = sweep.summarise(rows)
    sweep.write_csv(args.out / "jobs.csv", rows)
    sweep.write_csv(args.out / "summary.csv", summary)
    plots.jct_cdf(rows, args.out / "jct_cdf.png")
    plots.ratio_vs_pool(summary, args.out / "ratio_vs_pool.png")
    print(table(summary))
    ratios = [float(str(r[f"atp/{sweep.HEADLINE.value}"])) for r in summary]
    print(
        f"\nATP/{sweep.HEADLINE.value} mean-JCT ratio: min {min(ratios):.3f}, "
        f"max {max(ratios):.3f} over {len(ratios)} points "
        f"({time.monotonic() - t0:.1f} s; results in {args.out})"
    )
    return 0


def table(summary: list[dict[str, object]]) -> str:
    names = [s.value for s in Scheme]
    head = f"{'mix':<11}{'load':>5}{'pool':>7} " + "".join(f"{n:>19}" for n in names)
    head += f"{'ATP/ESA':>9}{'/srpt':>7}{'/aging':>7}"
    lines = [head, " " * 24 + "   mean / p99 (s)" * len(names)]
    for r in summary:
        line = f"{r['mix']!s:<11}{float(str(r['load'])):>5g}{int(str(r['pool'])):>7} "
        for n in names:
            line += f"{float(str(r[n + '_mean'])):>10.2f}/{float(str(r[n + '_p99'])):<8.2f}"
        for s in (Scheme.ESA, Scheme.ESA_SRPT, Scheme.ESA_AGING):
            line += f"{float(str(r['atp/' + s.value])):>7.3f}"
        lines.append(line)
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
