"""``python -m sim.headroom``: where ESA's time goes against the bound.

At the judged points where ESA takes the least of the headroom (best
baseline - ``sim.bound``), fluid model, ``esa-aging``, ``make sim``'s
seeds: the mean JCT of ESA, of the best baseline and the bound, and the
share of the gap ESA takes; then ESA's streaming time beyond what the line
rate needs (per job), split between jobs streaming in a home and jobs
hashed over the pool, each side's rate over the line and share of chunks
completed at a PS (time-weighted over the run); the share of streaming
time spent in a home, the share of the pool held, and the share of time
some job streams below ``SLOW`` of the line while a fifth of the pool or
more is free.

Then the placement: the bound lets a slot serve chunks back to back
(Little's law at the mean hold), as a switch that gave each chunk any free
slot nearly could; a home gives chunk ``seq`` the one slot ``seq mod s``.
For each fan-in, the share of chunks that find their slot held, both ways,
with ``s`` the mean hold in slots and multiples of it (chunks one packet
time apart, each held for the range of its workers' exponential spread,
``Net.jitter_ns``; ``placement_loss``), before ESA lends a kept-out chunk
a slot outside its home (rule L).
"""

from __future__ import annotations

import argparse
import heapq
from dataclasses import dataclass, field

import numpy as np

from esa import arguments
from esa.schemes import Scheme
from sim import fluid, sweep
from sim.bound import mean_jct as bound_jct
from sim.params import BASELINES
from sim.rates import Flow

POINTS = (
    ("overload-small-pool", 1),
    ("overload-small-pool", 2),
    ("moderate-lag", 1),
    ("overload", 1),
)
"""(regime, PS hosts per job): where `make sim` at 64b9a45 had ESA short of 75 %."""
SLOW = 0.9
"""A stream below this share of the line rate counts as slow."""
FREE = 0.2
"""The share of the pool free that counts as memory left idle."""
FAN_INS = (4, 8, 16)
HOME_SIZES = (1.0, 1.1, 1.5, 2.0)
"""Slots of the placement table, in mean holds."""
CHUNKS = 50_000
"""Chunks per placement draw."""


@dataclass
class StreamTally:
    """Time integrals (ns) over the streaming jobs of one or more runs,
    told after every rate solve (``fluid.Observer``): the rates hold until
    the next solve."""

    pool: int
    tx: float
    time: dict[bool, float] = field(default_factory=lambda: {True: 0.0, False: 0.0})
    """streaming job-ns, by homed (True) or hashed."""
    chunks: dict[bool, float] = field(default_factory=lambda: {True: 0.0, False: 0.0})
    to_ps: dict[bool, float] = field(default_factory=lambda: {True: 0.0, False: 0.0})
    """chunks completed at a PS."""
    span: float = 0.0
    """ns with at least one job streaming."""
    held: float = 0.0
    """slot-ns held (in a home and lent) while some job streams."""
    starved: float = 0.0
    """ns in which a job streams below ``SLOW`` of the line while ``FREE``
    of the pool or more is free."""
    last: tuple[float, list[tuple[bool, float, float, float]]] | None = None
    """the last solve: its time and (homed, rate, to_ps, slots) of each flow."""

    def observe(self, now: float, flows: list[Flow]) -> None:
        self.close(now)
        self.last = (now, [(f.part > 0, f.rate, f.to_ps, f.held + f.lent) for f in flows])

    def close(self, now: float) -> None:
        """Count the interval since the last solve; the run ended if ``now``
        is its end (no solve follows)."""
        if self.last is None:
            return
        t0, rows = self.last
        self.last = None
        dt = now - t0
        if dt <= 0.0 or not rows:
            return
        for homed, rate, to_ps, _ in rows:
            self.time[homed] += dt
            self.chunks[homed] += rate * dt
            self.to_ps[homed] += rate * to_ps * dt
        used = sum(slots for *_, slots in rows)
        self.span += dt
        self.held += used * dt
        slow = any(rate * self.tx < SLOW for _, rate, _, _ in rows)
        if slow and used <= (1.0 - FREE) * self.pool:
            self.starved += dt

    def excess(self, homed: bool) -> float:
        """ns streamed beyond what the line rate needs for the same chunks."""
        return self.time[homed] - self.chunks[homed] * self.tx

    def line_share(self, homed: bool) -> float:
        line = self.time[homed] / self.tx
        return self.chunks[homed] / line if line > 0 else 0.0

    def ps_share(self, homed: bool) -> float:
        c = self.chunks[homed]
        return self.to_ps[homed] / c if c > 0 else 0.0

    def homed_share(self) -> float:
        total = self.time[True] + self.time[False]
        return self.time[True] / total if total > 0 else 0.0


@dataclass(frozen=True)
class Gap:
    """One point's means (s) and ESA's tally over its seeds."""

    esa: float
    best: float
    best_name: str
    bound: float
    jobs: int
    tally: StreamTally

    @property
    def taken(self) -> float:
        """ESA's share of (best baseline - bound)."""
        room = self.best - self.bound
        return (self.best - self.esa) / room if room > 0 else 1.0


