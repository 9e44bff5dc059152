"""The default sweep: load x pool size x job mix, every scheme, fluid model."""

from __future__ import annotations

import csv
import itertools
import multiprocessing
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim import fluid
from sim.params import Net, Scheme
from sim.workload import WorkloadSpec, make_jobs

HEADLINE = Scheme.ESA_SRPT
"""The ESA variant the ATP/ESA ratio is reported for (chosen before the sweep ran)."""


@dataclass(frozen=True)
class Point:
    mix: str
    load: float
    pool: int
    seed: int


@dataclass(frozen=True)
class Sweep:
    mixes: tuple[str, ...] = ("mixed", "comm-heavy")
    loads: tuple[float, ...] = (2.0, 4.0, 8.0)
    pools: tuple[int, ...] = (1024, 2048, 4096, 8192, 32768)
    jobs: int = 16
    seeds: tuple[int, ...] = (0,)

    def points(self) -> list[Point]:
        return [
            Point(m, load, p, s)
            for m, load, p, s in itertools.product(self.mixes, self.loads, self.pools, self.seeds)
        ]


QUICK = Sweep(mixes=("mixed",), loads=(4.0,), pools=(1024, 4096, 65536), jobs=12)


def run_point(args: tuple[Point, int, Net]) -> list[dict[str, object]]:
    pt, jobs, net = args
    specs = make_jobs(WorkloadSpec(mix=pt.mix, jobs=jobs, load=pt.load), net, pt.seed)
    rows: list[dict[str, object]] = []
    for scheme in Scheme:
        jct = fluid.simulate(specs, pt.pool, scheme, net, pt.seed)
        for spec in specs:
            rows.append(
                {
                    "mix": pt.mix,
                    "load": pt.load,
                    "pool": pt.pool,
                    "seed": pt.seed,
                    "scheme": scheme.value,
                    "job": spec.job_id,
                    "model": spec.model,
                    "workers": spec.workers,
                    "iterations": spec.iterations,
                    "jct_s": jct[spec.job_id],
                }
            )
    return rows


def run(sweep: Sweep, net: Net, procs: int = 2) -> list[dict[str, object]]:
    """All rows (one per job per scheme per point); progress bar on stderr."""
    tasks = [(pt, sweep.jobs, net) for pt in sweep.points()]
    rows: list[dict[str, object]] = []
    with multiprocessing.Pool(procs) as pool:
        for i, part in enumerate(pool.imap_unordered(run_point, tasks), 1):
            rows.extend(part)
            bar = "#" * (30 * i // len(tasks))
            sys.stderr.write(f"\rsweep [{bar:<30}] {i}/{len(tasks)}")
            sys.stderr.flush()
    sys.stderr.write("\n")
    return rows


def summarise(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """Per point: mean and p99 JCT per scheme, ATP/ESA mean-JCT ratios."""
    groups: dict[tuple[object, ...], dict[str, list[float]]] = {}
    for r in rows:
        key = (r["mix"], r["load"], r["pool"], r["seed"])
        groups.setdefault(key, {}).setdefault(str(r["scheme"]), []).append(float(str(r["jct_s"])))
    out: list[dict[str, object]] = []
    for (mix, load, pool, seed), by in sorted(groups.items(), key=lambda kv: str(kv[0])):
        row: dict[str, object] = {"mix": mix, "load": load, "pool": pool, "seed": seed}
        for scheme in Scheme:
            v = np.array(by[scheme.value])
            row[f"{scheme.value}_mean"] = float(v.mean())
            row[f"{scheme.value}_p99"] = float(np.percentile(v, 99))
        for scheme in (Scheme.ESA, Scheme.ESA_SRPT, Scheme.ESA_AGING):
            ratio = float(str(row["atp_mean"])) / float(str(row[f"{scheme.value}_mean"]))
            row[f"atp/{scheme.value}"] = ratio
        out.append(row)
    out.sort(key=lambda r: (str(r["mix"]), float(str(r["load"])), int(str(r["pool"]))))
    return out


def write_csv(path: Path, rows: list[dict[str, object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
