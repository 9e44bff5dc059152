"""ESA against the baselines in the packet model on a lossy network (issue 39).

    .venv/bin/python -m bench.sim_loss --loss-pct 0.1 1 5 --seeds 5

``make sim``'s points (``sim.sweep.REGIMES``, one PS host per job, ESA
with its homes as ``make sim`` runs it, ``sim.sweep.at_shards``) at a
reduced scale the packet model can run: ``--jobs`` jobs of each point's
workload, their tensors, compute and arrivals divided by ``--shrink``, at
most ``--iterations`` iterations each; every host link loses each packet
with the given probability (``Net.loss``); the PS learns its stall, as
at every point (``Net.ps_stall_adapts``).  Per point and loss rate: each
scheme's mean JCT in ms over ``--seeds`` seeds, and the best baseline's
over the controller's ESA (``esa-aging``, what ``make sim`` judges): at or
above 1 where ESA is at or below every baseline; then that ratio's least
and most over the seeds.  A job of a few hundred microseconds pays a whole
retransmission timeout for each chunk whose resend is lost again, so at
1 % loss one seed's ratio is mostly which chunks that befell.  Seeded: the
same arguments print the same table.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace

from esa import arguments
from esa.job import JobSpec
from esa.schemes import Scheme
from sim import packet
from sim.params import BASELINES, Net
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


def run(specs: list[JobSpec], pool: int, net: Net, seed: int) -> dict[Scheme, float]:
    """Each scheme's mean JCT in s on ``specs`` (seed ``seed``'s jobs, reduced)."""
    return {
        s: statistics.fmean(packet.simulate(specs, pool, s, net, seed).values()) for s in SCHEMES
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.sim_loss", description=__doc__)
    ap.add_argument("--loss-pct", type=float, nargs="+", default=[0.1, 1.0, 5.0])
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--shrink", type=float, default=4000.0)
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0, help="the first seed")
    ap.add_argument(
        "--seeds", type=arguments.at_least("seeds", 1), default=1, help="seeds from --seed on"
    )
    ap.add_argument("--point", action="append", help="a point's name (default: all)")
    args = ap.parse_args(argv)
    seeds = range(args.seed, args.seed + args.seeds)
    names = [s.value for s in SCHEMES]
    print(
        "| point | loss % | "
        + " | ".join(names)
        + " | best baseline / esa | over seeds, least .. most |"
    )
    print("|---" * (4 + len(names)) + "|", flush=True)
    for pt in REGIMES:
        if args.point and pt.name not in args.point:
            continue
        pt = replace(at_shards(pt, 1), jobs=args.jobs)
        specs = {
            seed: [shrink(s, args.shrink, args.iterations) for s in pt.specs(seed)]
            for seed in seeds
        }
        for loss in args.loss_pct:
            net = replace(pt.net(), loss=loss / 100)
            runs = [run(specs[seed], pt.pool, net, seed) for seed in seeds]
            mean = {s: statistics.fmean(r[s] for r in runs) for s in SCHEMES}
            lead = [min(r[s] for s in BASELINES) / r[CONTROLLER_ESA] for r in runs]
            best = min(mean[s] for s in BASELINES)
            cells = " | ".join(f"{mean[s] * 1e3:.3f}" for s in SCHEMES)
            print(
                f"| {pt.name} | {loss:g} | {cells} | {best / mean[CONTROLLER_ESA]:.3f} | "
                f"{min(lead):.3f} .. {max(lead):.3f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
