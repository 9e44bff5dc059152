"""The sweep: named points (workload, pool, rack), every scheme, several seeds.

``SUBSET`` is what ``make sim`` runs: one point per regime that decides the
question (light load, moderate load, overload in small, medium and large
pools, workers whose links lag each other by microseconds, a large
bandwidth-delay product), each with 1 and 2 PS hosts per job, judged, and
with 8, shown; ESA with the controller's homes.  ``full()`` is ``make sim-full``:
the grid of mixes, loads, pools, links and link lag, and the sensitivity
variants (barrier, PS shards, a fixed window, no squat timeout).
"""

from __future__ import annotations

import csv
import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from esa.job import JobSpec
from esa.schemes import SIM_SCHEMES, Scheme
from sim import fluid
from sim.engine import Engine
from sim.params import JITTER_NS, Net
from sim.rates import NotConverged
from sim.taskfile import TaskFile, fingerprint
from sim.workload import WorkloadSpec, make_jobs

SEEDS = 5
SEEDS_SUBSET = 3
"""``make sim``'s seeds: its minute holds three (``make sim-full`` runs five)."""
JOBS = 32


@dataclass(frozen=True)
class Point:
    name: str
    mix: str
    load: float
    pool: int
    burst: int = 1
    jobs: int = JOBS
    gbps: float = 100.0
    hop_ns: float = 1000.0
    barrier: bool = True
    ps_shards: int = 8
    """every scheme's best: the most a job may have (``esa.job``); more
    shards only add PS capacity, in both models."""
    jitter_ns: float = JITTER_NS
    lag_ns: float = 0.0
    window: int = 0
    squat: bool = True
    esa_homes: bool = False
    """ESA's layout: the controller's homes with ``Net.line_hold`` slots,
    what a job holds at line rate, as the least home (``esa-ctl policy esa
    --part-size N``, ``controller.world.partition.esa_homes``: the pool
    split equally among as many of the highest ranks as it gives 3/4 of
    that or more, every job while it can; ``Net.esa_homes``,
    ``Net.esa_home_size``), or every job hashed over the pool."""
    sensitivity: bool = False
    """a variant of a design point (not the system as built): shown, not judged."""

    def net(self) -> Net:
        """The point's network, its hosts as built: the workers' adaptive
        timeout and the PS's learnt stall (``hosts.timing``)."""
        net = Net(
            gbps=self.gbps,
            hop_ns=self.hop_ns,
            barrier=self.barrier,
            ps_shards=self.ps_shards,
            jitter_ns=self.jitter_ns,
            lag_ns=self.lag_ns,
            window=self.window,
            squat_us=None if self.squat else 0,
            ps_stall_adapts=True,
        )
        if not self.esa_homes:
            return net
        return replace(net, esa_homes=True, esa_home_size=min(self.pool, net.line_hold))

    def workload(self) -> WorkloadSpec:
        return WorkloadSpec(mix=self.mix, jobs=self.jobs, load=self.load, burst=self.burst)

    def specs(self, seed: int) -> list[JobSpec]:
        return make_jobs(self.workload(), self.net(), seed)

    @property
    def link(self) -> str:
        lag = f" lag {self.lag_ns / 1000:g}us" if self.lag_ns else ""
        return f"{self.gbps:g}G/{self.hop_ns / 1000:g}us{lag}"


LIGHT, MODERATE, OVERLOAD = 1.0, 4.0, 16.0
BURST = 8
LAG_NS = 2000.0
"""Worker links up to 2 us apart (``Net.lag_ns``): the regime where the
packet model once had ESA losing to ``static-fb`` (docs/simulator.md)."""

REGIMES: tuple[Point, ...] = (
    Point("light", "mixed", LIGHT, 4096),
    Point("moderate", "mixed", MODERATE, 1024),
    Point("overload", "comm-heavy", OVERLOAD, 1024, burst=BURST),
    Point("overload-small-pool", "comm-heavy", OVERLOAD, 256, burst=BURST),
    Point("overload-large-pool", "comm-heavy", OVERLOAD, 16384, burst=BURST),
    Point("moderate-lag", "mixed", MODERATE, 1024, lag_ns=LAG_NS),
    Point("large-bdp", "mixed", MODERATE, 4096, gbps=400.0, hop_ns=5000.0),
    Point("large-bdp-overload", "comm-heavy", OVERLOAD, 16384, BURST, gbps=400.0, hop_ns=5000.0),
)
"""One point per regime, each job with 8 PS hosts and ESA hashed over the
pool: ``make sim-full``'s variants start from these."""
HEADLINE_SHARDS = (1, 2)
"""PS hosts per job where ``make sim`` judges: fewer than the workers, as
in-network aggregation is deployed (docs/simulator.md, "The results")."""
SENSITIVITY_SHARDS = 8
"""PS hosts per job of ``make sim``'s sensitivity rows: the PS as fast as
the workers, where no switch can gain much."""


