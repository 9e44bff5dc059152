"""What the sweep shows: per point mean (seed spread) and p99 JCT of every
scheme and the bound under its pool (``sim.bound``), the ratios the goals
are about, and whether each goal is met."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from esa.schemes import SIM_SCHEMES, Scheme
from sim import bound
from sim.params import BASELINES
from sim.sweep import Point, Row
from sim.workload import concurrency

CONTROLLER_ESA = Scheme.ESA_AGING
"""ESA as ``esa-ctl`` runs a job admitted with ``--size``: the automatic
rank, SRPT with aging.  The goals judge it, not the best ESA variant."""
NEVER_BEHIND = 1.01
"""Goal: ``CONTROLLER_ESA``'s mean JCT at most this much above the best
baseline's, at every judged point."""
HEADROOM_AT = 1.2
"""Where the best baseline is this much slower than the bound, ..."""
HEADROOM_TAKEN = 0.75
"""... goal: ``CONTROLLER_ESA`` takes at least this share of the gap."""
PRIORITY_ROOM = 1.10
"""Where ESA-equal is this much slower than the bound, ..."""
PRIORITY_PAYS = 0.90
"""... goal: ESA-SRPT over ESA-equal at most this."""
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

    @classmethod
    def of(cls, per_seed: list[list[float]]) -> JctStats:
        """The statistics of every job's JCT, given per seed."""
        every = np.concatenate(per_seed)
        return cls(
            float(every.mean()),
            tuple(float(np.mean(v)) for v in per_seed),
            float(np.percentile(every, 99)),
        )


@dataclass(frozen=True)
class Summary:
    point: Point
    concurrency: float
    """mean jobs running at once were each alone (over seeds)."""
    bdp: int
    """slots of one bandwidth-delay product (a STATIC_BDP partition)."""
    by: dict[Scheme, JctStats]
    bound: tuple[float, ...] = ()
    """per seed, the least mean JCT any slot scheduler could reach with the
    point's pool and PS hosts (``sim.bound``); empty where not computed."""

    @property
    def bound_mean(self) -> float:
        return float(np.mean(self.bound))

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
        if self.bound:
            out |= {"bound_mean": self.bound_mean, "bound_sd": float(np.std(self.bound))}
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
        baseline's mean JCT over the bound's."""
        return self.by[self.best(BASELINES)].mean / self.bound_mean

    def headroom(self, floor: float) -> float:
        """``CONTROLLER_ESA``'s share of the gap between the best baseline
        and ``floor`` (1: it reaches it; 0: no better than the best
        baseline; below 0: behind it)."""
        base, esa = (self.by[s].mean for s in (self.best(BASELINES), CONTROLLER_ESA))
        return (base - esa) / (base - floor) if base > floor else 1.0

    @property
    def headroom_taken(self) -> float:
        """``headroom`` against the bound under the point's pool."""
        return self.headroom(self.bound_mean)

    @property
    def priority_floor(self) -> float:
        """The least any priority rule could show as ``priority_gain``: the
        bound's mean JCT over ESA-equal's.  Priorities only move memory
        between jobs, and no placement of the point's memory beats the bound."""
        return self.bound_mean / self.by[Scheme.ESA_EQUAL].mean


def summarise(
    points: list[Point], rows: list[Row], seeds: int, with_bound: bool = True
) -> list[Summary]:
    """Every point's statistics, and its bound per seed unless not ``with_bound``
    (a trace's thousands of jobs would make its linear program large)."""
    jct: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for r in rows:
        jct[(str(r["point"]), str(r["scheme"]), int(str(r["seed"])))].append(float(str(r["jct_s"])))
    out = []
    for pt in points:
        by = {}
        for sc in SIM_SCHEMES:
            by[sc] = JctStats.of([jct[(pt.name, sc.value, s)] for s in range(seeds)])
        conc = float(np.mean([concurrency(pt.specs(s), pt.net()) for s in range(seeds)]))
        floors = tuple(
            bound.mean_jct(pt.specs(s), pt.pool, pt.net(), s) for s in range(seeds) if with_bound
        )
        out.append(Summary(pt, conc, pt.net().bdp_window(Scheme.STATIC_BDP), by, floors))
    return out


def table(summaries: list[Summary]) -> str:
    names = [s.value for s in SIM_SCHEMES]
    head = f"{'point':<40}{'conc':>5}{'BDPxC/pool':>11} " + "".join(f"{n:>14}" for n in names)
    head += f"{'bound':>14}{'base/':>10}{'SRPT/':>7}"
    sub = f"{'(mean JCT s ± sd over seeds; p99 s over all jobs)':<57}" + " " * 14 * len(names)
    sub += f"{'(sim.bound)':>14}{'ESA':>10}{'equal':>7}"
    lines = [head, sub]
    for s in summaries:
        pt = s.point
        mean = f"{pt.name:<40}{s.concurrency:>5.1f}{s.bdp * s.concurrency / pt.pool:>11.2f} "
        p99 = " " * 57
        for sc in SIM_SCHEMES:
            st = s.by[sc]
            mean += f"{st.mean:>8.2f}±{st.sd:<5.2f}"
            p99 += f"{'p99 ' + format(st.p99, '.1f'):>14}"
        if s.bound:
            mean += f"{s.bound_mean:>8.2f}±{float(np.std(s.bound)):<5.2f}"
        else:
            mean += f"{'-':>14}"
        mean += f"{s.esa_gain:>10.3f}{s.priority_gain:>7.3f}"
        lines += [mean, p99]
    return "\n".join(lines)


