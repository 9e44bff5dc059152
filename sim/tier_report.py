"""``python -m sim.tier_report`` (``make sim-tier``): the same jobs on one
switch and on a multi-rack fabric, packet model.

For each scheme: the mean time beyond compute (JCT less the slowest
worker's compute, ``sim.workload.beyond_compute``) with every worker under
one switch, on the fabric with only the spine aggregating (the ToRs
forward), and on the fabric with two tiers (``sim.tiers``); the packets the
ToRs' uplinks carried without and with ToR aggregation; then the best
baseline over the best ESA variant in each setting.  The jobs span two
racks each (``jobs``, placed by ``sim.racks.place``).  About three CPU
minutes, split over ``--procs`` processes.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from esa import arguments
from esa.job import JobSpec
from esa.schemes import SIM_SCHEMES, Scheme
from sim import packet, tiers
from sim.params import BASELINES, BOUNDS, ESA_SCHEMES, Net
from sim.racks import Racks, place
from sim.workload import beyond_compute

NET = Net(ps_shards=2, barrier=True)
"""The sweep's links, hosts and PS (100 G, 1 us hops, two PS shards)."""
FABRIC = Racks(racks=4, hosts_per_rack=8, oversubscription=2.0)
POOL = 256
"""Slots of every switch: the one switch, each ToR and the spine."""
SPREAD = 2
"""Racks per job."""

SCHEMES = [s for s in SIM_SCHEMES if s is not Scheme.STATIC_EQUAL and s not in BOUNDS]
"""STATIC_EQUAL's recut strands chunks without a timer in the packet model
(``sim.hostsim.Deadlock``), as in ``sim.calibrate``; the bounds are the
one switch's (``make sim``)."""


def jobs() -> list[JobSpec]:
    """Eight jobs of 4 or 8 workers arriving 20 us apart, 1 ms of compute,
    priorities spread over 1..255."""
    shapes = ((4, 2000), (8, 1500), (4, 3000), (8, 1000), (4, 1200), (8, 2500), (4, 800), (8, 1800))
    return [
        JobSpec(
            i + 1,
            w,
            32 * chunks,
            2,
            priority=1 + 254 * i // (len(shapes) - 1),
            arrival_s=20e-6 * i,
            compute_s=1e-3,
            jitter=0.01,
        )
        for i, (w, chunks) in enumerate(shapes)
    ]


@dataclass(frozen=True)
class Row:
    scheme: Scheme
    single: float
    """mean time beyond compute (s), one switch."""
    spine: float
    """the same on the fabric, only the spine aggregating."""
    two_tier: float
    uplinks_spine: tuple[int, int]
    """packets up and down the ToRs' uplinks, only the spine aggregating."""
    uplinks_two_tier: tuple[int, int]


Setting = Literal["one switch", "spine only", "two tiers"]
SETTINGS: tuple[Setting, ...] = ("one switch", "spine only", "two tiers")


def run_one(task: tuple[Scheme, Setting]) -> tuple[float, tuple[int, int]]:
    """Time beyond compute (s) and the uplinks' packets (up, down; none on
    one switch) of one scheme in one setting."""
    scheme, setting = task
    specs = jobs()
    if setting == "one switch":
        return beyond_compute(specs, packet.simulate(specs, POOL, scheme, NET)), (0, 0)
    fabric = replace(FABRIC, tor_aggregation=setting == "two tiers")
    sim = tiers.TierSim(place(specs, FABRIC, SPREAD), POOL, scheme, NET, fabric)
    return beyond_compute(specs, sim.run()), sim.uplink_packets()


def rows(procs: int) -> list[Row]:
    tasks = [(s, setting) for setting in reversed(SETTINGS) for s in SCHEMES]
    with multiprocessing.Pool(procs) as pool:
        done = dict(zip(tasks, pool.map(run_one, tasks, chunksize=1), strict=True))
    return [
        Row(
            s,
            done[(s, "one switch")][0],
            done[(s, "spine only")][0],
            done[(s, "two tiers")][0],
            done[(s, "spine only")][1],
            done[(s, "two tiers")][1],
        )
        for s in SCHEMES
    ]


def table(rows: list[Row]) -> list[str]:
    lines = [
        f"{'scheme':<14}{'one switch':>12}{'spine only':>12}{'two tiers':>12}"
        f"{'uplink pkts up/down, spine only':>34}{'two tiers':>22}{'up ratio':>10}",
        f"{'':<14}{'(time beyond compute, us)':>36}",
    ]
    for r in rows:
        up_s, down_s = r.uplinks_spine
        up_t, down_t = r.uplinks_two_tier
        lines.append(
            f"{r.scheme.value:<14}{r.single * 1e6:>12.0f}{r.spine * 1e6:>12.0f}"
            f"{r.two_tier * 1e6:>12.0f}{f'{up_s:,} / {down_s:,}':>34}"
            f"{f'{up_t:,} / {down_t:,}':>22}{up_s / up_t:>10.2f}"
        )
    by = {r.scheme: r for r in rows}
    picks: tuple[Callable[[Row], float], ...] = (
        lambda r: r.single,
        lambda r: r.spine,
        lambda r: r.two_tier,
    )
    for label, pick in zip(SETTINGS, picks, strict=True):
        base = min((s for s in BASELINES if s in by), key=lambda s: pick(by[s]))
        esa = min(ESA_SCHEMES, key=lambda s: pick(by[s]))
        lines.append(
            f"{label}: best baseline ({base.value}) / best ESA ({esa.value}) "
            f"{pick(by[base]) / pick(by[esa]):.3f}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.tier_report", description=__doc__)
    ap.add_argument("--procs", type=arguments.at_least("procs", 1), default=2)
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    table_rows = rows(args.procs)
    print(
        f"{len(jobs())} jobs on {SPREAD} racks each; {FABRIC.racks} racks of "
        f"{FABRIC.hosts_per_rack} hosts, uplinks {FABRIC.oversubscription:g}:1 oversubscribed; "
        f"{POOL} slots per switch; {NET.gbps:g} G, {NET.hop_ns / 1000:g} us hops, "
        f"{NET.ps_shards} PS shards, barrier; packet model"
    )
    print("\n".join(table(table_rows)))
    print(f"({time.monotonic() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
