"""Two curves at one contended point, every scheme beside the two bounds
(``ps-only``: no aggregation in the switch; ``ideal``: an unlimited pool):
JCT against pool size, from a few slots to a pool where memory never
binds, and JCT against the PS shards each job has, which decide what a
chunk the switch does not sum costs."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from esa.schemes import SIM_SCHEMES, Scheme
from sim.summary import CONTROLLER_ESA, NEAR_IDEAL, NEAR_PS_ONLY, Summary, verdict
from sim.sweep import REGIMES, Point, at_shards

POOLS = (8, 64, 256, 1024, 4096, 16384, 65536)
SHARDS = (1, 2, 4, 8)
BASE = "overload"
POOL_SHARDS = 1
"""PS hosts per job along the pool curve: the regime ``make sim`` judges."""
SEEDS = 1
WITHIN_IDEAL = 1.05
"""The shard curve names the fewest shards that bring a scheme this close to ``ideal``."""
RISE_TOLERANCE = 0.01
"""JCT may rise with the pool by this much: each rate solve stops within
``sim.rates.CONVERGED``, and a run is thousands of them."""
MAY_RISE = frozenset({Scheme.STATIC_EQUAL, Scheme.STATIC_FB, Scheme.STATIC_BDP})
"""Schemes whose JCT may rise with the pool, and why: a STATIC worker's
window is its partition, and a partition of a few slots streams slower than
no partition at all (its job then goes through its PS with the PS path's
window); more memory cut into more such partitions is slower."""


def _base() -> Point:
    return next(p for p in REGIMES if p.name == BASE)


def pool_points() -> list[Point]:
    base = at_shards(_base(), POOL_SHARDS)
    return [replace(base, name=f"{base.name} pool {n}", pool=n, sensitivity=True) for n in POOLS]


def shard_points() -> list[Point]:
    return [replace(at_shards(_base(), n), sensitivity=True) for n in SHARDS]


def pool_goals(curve: list[Summary]) -> list[str]:
    """ESA as the controller runs it at the two ends of the curve, and where
    a scheme's JCT rises with memory."""
    small, large = curve[0], curve[-1]
    esa = CONTROLLER_ESA
    low = small.ratio(esa, Scheme.PS_ONLY)
    high = large.ratio(esa, Scheme.IDEAL)
    rises = [
        f"{sc.value} {a.point.pool}->{b.point.pool}"
        for sc in SIM_SCHEMES
        for a, b in itertools.pairwise(curve)
        if b.by[sc].mean > a.by[sc].mean * (1 + RISE_TOLERANCE)
    ]
    unexplained = [r for r in rises if Scheme(r.split()[0]) not in MAY_RISE]
    return [
        f"pool curve ({BASE}): {esa.value} with {small.point.pool} slots / ps-only {low:.3f}, "
        f"goal <= {NEAR_PS_ONLY}: {verdict(low <= NEAR_PS_ONLY)}; with {large.point.pool} slots "
        f"/ ideal {high:.3f}, goal <= {NEAR_IDEAL}: {verdict(high <= NEAR_IDEAL)}",
        f"pool curve: JCT rises with the pool (by more than {RISE_TOLERANCE:.0%}) only where a "
        f"small partition is slower than none (static): {verdict(not unexplained)}"
        + (f"; rises at {', '.join(rises)}" if rises else "; never rises"),
    ]


def shard_lines(curve: list[Summary]) -> list[str]:
    """Where a scheme's JCT rises with more PS shards (judged: more PS
    capacity never slows a scheme), and per scheme the fewest PS shards that
    bring it within ``WITHIN_IDEAL`` of ``ideal`` (shown)."""
    rises = [
        f"{sc.value} {a.point.ps_shards}->{b.point.ps_shards}"
        for sc in SIM_SCHEMES
        for a, b in itertools.pairwise(curve)
        if b.by[sc].mean > a.by[sc].mean * (1 + RISE_TOLERANCE)
    ]
    need = []
    for sc in SIM_SCHEMES:
        if sc is Scheme.IDEAL:
            continue
        near = [s.point.ps_shards for s in curve if s.ratio(sc, Scheme.IDEAL) <= WITHIN_IDEAL]
        need.append(f"{sc.value} {min(near) if near else f'>{SHARDS[-1]}'}")
    return [
        f"shard curve ({BASE}, pool {curve[0].point.pool}): no scheme slower with more PS "
        f"shards (by more than {RISE_TOLERANCE:.0%}): {verdict(not rises)}"
        + (f"; rises at {', '.join(rises)}" if rises else ""),
        f"shard curve: PS shards per job to come within {WITHIN_IDEAL - 1:.0%} of ideal: "
        + ", ".join(need),
    ]


def plot(pools: list[Summary], shards: list[Summary], path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, curve, x, label in (
        (axes[0], pools, [s.point.pool for s in pools], "pool (slots)"),
        (axes[1], shards, [s.point.ps_shards for s in shards], "PS shards per job"),
    ):
        for sc in SIM_SCHEMES:
            style = "--" if sc in (Scheme.PS_ONLY, Scheme.IDEAL) else "-"
            ax.plot(x, [s.by[sc].mean for s in curve], style, marker="o", ms=3, label=sc.value)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("mean JCT (s)")
        ax.grid(alpha=0.3, which="both")
    axes[0].set_title(f"{BASE}: against switch memory ({pools[0].point.ps_shards} PS shards)")
    axes[1].set_title(f"{BASE}: against PS shards (pool {shards[0].point.pool})")
    axes[0].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
