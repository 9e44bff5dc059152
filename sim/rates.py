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
* a job with a home streams in it (``solve_pool``); a chunk its home keeps
  out borrows a slot hashed over the pool outside the home when that slot
  is free (rule L, ``lend_offers``), and the home's owner evicts such a
  guest of its rank or below;
* a chunk that found no slot or lost it completes at its PS shard: its N
  contributions cross that shard's one link and the shard serves each, no
  timer: the slot remembers the chunk (``slot_gone``, rules S8 and S13) and
  sends its later contributions after it;
* that memory is one job per slot, with the highest seq of it gone
  (docs/dataplane.md, "Gone is gone"): a later chunk of the same job that
  goes to the PS keeps the earlier ones covered, but when another job's
  fallback or eviction at the same slot replaces the marker before the
  chunk's last contribution came, and that contribution finds the slot
  free, it claims it and the chunk is **stranded**: its partial waits for
  the squat timeout and the next chunk to land there, or for the PS's pull
  (``stranded``);
* every completed chunk's result reaches its PS shard too (ESA and STATIC
  multicast a copy to the PS; ATP holds the slot until the PS answers);
* the rate is the least of the worker link, the PS shard's link and CPU,
  and the window over the mean chunk latency (Little's law);
* with ``Net.switch_pkt_ns`` the switch is one shared server: when the
  streaming jobs together offer it more packets than it serves, every rate
  is capped at the same share of what it asked, and the shared pool solved
  again under the caps: a stream the switch slows keeps its chunks in
  flight longer (its window fills the switch's queue), which under ATP
  holds its slots that much longer.

STATIC jobs never collide: each streams through its own partition, with a
window of at most the partition.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
from scipy import optimize

from esa.model import slot_hash
from esa.schemes import Scheme
from sim.params import Net, spread_range_ns

ROUNDS = 2000
"""Most damped rounds of one shared-pool solve; a solve still moving then
searches for the root, and raises if it finds none."""
CONVERGED = 3e-3
"""A solve has converged when in a round no rate moved by more than this
fraction, and no share of a flow's chunks sent to the PS nor share of the
pool a flow holds by more than this (what the flows see of each other)."""
DAMP_FLOOR = 1 / 1024
"""A flow's rate, share to the PS or slot count whose step turned back
halves its own step, down to this."""
BLOCK_CAP = 0.99
LINE_RAMP = 0.02
ROOT_METHODS = ("hybr", "krylov", "lm", "df-sane")
"""``scipy.optimize.root``'s methods a solve tries, in order, after its
rounds (none: the rounds alone, as ``bench.rate_solve`` compares)."""
DAMP_ATP = 0.7
DAMP_ESA = 1.0


class NotConverged(RuntimeError):
    """A rate solve ended its rounds and its root search still moving."""


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
    """slots it keeps from other chunks (a job with a home: in its home)."""
    lent: float = 0.0
    """a job with a home: slots it holds outside its home as a guest (rule
    L, ``lend_offers``)."""
    to_ps: float = 0.0
    """share of its chunks that complete at the PS."""
    stranded: float = 0.0
    """share of its chunks stranded (``SolveConstants.stranded``)."""
    strand_wait: float = 0.0
    """ns a stranded chunk waits before its partial leaves the slot."""
    cap: float = math.inf
    """chunks per ns a busy switch (``Net.switch_pkt_ns``) leaves it."""


@dataclass(frozen=True)
class SolveConstants:
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
    pool: float
    """slots; ``math.inf`` for ``Scheme.IDEAL``."""
    ranked: bool
    """priorities matter: ESA with fixed or automatic priorities."""
    static: bool
    atp: bool
    jitter: float = 0.0
    """``Net.jitter_ns``: the mean spread of one contribution."""
    modulo: bool = False
    """the pool is one job's home: its chunk ``seq`` lands on slot ``seq mod
    pool`` (``modulo_blocked``), not on the CRC's hash."""

    @classmethod
    def of(cls, scheme: Scheme, net: Net, pool: int) -> SolveConstants:
        tx, hop, sw = net.pkt_ns, net.hop_ns, net.switch_pkt_ns
        atp = scheme is Scheme.ATP
        return cls(
            tx=tx,
            window=net.window_for(scheme),
            lat_ok=net.path_ns(scheme),
            hold_ps=2 * hop + 2 * tx + net.ps_ns + sw if atp else 0.0,
            squat=net.squat_us_for(scheme) * 1000.0,
            pull=net.ps_stall_initial() + 4 * hop + 4 * tx + net.ps_ns + 2 * sw,
            ps_cost=max(tx, net.ps_ns),
            shards=net.ps_shards,
            lat_ps_base=4 * hop + 3 * tx + net.ps_ns + 2 * sw,
            pool=math.inf if scheme is Scheme.IDEAL else pool,
            ranked=scheme.ranked,
            static=scheme.is_static,
            atp=atp,
            jitter=net.jitter_ns,
        )

    def lat_ps(self, workers: int) -> float:
        return self.lat_ps_base + workers * self.tx

    def hold(
        self, rate: float, lat: float, skew: float, lag_spread: float
    ) -> tuple[float, float, float, float]:
        """Of one flow: (ns a chunk keeps its slot from others, ns it sits
        idle and may be taken, ns it queues at its PS shard, ns from its
        first contribution to its last).

        The solve's innermost step: ``min`` and ``max`` are spelled out, as
        ``x if x < y else y`` is several times cheaper than a builtin call."""
        slack = self.window / rate - lat
        slack = slack if slack > 0.0 else 0.0
        # how far the flow is line-bound (1) rather than PS- or window-bound
        # (0): a ramp over the last LINE_RAMP of the line rate, not a step, so
        # that the solve's map is continuous
        line = (rate * self.tx - 1.0 + LINE_RAMP) / LINE_RAMP
        line = 0.0 if line < 0.0 else (1.0 if line > 1.0 else line)
        queue = (1.0 - line) * slack
        partial = line * (skew if skew < slack else slack) + lag_spread
        squat = self.squat
        blk = (squat if squat < partial else partial) if squat > 0 else partial
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

        Every chunk that goes to the PS marks its slot (S8 on a fallback,
        S10/S11 on an eviction); a flow's marker is lost only to the
        markings of the other flows' chunks (a job's own keep its earlier
        chunks covered), at ``sum(rate * to_ps) / pool`` per slot and ns
        less the flow's own.  A blocked chunk is marked at its first
        contribution and needs the marker for its whole ``span``; an evicted
        one, on average, for half of it.  A lost marker strands the chunk
        when its next contribution finds the slot free (``1 - occupied``)."""
        own = rate * to_ps
        others = np.maximum(float(own.sum()) - own, 0.0) / self.pool
        vacant = 1 - min(1.0, occupied)
        share = [
            self.strand_share(float(m), float(p), float(b), float(s), vacant)
            for m, p, b, s in zip(others, to_ps, blocked, span, strict=True)
        ]
        return np.array(share), *self.strand_wait(float(rate.sum()))

    def strand_share(
        self, marks: float, to_ps: float, blocked: float, span: float, vacant: float
    ) -> float:
        """``stranded``'s share of one flow, given the other flows' markings
        per slot and ns (``marks``) and the share of slots free (``vacant``)."""
        exposed = span * (blocked + (to_ps - blocked) / 2)
        lost = -math.expm1(-marks * exposed / (1e-12 if to_ps < 1e-12 else to_ps))
        return to_ps * lost * vacant

    def strand_wait(self, total_rate: float) -> tuple[float, float]:
        """``stranded``'s wait and the part of it that keeps others out,
        given the chunks per ns of all the streaming jobs together."""
        if self.squat <= 0:
            return self.pull, self.pull
        wait = min(self.pull, self.squat + self.pool / max(total_rate, 1e-12))
        return wait, min(wait, self.squat)


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


@functools.cache
def blocked_integral(pool: int) -> list[float]:
    """``out[k]``: the integral of ``self_blocked(pool, h)`` over ``h`` from 0
    to ``k``, for every whole ``k`` up to the largest reuse distance."""
    dist = reuse_distances(pool)
    share = np.searchsorted(dist, np.arange(int(dist[-1]) + 1), side="right") / len(dist)
    return [0.0, *np.cumsum(share).tolist()]


def modulo_blocked(home: int, gap: float, hold: float, workers: float, jitter: float) -> float:
    """Share of a job's chunks that find their slot in its home held by its
    own chunk ``home`` seqs back, where chunk ``seq`` lands on slot ``seq
    mod home`` and chunks are sent ``gap`` ns apart: the share whose slot is
    held longer than ``home * gap``.  A chunk's hold is ``hold`` (the mean
    of the solve, ``SolveConstants.hold``) less the mean range of its
    workers' exponential spread, plus that range drawn: the range of
    ``workers`` exponentials of mean ``jitter`` is distributed as the
    largest of ``workers - 1`` of them.  Without spread, a step."""
    k = workers - 1.0
    if jitter <= 0.0 or k < 1.0:
        return 1.0 if hold > home * gap else 0.0
    fixed = hold - spread_range_ns(jitter, int(workers))
    room = home * gap - (fixed if fixed > 0.0 else 0.0)
    if room <= 0.0:
        return 1.0
    return 1.0 - math.pow(-math.expm1(-room / jitter), k)


def self_blocked_mean(pool: int, held: float) -> float:
    """``self_blocked`` averaged over the chunks a job has in flight: ``held``
    is a mean, the count around it Poisson, taken as uniform with the same
    variance (``held`` +- sqrt(3 held)).  The exact share is a step function
    of the count (the CRC's reuse distances cluster), and a solve that sat on
    a step would flip between its two sides."""
    table = blocked_integral(pool)
    top = len(table) - 1

    def integral(x: float) -> float:
        if x <= 0.0:
            return 0.0
        if x >= top:
            return table[top] + (x - top) * (table[top] - table[top - 1])
        k = int(x)
        return table[k] + (x - k) * (table[k + 1] - table[k])

    half = math.sqrt(3.0 * held) if held > 1.0 / 3.0 else 1.0
    return (integral(held + half) - integral(held - half if held > half else 0.0)) / (
        held + half - (held - half if held > half else 0.0)
    )


def array_sum(xs: Sequence[float]) -> float:
    """``np.sum`` of ``xs``, rounding included: numpy adds pairwise, fewer
    than 8 numbers one by one, up to 128 in 8 running sums, more by halves.
    The solve runs on lists, and a different rounding could flip its
    convergence test and so move its result by far more than a rounding."""
    n = len(xs)
    if n < 8:
        total = 0.0
        for x in xs:
            total += x
        return total
    if n > 128:
        half = n // 2 - n // 2 % 8
        return array_sum(xs[:half]) + array_sum(xs[half:])
    acc = list(xs[:8])
    tail = n - n % 8
    for i in range(8, tail, 8):
        for j in range(8):
            acc[j] += xs[i + j]
    total = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
    for x in xs[tail:]:
        total += x
    return total


Parked = tuple[int, float]
"""A job whose early workers have chunks parked in the pool: (priority, slots)."""


def park_slots(prio: int, flows: list[Flow], parked: list[Parked], paths: SolveConstants) -> float:
    """Slots a job's early workers park: its window, except where they find
    a slot held by a job they may not displace (those chunks fall back)."""
    free = 1.0
    for p, b in [(f.prio, f.held + f.lent) for f in flows] + parked:
        if not paths.ranked or p >= prio:
            free *= 1 - min(BLOCK_CAP, b / paths.pool)
    return min(paths.window, paths.pool) * free


def solve(flows: list[Flow], parked: list[Parked], paths: SolveConstants, net: Net) -> None:
    """Set ``rate``, ``latency``, ``held`` and ``to_ps`` of every flow."""
    for f in flows:
        f.cap, f.stranded = math.inf, 0.0
    if paths.static:
        solve_static(flows, paths, net)
    else:
        solve_pool(flows, parked, paths)
    if net.switch_pkt_ns <= 0:  # the switch serves any load
        return
    if not paths.static:
        # cap every flow at the share the switch serves, solve the pool again
        # under the caps, until the switch is no longer oversubscribed
        for _ in range(ROUNDS):
            busy = switch_busy(flows, paths, net)
            if busy <= 1 + CONVERGED:
                return
            for f in flows:
                f.cap = f.rate / busy
            solve_pool(flows, parked, paths)
    share_switch(flows, paths, net)


MIXED_ROUNDS = 4
"""Rounds of ``solve_pool`` between the homes and the hashed jobs when
there are both: each side solved given what the other did last."""


def solve_pool(flows: list[Flow], parked: list[Parked], paths: SolveConstants) -> None:
    """The shared-pool solve, by home: an ESA job with a home (``part``,
    ``Net.esa_homes``) streams in it, its chunks on ``seq mod part``, where
    no other job's home lands; the jobs without one hash over the whole
    pool, among the homes' held slots, the guests and the parked chunks.
    When there are both (fixed-size homes for the top ranks,
    ``Net.esa_home_size``, or more jobs than slots), the two sides meet in
    the homes: a hashed chunk there keeps the owner's chunk out if it
    outranks the owner, and is evicted by an owner of its rank or above
    (rule L).  A homed chunk kept out of its home slot tries its slot hashed
    over the pool outside the home (rule L, ``lend_offers``).  Each home, and the hashed
    side, is solved given what the others did last, until what each sees
    of the others stops moving, at most ``MIXED_ROUNDS`` times."""
    homed = [f for f in flows if f.part > 0]
    hashed = [f for f in flows if f.part == 0]
    if not homed:
        solve_shared(flows, parked, paths)
        return
    seen: list[Lending] = []
    for _ in range(MIXED_ROUNDS):
        lending = lend_offers(homed, hashed, parked, paths)
        if seen and all(
            abs(a.share - b.share) < CONVERGED and abs(a.evicted - b.evicted) < CONVERGED
            for a, b in zip(lending, seen, strict=True)
        ):
            break
        seen = lending
        for f, mine in zip(homed, lending, strict=True):
            # the guests that land in this home and outrank its owner: the
            # hashed chunks, as their share of the pool, and the other
            # homes' lent chunks, as this home's share of the free slots
            # they land on
            guests = [(g.prio, g.held * f.part / paths.pool) for g in hashed if g.prio > f.prio]
            guests += [
                (g.prio, g.lent * mine.home / theirs.free)
                for g, theirs in zip(homed, lending, strict=True)
                if g is not f and g.prio > f.prio and theirs.free > 0.0
            ]
            home = replace(paths, pool=f.part, modulo=True)
            solve_shared([f], guests, home, lend=[(mine.share, mine.evicted)])
        if hashed:
            owners = [(f.prio, f.held + f.lent) for f in homed]
            solve_shared(hashed, parked + owners, paths, [(f.prio, f.rate) for f in homed])


class Lending(NamedTuple):
    """What a job with a home sees of the pool (``lend_offers``)."""

    share: float
    """of its chunks kept out of their home slot, the share whose borrowed
    slot (hashed over the pool outside the home) is free."""
    evicted: float
    """the share of its guests evicted before they complete."""
    free: float
    """slots free outside its home."""
    home: float
    """slots free in its home, where the others' guests may land."""


def lend_offers(
    homed: list[Flow], hashed: list[Flow], parked: list[Parked], paths: SolveConstants
) -> list[Lending]:
    """Rule L's odds for each job with a home, from the others' last state.

    A chunk whose home slot is held by its own job's earlier chunk (or by a
    guest that outranks its job) claims its borrowed slot ``g`` if ``g`` is
    free: over ``g`` uniform on the pool outside the home, the free slots
    there over the slots there.  Free are the slots no streaming
    job holds in its home, no guest or hashed chunk holds and no parked
    chunk holds: the homes of the jobs in compute whole, the rest of a
    streaming home.  A guest holds its slot as long as in its home (the
    job's hold), and is evicted (its partial and its remaining
    contributions to its PS) when the owner of the home it sits in, of its
    rank or above, reaches the slot first: a streaming owner's chunks pass
    each slot of its home once a lap, ``part / rate``, and a slot free now
    was left by the owner's chunk of the last lap, so the owner is back
    within the lap less its hold; over a guest held ``t``, the evictions in
    a home are ``min(free slots there, rate * t)``.  A hashed chunk that
    outranks the guest and lands on its slot evicts it too (S11).  An owner
    in compute evicts the guests in its home only at its stream's start: a
    few chunks per iteration of hundreds of thousands, left out."""
    pool = paths.pool
    guests = sum(f.lent for f in homed) + sum(h.held for h in hashed)
    occupied = guests + sum(f.held for f in homed) + sum(b for _, b in parked)
    free_all = max(0.0, pool - occupied)
    free_home = [max(0.0, f.part - f.held - guests * f.part / pool) for f in homed]
    out = []
    for i, f in enumerate(homed):
        free = max(0.0, free_all - free_home[i])
        outside = pool - f.part
        if free <= 0.0 or outside <= 0:
            out.append(Lending(0.0, 0.0, 0.0, free_home[i]))
            continue
        rate = f.rate if f.rate > 0.0 else 1 / paths.tx
        lat = f.latency if f.rate > 0.0 else paths.lat_ok + f.lag_max
        hold = paths.hold(rate, lat, f.skew, f.lag_spread)[0]
        owners = sum(
            min(free_home[k], g.rate * hold)
            for k, g in enumerate(homed)
            if k != i and g.prio >= f.prio
        )
        evicted = min(1.0, owners / free)
        higher = sum(h.rate for h in hashed if h.prio > f.prio)
        evicted += (1.0 - evicted) * -math.expm1(-higher * hold / pool)
        out.append(Lending(free / outside, evicted, free, free_home[i]))
    return out


def solve_static(flows: list[Flow], paths: SolveConstants, net: Net) -> None:
    """Each job alone in its partition: window-, link- or PS-bound; a job
    without a partition (more jobs than slots) streams through its PS."""
    windows: dict[int, int] = {}  # by partition size (the jobs' are mostly equal)
    for f in flows:
        if f.part not in windows:
            windows[f.part] = net.static_window(Scheme.STATIC_BDP, f.part)
        f.window = windows[f.part]
        if f.part == 0:
            f.to_ps = 1.0
            f.latency = paths.lat_ps(f.workers) + f.lag_max
            ps_bound = paths.shards / (f.workers * paths.ps_cost)
            f.rate = min(1 / paths.tx, ps_bound, f.window / f.latency)
            continue
        f.latency = paths.lat_ok + f.lag_max
        f.rate = min(1 / paths.tx, f.window / f.latency, paths.shards / paths.ps_cost)
        f.to_ps = 0.0


def solve_shared(
    flows: list[Flow],
    parked: list[Parked],
    paths: SolveConstants,
    outside: Sequence[Parked] = (),
    lend: Sequence[tuple[float, float]] = (),
) -> None:
    """The fixed point of slots held, collisions, evictions and PS load.

    ``outside``: (priority, chunks per ns) of flows solved elsewhere whose
    chunks land on this pool's slots too (the homes' owners, for the jobs
    hashed over the pool): they evict a chunk of their rank or below (rule
    L), and take an idle one, as the flows here do.

    ``lend``: per flow, for a job solved in its home (rule L,
    ``lend_offers``): of its chunks kept out of their slot, the share that
    claims a slot outside the home instead of falling back, and of those
    the share evicted there (to the PS, as a chunk evicted at home).  A
    guest holds its slot as long as a chunk at home (``Flow.lent``).

    Under ATP the slots a job holds grow with its PS queue, which grows with
    the collisions the others' slots cause: the iteration starts damped.
    Under ESA a job holds slots for its workers' gap and the spread of its
    contributions; with no spread (an idealisation) and nothing parked it
    holds none, and there is nothing to solve.  A flow's rate, share to
    the PS or slot count whose step turned back halves its own step (down to
    ``DAMP_FLOOR``), so a steep flow slows no other: the map is
    continuous but steep where a job's collisions tip it from one bound to
    another, and a full step there flips between two states.  A solve that
    has not converged after ``ROUNDS`` searches for the root of the round's
    undamped map, and raises ``NotConverged`` if that fails too.

    A solve rarely sees more than a few jobs, so it runs on lists of floats
    (numpy's per-call cost would dominate), with numpy's rounding
    (``array_sum``, ``level_sums``); ``min`` and ``max`` of two are spelled
    out in the loop, as in ``SolveConstants.hold``."""
    if not flows:
        return
    tx, w, pool, modulo, jitter = paths.tx, paths.window, paths.pool, paths.modulo, paths.jitter
    unlimited = math.isinf(pool)
    if (
        not parked
        and not outside
        and not paths.atp
        and all(f.skew == f.lag_spread == 0 for f in flows)
    ):
        for f in flows:
            f.window, f.held, f.lent, f.to_ps, f.queue = w, 0.0, 0.0, 0.0, 0.0
            f.latency = paths.lat_ok + f.lag_max
            f.rate = min(1 / tx, f.cap, paths.shards / paths.ps_cost, w / f.latency)
        return
    prios = [f.prio for f in flows] + [p for p, _ in parked]
    levels = sorted(set(prios)) if paths.ranked else [0]
    index = {p: i for i, p in enumerate(levels)}
    lvl = [index[p] if paths.ranked else 0 for p in prios]
    n, n_lv = len(flows), len(levels)
    lvl_f = lvl[:n]
    fl = range(n)
    workers = [float(f.workers) for f in flows]
    skew = [f.skew for f in flows]
    lag_spread = [f.lag_spread for f in flows]
    lag_max = [f.lag_max for f in flows]
    lat_ps = [paths.lat_ps_base + k * tx for k in workers]
    lat = [paths.lat_ok + f.lag_max if f.rate == 0.0 else f.latency for f in flows]
    rate = [min(1 / tx, w / lat[i]) if f.rate == 0.0 else f.rate for i, f in enumerate(flows)]
    # each flow's paths.hold at its current rate and latency, kept up to date
    holds = [paths.hold(rate[i], lat[i], skew[i], lag_spread[i]) for i in fl]
    held = [rate[i] * holds[i][0] if f.rate == 0.0 else f.held for i, f in enumerate(flows)]
    to_ps = [f.to_ps for f in flows]
    logs = [math.log1p(-min(BLOCK_CAP, b / pool)) for b in held + [b for _, b in parked]]
    parked_slots = sum(b for _, b in parked)
    away = sum(r for _, r in outside)
    evictors = [sum(r for p, r in outside if p >= f.prio) for f in flows]
    """per flow, chunks per ns of the flows outside that evict it"""
    lend_share = [q for q, _ in lend] if lend else [0.0] * len(flows)
    lend_evicted = [e for _, e in lend] if lend else [0.0] * len(flows)
    lent = [0.0] * len(flows)
    atp, lat_ok, shards, ps_cost = paths.atp, paths.lat_ok, paths.shards, paths.ps_cost
    damp_rate = [DAMP_ATP if atp else DAMP_ESA] * n
    damp_held, damp_ps = damp_rate[:], damp_rate[:]
    line_rate = [min(1 / tx, f.cap) for f in flows]
    f_b, new_to_ps, span, strands = [0.0] * n, [0.0] * n, [0.0] * n, [0.0] * n
    d_rate, d_held, d_ps = [0.0] * n, [0.0] * n, [0.0] * n
    """each flow's last step, whose sign tells an oscillation"""

    def sweep(damped: bool) -> float:
        """One round: every flow's share to the PS, rate and slots held
        moved towards what the others' imply (all the way if not
        ``damped``); returns the largest step asked for."""
        rate_sum = array_sum(rate)
        if paths.ranked:
            # per flow: log of the share of slots free of the chunks at its
            # level or above (its own included, taken out below)
            free_ge = level_sums(lvl, logs, n_lv)
            log_free = [free_ge[k] for k in lvl_f]
            rate_ge = level_sums(lvl_f, rate, n_lv)
            higher, total = [rate_ge[k + 1] for k in lvl_f], rate_ge[0] + away
            if outside:
                higher = [h + e for h, e in zip(higher, evictors, strict=True)]
        else:
            log_free = [array_sum(logs)] * n
            higher, total = evictors, rate_sum + away
        for i in fl:
            t_blk, t_idle, _, span[i] = holds[i]
            if unlimited:
                own = 0.0
            elif modulo:
                own = modulo_blocked(int(pool), 1.0 / rate[i], t_blk, workers[i], jitter)
            else:
                own = self_blocked_mean(int(pool), rate[i] * t_blk)
            b = 1 - math.exp(log_free[i] - logs[i]) * (1 - own)
            b = b if b < BLOCK_CAP else BLOCK_CAP
            lent[i] = b * lend_share[i]  # kept out, and a guest elsewhere
            f_b[i] = new_to_ps[i] = b - lent[i]
            if not atp:
                load = higher[i] * t_blk + (total - rate[i]) * t_idle
                evict = 1 - math.exp(-load / pool)
                new_to_ps[i] = f_b[i] + (1 - b) * evict + lent[i] * lend_evicted[i]
        vacant = 1 - min(1.0, (array_sum(held) + parked_slots) / pool)
        # each flow's markings, and all of them: a flow loses its markers
        # only to the others' (a job's own keep its earlier chunks covered)
        own_marks = [rate[i] * to_ps[i] for i in fl]
        marks = array_sum(own_marks)
        wait, keep = paths.strand_wait(rate_sum)
        moved = 0.0
        for i in fl:
            p, r = new_to_ps[i], rate[i]
            step = abs(p - to_ps[i])
            moved = step if step > moved else moved
            if damped:
                if step > CONVERGED and (p - to_ps[i]) * d_ps[i] < 0:
                    damp_ps[i] = halve(damp_ps[i])
                d_ps[i] = p - to_ps[i]
                p = to_ps[i] + damp_ps[i] * (p - to_ps[i])
            to_ps[i] = p
            blocked = f_b[i] if f_b[i] < p else p
            others = marks - own_marks[i]
            others = others / pool if others > 0.0 else 0.0
            strands[i] = strand = paths.strand_share(others, p, blocked, span[i], vacant)
            lat[i] = (1 - p) * lat_ok + p * lat_ps[i] + strand * wait + lag_max[i]
            # a chunk at the PS costs it its N contributions, but a guest
            # evicted mid-hold its partial and, on average, half of the
            # N - 1 contributions after its first: (N - 1) / 2 fewer
            spared = lent[i] * lend_evicted[i]
            spared = (spared if spared < p else p) * (workers[i] - 1) / 2
            ps_bound = 1 / (((1 - p) + p * workers[i] - spared) / shards * ps_cost)
            # the least of the line rate, the PS bound and the window (Little's law)
            new = ps_bound if ps_bound < line_rate[i] else line_rate[i]
            new = w / lat[i] if w / lat[i] < new else new
            step = abs(new - r) / new
            moved = step if step > moved else moved
            if damped:
                if step > CONVERGED and (new - r) * d_rate[i] < 0:
                    damp_rate[i] = halve(damp_rate[i])
                d_rate[i] = new - r
                new = r + damp_rate[i] * (new - r)
            rate[i] = r = new
            holds[i] = paths.hold(r, lat[i], skew[i], lag_spread[i])
            target = (1 - blocked - lent[i]) * r * holds[i][0]
            target += r * strand * keep
            target = target if target < pool else pool  # a flow holds at most the pool
            step = abs(target - held[i]) / pool
            moved = step if step > moved else moved
            if damped:
                if step > CONVERGED and (target - held[i]) * d_held[i] < 0:
                    damp_held[i] = halve(damp_held[i])
                d_held[i] = target - held[i]
                target = held[i] + damp_held[i] * (target - held[i])
            held[i] = h = target
            logs[i] = math.log1p(-(h / pool if h / pool < BLOCK_CAP else BLOCK_CAP))
        return moved

    def state() -> np.ndarray:
        """rate, share to the PS, slots held and latency, each scaled to about 1."""
        return np.array(
            [r * tx for r in rate] + to_ps + [h / pool for h in held] + [x / lat_ok for x in lat]
        )

    def put(x: np.ndarray) -> None:
        x = x.tolist()
        for i in fl:
            rate[i] = min(max(x[i], 1e-9), 1.0) / tx
            to_ps[i] = min(max(x[n + i], 0.0), 1.0)
            held[i] = h = min(max(x[2 * n + i], 0.0), 1.0) * pool
            lat[i] = max(x[3 * n + i], 1e-9) * lat_ok
            logs[i] = math.log1p(-(h / pool if h / pool < BLOCK_CAP else BLOCK_CAP))
            holds[i] = paths.hold(rate[i], lat[i], skew[i], lag_spread[i])

    for _ in range(ROUNDS):
        moved = sweep(damped=True)
        if moved < CONVERGED:
            break
    else:
        # A cycle no damping leaves: the map's loops through several flows
        # (one's slots, another's share to the PS, its rate, its slots) have
        # a gain that makes any fixed-step iteration circle.  A root finder
        # on the round's map takes it from there: Powell's hybrid method, then
        # Newton-Krylov, Levenberg-Marquardt and DF-SANE where one stalls.
        # Alike flows share their unknowns: a round maps alike states to
        # alike states, but a root finder's steps need not, and could land
        # alike jobs on different answers where the map has several roots.
        kind: dict[tuple[float, ...], int] = {}
        cls = [kind.setdefault(flow_kind(f), i) for i, f in enumerate(flows)]
        reps = sorted(set(cls))
        pick = np.array([b * n + i for b in range(4) for i in reps])
        widen = np.array([b * len(reps) + reps.index(c) for b in range(4) for c in cls])

        def residual(
            x: np.ndarray, pick: np.ndarray = pick, widen: np.ndarray = widen
        ) -> np.ndarray:
            put(x[widen])
            sweep(damped=False)
            out: np.ndarray = state()[pick] - x
            return out

        # from where the rounds ended, and from halfway to where one more
        # full round takes them: the rounds circle around the root
        here = state()
        sweep(damped=False)
        starts = (here[pick], (here[pick] + state()[pick]) / 2)
        for start, method in itertools.product(starts, ROOT_METHODS):
            put(optimize.root(residual, start, method=method).x[widen])
            moved = sweep(damped=False)
            if moved < CONVERGED:
                break
        else:
            raise NotConverged(
                f"{n} flows still moving by {moved:.3g} after {ROUNDS} rounds and a root search"
            )
    wait = paths.strand_wait(array_sum(rate))[0]
    for i, f in enumerate(flows):
        f.window = w
        f.rate, f.latency, f.held, f.to_ps = rate[i], lat[i], held[i], to_ps[i]
        # a guest evicted held its slot for half its hold, on average
        f.lent = lent[i] * (1 - lend_evicted[i] / 2) * rate[i] * holds[i][0]
        f.queue = holds[i][2]
        f.stranded, f.strand_wait = strands[i], wait


def flow_kind(f: Flow) -> tuple[float, ...]:
    """What the solve knows of a flow before it starts: flows of one kind
    are alike to it."""
    return (f.workers, f.prio, f.skew, f.lag_spread, f.lag_max, f.part, f.cap)


def halve(damp: float) -> float:
    return damp / 2 if damp / 2 > DAMP_FLOOR else DAMP_FLOOR


def level_sums(lvl: list[int], x: list[float], n_lv: int) -> list[float]:
    """``out[k]``: the sum of ``x`` over the entries of level ``k`` or
    above, with one trailing 0 (numpy's bincount and reversed cumsum, in
    the same order)."""
    bins = [0.0] * n_lv
    for k, v in zip(lvl, x, strict=True):
        bins[k] += v
    out = [0.0] * (n_lv + 1)
    acc = 0.0
    for k in range(n_lv - 1, -1, -1):
        acc += bins[k]
        out[k] = acc
    return out


def switch_busy(flows: list[Flow], paths: SolveConstants, net: Net) -> float:
    """The share of the switch's time the flows ask for: per chunk, its N
    contributions plus the PS result that comes back through it (every
    chunk under ATP, the share that went to the PS otherwise)."""
    per_chunk = [f.workers + (1.0 if paths.atp else f.to_ps) for f in flows]
    return sum(f.rate * n for f, n in zip(flows, per_chunk, strict=True)) * net.switch_pkt_ns


def share_switch(flows: list[Flow], paths: SolveConstants, net: Net) -> None:
    """Scale the rates down to the switch's capacity; each chunk then waits
    its window's time in the switch's queue."""
    busy = switch_busy(flows, paths, net)
    if busy <= 1.0:
        return
    for f in flows:
        f.rate /= busy
        f.latency = max(f.latency, f.window / f.rate)
