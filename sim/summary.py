"""What the sweep shows: per point mean (seed spread) and p99 JCT of every
scheme, the ratios the goals are about, and whether each goal is met."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from esa.schemes import SIM_SCHEMES, Scheme
from sim.params import BASELINES
from sim.sweep import Point, Row
from sim.workload import concurrency

CONTROLLER_ESA = Scheme.ESA_AGING
"""ESA as ``esa-ctl`` runs a job admitted with ``--size``: the automatic
rank, SRPT with aging.  The goals judge it, not the best ESA variant."""
CONTENDED_AHEAD = 1.2
"""Goal: best baseline over ``CONTROLLER_ESA``, at the best contended point."""
LIGHT_BEHIND = 1.05
"""Goal: ``CONTROLLER_ESA`` at most this much above the best baseline at light load."""
PRIORITY_PAYS = 0.90
"""Goal: ESA-SRPT over ESA-equal at the best contended point."""
NEAR_PS_ONLY = 1.10
"""Goal: ``CONTROLLER_ESA`` with the smallest pool over ``ps-only``."""
NEAR_IDEAL = 1.02
"""Goal: ``CONTROLLER_ESA`` with the largest pool over ``ideal``."""
TIE = 1e-3
"""Mean JCTs within this fraction of each other count as equal."""


@dataclass(frozen=True)
class JctStats:
    mean: float
    """mean JCT over every job of every seed."""
    seed_means: tuple[float, ...]
    p99: float
    """99th percentile over every job of every seed."""

    @property
    def sd(self) -> float:
        return float(np.std(self.seed_means))


@dataclass(frozen=True)
class Summary:
    point: Point
    concurrency: float
    """mean jobs running at once were each alone (over seeds)."""
    bdp: int
    """slots of one bandwidth-delay product (a STATIC_BDP partition)."""
    by: dict[Scheme, JctStats]

    @property
    def contended(self) -> bool:
        """BDP x concurrent jobs exceeds the pool."""
        return self.bdp * self.concurrency > self.point.pool

    def best(self, schemes: tuple[Scheme, ...]) -> Scheme:
        return min(schemes, key=lambda s: self.by[s].mean)

    def ratio(self, num: Scheme, den: Scheme) -> float:
        return self.by[num].mean / self.by[den].mean

    def seed_ratios(self, num: Scheme, den: Scheme) -> tuple[float, float]:
        r = [a / b for a, b in zip(self.by[num].seed_means, self.by[den].seed_means, strict=True)]
        return min(r), max(r)

    def row(self) -> Row:
        """One CSV row."""
        pt = self.point
        out: Row = {
            "point": pt.name,
            "mix": pt.mix,
            "load": pt.load,
            "burst": pt.burst,
            "pool": pt.pool,
            "link": pt.link,
            "barrier": pt.barrier,
            "ps_shards": pt.ps_shards,
            "lag_ns": pt.lag_ns,
            "window": pt.window or "bdp",
            "squat": pt.squat,
            "concurrency": self.concurrency,
            "bdp": self.bdp,
            "contended": self.contended,
        }
        for sc, st in self.by.items():
            out |= {f"{sc.value}_mean": st.mean, f"{sc.value}_sd": st.sd, f"{sc.value}_p99": st.p99}
        out["best_baseline"] = self.best(BASELINES).value
        out[f"best_baseline/{CONTROLLER_ESA.value}"] = self.esa_gain
        out["esa-srpt/esa-equal"] = self.priority_gain
        return out

    @property
    def esa_gain(self) -> float:
        """Best baseline's mean JCT over ``CONTROLLER_ESA``'s (> 1: ESA ahead)."""
        return self.ratio(self.best(BASELINES), CONTROLLER_ESA)

    @property
    def priority_gain(self) -> float:
        """ESA-SRPT's mean JCT over ESA-equal's (< 1: priorities pay)."""
        return self.ratio(Scheme.ESA_SRPT, Scheme.ESA_EQUAL)

    @property
    def gain_ceiling(self) -> float:
        """The most any scheme could show as ``esa_gain``: the best
        baseline's mean JCT over ``ideal``'s (no memory limit at all)."""
        return self.ratio(self.best(BASELINES), Scheme.IDEAL)

    @property
    def priority_floor(self) -> float:
        """The least any priority rule could show as ``priority_gain``:
        ``ideal``'s mean JCT over ESA-equal's.  Priorities only move memory
        between jobs, and no placement of memory beats an unlimited pool."""
        return self.ratio(Scheme.IDEAL, Scheme.ESA_EQUAL)


def summarise(points: list[Point], rows: list[Row], seeds: int) -> list[Summary]:
    jct: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for r in rows:
        jct[(str(r["point"]), str(r["scheme"]), int(str(r["seed"])))].append(float(str(r["jct_s"])))
    out = []
    for pt in points:
        by = {}
        for sc in SIM_SCHEMES:
            per_seed = [jct[(pt.name, sc.value, s)] for s in range(seeds)]
            every = np.concatenate(per_seed)
            by[sc] = JctStats(
                float(every.mean()),
                tuple(float(np.mean(v)) for v in per_seed),
                float(np.percentile(every, 99)),
            )
        conc = float(np.mean([concurrency(pt.specs(s), pt.net()) for s in range(seeds)]))
        out.append(Summary(pt, conc, pt.net().bdp_window(Scheme.STATIC_BDP), by))
    return out


def table(summaries: list[Summary]) -> str:
    names = [s.value for s in SIM_SCHEMES]
    head = f"{'point':<40}{'conc':>5}{'BDPxC/pool':>11} " + "".join(f"{n:>14}" for n in names)
    head += f"{'base/':>10}{'SRPT/':>7}"
    sub = f"{'(mean JCT s ± sd over seeds; p99 s over all jobs)':<57}" + " " * 14 * len(names)
    sub += f"{'ESA':>10}{'equal':>7}"
    lines = [head, sub]
    for s in summaries:
        pt = s.point
        mean = f"{pt.name:<40}{s.concurrency:>5.1f}{s.bdp * s.concurrency / pt.pool:>11.2f} "
        p99 = " " * 57
        for sc in SIM_SCHEMES:
            st = s.by[sc]
            mean += f"{st.mean:>8.2f}±{st.sd:<5.2f}"
            p99 += f"{'p99 ' + format(st.p99, '.1f'):>14}"
        mean += f"{s.esa_gain:>10.3f}{s.priority_gain:>7.3f}"
        lines += [mean, p99]
    return "\n".join(lines)


def verdict(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def goals(summaries: list[Summary]) -> list[str]:
    """The summary lines: each goal, the numbers, and whether it is met;
    over the design points (sensitivity variants are shown, not judged)."""
    summaries = [s for s in summaries if not s.point.sensitivity]
    hot = [s for s in summaries if s.contended]
    cold = [s for s in summaries if not s.contended]
    esa = CONTROLLER_ESA.value
    lines = []
    if hot:
        gains = [s.esa_gain for s in hot]
        best = max(hot, key=lambda s: s.esa_gain)
        behind = [s.point.name for s in hot if s.esa_gain <= 1.0]
        ok = not behind and best.esa_gain >= CONTENDED_AHEAD
        ceiling = max(s.gain_ceiling for s in hot)
        lines.append(
            f"where BDP x jobs > pool ({len(hot)} points): best baseline / {esa} "
            f"{min(gains):.3f} .. {max(gains):.3f} (best at {best.point.name}, against "
            f"{best.best(BASELINES).value}); goal > 1 everywhere and >= {CONTENDED_AHEAD} at the "
            f"best (the most any scheme could show, best baseline / ideal: {ceiling:.3f}): "
            f"{verdict(ok)}" + (f"; ESA not ahead at {', '.join(behind)}" if behind else "")
        )
    if cold:
        worst = min(cold, key=lambda s: s.esa_gain)
        late = [s.point.name for s in cold if 1 / s.esa_gain > LIGHT_BEHIND]
        lines.append(
            f"where BDP x jobs <= pool ({len(cold)} points): {esa} / best baseline at most "
            f"{1 / worst.esa_gain:.3f} ({worst.point.name}); goal <= {LIGHT_BEHIND}: "
            f"{verdict(not late)}" + (f"; behind at {', '.join(late)}" if late else "")
        )
    prio = [s.priority_gain for s in summaries]
    worse = [s.point.name for s in summaries if s.priority_gain > 1 + TIE]
    pays = min((s.priority_gain for s in hot), default=1.0)
    floor = min((s.priority_floor for s in hot), default=1.0)
    lines.append(
        f"ESA-SRPT / ESA-equal: {min(prio):.3f} .. {max(prio):.3f}, best where BDP x jobs > "
        f"pool {pays:.3f}; goal <= 1 everywhere and <= {PRIORITY_PAYS} at the best (the least "
        f"any rule could show, ideal / ESA-equal: {floor:.3f}): "
        f"{verdict(not worse and pays <= PRIORITY_PAYS)}"
        + (f"; priorities cost at {', '.join(worse)}" if worse else "")
    )
    return lines
