"""The fluid model's rate solve: chunk rates of the jobs streaming at once.

Given who streams and who has chunks parked in the pool, every streaming
job gets a constant chunk rate, solved as a fixed point of the packet
model's mechanisms (docs/simulator.md, "Fluid"):

* a chunk holds its slot from its first contribution to its last: the gap
  by which the slowest worker trails the others, plus the spread of the
  workers' link lags; under ATP also the round trip through the PS and the
  PS's queue until its result releases the slot.  With a window of one
  bandwidth-delay product the early workers hear of chunk ``i`` just as the
  slowest sends chunk ``i + W``, so the gap is ``W / rate - latency``: under
  one packet time at line rate, nothing when the window binds;
* a chunk lands on a slot another job holds with probability (slots held by
  the jobs it may not displace) / pool, the jobs' held sets placed
  independently: every other job under ATP and ESA-equal, those of priority
  >= its own under ESA.  It lands on a slot one of its own job's last
  ``held`` chunks holds as often as the switch's CRC-32 makes two seqs that
  close share a slot (``self_blocked``: none within 84 seqs in a pool of
  1,024, 6 % of chunks within 139, 38 % within 279);
* under ESA a held chunk is evicted when a higher-priority chunk lands on
  its slot, or any chunk once it has been idle for the squat timeout;
* a chunk that found no slot or lost it completes at its PS shard: its N
  contributions cross that shard's one link and the shard serves each, no
  timer: the slot remembers the chunk (``slot_gone``, rules S8 and S13) and
  sends its later contributions after it;
* that memory is one chunk per slot: when another chunk's fallback or
  eviction at the same slot overwrites it before the chunk's last
  contribution came, and that contribution finds the slot free, it claims
  it and the chunk is **stranded**: its partial waits for the squat timeout
  and the next chunk to land there, or for the PS's pull (``stranded``);
* every completed chunk's result reaches its PS shard too (ESA and STATIC
  multicast a copy to the PS; ATP holds the slot until the PS answers);
* the rate is the least of the worker link, the PS shard's link and CPU,
  and the window over the mean chunk latency (Little's law);
* with ``Net.switch_pkt_ns`` the switch is one shared server: when the
  streaming jobs together offer it more packets than it serves, every rate
  is scaled down by the same factor.

STATIC jobs never collide: each streams through its own partition, with a
window of at most the partition.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from esa.model import slot_hash
from sim.params import Net, Scheme

ROUNDS = 60
CONVERGED = 3e-3
BLOCK_CAP = 0.99


@dataclass
class Flow:
    """One streaming job as the solve sees it."""

    workers: int
    prio: int
    skew: float
    """ns by which the slowest worker started after the first (0 with a barrier)."""
    lag_spread: float
    lag_max: float
    part: int = 0
    """STATIC: slots of its partition."""
    window: int = 0
    """chunks outstanding per worker."""
    rate: float = 0.0
    """chunks per ns."""
    latency: float = 0.0
    """mean ns from a chunk's first send to its result, PS queue aside."""
    queue: float = 0.0
    """ns a chunk waits at its PS shard when the PS bounds the rate."""
    held: float = 0.0
    """slots it keeps from other chunks."""
    to_ps: float = 0.0
    """share of its chunks that complete at the PS."""


