"""A lower bound on the mean JCT any slot scheduler could reach with a
point's pool and PS hosts (``bound`` beside ``ideal`` in ``make sim``).

``ideal`` is an unlimited pool.  This bound keeps the pool's size but
relaxes everything else about it, so no scheme of the simulator (nor any
other way of handing out the slots) can beat it.  It is the optimum of a
linear program over a relaxation of every schedule, built from the same
physics as the fluid model (``sim.rates``), per job ``j``:

* **The pool is a divisible resource.**  At any instant the jobs together
  hold at most ``P`` slots; nothing else about slots (hashing, collisions,
  homes, evictions, parking, partitions) is kept.
* **A job's rate for the slots it holds.**  A chunk aggregated in the
  switch keeps its slot at least from its first contribution to its last
  (the range of the workers' link lags and spread, ``lag_spread``), or,
  where a squat timeout lets other chunks take an idle slot, at least that
  timeout (``SolveConstants.hold``): with ``s`` slots at most ``s / h_j``
  chunks per second complete in the switch (Little's law).  Every other
  chunk completes at its PS shard: the job's ``S`` shards, each ``c`` per
  packet (the slower of its link and its CPU), take ``w_j`` packets for it
  and one for every chunk aggregated in the switch (its result), so the
  rate is at most ``beta_j + gamma_j s`` with ``beta_j = S / (c w_j)`` (no
  slots: the PS bound, ``ps-only``) and ``gamma_j = (1 - 1 / w_j) / h_j``;
  and at most ``min(1 / tx, S / c)``, the worker links and the PS.  With
  zero hold (no spread, no lag) slots are free and only the second cap is
  left.  The rate is linear in the slots up to the cap, so the slot-time a
  job needs to stream ``N_j`` chunks in a streaming time ``sigma`` is at
  least ``(N_j - beta_j sigma) / gamma_j``, however the slots are spread
  over that time.
* **Phases as the workload gives them.**  Each iteration the job waits for
  its slowest worker's compute (the draw both models use,
  ``sim.workload.compute_times``; with the barrier also its round trip),
  then streams; the stream's last chunk is answered at least one packet
  time after it is sent.  Summed: ``F_j``.  The streaming time of a job
  done at ``C`` is at most ``C - a_j - F_j``, so by ``C`` it has used at
  least ``Q_j(C) = (N_j - beta_j (C - a_j - F_j)) / gamma_j`` slot-seconds
  since its arrival ``a_j``.
* **No job is faster than alone with the whole pool**, ``D_j``: per
  iteration the compute, then ``C`` chunks at the least of the rate above
  with ``P`` slots and ``w / lat0`` for a window of ``w`` chunks (``lat0``:
  the shortest path of any scheme plus the job's latest contribution),
  then the window's last chunk answered, ``min(lat0, w tx)``: minimised
  over every window up to the largest any scheme uses.  Where ``ideal``
  streams at line rate and a stream is longer than a window (every
  workload's is: hundreds of thousands of chunks), that is ``ideal``'s
  own iteration, so the bound is at or above ``ideal``.  (Over a shorter
  stream the fluid model's window-bound tail, the last window's send time,
  lets a small window beat ``ideal``'s, and the bound follows it.)

Time is cut into cells (``CELLS`` of them, and a cut at every arrival and
every ``a_j + D_j``).  A schedule completing job ``j`` at ``C`` in cell
``k`` is counted as completing at the cell's start (``max(t_k - a_j,
D_j)``, at most its JCT) and charged the slot-time it needs if done at
the cell's end (``Q_j(t_{k+1}) <= Q_j(C)``): the program's variables are
the slot-seconds ``x_jk`` each job gets in each cell (at most ``P`` times
the cell in all, at most the slots that take the job to its cap) and the
share ``z_jk`` of job ``j`` done in cell ``k``, with the slot-time used by
the end of each cell at least the need of the shares done by then.  Every
schedule (every scheme's, the packet model's) is one point of it with
0/1 shares, so the optimum, over fractional shares too, is at most every
scheme's mean JCT.  Only completions up to ``a_j + max(D_j, F_j + N_j /
beta_j)`` are offered: the best schedule finishes no job later, as a job
that streams through its PS whenever it is not computing uses no slots.

The physics is the fluid model's, so the bound holds for it exactly
(``tests/test_sim_bound.py``, random small workloads).  The packet model
answers a stream's last chunk one packet time sooner than the fluid
model's latency counts it (it counts the chunk's send in the rate too),
and its spread is drawn where the bound takes expectations: the bound
holds for it within a packet time per iteration where the workers are in
step, and by a wide margin where the pool binds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, sparse

from esa.job import JobSpec
from esa.schemes import SIM_SCHEMES
from sim.fluid import phase_marks
from sim.params import Net, spread_max_ns, spread_range_ns
from sim.workload import compute_times, lags

CELLS = 400
"""Even cells over the span from the first arrival to the last PS-only
completion, before the cuts at arrivals and ``a_j + D_j`` are added."""


@dataclass(frozen=True)
class Needs:
    """One job as the bound sees it: seconds, chunks, slots."""

    arrival: float
    fixed: float
    """``F_j``: compute (and barrier) of every iteration, and one packet
    time at the end of each stream."""
    chunks: float
    """``N_j``: every iteration's chunks."""
    cap: float
    """chunks per second at most: the worker links and the PS shards."""
    ps: float
    """``beta_j``: chunks per second through the PS with no slots (at most ``cap``)."""
    per_slot: float
    """``gamma_j``: chunks per second each slot adds; ``math.inf`` where a
    chunk holds its slot for no time."""
    alone: float
    """``D_j``: the least JCT with the whole pool to itself."""

    @property
    def slots(self) -> float:
        """Slots beyond which more add nothing (the rate is at its cap)."""
        if math.isinf(self.per_slot):
            return 0.0
        return (self.cap - self.ps) / self.per_slot

    @property
    def latest(self) -> float:
        """Seconds after arrival by which the job is done streaming through
        the PS only (and no sooner than ``alone``)."""
        return max(self.alone, self.fixed + self.chunks / self.ps)

    def need(self, done: np.ndarray) -> np.ndarray:
        """``Q_j``: slot-seconds used by completion at ``done`` (absolute s)."""
        if math.isinf(self.per_slot):
            return np.zeros_like(done)
        streaming = done - self.arrival - self.fixed
        return np.maximum(0.0, self.chunks - self.ps * streaming) / self.per_slot


