"""Fluid (rate-based) simulator: fast, for paper scale.

Events are per job phase, not per packet: a job arrives, its first worker
finishes computing (it fills its window: ``W`` slots held while it waits for
the slowest worker), the last worker finishes (the job streams at a rate),
the stream ends (one chunk latency later the iteration is done).  Between
events every streaming job has a constant chunk rate, solved as a fixed
point of the mechanisms the packet model has (see docs/simulator.md):

* slots held per job: a chunk holds its slot for the skew between the first
  and the last worker, at most as long as the window lets the early workers
  run ahead; under ATP add the PS round trip and the PS's queue;
* a chunk lands on a slot held by another job with probability (slots held by
  the jobs it may not preempt) / pool: every other job under ATP, those of
  priority >= its own under ESA.  A job never collides with itself: the
  switch's CRC-32 is linear, so a window of consecutive seqs of one job lands
  on distinct slots of a power-of-two pool (the packet model shows it);
* under ESA a held chunk is preempted when a higher-priority chunk lands on
  its slot during its hold time;
* a blocked or preempted chunk goes to the job's PS: its N contributions
  cross the PS's single link (incast) and the PS serves each;
* the rate is the least of the worker link, the PS link and CPU, and the
  window over the mean chunk latency (Little's law);
* with ``Net.switch_pkt_ns`` the switch is one shared server: when the
  streaming jobs together offer it more packets than it serves, every rate
  is scaled down by the same factor (a FIFO shares its capacity in
  proportion to what each job offers).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from sim.params import JobSpec, Net, Scheme
from sim.priority import priority
from sim.workload import compute_times

FIXED_POINT_ROUNDS = 40
BLOCK_CAP = 0.99
CONVERGED = 2e-3


class Phase(enum.Enum):
    QUEUED = 0
    COMPUTE = 1
    WAIT = 2
    STREAM = 3
    TAIL = 4
    DONE = 5


@dataclass
class FluidJob:
    spec: JobSpec
    first_ready: list[float]
    last_ready: list[float]
    phase: Phase = Phase.QUEUED
    it: int = 0
    remaining: float = 0.0
    rate: float = 0.0
    """chunks per ns while streaming."""
    latency: float = 0.0
    prio: int = 0
    t_next: float = math.inf
    admitted_at: float = 0.0
    finish: float = 0.0
    held: float = 0.0
    ps_queue: float = 0.0
    """ns a packet waits at the PS when the PS (link or CPU) is the bottleneck."""
    to_ps: float = 0.0
    """share of the chunks that end at the PS (blocked or preempted)."""
    skew: float = 0.0
    """ns between the first and the last worker starting this iteration."""
    part: int = -1
    iter_start: float = 0.0


def solve_rates(
    streaming: list[FluidJob], waiting: list[FluidJob], pool: int, scheme: Scheme, net: Net
) -> None:
    """Set ``rate``, ``latency`` and ``held`` of every streaming job."""
    tx, hop, ps = net.pkt_ns, net.hop_ns, net.ps_ns
    atp = scheme is Scheme.ATP
    lat_sw = 4 * hop + 4 * tx + ps if atp else 2 * hop + 2 * tx
    skew_back = 2 * hop + 2 * tx
    ps_rtt = 2 * hop + 2 * tx + ps if atp else 0.0

    def hold(j: FluidJob, rate: float) -> float:
        """ns a chunk holds its slot: the skew of the workers, at most what
        the window lets the early workers run ahead, plus ATP's PS round trip."""
        if not atp:
            return min(j.skew, max(0.0, w / rate - skew_back))
        return min(j.skew + ps_rtt + j.ps_queue, max(0.0, w / rate - skew_back))

    w = net.window
    if scheme is Scheme.STATIC:
        window = net.static_window(pool)
        for j in streaming:
            j.rate = min(1 / tx, window / lat_sw)
            j.latency, j.held = lat_sw, 0.0
        share_switch(streaming, [float(j.spec.workers) for j in streaming], window, net)
        return
    for j in waiting:
        j.held = float(w)
    for j in streaming:
        if j.rate == 0.0:
            j.rate = min(1 / tx, w / lat_sw)
            j.held = j.rate * hold(j, j.rate)
    esa = not atp
    holders = streaming + waiting
    for _ in range(FIXED_POINT_ROUNDS):
        total = sum(k.held for k in holders)
        new: list[tuple[float, float, float, float]] = []
        for j in streaming:
            n = j.spec.workers
            if esa:
                blocked = sum(k.held for k in holders if k.prio >= j.prio and k is not j)
                hi = sum(k.rate for k in streaming if k.prio > j.prio)
            else:
                blocked, hi = total - j.held, 0.0
            p = min(BLOCK_CAP, blocked / pool)
            evict = 1 - math.exp(-hi * hold(j, j.rate) / pool) if hi else 0.0
            f = p + (1 - p) * evict
            lat_ps = 4 * hop + (n + 3) * tx + ps
            lat = (1 - f) * lat_sw + f * lat_ps
            ps_work = ((1 - f) + f * n) if atp else f * n
            ps_bound = min(
                1 / (tx * ((1 - f) + f * n)),
                1 / (ps * ps_work) if ps_work > 0 else math.inf,
            )
            rate = min(1 / tx, ps_bound, w / lat)
            queue = w / rate - lat if rate == ps_bound else 0.0
            new.append((rate, lat, queue, f))
        moved = 0.0
        for j, (rate, lat, queue, f) in zip(streaming, new, strict=True):
            moved = max(moved, abs(rate - j.rate) / rate)
            j.rate = 0.5 * (j.rate + rate)
            j.latency, j.ps_queue, j.to_ps = max(lat, w / j.rate), queue, f
            j.held = 0.5 * (j.held + (1 - f) * j.rate * hold(j, j.rate))
        if moved < CONVERGED:
            break
    per_chunk = [j.spec.workers + (1.0 if atp else j.to_ps) for j in streaming]
    share_switch(streaming, per_chunk, w, net)