UNITS = (("s", 1.0), ("ms", 1e3), ("us", 1e6))
"""What ``in_unit`` may print JCTs in, largest first."""


def in_unit(*seconds: float) -> tuple[str, list[str]]:
    """``seconds`` in the largest of ``UNITS`` in which the largest of them
    is at least 1 (else microseconds), each to two decimals: ``make sim``'s
    JCTs are seconds, ``sim.check``'s reduced ones microseconds."""
    top = max(seconds)
    unit, scale = next(((u, f) for u, f in UNITS if top * f >= 1), UNITS[-1])
    return unit, [f"{v * scale:.2f}" for v in seconds]


def verdict(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def goals(summaries: list[Summary]) -> list[str]:
    """The summary lines: each goal, the numbers, and whether it is met;
    over the judged points (sensitivity variants are shown, not judged).
    Headroom and the room for priorities are measured against the bound
    under the point's own pool (``sim.bound``), not ``ideal``'s unlimited
    one: what no scheduler of that memory could take is no one's headroom."""
    judged = [s for s in summaries if not s.point.sensitivity]
    esa = CONTROLLER_ESA.value
    worst = min(judged, key=lambda s: s.esa_gain)
    behind = [s.point.name for s in judged if 1 / s.esa_gain > NEVER_BEHIND]
    gains = [s.esa_gain for s in judged]
    lines = [
        f"{esa} / best baseline at most {1 / worst.esa_gain:.3f} ({worst.point.name}, against "
        f"{worst.best(BASELINES).value}), best baseline / {esa} {min(gains):.3f}"
        f" .. {max(gains):.3f} over {len(judged)} points; goal: never more "
        f"than {NEVER_BEHIND - 1:.0%} behind: {verdict(not behind)}"
        + (f"; behind at {', '.join(behind)}" if behind else "")
    ]
    room = [s for s in judged if s.gain_ceiling >= HEADROOM_AT]
    if room:
        least = min(room, key=lambda s: s.headroom_taken)
        unit, (base, at_esa, floor) = in_unit(
            least.by[least.best(BASELINES)].mean,
            least.by[CONTROLLER_ESA].mean,
            least.bound_mean,
        )
        short = [s.point.name for s in room if s.headroom_taken < HEADROOM_TAKEN]
        of_ideal = [s.headroom(s.by[Scheme.IDEAL].mean) for s in room]
        lines.append(
            f"where best baseline / bound >= {HEADROOM_AT} ({len(room)} points): {esa} takes "
            f"{least.headroom_taken:.0%} .. {max(s.headroom_taken for s in room):.0%} of best "
            f"baseline - bound (of best baseline - ideal {min(of_ideal):.0%} .. "
            f"{max(of_ideal):.0%}); least at {least.point.name} (best baseline {base} {unit}, "
            f"{esa} {at_esa}, bound {floor}); goal >= "
            f"{HEADROOM_TAKEN:.0%}: {verdict(not short)}"
            + (f"; short at {', '.join(short)}" if short else "")
        )
    else:
        lines.append(f"best baseline / bound below {HEADROOM_AT} at every point: no headroom goal")
    spare = [s for s in judged if 1 / s.priority_floor >= PRIORITY_ROOM]
    tight = [s for s in judged if 1 / s.priority_floor < PRIORITY_ROOM]
    prio = [s.priority_gain for s in judged]
    head = f"ESA-SRPT / ESA-equal: {min(prio):.3f} .. {max(prio):.3f}"
    if spare:
        most = max(spare, key=lambda s: s.priority_gain)
        line = (
            f"{head}; where ESA-equal / bound >= {PRIORITY_ROOM} ({len(spare)} points) at most "
            f"{most.priority_gain:.3f} ({most.point.name}), goal <= {PRIORITY_PAYS}: "
            f"{verdict(most.priority_gain <= PRIORITY_PAYS)}"
        )
        if tight:
            room_left = max(1 / s.priority_floor for s in tight)
            line += (
                f"; at the other {len(tight)} points ESA-equal / bound at most {room_left:.3f}: "
                f"below {PRIORITY_ROOM}, no rule could show {PRIORITY_PAYS} there"
            )
        lines.append(line)
    else:
        room_left = max(1 / s.priority_floor for s in judged)
        lines.append(
            f"{head}; ESA-equal / bound at most {room_left:.3f}: below {PRIORITY_ROOM} at every "
            f"point, so no rule could show {PRIORITY_PAYS}: no priority goal"
        )
    return lines
