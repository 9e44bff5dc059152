"""Where a chunk lands in the fluid model, and how often it finds its
slots held by its own job's earlier chunks.

A job without a home hashes chunk ``seq`` over the pool with the switch's
CRC-32, and under ESA over a second hash too (``self_blocked``,
``self_blocked_mean``); a job with a home puts it on ``seq mod home``, and
under ESA then on ``(seq + home // 2) mod home`` (``modulo_blocked``):
chunks half a home apart share a pair of slots, a loss system of two
servers that ``pair_blocked`` solves on the lattice of arrivals.
``sim.headroom.placement_loss`` places chunks one by one the same ways,
which the tests hold these against.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from esa.model import slot_hash
from sim.params import spread_range_ns

TAIL = 1e-7
"""``laps_held`` stops where a chunk's odds of still holding its slot fall below this."""
LAPS_CAP = 100_000
"""and looks no further than this many chunks ahead."""
PAIR_EXACT = 256
"""``pair_blocked`` solves its chain exactly up to this many steps of hold."""
RESTART = 1e-6
"""``pair_blocked``'s odds per chunk that its chain starts again from two free slots."""


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


def held_past(t: np.ndarray, hold: float, workers: float, jitter: float) -> np.ndarray:
    """Odds that a chunk still holds its slot ``t`` ns after its first
    contribution.  A chunk's hold is ``hold`` (the mean of the solve,
    ``SolveConstants.hold``) less the mean range of its workers'
    exponential spread, plus that range drawn: the range of ``workers``
    exponentials of mean ``jitter`` is distributed as the largest of
    ``workers - 1`` of them.  Without spread, a step."""
    k = workers - 1.0
    if jitter <= 0.0 or k < 1.0:
        return (hold > t).astype(float)
    fixed = max(hold - spread_range_ns(jitter, int(workers)), 0.0)
    room = np.maximum(t - fixed, 0.0)
    return 1.0 - np.power(-np.expm1(-room / jitter), k)


def laps_held(step: float, hold: float, workers: float, jitter: float) -> np.ndarray:
    """``out[n]``: the odds that a chunk holds its slot past exactly ``n``
    of the instants ``step``, ``2 step``, ... after its first contribution
    (the chunks that come to its slots in that time), up to where the
    odds fall below ``TAIL``; the last entry takes the rest."""
    k = max(workers - 1.0, 1.0)
    reach = hold if jitter <= 0.0 or workers < 2.0 else hold + jitter * math.log(k / TAIL)
    top = min(int(reach / step) + 1, LAPS_CAP)
    past = held_past(step * np.arange(1, top + 1), hold, workers, jitter)
    past[-1] = 0.0
    return -np.diff(past, prepend=1.0)


def modulo_blocked(
    home: int, gap: float, hold: float, workers: float, jitter: float, free: float = 1.0
) -> float:
    """Share of a job's chunks, sent ``gap`` ns apart, kept out of both
    their slots in its home: chunk ``seq``'s slot h is ``seq mod home`` and
    its second slot h' is ``(seq + home // 2) mod home``
    (``esa.model.home_second``), so the chunks ``home / 2`` apart share a
    pair of slots, one of which each takes if it is free: a loss system of
    two slots, a chunk every ``home / 2 * gap`` ns (``pair_blocked``); a
    home of one slot has no h', a loss system of one (``lap_blocked``).
    Another job's chunks hold each slot but ``free`` of the time,
    independently; a chunk kept out by its own takes no slot."""
    if home < 2:
        own = lap_blocked(laps_held(home * gap, hold, workers, jitter))
    else:
        own = pair_blocked(laps_held(home * gap / 2, hold, workers, jitter))
    return 1.0 - free * (1.0 - own)


def lap_blocked(laps: np.ndarray) -> float:
    """One slot, a chunk every step, each chunk's hold past ``n`` steps with
    odds ``laps[n]`` (``laps_held``): a taken slot keeps out the next ``n``
    chunks, so of ``1 + E[n]`` chunks one takes the slot (a renewal)."""
    kept = float(np.arange(len(laps)) @ laps)
    return kept / (1.0 + kept)