def share_switch(streaming: list[FluidJob], per_chunk: list[float], window: int, net: Net) -> None:
    """Scale the rates down to the switch's capacity; ``per_chunk`` is the
    packets the switch processes per chunk of each job (its N contributions
    plus the PS result that comes back through it: every chunk under ATP,
    the share that went to the PS otherwise)."""
    load = sum(j.rate * n for j, n in zip(streaming, per_chunk, strict=True))
    busy = load * net.switch_pkt_ns
    if busy <= 1.0:
        return
    for j in streaming:
        j.rate /= busy
        j.latency = max(j.latency, window / j.rate)


class FluidSim:
    def __init__(
        self, jobs: list[JobSpec], pool_size: int, scheme: Scheme, net: Net, seed: int = 0
    ) -> None:
        self.net, self.scheme, self.pool = net, scheme, pool_size
        self.now = 0.0
        self.tick = net.tick_s * 1e9
        self.jobs: list[FluidJob] = []
        for spec in jobs:
            ct = compute_times(spec, net, seed) * 1e9
            self.jobs.append(FluidJob(spec, list(ct.min(axis=1)), list(ct.max(axis=1))))
        self.free_parts = list(range(net.static_parts))
        self.queue: list[FluidJob] = []
        self.solved: tuple[tuple[int, Phase, int], ...] = ()

    def run(self) -> dict[int, float]:
        pending = sorted(self.jobs, key=lambda j: j.spec.arrival_s)
        next_tick = self.tick if self.scheme is Scheme.ESA_AGING else math.inf
        while pending or any(j.phase is not Phase.DONE for j in self.jobs):
            t_arr = pending[0].spec.arrival_s * 1e9 if pending else math.inf
            live = [j for j in self.jobs if j.phase not in (Phase.DONE, Phase.QUEUED)]
            t_job = min((j.t_next for j in live), default=math.inf)
            t = min(t_arr, t_job, next_tick)
            for j in live:
                if j.phase is Phase.STREAM:
                    j.remaining -= j.rate * (t - self.now)
            self.now = t
            if t == t_arr:
                self._arrive(pending.pop(0))
            elif t == t_job:
                for j in live:
                    if j.t_next <= t:
                        self._advance(j)
            else:
                next_tick += self.tick
            self._reschedule()
        return {j.spec.job_id: j.finish * 1e-9 - j.spec.arrival_s for j in self.jobs}

    def _arrive(self, j: FluidJob) -> None:
        if self.scheme is Scheme.STATIC:
            if not self.free_parts:
                self.queue.append(j)
                return
            j.part = self.free_parts.pop(0)
        j.admitted_at = self.now
        self._start_iteration(j)

    def _start_iteration(self, j: FluidJob) -> None:
        j.phase = Phase.COMPUTE
        j.t_next = self.now + j.first_ready[j.it]
        j.iter_start = self.now

    def _advance(self, j: FluidJob) -> None:
        start = j.iter_start
        if j.phase is Phase.COMPUTE:
            j.phase, j.t_next = Phase.WAIT, start + j.last_ready[j.it]
        elif j.phase is Phase.WAIT:
            j.phase, j.remaining = Phase.STREAM, float(j.spec.chunks)
            j.rate = 0.0
            j.skew = j.last_ready[j.it] - j.first_ready[j.it]
        elif j.phase is Phase.STREAM:
            j.phase, j.t_next = Phase.TAIL, self.now + j.latency
        elif j.phase is Phase.TAIL:
            j.it += 1
            if j.it == j.spec.iterations:
                j.phase, j.finish, j.t_next = Phase.DONE, self.now, math.inf
                if j.part >= 0:
                    self.free_parts.append(j.part)
                    if self.queue:
                        self._arrive(self.queue.pop(0))
            else:
                self._start_iteration(j)

    def _reschedule(self) -> None:
        live = [j for j in self.jobs if j.phase not in (Phase.DONE, Phase.QUEUED)]
        for j in live:
            age_s = (self.now - j.admitted_at) * 1e-9
            j.prio = priority(self.scheme, j.spec, self.net, j.it, age_s)
        streaming = [j for j in live if j.phase is Phase.STREAM]
        waiting = [j for j in live if j.phase is Phase.WAIT]
        state = tuple((id(j), j.phase, j.prio) for j in streaming + waiting)
        if state != self.solved:
            solve_rates(streaming, waiting, self.pool, self.scheme, self.net)
            self.solved = state
        for j in streaming:
            j.t_next = self.now + max(0.0, j.remaining) / j.rate


def simulate(
    jobs: list[JobSpec], pool_size: int, scheme: Scheme, net: Net, seed: int = 0
) -> dict[int, float]:
    return FluidSim(jobs, pool_size, scheme, net, seed).run()