def least_hold_ns(net: Net, lag_spread: float) -> float:
    """The least ns any scheme's chunk keeps its slot from others: its
    contributions' range, or the shortest squat timeout of any scheme."""
    squats = [net.squat_us_for(s) * 1000.0 for s in SIM_SCHEMES]
    squat = min([q for q in squats if q > 0], default=math.inf)
    return min(lag_spread, squat)


def iteration_ns(chunks: float, least_ns: float, lat0: float, tx: float, window: float) -> float:
    """Least ns from an iteration's stream start to its last result, over
    every window ``w`` in ``[1, window]``: ``chunks * max(least_ns, lat0 / w)
    + min(lat0, w * tx)``, ``least_ns`` the least ns per chunk the rate
    allows.  The function is ``chunks * lat0 / w + w * tx`` below ``lat0 /
    least_ns``, rises up to ``lat0 / tx`` and is flat beyond, so its least is
    at one of these points or at the first piece's stationary point."""

    def at(w: float) -> float:
        return chunks * max(least_ns, lat0 / w) + min(lat0, w * tx)

    points = (1.0, window, lat0 / least_ns, lat0 / tx, math.sqrt(chunks * lat0 / tx))
    return min(at(min(max(w, 1.0), window)) for w in points)


def needs(job: JobSpec, net: Net, pool: int, seed: int) -> Needs:
    """What ``job`` needs (module docstring), from the same draws as the models."""
    tx, shards = net.pkt_ns, net.ps_shards
    ps_cost = max(tx, net.ps_ns)
    lag = lags(job, net, seed)
    lag_spread = float(np.ptp(lag)) + spread_range_ns(net.jitter_ns, job.workers)
    lag0 = float(lag.max()) + spread_max_ns(net.jitter_ns, job.workers)
    lat0 = min(net.path_ns(s) for s in SIM_SCHEMES) + lag0
    window = max(net.window_for(s) for s in SIM_SCHEMES)
    cap = min(1 / tx, shards / ps_cost)  # chunks per ns
    ps = min(cap, shards / (job.workers * ps_cost))
    hold = least_hold_ns(net, lag_spread)
    per_slot = math.inf if hold <= 0 else (1 - 1 / job.workers) / hold
    with_pool = cap if math.isinf(per_slot) else min(cap, ps + per_slot * pool)
    starts = phase_marks(compute_times(job, seed) * 1e9, net, 0.0)[:, 2]
    stream = iteration_ns(job.chunks, 1 / with_pool, lat0, tx, window)
    return Needs(
        arrival=job.arrival_s,
        fixed=(float(starts.sum()) + job.iterations * tx) * 1e-9,
        chunks=float(job.chunks * job.iterations),
        cap=cap * 1e9,
        ps=ps * 1e9,
        per_slot=per_slot * 1e9,
        alone=(float(starts.sum()) + job.iterations * stream) * 1e-9,
    )