def pair_blocked(laps: np.ndarray) -> float:
    """Two slots, a chunk every step, each chunk's hold past ``n`` steps with
    odds ``laps[n]``: exact on the lattice of arrivals.  When a chunk takes a
    slot, the other stays held for ``b`` more chunks; the next ``min(n, b)``
    are kept out and the one after takes the slot freed first, the other
    then held ``|n - b| - 1`` more (none if that is negative).  Over the
    stationary ``b`` of that chain, ``min(n, b)`` of every ``1 + min(n,
    b)`` chunks are kept out.  Past ``PAIR_EXACT`` steps the chain is too
    large to solve and the slots too busy to be free together: each taken
    slot keeps out ``n`` chunks, two slots ``1 - 2 / (1 + E[n])``."""
    top = len(laps) - 1
    n = np.arange(top + 1)
    if top > PAIR_EXACT:
        return max(0.0, 1.0 - 2.0 / (1.0 + float(n @ laps)))
    b = n[:, None]
    nxt = np.maximum(np.abs(n[None, :] - b) - 1, 0)
    moves = np.bincount(
        (b * (top + 1) + nxt).ravel(), np.broadcast_to(laps, nxt.shape).ravel(), (top + 1) ** 2
    ).reshape(top + 1, top + 1)
    # a chance in a million per chunk of starting again from both slots
    # free: without spread the chain may have several closed classes (and
    # cycle), and the run starts from free slots
    step: np.ndarray = (1.0 - RESTART) * moves
    step[:, 0] += RESTART
    system = step.T - np.eye(top + 1)
    system[-1, :] = 1.0
    rhs = np.zeros(top + 1)
    rhs[-1] = 1.0
    stationary = np.linalg.solve(system, rhs)
    kept = float(stationary @ (np.minimum(n[None, :], b) @ laps))
    return kept / (1.0 + kept)


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


@functools.cache
def chain_renewals(pool: int, top: int) -> np.ndarray:
    """``out[h]``: the expected number of a job's chunks, among the ``h``
    after one of them, that hash to its slot (the renewal function of the
    CRC's reuse distances, ``reuse_distances``, taken as independent), for
    every ``h`` up to ``top``; beyond the distances looked back at, one in
    ``pool`` chunks (every chunk hashes to one of the slots)."""
    dist = reuse_distances(pool)
    known = min(top, int(dist[-1]) - 1)
    pmf = np.bincount(np.minimum(dist, known + 1), minlength=known + 2)[: known + 1] / len(dist)
    density = np.zeros(known + 1)
    density[0] = 1.0
    for d in range(1, known + 1):
        density[d] = pmf[1 : d + 1] @ density[d - 1 :: -1]
    density[0] = 0.0
    out = np.cumsum(density)
    beyond = out[-1] + np.arange(1, top - known + 1) / pool
    return np.concatenate([out, beyond])


def chain_blocked(pool: int, hold: float) -> float:
    """Share of a job's hashed chunks kept out by its own earlier ones when
    a chunk that takes its slot holds it for ``hold`` chunks of the job
    and one kept out takes none (ATP: a colliding chunk goes to its PS
    whole).  The chunks that hash to one slot come the CRC's reuse
    distances apart; a chunk that takes the slot keeps out those of them
    that come within ``hold`` after it, and the next takes it again: of
    every ``1 + m(hold)`` chunks of the chain ``m(hold)`` are kept out
    (``chain_renewals``).  Counting every chunk sent in a hold as holding
    its slot, kept out or not (``self_blocked_mean``), put a lone ATP job
    of 8 workers at 74 % of its chunks to its PS where the packet model
    sends 47 %."""
    if hold <= 0.0:
        return 0.0
    k = int(hold)
    table = chain_renewals(pool, 1 << (k + 1).bit_length())
    m = table[k] + (hold - k) * (table[k + 1] - table[k])
    return float(m / (1.0 + m))
