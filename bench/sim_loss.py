"""ESA against the baselines in the packet model on a lossy network (issue 39).

    .venv/bin/python -m bench.sim_loss --loss-pct 0.1 1 5

``make sim``'s points (``sim.sweep.REGIMES``, one PS host per job, ESA
with its homes as ``make sim`` runs it, ``sim.sweep.at_shards``) at a
reduced scale the packet model can run: ``--jobs`` jobs of each point's
workload, their tensors, compute and arrivals divided by ``--shrink``, at
most ``--iterations`` iterations each; every host link loses each packet
with the given probability (``Net.loss``); the PS learns its stall, as
at every point (``Net.ps_stall_adapts``).  Per point and loss rate: each scheme's mean
JCT in ms, and the best baseline's over the controller's ESA (``esa-aging``,
what ``make sim`` judges): at or above 1 where ESA is at or below every
baseline.  Seeded: the same arguments print the same table.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace

from esa.job import JobSpec
from esa.schemes import Scheme
from sim import packet
from sim.params import BASELINES
from sim.summary import CONTROLLER_ESA
from sim.sweep import REGIMES, at_shards

SCHEMES = (*BASELINES, Scheme.ESA_EQUAL, CONTROLLER_ESA)


def shrink(spec: JobSpec, by: float, iterations: int) -> JobSpec:
    values = max(32, 32 * round(spec.values / by / 32))
    return replace(
        spec,
        values=values,
        iterations=min(spec.iterations, iterations),
        arrival_s=spec.arrival_s / by,
        compute_s=spec.compute_s / by,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.sim_loss", description=__doc__)
    ap.add_argument("--loss-pct", type=float, nargs="+", default=[0.1, 1.0, 5.0])
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--shrink", type=float, default=4000.0)
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--point", action="append", help="a point's name (default: all)")
    args = ap.parse_args(argv)
    names = [s.value for s in SCHEMES]
    print("| point | loss % | " + " | ".join(names) + " | best baseline / esa |")
    print("|---" * (3 + len(names)) + "|", flush=True)
    for pt in REGIMES:
        if args.point and pt.name not in args.point:
            continue
        pt = replace(at_shards(pt, 1), jobs=args.jobs)
        specs = [shrink(s, args.shrink, args.iterations) for s in pt.specs(args.seed)]
        for loss in args.loss_pct:
            net = replace(pt.net(), loss=loss / 100)
            mean = {
                s: statistics.fmean(packet.simulate(specs, pt.pool, s, net, args.seed).values())
                for s in SCHEMES
            }
            best = min(mean[s] for s in BASELINES)
            cells = " | ".join(f"{mean[s] * 1e3:.3f}" for s in SCHEMES)
            print(
                f"| {pt.name} | {loss:g} | {cells} | {best / mean[CONTROLLER_ESA]:.3f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