def at_shards(pt: Point, shards: int) -> Point:
    """``pt`` with ``shards`` PS hosts per job and ESA's homes with what a
    job holds at line rate as the least home, named for both; judged only
    at ``HEADLINE_SHARDS``."""
    return replace(
        pt,
        name=f"{pt.name} {shards} PS",
        ps_shards=shards,
        esa_homes=True,
        sensitivity=shards not in HEADLINE_SHARDS,
    )


SUBSET: tuple[Point, ...] = tuple(
    at_shards(pt, n) for n in (*HEADLINE_SHARDS, SENSITIVITY_SHARDS) for pt in REGIMES
)


def full() -> list[Point]:
    """The grid behind ``make sim-full`` (light and moderate load of the
    mixed workload, bursty overload of the communication-heavy one; pools of
    256 to 16,384 slots; 100 G links with 1 us hops and 400 G with 5 us, and
    at moderate load also 400 G / 1 us, 100 G / 5 us and 100 G / 1 us with
    2 us of link lag), then the sensitivity variants of four of ``SUBSET``'s
    points."""
    loads = (("mixed", LIGHT, 1), ("mixed", MODERATE, 1), ("comm-heavy", OVERLOAD, BURST))
    links = ((100.0, 1000.0), (400.0, 5000.0), (400.0, 1000.0), (100.0, 5000.0))
    grid = [
        Point(
            f"{mix} L{load:g} {pool} {g:g}G/{h / 1000:g}us",
            mix,
            load,
            pool,
            burst,
            gbps=g,
            hop_ns=h,
        )
        for (mix, load, burst), (g, h), pool in itertools.product(
            loads, links, (256, 1024, 4096, 16384)
        )
        if load == MODERATE or (g, h) in links[:2]
    ]
    grid += [
        Point(
            f"mixed L{MODERATE:g} {pool} 100G/1us lag 2us", "mixed", MODERATE, pool, lag_ns=LAG_NS
        )
        for pool in (256, 1024, 4096, 16384)
    ]
    changes: tuple[tuple[str, Callable[[Point], Point]], ...] = (
        ("no barrier", lambda p: replace(p, barrier=False)),
        ("no barrier, no squat", lambda p: replace(p, barrier=False, squat=False)),
        ("2 PS", lambda p: replace(p, ps_shards=2)),
        ("no spread", lambda p: replace(p, jitter_ns=0.0)),
        ("spread 5us", lambda p: replace(p, jitter_ns=5000.0)),
        ("window 512", lambda p: replace(p, window=512)),
    )
    variants = [
        replace(change(base), name=f"{base.name}/{tag}", sensitivity=True)
        for base in REGIMES
        if base.name in ("moderate", "overload", "overload-small-pool", "large-bdp-overload")
        for tag, change in changes
    ]
    return grid + variants


Row = dict[str, object]
Task = tuple[Point, int, Scheme]
"""a point, a seed, a scheme: what one worker process runs."""


class SolveFailed(RuntimeError):
    """A point's rate solve did not converge: the run stops, naming it."""


def run_one(task: Task) -> list[Row]:
    pt, seed, scheme = task
    specs = pt.specs(seed)
    sim = fluid.FluidSim(specs, pt.pool, scheme, pt.net(), seed)
    try:
        jct = sim.run()
    except NotConverged as e:
        raise SolveFailed(f"point {pt.name!r}, seed {seed}, scheme {scheme.value}: {e}") from e
    return [
        {
            "point": pt.name,
            "seed": seed,
            "scheme": scheme.value,
            "job": s.job,
            "model": s.name,
            "workers": s.workers,
            "iterations": s.iterations,
            "jct_s": jct[s.job],
            "solves": sim.solves,
        }
        for s in specs
    ]


COLUMNS: dict[str, type] = {
    "point": str,
    "seed": int,
    "scheme": str,
    "job": int,
    "model": str,
    "workers": int,
    "iterations": int,
    "jct_s": float,
    "solves": int,
}
"""``run_one``'s rows; the first three name the task."""


def key(task: Task) -> tuple[object, ...]:
    pt, seed, scheme = task
    return (pt.name, seed, scheme.value)


def run(
    points: list[Point],
    seeds: int,
    path: Path,
    engine: Engine,
    fresh: bool = False,
    label: str = "sweep",
) -> list[Row]:
    """One row per job, scheme, seed and point, in that order whatever the
    order the tasks finished in; each task's rows stored in ``path`` as it
    finishes, and the tasks stored there already not run again."""
    names = [pt.name for pt in points]
    if len(set(names)) < len(names):
        raise ValueError(f"points named twice: {sorted({n for n in names if names.count(n) > 1})}")
    tasks = [(pt, s, sc) for pt in points for s in range(seeds) for sc in SIM_SCHEMES]
    store = TaskFile(path, COLUMNS, 3, fingerprint(tasks, COLUMNS), fresh)
    todo = [t for t in tasks if key(t) not in store.done]
    todo.sort(key=lambda t: t[2] is not Scheme.ATP)
    engine.run(run_one, todo, lambda _, rows: store.append(rows), label, len(tasks), lambda t: t[2])
    return store.rows([key(t) for t in tasks])


def write_csv(path: Path, rows: list[Row]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
