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
  is free (rule L, ``lend_offers``), of the others and of its own job's
  guests (``lent_share``), and the home's owner evicts such a guest of its
  rank or below;
* a chunk that found no slot or lost it completes at its PS shard: its N
  contributions cross that shard's one link and the shard serves each, no
  timer: the slot remembers the chunk (``slot_gone``, rules S8 and S13;
  ``slot_evicted`` for a chunk evicted by another job's) and sends its
  later contributions after it;
* that memory is one job per marker, with the highest seq of it gone
  (docs/dataplane.md, "Gone is gone"): a later chunk of the same job that
  goes to the PS keeps the earlier ones covered, but when another job's
  marking at the same slot replaces the marker before the chunk's last
  contribution came, and that contribution finds the slot free, it claims
  it and the chunk is **stranded**: its partial waits for the squat
  timeout and the next chunk to land there, or for the PS's pull
  (``stranded``), each marker replaced only by the others' markings of
  its kind (a fallback's, an eviction's);
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

from esa.schemes import Scheme
from sim.params import Net
from sim.placement import chain_blocked, lap_blocked, laps_held, modulo_blocked, self_blocked_mean

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

        Every chunk that goes to the PS marks its slot: a blocked one (S8)
        in ``slot_gone``, an evicted one (S10/S11) in ``slot_evicted``; a
        flow's marker is lost only to the other flows' markings of the same
        kind (a job's own keep its earlier chunks covered), at
        ``sum(rate * blocked) / pool`` and ``sum(rate * (to_ps - blocked))
        / pool`` per slot and ns less the flow's own.  A blocked chunk is
        marked at its first contribution and needs the marker for its whole
        ``span``; an evicted one, on average, for half of it.  A lost
        marker strands the chunk when its next contribution finds the slot
        free (``1 - occupied``)."""
        fell = rate * np.minimum(blocked, to_ps)
        evicted = rate * to_ps - fell
        fell_others = np.maximum(float(fell.sum()) - fell, 0.0) / self.pool
        evicted_others = np.maximum(float(evicted.sum()) - evicted, 0.0) / self.pool
        vacant = 1 - min(1.0, occupied)
        share = [
            self.strand_share(float(f), float(e), float(p), float(b), float(s), vacant)
            for f, e, p, b, s in zip(fell_others, evicted_others, to_ps, blocked, span, strict=True)
        ]
        return np.array(share), *self.strand_wait(float(rate.sum()))

    def strand_share(
        self, fell: float, evicted: float, to_ps: float, blocked: float, span: float, vacant: float
    ) -> float:
        """``stranded``'s share of one flow, given the other flows' markings
        per slot and ns, of their blocked chunks (``fell``) and of their
        evicted ones (``evicted``), and the share of slots free
        (``vacant``)."""
        exposed = span * (fell * blocked + evicted * (to_ps - blocked) / 2)
        lost = -math.expm1(-exposed / (1e-12 if to_ps < 1e-12 else to_ps))
        return to_ps * lost * vacant

    def strand_wait(self, total_rate: float) -> tuple[float, float]:
        """``stranded``'s wait and the part of it that keeps others out,
        given the chunks per ns of all the streaming jobs together."""
        if self.squat <= 0:
            return self.pull, self.pull
        wait = min(self.pull, self.squat + self.pool / max(total_rate, 1e-12))
        return wait, min(wait, self.squat)


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
            solve_shared([f], guests, home, lend=[mine])
        if hashed:
            owners = [(f.prio, f.held + f.lent) for f in homed]
            solve_shared(hashed, parked + owners, paths, [(f.prio, f.rate) for f in homed])


class Lending(NamedTuple):
    """What a job with a home sees of the pool (``lend_offers``)."""

    share: float
    """the share of the slots outside its home that the other jobs leave
    free: of its chunks kept out of their home slot, the share whose
    borrowed slot (hashed over the pool outside the home) is free, before
    its own guests (``lent_share``)."""
    evicted: float
    """the share of its guests evicted before they complete."""
    free: float
    """slots free outside its home."""
    home: float
    """slots free in its home, where the others' guests may land."""
    outside: int
    """slots outside its home, over which its borrowed slots hash."""


def lend_offers(
    homed: list[Flow], hashed: list[Flow], parked: list[Parked], paths: SolveConstants
) -> list[Lending]:
    """Rule L's odds for each job with a home, from the others' last state.

    A chunk whose home slot is held by its own job's earlier chunk (or by a
    guest that outranks its job) claims its borrowed slot ``g`` if ``g`` is
    free: over ``g`` uniform on the pool outside the home, the free slots
    there over the slots there.  Here free are the slots no other job
    holds: no other streaming job in its home, no other home's guest, no
    hashed and no parked chunk (the homes of the jobs in compute whole, the
    rest of a streaming home).  The job's own guests are left to its solve
    (``lent_share``): they follow its rate within the solve, and taken from
    its last state they swing the share between all and little from one
    round to the next (a job alone that lends at line rate holds more
    guests than there are slots outside its home).  A guest lies outside
    its own home, spread over the rest of the pool; a hashed or parked
    chunk over the whole pool.  A guest holds its slot as long as in its
    home (the job's hold), and is evicted (its partial and its remaining
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
    spread = sum(h.held for h in hashed) + sum(b for _, b in parked)
    # per home, each job's guests that land in it (none of its own)
    landed = [
        [
            g.lent * f.part / (pool - g.part) if k != i and pool > g.part else 0.0
            for k, g in enumerate(homed)
        ]
        for i, f in enumerate(homed)
    ]
    free_home = [
        max(0.0, f.part - f.held - sum(landed[i]) - spread * f.part / pool)
        for i, f in enumerate(homed)
    ]
    out = []
    for i, f in enumerate(homed):
        outside = int(pool) - f.part
        taken = spread * outside / pool + sum(
            g.held + g.lent - landed[i][k] for k, g in enumerate(homed) if k != i
        )
        free = max(0.0, outside - taken)
        if free <= 0.0 or outside <= 0:
            out.append(Lending(0.0, 0.0, 0.0, free_home[i], max(0, outside)))
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
        out.append(Lending(free / outside, evicted, free, free_home[i], outside))
    return out


NO_OFFER = Lending(0.0, 0.0, 0.0, 0.0, 0)
"""What a flow without a home sees outside it: nothing to borrow."""


def lent_share(offer: Lending, blocked: float, sent: float) -> float:
    """Of a homed job's chunks kept out of their home slot (``blocked`` of
    its chunks), the share that claims its borrowed slot: one the others
    leave free (``offer.share``, ``a``) and none of its own guests holds.
    Its last ``sent`` chunks still hold their slots, each a guest there with
    odds ``q = blocked * share`` (an evicted guest, ``offer.evicted``, for
    half its hold, on average); the nearest of them on the same borrowed
    slot, as the CRC places them (``self_blocked_mean`` over the slots
    outside), keeps the chunk out with odds ``q``, so ``share = a * (1 - q
    * own)``, solved: ``a / (1 + a * blocked * own)``."""
    a = offer.share
    if a <= 0.0:
        return 0.0
    own = self_blocked_mean(offer.outside, sent) * (1.0 - offer.evicted / 2)
    return a / (1.0 + a * blocked * own)


STATIC_ROUNDS = 40
"""Damped rounds of a partitioned job's rate and fallbacks
(``static_lap_point``)."""


def solve_static(flows: list[Flow], paths: SolveConstants, net: Net) -> None:
    """Each job alone in its partition: window-, link- or PS-bound; a job
    without a partition (more jobs than slots) streams through its PS."""
    windows: dict[int, int] = {}  # by partition size (the jobs' are mostly equal)
    for f in flows:
        if f.part == 0:
            f.window = net.ps_window(f.workers)
            f.to_ps = 1.0
            f.latency = paths.lat_ps(f.workers) + f.lag_max
            ps_bound = paths.shards / (f.workers * paths.ps_cost)
            f.rate = min(1 / paths.tx, ps_bound, f.window / f.latency)
            continue
        if f.part not in windows:
            windows[f.part] = net.static_window(Scheme.STATIC_BDP, f.part, f.workers)
        f.window = windows[f.part]
        static_lap(f, paths)


def static_lap(f: Flow, paths: SolveConstants) -> None:
    """A job in its partition: chunk ``seq`` on slot ``seq mod part``, a
    worker's window at most the partition, counted in chunks.  Later
    chunks answered first let chunk ``seq + part`` out while ``seq``'s
    partial still holds the slot (its contributions' spread), and it falls
    back to the PS (``lap_blocked``'s loss system of one slot, a chunk
    every ``part`` chunk times); each fallback costs the PS its ``W``
    contributions and the window a PS round trip.  A window well below the
    partition needs the hold to outlast many laps' worth of chunks, which
    the spread's tail makes rare, not impossible."""
    f.rate, f.to_ps, f.latency = static_lap_point(
        f.workers, f.part, f.window, f.skew, f.lag_spread, f.lag_max, paths
    )


@functools.lru_cache(maxsize=65536)
def static_lap_point(
    workers: int,
    part: int,
    window: int,
    skew: float,
    lag_spread: float,
    lag_max: float,
    paths: SolveConstants,
) -> tuple[float, float, float]:
    """``static_lap``'s (rate, share to the PS, latency), damped to its
    fixed point: a job's flow is the same at every solve of its partition
    but for its skew, so each is solved once."""
    lat = paths.lat_ok + lag_max
    rate, to_ps = min(1 / paths.tx, window / lat, paths.shards / paths.ps_cost), 0.0
    for _ in range(STATIC_ROUNDS):
        hold = paths.hold(rate, lat, skew, lag_spread)[3]
        to_ps = lap_blocked(laps_held(part / rate, hold, workers, paths.jitter))
        lat = (1 - to_ps) * paths.lat_ok + to_ps * paths.lat_ps(workers) + lag_max
        ps_bound = paths.shards / (((1 - to_ps) + to_ps * workers) * paths.ps_cost)
        rate = (rate + min(1 / paths.tx, window / lat, ps_bound)) / 2
    return rate, to_ps, lat


def solve_shared(
    flows: list[Flow],
    parked: list[Parked],
    paths: SolveConstants,
    outside: Sequence[Parked] = (),
    lend: Sequence[Lending] = (),
) -> None:
    """The fixed point of slots held, collisions, evictions and PS load.

    ``outside``: (priority, chunks per ns) of flows solved elsewhere whose
    chunks land on this pool's slots too (the homes' owners, for the jobs
    hashed over the pool): they evict a chunk of their rank or below (rule
    L), and take an idle one, as the flows here do.

    ``lend``: per flow, for a job solved in its home (rule L,
    ``lend_offers``): the odds that a chunk kept out of its slot finds
    its borrowed slot free of the others, instead of falling back (less its
    own guests, ``lent_share``, each round), and of its guests the share
    evicted there (to the PS, as a chunk evicted at home).  A guest holds
    its slot as long as a chunk at home (``Flow.lent``).

    The steps: a pool nobody holds a slot of needs no solve
    (``holds_nothing``); otherwise the flows start from their last state
    (``SharedState.start``), damped rounds move them towards the fixed
    point (``damped_rounds``), a root search takes over when the rounds
    circle (``search_root``), and the flows take the result
    (``write_back``)."""
    if not flows:
        return
    if holds_nothing(flows, parked, paths, outside):
        stream_unblocked(flows, paths)
        return
    s = SharedState.start(flows, parked, paths, outside, lend)
    moved = damped_rounds(s)
    if moved >= CONVERGED:
        search_root(s, flows, moved)
    write_back(s, flows)


def holds_nothing(
    flows: list[Flow], parked: list[Parked], paths: SolveConstants, outside: Sequence[Parked]
) -> bool:
    """Under ESA a job holds slots for its workers' gap and the spread of
    its contributions; with no spread (an idealisation), nothing parked and
    nothing outside it holds none, and there is nothing to solve.  Under
    ATP a completed chunk holds its slot for the PS round trip anyway."""
    return (
        not parked
        and not outside
        and not paths.atp
        and all(f.skew == f.lag_spread == 0 for f in flows)
    )


def stream_unblocked(flows: list[Flow], paths: SolveConstants) -> None:
    """Every flow as if alone: the least of the line, its cap, the PS and
    the window over the latency of a chunk completed in the switch."""
    tx, w = paths.tx, paths.window
    for f in flows:
        f.window, f.held, f.lent, f.to_ps, f.queue = w, 0.0, 0.0, 0.0, 0.0
        f.latency = paths.lat_ok + f.lag_max
        f.rate = min(1 / tx, f.cap, paths.shards / paths.ps_cost, w / f.latency)


@dataclass
class SharedState:
    """One ``solve_shared`` under way: per flow (in the order of ``flows``),
    its unknowns, what they derive from and the damping of its steps.

    A solve rarely sees more than a few jobs, so it runs on lists of floats
    (numpy's per-call cost would dominate), with numpy's rounding
    (``array_sum``, ``level_sums``); ``min`` and ``max`` of two are spelled
    out in the rounds, as in ``SolveConstants.hold``."""

    paths: SolveConstants
    lvl: list[int]
    """priority level of each flow, then of each parked entry (0 unless
    ``paths.ranked``)."""
    lvl_f: list[int]
    """``lvl`` of the flows alone."""
    n_lv: int
    workers: list[float]
    skew: list[float]
    lag_spread: list[float]
    lag_max: list[float]
    lat_ps: list[float]
    line_rate: list[float]
    parked_slots: float
    away: float
    """chunks per ns of the flows outside."""
    evictors: list[float]
    """per flow, chunks per ns of the flows outside that evict it."""
    has_outside: bool
    offers: list[Lending]
    """per flow, what it sees outside its home (``lend_offers``); none
    outside for a flow without a home."""
    rate: list[float]
    lat: list[float]
    holds: list[tuple[float, float, float, float]]
    """each flow's ``paths.hold`` at its current rate and latency, kept up
    to date."""
    held: list[float]
    to_ps: list[float]
    logs: list[float]
    """log of the share of the pool each flow, then each parked entry,
    leaves free."""
    lent: list[float]
    f_b: list[float]
    """share of the flow's chunks that find their slot held and fall back."""
    new_to_ps: list[float]
    """the share to the PS the others imply this round."""
    span: list[float]
    strands: list[float]
    damp_rate: list[float]
    damp_held: list[float]
    damp_ps: list[float]
    d_rate: list[float]
    d_held: list[float]
    d_ps: list[float]
    """each flow's last steps, whose sign tells an oscillation."""

    @classmethod
    def start(
        cls,
        flows: list[Flow],
        parked: list[Parked],
        paths: SolveConstants,
        outside: Sequence[Parked],
        lend: Sequence[Lending],
    ) -> SharedState:
        """The flows' last state, or for a flow that has none (rate 0) the
        line rate or window bound at a switch chunk's latency, holding its
        window's slots."""
        tx, w, pool = paths.tx, paths.window, paths.pool
        lvl, n_lv = priority_levels(flows, parked, paths.ranked)
        n = len(flows)
        workers = [float(f.workers) for f in flows]
        skew = [f.skew for f in flows]
        lag_spread = [f.lag_spread for f in flows]
        lat = [paths.lat_ok + f.lag_max if f.rate == 0.0 else f.latency for f in flows]
        rate = [min(1 / tx, w / lat[i]) if f.rate == 0.0 else f.rate for i, f in enumerate(flows)]
        holds = [paths.hold(rate[i], lat[i], skew[i], lag_spread[i]) for i in range(n)]
        held = [rate[i] * holds[i][0] if f.rate == 0.0 else f.held for i, f in enumerate(flows)]
        damp = [DAMP_ATP if paths.atp else DAMP_ESA] * n
        return cls(
            paths=paths,
            lvl=lvl,
            lvl_f=lvl[:n],
            n_lv=n_lv,
            workers=workers,
            skew=skew,
            lag_spread=lag_spread,
            lag_max=[f.lag_max for f in flows],
            lat_ps=[paths.lat_ps_base + k * tx for k in workers],
            line_rate=[min(1 / tx, f.cap) for f in flows],
            parked_slots=sum(b for _, b in parked),
            away=sum(r for _, r in outside),
            evictors=[sum(r for p, r in outside if p >= f.prio) for f in flows],
            has_outside=bool(outside),
            offers=list(lend) if lend else [NO_OFFER] * n,
            rate=rate,
            lat=lat,
            holds=holds,
            held=held,
            to_ps=[f.to_ps for f in flows],
            logs=[math.log1p(-min(BLOCK_CAP, b / pool)) for b in held + [b for _, b in parked]],
            lent=[0.0] * n,
            f_b=[0.0] * n,
            new_to_ps=[0.0] * n,
            span=[0.0] * n,
            strands=[0.0] * n,
            damp_rate=damp,
            damp_held=damp[:],
            damp_ps=damp[:],
            d_rate=[0.0] * n,
            d_held=[0.0] * n,
            d_ps=[0.0] * n,
        )


def priority_levels(flows: list[Flow], parked: list[Parked], ranked: bool) -> tuple[list[int], int]:
    """(The level of each flow's, then each parked entry's, priority, 0 the
    lowest; the number of levels): one level when priorities do not
    matter."""
    prios = [f.prio for f in flows] + [p for p, _ in parked]
    levels = sorted(set(prios)) if ranked else [0]
    index = {p: i for i, p in enumerate(levels)}
    return [index[p] if ranked else 0 for p in prios], len(levels)


def damped_rounds(s: SharedState) -> float:
    """Damped rounds until none moves by ``CONVERGED``, at most ``ROUNDS``;
    returns the last round's largest step.

    Under ATP the slots a job holds grow with its PS queue, which grows
    with the collisions the others' slots cause: the iteration starts
    damped (``DAMP_ATP``).  A flow's rate, share to the PS or slot count
    whose step turned back halves its own step (down to ``DAMP_FLOOR``),
    so a steep flow slows no other: the map is continuous but steep where
    a job's collisions tip it from one bound to another, and a full step
    there flips between two states."""
    moved = math.inf
    for _ in range(ROUNDS):
        moved = sweep(s, damped=True)
        if moved < CONVERGED:
            break
    return moved


def search_root(s: SharedState, flows: list[Flow], moved: float) -> None:
    """Search for the root of the round's undamped map where the damped
    rounds did not converge; raise ``NotConverged`` if that fails too.

    A cycle no damping leaves: the map's loops through several flows (one's
    slots, another's share to the PS, its rate, its slots) have a gain that
    makes any fixed-step iteration circle.  A root finder on the round's
    map takes it from there: Powell's hybrid method, then Newton-Krylov,
    Levenberg-Marquardt and DF-SANE where one stalls (``ROOT_METHODS``).
    Alike flows share their unknowns: a round maps alike states to alike
    states, but a root finder's steps need not, and could land alike jobs
    on different answers where the map has several roots."""
    n = len(flows)
    kind: dict[tuple[float, ...], int] = {}
    cls = [kind.setdefault(flow_kind(f), i) for i, f in enumerate(flows)]
    reps = sorted(set(cls))
    pick = np.array([b * n + i for b in range(4) for i in reps])
    widen = np.array([b * len(reps) + reps.index(c) for b in range(4) for c in cls])

    def residual(x: np.ndarray) -> np.ndarray:
        put_state(s, x[widen])
        sweep(s, damped=False)
        out: np.ndarray = state_vector(s)[pick] - x
        return out

    # from where the rounds ended, and from halfway to where one more
    # full round takes them: the rounds circle around the root
    here = state_vector(s)
    sweep(s, damped=False)
    starts = (here[pick], (here[pick] + state_vector(s)[pick]) / 2)
    for start, method in itertools.product(starts, ROOT_METHODS):
        put_state(s, optimize.root(residual, start, method=method).x[widen])
        moved = sweep(s, damped=False)
        if moved < CONVERGED:
            return
    raise NotConverged(
        f"{n} flows still moving by {moved:.3g} after {ROUNDS} rounds and a root search"
    )


def state_vector(s: SharedState) -> np.ndarray:
    """rate, share to the PS, slots held and latency, each scaled to about 1."""
    tx, pool, lat_ok = s.paths.tx, s.paths.pool, s.paths.lat_ok
    return np.array(
        [r * tx for r in s.rate]
        + s.to_ps
        + [h / pool for h in s.held]
        + [x / lat_ok for x in s.lat]
    )


def put_state(s: SharedState, vector: np.ndarray) -> None:
    """Set the flows to a ``state_vector``, clipped to what can be."""
    paths, n = s.paths, len(s.rate)
    tx, pool, lat_ok = paths.tx, paths.pool, paths.lat_ok
    rate, to_ps, held, lat, logs, holds = s.rate, s.to_ps, s.held, s.lat, s.logs, s.holds
    x = vector.tolist()
    for i in range(n):
        rate[i] = min(max(x[i], 1e-9), 1.0) / tx
        to_ps[i] = min(max(x[n + i], 0.0), 1.0)
        held[i] = h = min(max(x[2 * n + i], 0.0), 1.0) * pool
        lat[i] = max(x[3 * n + i], 1e-9) * lat_ok
        logs[i] = log_free_of(h, pool)
        holds[i] = paths.hold(rate[i], lat[i], s.skew[i], s.lag_spread[i])


def log_free_of(held: float, pool: float) -> float:
    """log of the share of the pool ``held`` slots leave free (at least
    ``1 - BLOCK_CAP``)."""
    return math.log1p(-(held / pool if held / pool < BLOCK_CAP else BLOCK_CAP))


def sweep(s: SharedState, damped: bool) -> float:
    """One round: every flow's share to the PS, rate and slots held moved
    towards what the others' imply (all the way if not ``damped``);
    returns the largest step asked for."""
    rate_sum = array_sum(s.rate)
    log_free, higher, total = contenders(s, rate_sum)
    fallback_shares(s, log_free, higher, total)
    return move_flows(s, rate_sum, damped)


def contenders(s: SharedState, rate_sum: float) -> tuple[list[float], list[float], float]:
    """(Per flow, the log of the share of slots free of the chunks it may
    not displace, its own included; per flow, chunks per ns of the chunks
    that evict it; chunks per ns of all, outside included)."""
    if s.paths.ranked:
        # per flow: log of the share of slots free of the chunks at its
        # level or above (its own included, taken out in fallback_shares)
        free_ge = level_sums(s.lvl, s.logs, s.n_lv)
        log_free = [free_ge[k] for k in s.lvl_f]
        rate_ge = level_sums(s.lvl_f, s.rate, s.n_lv)
        higher, total = [rate_ge[k + 1] for k in s.lvl_f], rate_ge[0] + s.away
        if s.has_outside:
            higher = [h + e for h, e in zip(higher, s.evictors, strict=True)]
    else:
        log_free = [array_sum(s.logs)] * len(s.rate)
        higher, total = s.evictors, rate_sum + s.away
    return log_free, higher, total


def fallback_shares(
    s: SharedState, log_free: list[float], higher: list[float], total: float
) -> None:
    """Per flow, at its current rate and hold: the share of its chunks
    that find their slot held (``f_b``), by the others or by its own
    earlier chunks; of those the share a guest elsewhere (``lent``); and
    the share to the PS that implies (``new_to_ps``), under ESA with the
    chunks evicted while they hold their slot or sit idle in it."""
    paths = s.paths
    pool, modulo, jitter, atp = paths.pool, paths.modulo, paths.jitter, paths.atp
    unlimited = math.isinf(pool)
    rate, workers, logs = s.rate, s.workers, s.logs
    lent, f_b, new_to_ps, span = s.lent, s.f_b, s.new_to_ps, s.span
    for i in range(len(rate)):
        t_blk, t_idle, _, span[i] = s.holds[i]
        free = math.exp(log_free[i] - logs[i])
        if unlimited:
            b = 1 - free
        elif modulo:
            b = modulo_blocked(int(pool), 1.0 / rate[i], t_blk, workers[i], jitter, free)
        elif atp:  # a colliding chunk goes to the PS whole: a renewal per slot
            b = 1 - free * (1 - chain_blocked(int(pool), rate[i] * t_blk))
        else:  # one slot, though ESA's hashed chunks have two (docs/sim-models.md)
            b = 1 - free * (1 - self_blocked_mean(int(pool), rate[i] * t_blk))
        b = b if b < BLOCK_CAP else BLOCK_CAP
        # kept out, and a guest elsewhere
        lent[i] = b * lent_share(s.offers[i], b, rate[i] * t_blk)
        f_b[i] = new_to_ps[i] = b - lent[i]
        if not atp:
            load = higher[i] * t_blk + (total - rate[i]) * t_idle
            evict = 1 - math.exp(-load / pool)
            new_to_ps[i] = f_b[i] + (1 - b) * evict + lent[i] * s.offers[i].evicted


def move_flows(s: SharedState, rate_sum: float, damped: bool) -> float:
    """Each flow in turn: its share to the PS moved, its stranded share and
    latency from that, its rate moved, its slots held moved; returns the
    largest step asked for."""
    paths, rate, to_ps = s.paths, s.rate, s.to_ps
    vacant = 1 - min(1.0, (array_sum(s.held) + s.parked_slots) / paths.pool)
    # each flow's markings of each marker, and all of them: a flow loses
    # its markers only to the others' of the same marker (a job's own keep
    # its earlier chunks covered): its blocked chunks' (slot_gone) and its
    # evicted ones' (slot_evicted)
    fell = [rate[i] * (s.f_b[i] if s.f_b[i] < to_ps[i] else to_ps[i]) for i in range(len(rate))]
    evicted = [rate[i] * to_ps[i] - fell[i] for i in range(len(rate))]
    all_fell, all_evicted = array_sum(fell), array_sum(evicted)
    wait, keep = paths.strand_wait(rate_sum)
    moved = 0.0
    for i in range(len(rate)):
        step = move_to_ps(s, i, damped)
        moved = step if step > moved else moved
        others = (all_fell - fell[i], all_evicted - evicted[i])
        blocked, strand = strand_and_latency(s, i, others, vacant, wait)
        step = move_rate(s, i, damped)
        moved = step if step > moved else moved
        step = move_held(s, i, blocked, strand, keep, damped)
        moved = step if step > moved else moved
    return moved


def damped_step(
    new: float, old: float, step: float, i: int, damp: list[float], last: list[float]
) -> float:
    """Flow ``i``'s value moved from ``old`` towards ``new`` by its damping
    ``damp[i]``, which halves when a step larger than ``CONVERGED`` (``step``,
    scaled) turns back from its ``last``."""
    if step > CONVERGED and (new - old) * last[i] < 0:
        damp[i] = halve(damp[i])
    last[i] = new - old
    return old + damp[i] * (new - old)


def move_to_ps(s: SharedState, i: int, damped: bool) -> float:
    """Flow ``i``'s share to the PS moved towards this round's; returns the
    step asked for."""
    p, old = s.new_to_ps[i], s.to_ps[i]
    step = abs(p - old)
    if damped:
        p = damped_step(p, old, step, i, s.damp_ps, s.d_ps)
    s.to_ps[i] = p
    return step


def strand_and_latency(
    s: SharedState, i: int, others: tuple[float, float], vacant: float, wait: float
) -> tuple[float, float]:
    """Flow ``i``'s share stranded and its mean latency, given its share to
    the PS, the others' markings per ns (``others``: of their blocked
    chunks, of their evicted ones) and the share of slots free; returns
    (its share blocked, its share stranded)."""
    paths, p = s.paths, s.to_ps[i]
    blocked = s.f_b[i] if s.f_b[i] < p else p
    fell, evicted = (m / paths.pool if m > 0.0 else 0.0 for m in others)
    s.strands[i] = strand = paths.strand_share(fell, evicted, p, blocked, s.span[i], vacant)
    s.lat[i] = (1 - p) * paths.lat_ok + p * s.lat_ps[i] + strand * wait + s.lag_max[i]
    return blocked, strand


def move_rate(s: SharedState, i: int, damped: bool) -> float:
    """Flow ``i``'s rate moved towards the least of its line rate, its PS
    bound and its window over its latency (Little's law); returns the step
    asked for, as a share of the new rate."""
    paths, p, r, lat, workers = s.paths, s.to_ps[i], s.rate[i], s.lat[i], s.workers[i]
    # a chunk at the PS costs it its N contributions, but a guest
    # evicted mid-hold its partial and, on average, half of the
    # N - 1 contributions after its first: (N - 1) / 2 fewer
    spared = s.lent[i] * s.offers[i].evicted
    spared = (spared if spared < p else p) * (workers - 1) / 2
    ps_bound = 1 / (((1 - p) + p * workers - spared) / paths.shards * paths.ps_cost)
    new = ps_bound if ps_bound < s.line_rate[i] else s.line_rate[i]
    new = paths.window / lat if paths.window / lat < new else new
    step = abs(new - r) / new
    if damped:
        new = damped_step(new, r, step, i, s.damp_rate, s.d_rate)
    s.rate[i] = new
    s.holds[i] = paths.hold(new, lat, s.skew[i], s.lag_spread[i])
    return step


def move_held(
    s: SharedState, i: int, blocked: float, strand: float, keep: float, damped: bool
) -> float:
    """Flow ``i``'s slots held moved towards its chunks in the switch over
    their hold, plus its stranded chunks over the time they keep others
    out, at most the pool; returns the step asked for, as a share of the
    pool."""
    pool, r, held = s.paths.pool, s.rate[i], s.held[i]
    target = (1 - blocked - s.lent[i]) * r * s.holds[i][0]
    target += r * strand * keep
    target = target if target < pool else pool  # a flow holds at most the pool
    step = abs(target - held) / pool
    if damped:
        target = damped_step(target, held, step, i, s.damp_held, s.d_held)
    s.held[i] = target
    s.logs[i] = log_free_of(target, pool)
    return step


def write_back(s: SharedState, flows: list[Flow]) -> None:
    """The solved state into the flows."""
    wait = s.paths.strand_wait(array_sum(s.rate))[0]
    for i, f in enumerate(flows):
        f.window = s.paths.window
        f.rate, f.latency, f.held, f.to_ps = s.rate[i], s.lat[i], s.held[i], s.to_ps[i]
        # a guest evicted held its slot for half its hold, on average
        f.lent = s.lent[i] * (1 - s.offers[i].evicted / 2) * s.rate[i] * s.holds[i][0]
        f.queue = s.holds[i][2]
        f.stranded, f.strand_wait = s.strands[i], wait


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