def mean_jct(jobs: list[JobSpec], pool: int, net: Net, seed: int = 0) -> float:
    """The bound on the mean JCT (seconds) of ``jobs`` with ``pool`` slots."""
    return least_mean([needs(j, net, pool, seed) for j in jobs], pool)


def cuts(jobs: list[Needs]) -> np.ndarray:
    """The cells' edges: ``CELLS`` even cells from the first arrival to the
    last PS-only completion, cut at every arrival and every ``a_j + D_j``."""
    first = min(j.arrival for j in jobs)
    last = max(j.arrival + j.latest for j in jobs)
    edges = np.linspace(first, last, CELLS + 1)
    marks = [j.arrival for j in jobs] + [j.arrival + j.alone for j in jobs]
    return np.unique(np.concatenate([edges, np.array(marks)]))


class LinearProgram:
    """A sparse linear program built a row at a time: variables by index."""

    def __init__(self) -> None:
        self.lower: list[float] = []
        self.upper: list[float] = []
        self.cost: list[float] = []
        self.rows: dict[bool, tuple[list[int], list[int], list[float], list[float]]] = {
            eq: ([], [], [], []) for eq in (False, True)
        }

    def var(self, upper: float = math.inf, cost: float = 0.0, lower: float = 0.0) -> int:
        self.lower.append(lower)
        self.upper.append(upper)
        self.cost.append(cost)
        return len(self.cost) - 1

    def row(self, terms: dict[int, float], rhs: float, eq: bool = False) -> None:
        """``sum(coef * var) <= rhs`` (``== rhs`` if ``eq``)."""
        rows, cols, vals, rhss = self.rows[eq]
        r = len(rhss)
        for v, c in terms.items():
            rows.append(r)
            cols.append(v)
            vals.append(c)
        rhss.append(rhs)

    def minimum(self) -> float:
        n = len(self.cost)

        def matrix(eq: bool) -> tuple[sparse.csr_array | None, np.ndarray | None]:
            rows, cols, vals, rhs = self.rows[eq]
            if not rhs:
                return None, None
            return sparse.csr_array((vals, (rows, cols)), shape=(len(rhs), n)), np.array(rhs)

        a_ub, b_ub = matrix(False)
        a_eq, b_eq = matrix(True)
        res = optimize.linprog(
            np.array(self.cost),
            A_ub=a_ub,
            b_ub=b_ub,
            A_eq=a_eq,
            b_eq=b_eq,
            bounds=np.stack([self.lower, self.upper], axis=1),
            method="highs",
        )
        if res.status != 0:
            raise RuntimeError(f"the bound's linear program failed: {res.message}")
        return float(res.fun)


def least_mean(jobs: list[Needs], pool: int) -> float:
    """The linear program's optimum (module docstring): mean over ``jobs``."""
    if all(math.isinf(j.per_slot) or j.ps >= j.cap for j in jobs):
        return float(np.mean([j.alone for j in jobs]))  # slots add nothing
    edges = cuts(jobs)
    start, end = edges[:-1], edges[1:]
    lp = LinearProgram()
    used: dict[int, dict[int, float]] = {}  # per cell: the slot-time variables in it
    for j in jobs:
        first = int(np.searchsorted(edges, j.arrival, side="right")) - 1
        last = int(np.searchsorted(edges, j.arrival + j.latest, side="right")) - 1
        cells = range(first, min(last, len(start) - 1) + 1)
        need = j.need(end[first : cells.stop])
        done: list[int] = []
        spare = -1  # slot-seconds used beyond the need of the shares done, by the cell's end
        for k, q in zip(cells, need.tolist(), strict=True):
            room = max(0.0, end[k] - max(start[k], j.arrival))
            ok = end[k] >= j.arrival + j.alone
            x = lp.var(min(j.slots, pool) * room)
            z = lp.var(1.0 if ok else 0.0, max(start[k] - j.arrival, j.alone) if ok else 0.0)
            terms = {lp.var(): 1.0, x: -1.0, z: q}
            if spare >= 0:
                terms[spare] = -1.0
            spare = next(iter(terms))
            lp.row(terms, 0.0, eq=True)
            used.setdefault(k, {})[x] = 1.0
            done.append(z)
        lp.row(dict.fromkeys(done, 1.0), 1.0, eq=True)
    for k, terms in used.items():  # the pool
        lp.row(terms, pool * (end[k] - start[k]))
    return lp.minimum() / len(jobs)
