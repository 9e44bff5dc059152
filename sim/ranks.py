"""``python -m sim.ranks``: what a priority rank buys under ESA.

At the sweep's memory-scarce points, with 1, 2 and 8 PS shards per job,
under ESA-equal and ESA-SRPT: for each rank among the jobs streaming at
once (0: the highest priority, SRPT's shortest job), the share of its
chunks completed at its PS (fallbacks and evictions) and its chunk rate
over the line rate, both averaged over time; and each scheme's mean JCT.
It shows where strict priorities move memory, what the favoured job gains
from it and what the others lose (docs/simulator.md, "Priorities").
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import dataclass, field, replace

import numpy as np

from esa import arguments
from esa.schemes import Scheme
from sim import fluid, sweep
from sim.rates import Flow

POINTS = ("overload", "overload-small-pool")
SHARDS = (1, 2, 8)
SCHEMES = (Scheme.ESA_EQUAL, Scheme.ESA_SRPT)
TOP = 3
"""Ranks shown one by one; the rest are pooled in the last row."""


@dataclass
class RankStats:
    """Time integrals, per rank, over one or more runs."""

    time: defaultdict[int, float] = field(default_factory=lambda: defaultdict(float))
    to_ps: defaultdict[int, float] = field(default_factory=lambda: defaultdict(float))
    line: defaultdict[int, float] = field(default_factory=lambda: defaultdict(float))
    last: tuple[float, list[tuple[int, float, float]]] | None = None
    """the last solve: its time and (rank, rate over line, to_ps) of each flow."""

    def observe(self, now: float, flows: list[Flow], tx: float) -> None:
        self._close(now)
        order = sorted(flows, key=lambda f: -f.prio)
        self.last = (now, [(min(r, TOP), f.rate * tx, f.to_ps) for r, f in enumerate(order)])

    def _close(self, now: float) -> None:
        if self.last is None:
            return
        t0, rows = self.last
        for rank, line, to_ps in rows:
            self.time[rank] += now - t0
            self.line[rank] += line * (now - t0)
            self.to_ps[rank] += to_ps * (now - t0)

    def finish(self) -> None:
        self.last = None

    def rows(self) -> list[tuple[str, float, float]]:
        return [
            (f"{r}" if r < TOP else f">={TOP}", self.to_ps[r] / t, self.line[r] / t)
            for r, t in sorted(self.time.items())
            if t > 0
        ]


def study(point: sweep.Point, scheme: Scheme, seeds: int) -> tuple[float, RankStats]:
    stats = RankStats()
    tx = point.net().pkt_ns
    jct = []
    for seed in range(seeds):
        sim = fluid.FluidSim(
            point.specs(seed),
            point.pool,
            scheme,
            point.net(),
            seed,
            observer=lambda now, flows: stats.observe(now, flows, tx),
        )
        jct.append(float(np.mean(list(sim.run().values()))))
        stats.finish()
    return float(np.mean(jct)), stats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.ranks", description=__doc__)
    ap.add_argument("--seeds", type=arguments.at_least("seeds", 1), default=2)
    args = ap.parse_args(argv)
    base = {p.name: p for p in sweep.REGIMES}
    print("| point | PS shards | scheme | mean JCT s | rank | to PS | rate / line |")
    print("|---|---|---|---|---|---|---|")
    for name in POINTS:
        for shards in SHARDS:
            pt = replace(base[name], ps_shards=shards)
            for scheme in SCHEMES:
                jct, stats = study(pt, scheme, args.seeds)
                for rank, to_ps, line in stats.rows():
                    print(
                        f"| {name} | {shards} | {scheme.value} | {jct:.2f} | {rank} | "
                        f"{to_ps:.2f} | {line:.2f} |",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
