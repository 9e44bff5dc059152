"""``python -m sim.regime``: every scheme with fewer PS hosts than workers.

In-network aggregation is deployed to replace parameter-server hosts, so
the regime that decides it is a job with fewer PS hosts than workers: one
or two, where every chunk the switch does not sum costs the job its fan-in
in packets on one PS link.  This runs ``make sim``'s points (``sim.sweep
.REGIMES``) with 1, 2 and 8 PS hosts per job, every scheme on the same
hardware (pool, PS hosts, links), in the fluid model, with ESA's two
layouts side by side: **homes** (``Net.esa_homes``, the controller's
default, ``esa-ctl policy esa``: every running job streams through its
share of the equal split, its chunks on ``seq mod home``) and **hashed**
(``--layout hashed``, the paper's ESA: every job over the whole pool),
and a third, ``make sim``'s, the controller's homes with ``Net.line_hold``
slots, what a job holds at line rate, as the least home (``esa-ctl policy
esa --part-size N``, ``controller.world.partition.esa_homes``): the pool
split equally among as many of the highest SRPT ranks as it gives 3/4
of that or more, the other jobs hashed.  Beside them the bounds,
``ideal`` (no memory limit) and ``ps-only`` (no aggregation), and per row
the best baseline over each ESA layout, so a reader sees where each layout
wins and loses.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass, replace

from esa import arguments
from esa.job import SHARD_COUNTS
from esa.schemes import Scheme
from sim import fluid
from sim.engine import Engine
from sim.entry import mean_jct
from sim.params import BASELINES
from sim.sweep import REGIMES, Point

SHARDS = (1, 2, 8)
"""PS hosts per job: the deployed regime (1, 2) and the PS as fast as the workers (8)."""


@dataclass(frozen=True)
class Variant:
    name: str
    scheme: Scheme
    homes: bool = False
    least: bool = False
    """homes with ``Net.line_hold`` slots as the least home (``esa-ctl
    policy esa --part-size N``, ``controller.world.partition.esa_homes``)"""


COLUMNS = (
    *(Variant(s.value, s) for s in BASELINES),
    Variant("esa-equal homes", Scheme.ESA_EQUAL, True),
    Variant("esa homes", Scheme.ESA, True),
    Variant("esa-equal hashed", Scheme.ESA_EQUAL),
    Variant("esa hashed", Scheme.ESA),
    Variant("esa-srpt least", Scheme.ESA_SRPT, True, True),
    Variant(Scheme.PS_ONLY.value, Scheme.PS_ONLY),
    Variant(Scheme.IDEAL.value, Scheme.IDEAL),
)
LAYOUTS = ("esa homes", "esa hashed", "esa-srpt least")
"""The ESA layouts the ratios compare with the best baseline."""

Task = tuple[Point, int, Variant]


def run_one(task: Task) -> float:
    """Mean JCT (s) of one point, seed and column."""
    pt, seed, col = task
    net = pt.net()
    size = min(pt.pool, net.line_hold) if col.least else 0
    net = replace(net, esa_homes=col.homes, esa_home_size=size)
    return mean_jct(fluid.FluidSim(pt.specs(seed), pt.pool, col.scheme, net, seed).run())


def table(points: list[Point], seeds: int, engine: Engine) -> dict[str, dict[str, float]]:
    """Point name -> column -> mean JCT over the seeds."""
    tasks = [(pt, s, col) for pt in points for s in range(seeds) for col in COLUMNS]
    got: dict[tuple[str, str], list[float]] = {}
    engine.run(
        run_one,
        tasks,
        lambda t, jct: got.setdefault((t[0].name, t[2].name), []).append(jct),
        "regime",
        len(tasks),
        lambda t: t[2].name,
    )
    return {
        pt.name: {col.name: statistics.fmean(got[pt.name, col.name]) for col in COLUMNS}
        for pt in points
    }


def best_baseline(row: dict[str, float]) -> tuple[str, float]:
    name = min((s.value for s in BASELINES), key=lambda n: row[n])
    return name, row[name]


def render(rows: dict[str, dict[str, float]]) -> list[str]:
    width = max(len(n) for n in rows) + 2
    head = f"{'point':<{width}}" + "".join(f"{c.name:>17}" for c in COLUMNS)
    out = [head + "".join(f"{'base/' + n.split()[-1]:>13}" for n in LAYOUTS) + "  best baseline"]
    for name, row in rows.items():
        base, jct = best_baseline(row)
        cells = "".join(f"{row[c.name]:>17.2f}" for c in COLUMNS)
        gains = "".join(f"{jct / row[n]:>13.3f}" for n in LAYOUTS)
        out.append(f"{name:<{width}}{cells}{gains}  {base}")
    for layout in LAYOUTS:
        ratios = {n: best_baseline(r)[1] / r[layout] for n, r in rows.items()}
        worst = min(ratios, key=lambda n: ratios[n])
        verdict = "MET" if ratios[worst] >= 1 / 1.01 else "NOT MET"
        out.append(
            f"{layout}: best baseline / ESA {min(ratios.values()):.3f} .. "
            f"{max(ratios.values()):.3f} (worst at {worst}); "
            f"goal: never more than 1% behind the best baseline: {verdict}"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.regime", description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=arguments.at_least("seeds", 1), default=1)
    ap.add_argument(
        "--shards",
        type=arguments.shards,
        nargs="+",
        default=list(SHARDS),
        help=f"PS hosts per job, each of {SHARD_COUNTS} (default: {' '.join(map(str, SHARDS))})",
    )
    ap.add_argument(
        "--points", nargs="+", choices=[p.name for p in REGIMES], help="default: every point"
    )
    ap.add_argument(
        "--procs",
        type=arguments.at_least("procs", 0),
        default=2,
        help="worker processes of a local Dask cluster (default 2; 0: one by one here)",
    )
    args = ap.parse_args(argv)
    base = [p for p in REGIMES if args.points is None or p.name in args.points]
    points = [replace(p, name=f"{p.name} {n} PS", ps_shards=n) for n in args.shards for p in base]
    with Engine(args.procs) as engine:
        rows = table(points, args.seeds, engine)
    print(
        f"fluid model, {args.seeds} seed(s), mean JCT (s); every scheme on the same pool, "
        "PS hosts and links; ESA's homes are the controller's default layout"
    )
    print("\n".join(render(rows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