def study(point: sweep.Point, seeds: int) -> Gap:
    net = point.net()
    tally = StreamTally(point.pool, net.pkt_ns)
    esa, bound, jobs = [], [], 0
    base: dict[Scheme, list[float]] = {s: [] for s in BASELINES}
    for seed in range(seeds):
        specs = point.specs(seed)
        jobs += len(specs)
        sim = fluid.FluidSim(specs, point.pool, Scheme.ESA_AGING, net, seed, tally.observe)
        esa.append(float(np.mean(list(sim.run().values()))))
        tally.close(sim.now)
        bound.append(bound_jct(specs, point.pool, net, seed))
        for scheme in BASELINES:
            jct = fluid.simulate(specs, point.pool, scheme, net, seed)
            base[scheme].append(float(np.mean(list(jct.values()))))
    best = min(BASELINES, key=lambda s: np.mean(base[s]))
    return Gap(
        float(np.mean(esa)),
        float(np.mean(base[best])),
        best.value,
        float(np.mean(bound)),
        jobs,
        tally,
    )


def placement_loss(holds: np.ndarray, gap: float, slots: int) -> tuple[float, float, float]:
    """(Any free slot, ``seq mod slots``, ``seq mod slots`` then its second
    slot ``(seq + slots // 2) mod slots`` as ESA's homes place a chunk):
    the share of chunks, sent ``gap`` ns apart and chunk ``i`` holding its
    slot ``holds[i]`` ns, that find no slot to take; a chunk kept out
    holds none, and a slot is free again at the instant its hold ends."""
    busy: list[float] = []
    ends, ends2 = np.zeros(slots), np.zeros(slots)
    pooled = modulo = second = 0
    for i, hold in enumerate(holds.tolist()):
        t = i * gap
        while busy and busy[0] <= t:
            heapq.heappop(busy)
        if len(busy) >= slots:
            pooled += 1
        else:
            heapq.heappush(busy, t + hold)
        k = i % slots
        if ends[k] > t:
            modulo += 1
        else:
            ends[k] = t + hold
        for j in (k, (i + slots // 2) % slots):
            if ends2[j] <= t:
                ends2[j] = t + hold
                break
        else:
            second += 1
    n = len(holds)
    return pooled / n, modulo / n, second / n


def spread_holds(workers: int, jitter_ns: float, n: int, seed: int = 0) -> np.ndarray:
    """``n`` chunks' holds: the range of ``workers`` exponential spreads."""
    draws = np.random.default_rng(seed).exponential(jitter_ns, (n, workers))
    holds: np.ndarray = draws.max(axis=1) - draws.min(axis=1)
    return holds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.headroom", description=__doc__)
    ap.add_argument("--seeds", type=arguments.at_least("seeds", 1), default=sweep.SEEDS_SUBSET)
    args = ap.parse_args(argv)
    regimes = {p.name: p for p in sweep.REGIMES}
    print(
        "| point | best baseline s | ESA s | bound s | taken | beyond line, homed s/job "
        "| hashed s/job | time homed | rate/line homed | hashed | to PS homed | hashed "
        "| pool held | slow, pool free |"
    )
    print("|---|" + "---|" * 13)
    for name, shards in POINTS:
        pt = sweep.at_shards(regimes[name], shards)
        g = study(pt, args.seeds)
        t = g.tally
        print(
            f"| {pt.name} | {g.best:.2f} ({g.best_name}) | {g.esa:.2f} | {g.bound:.2f} "
            f"| {g.taken:.0%} | {t.excess(True) * 1e-9 / g.jobs:.2f} "
            f"| {t.excess(False) * 1e-9 / g.jobs:.2f} | {t.homed_share():.0%} "
            f"| {t.line_share(True):.2f} | {t.line_share(False):.2f} "
            f"| {t.ps_share(True):.3f} | {t.ps_share(False):.3f} "
            f"| {t.held / t.span / pt.pool:.0%} | {t.starved / t.span:.0%} |",
            flush=True,
        )
    net = sweep.at_shards(regimes["overload"], 1).net()
    print()
    print(f"placement ({net.pkt_ns:.2f} ns a chunk, spread mean {net.jitter_ns:g} ns): kept out,")
    print("| fan-in | mean hold, slots | " + " | ".join(f"{m:g} x" for m in HOME_SIZES) + " |")
    print("|---|---|" + "---|" * len(HOME_SIZES))
    for w in FAN_INS:
        holds = spread_holds(w, net.jitter_ns, CHUNKS)
        mean = float(holds.mean()) / net.pkt_ns
        cells = []
        for m in HOME_SIZES:
            pooled, modulo, second = placement_loss(holds, net.pkt_ns, round(m * mean))
            cells.append(f"any free {pooled:.3f}, seq mod s {modulo:.3f}, and h' {second:.3f}")
        print(f"| {w} | {mean:.0f} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