@dataclass(frozen=True)
class Paths:
    """Per-scheme constants of the solve."""

    tx: float
    window: int
    lat_ok: float
    """latency of a chunk that completes in the switch."""
    hold_ps: float
    """ATP: ns a completed chunk keeps its slot (the PS round trip)."""
    squat: float
    pull: float
    """ns from a chunk's first piece at its PS until a pull has flushed a
    stranded partial: the PS's stall, then PULL out and RETX back."""
    ps_cost: float
    """ns per packet at a PS shard: the slower of its link and its CPU."""
    shards: int
    lat_ps_base: float
    """latency of a chunk completed at its PS shard, less its N packets on the
    shard's link."""
    pool: int
    ranked: bool
    """priorities matter: ESA with fixed or automatic priorities."""
    static: bool
    atp: bool

    @classmethod
    def of(cls, scheme: Scheme, net: Net, pool: int) -> Paths:
        tx, hop, sw = net.pkt_ns, net.hop_ns, net.switch_pkt_ns
        atp = scheme is Scheme.ATP
        return cls(
            tx=tx,
            window=net.window_for(scheme),
            lat_ok=net.rtt_ns(scheme) - net.lag_ns,
            hold_ps=2 * hop + 2 * tx + net.ps_ns + sw if atp else 0.0,
            squat=net.squat_us_for(scheme) * 1000.0,
            pull=net.ps_stall_ns + 4 * hop + 4 * tx + net.ps_ns + 2 * sw,
            ps_cost=max(tx, net.ps_ns),
            shards=net.ps_shards,
            lat_ps_base=4 * hop + 3 * tx + net.ps_ns + 2 * sw,
            pool=pool,
            ranked=scheme.ranked,
            static=scheme.is_static,
            atp=atp,
        )

    def lat_ps(self, workers: int) -> float:
        return self.lat_ps_base + workers * self.tx

    def hold(
        self, rate: np.ndarray, lat: np.ndarray, skew: np.ndarray, lag_spread: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per flow: (ns a chunk keeps its slot from others, ns it sits idle
        and may be taken, ns it queues at its PS shard, ns from its first
        contribution to its last)."""
        slack = np.maximum(0.0, self.window / rate - lat)
        line = rate * self.tx >= 1 - 1e-9
        queue = np.where(line, 0.0, slack)
        partial = np.where(line, np.minimum(slack, skew), 0.0) + lag_spread
        blk = np.minimum(partial, self.squat) if self.squat > 0 else partial
        idle = partial - blk
        if self.atp:
            blk = blk + self.hold_ps + queue
        return blk, idle, queue, partial

    def stranded(
        self,
        rate: np.ndarray,
        to_ps: np.ndarray,
        blocked: np.ndarray,
        span: np.ndarray,
        occupied: float,
    ) -> tuple[np.ndarray, float, float]:
        """(Per flow, the share of its chunks stranded; the ns a stranded
        chunk waits before its partial leaves the slot, and of that the ns
        it keeps other chunks out).

        Every chunk that goes to the PS writes its slot's one marker (S8 on a
        fallback, S10/S11 on an eviction), at ``sum(rate * to_ps) / pool``
        per slot and ns.  A blocked chunk is marked at its first
        contribution and needs the marker for its whole ``span``; an evicted
        one, on average, for half of it.  A lost marker strands the chunk
        when its next contribution finds the slot free (``1 - occupied``)."""
        marks = float((rate * to_ps).sum()) / self.pool
        exposed = span * (blocked + (to_ps - blocked) / 2)
        lost = -np.expm1(-marks * exposed / np.maximum(to_ps, 1e-12))
        share = to_ps * lost * (1 - min(1.0, occupied))
        if self.squat <= 0:
            return share, self.pull, self.pull
        wait = min(self.pull, self.squat + self.pool / max(float(rate.sum()), 1e-12))
        return share, wait, min(wait, self.squat)


@functools.cache
def reuse_distances(pool: int) -> np.ndarray:
    """Sorted, for each of ``8 * pool`` seqs of a job, how many seqs back the
    last one that hashes to the same slot is (looking back at most
    ``8 * pool``, beyond which it counts as never): the switch's CRC-32 is
    affine, so the distribution is every job's."""
    n = 16 * pool
    slots = np.array([slot_hash(1, s, pool) for s in range(n)])
    order = np.argsort(slots, kind="stable")
    dist = np.full(n, n)
    same = slots[order[1:]] == slots[order[:-1]]
    dist[order[1:][same]] = (order[1:] - order[:-1])[same]
    return np.sort(dist[n // 2 :])


def self_blocked(pool: int, held: np.ndarray) -> np.ndarray:
    """Share of a job's chunks whose slot one of its own last ``held``
    chunks still holds."""
    dist = reuse_distances(pool)
    return np.searchsorted(dist, held, side="right") / len(dist)


Parked = tuple[int, float]
"""A job whose early workers have chunks parked in the pool: (priority, slots)."""


def park_slots(prio: int, flows: list[Flow], parked: list[Parked], paths: Paths) -> float:
    """Slots a job's early workers park: its window, except where they find
    a slot held by a job they may not displace (those chunks fall back)."""
    free = 1.0
    for p, b in [(f.prio, f.held) for f in flows] + parked:
        if not paths.ranked or p >= prio:
            free *= 1 - min(BLOCK_CAP, b / paths.pool)
    return min(paths.window, paths.pool) * free


def solve(flows: list[Flow], parked: list[Parked], paths: Paths, net: Net) -> None:
    """Set ``rate``, ``latency``, ``held`` and ``to_ps`` of every flow."""
    if paths.static:
        solve_static(flows, paths, net)
    else:
        solve_shared(flows, parked, paths)
    per_chunk = [f.workers + (1.0 if paths.atp else f.to_ps) for f in flows]
    share_switch(flows, per_chunk, net)


def solve_static(flows: list[Flow], paths: Paths, net: Net) -> None:
    """Each job alone in its partition: window-, link- or PS-bound; a job
    without a partition (more jobs than slots) streams through its PS."""
    for f in flows:
        f.window = net.static_window(Scheme.STATIC_BDP, f.part)
        if f.part == 0:
            f.to_ps = 1.0
            f.latency = paths.lat_ps(f.workers) + f.lag_max
            ps_bound = paths.shards / (f.workers * paths.ps_cost)
            f.rate = min(1 / paths.tx, ps_bound, f.window / f.latency)
            continue
        f.latency = paths.lat_ok + f.lag_max
        f.rate = min(1 / paths.tx, f.window / f.latency, paths.shards / paths.ps_cost)
        f.to_ps = 0.0


def solve_shared(flows: list[Flow], parked: list[Parked], paths: Paths) -> None:
    """The fixed point of slots held, collisions, evictions and PS load.

    Under ATP the slots a job holds grow with its PS queue, which grows with
    the collisions the others' slots cause: the iteration is damped.  Under
    ESA a job holds slots only for its workers' gap and lag spread, and a few
    rounds settle it; with its workers in lockstep and nothing parked it
    holds none, and there is nothing to solve."""
    if not flows:
        return
    tx, w, pool = paths.tx, paths.window, paths.pool
    if not parked and not paths.atp and all(f.skew == f.lag_spread == 0 for f in flows):
        for f in flows:
            f.window, f.held, f.to_ps, f.queue = w, 0.0, 0.0, 0.0
            f.latency = paths.lat_ok + f.lag_max
            f.rate = min(1 / tx, paths.shards / paths.ps_cost, w / f.latency)
        return
    prios = [f.prio for f in flows] + [p for p, _ in parked]
    levels = sorted(set(prios)) if paths.ranked else [0]
    index = {p: i for i, p in enumerate(levels)}
    lvl = np.array([index[p] if paths.ranked else 0 for p in prios])
    n, n_lv = len(flows), len(levels)
    lvl_f = lvl[:n]
    workers = np.array([f.workers for f in flows], dtype=float)
    skew = np.array([f.skew for f in flows])
    lag_spread = np.array([f.lag_spread for f in flows])
    lag_max = np.array([f.lag_max for f in flows])
    lat_ps = paths.lat_ps_base + workers * tx
    fresh = np.array([f.rate == 0.0 for f in flows])
    lat = np.where(fresh, paths.lat_ok + lag_max, [f.latency for f in flows])
    rate = np.where(fresh, np.minimum(1 / tx, w / lat), [f.rate for f in flows])
    held = np.where(
        fresh, rate * paths.hold(rate, lat, skew, lag_spread)[0], [f.held for f in flows]
    )
    to_ps = np.array([f.to_ps for f in flows])
    logs = np.log1p(-np.minimum(BLOCK_CAP, np.array([*held, *(b for _, b in parked)]) / pool))
    parked_slots = sum(b for _, b in parked)
    damp = 0.7 if paths.atp else 1.0
    for _ in range(ROUNDS):
        if paths.ranked:
            free_ge = suffix_sums(np.bincount(lvl, weights=logs, minlength=n_lv))
            rate_ge = suffix_sums(np.bincount(lvl_f, weights=rate, minlength=n_lv))
            free = np.exp(free_ge[lvl_f] - logs[:n])
            higher, total = rate_ge[lvl_f + 1], rate_ge[0]
        else:
            free = np.exp(logs.sum() - logs[:n])
            higher, total = 0.0, rate.sum()
        t_blk, t_idle, _, span = paths.hold(rate, lat, skew, lag_spread)
        own = self_blocked(pool, rate * t_blk)
        f_b = np.minimum(BLOCK_CAP, 1 - free * (1 - own))
        new_to_ps = f_b
        if not paths.atp:
            evict = 1 - np.exp(-(higher * t_blk + (total - rate) * t_idle) / pool)
            new_to_ps = f_b + (1 - f_b) * evict
        occupied = (held.sum() + parked_slots) / pool
        strand, wait, keep = paths.stranded(rate, new_to_ps, f_b, span, occupied)
        lat = (1 - new_to_ps) * paths.lat_ok + new_to_ps * lat_ps + strand * wait + lag_max
        per_chunk = ((1 - new_to_ps) + new_to_ps * workers) / paths.shards
        new = np.minimum(np.minimum(1 / tx, 1 / (per_chunk * paths.ps_cost)), w / lat)
        moved = max(float((np.abs(new - rate) / new).max()), float(np.abs(new_to_ps - to_ps).max()))
        rate = rate + damp * (new - rate)
        t_blk = paths.hold(rate, lat, skew, lag_spread)[0]
        target = (1 - f_b) * rate * t_blk + rate * strand * keep
        moved = max(moved, float((np.abs(target - held) / np.maximum(target, 1.0)).max()))
        to_ps = new_to_ps
        held = held + damp * (target - held)
        logs[:n] = np.log1p(-np.minimum(BLOCK_CAP, held / pool))
        if moved < CONVERGED:
            break
    queue = paths.hold(rate, lat, skew, lag_spread)[2]
    for i, f in enumerate(flows):
        f.window = w
        f.rate, f.latency, f.held = float(rate[i]), float(lat[i]), float(held[i])
        f.to_ps, f.queue = float(to_ps[i]), float(queue[i])


def suffix_sums(x: np.ndarray) -> np.ndarray:
    """``out[i] = x[i:].sum()``, with one trailing 0."""
    return np.append(np.cumsum(x[::-1])[::-1], 0.0)


def share_switch(flows: list[Flow], per_chunk: list[float], net: Net) -> None:
    """Scale the rates down to the switch's capacity; ``per_chunk`` is the
    packets the switch processes per chunk of each job (its N contributions
    plus the PS result that comes back through it: every chunk under ATP,
    the share that went to the PS otherwise)."""
    load = sum(f.rate * n for f, n in zip(flows, per_chunk, strict=True))
    busy = load * net.switch_pkt_ns
    if busy <= 1.0:
        return
    for f in flows:
        f.rate /= busy
        f.latency = max(f.latency, f.window / f.rate)
