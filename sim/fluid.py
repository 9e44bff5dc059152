"""Fluid (rate-based) simulator: fast, for cluster scale.

Events are per job phase, not per packet.  Each iteration of a job: its
workers compute; the first one ready **parks** its window of chunks in the
shared pool (each slot an incomplete partial) until the last worker is
ready; under ESA's squat timeout the parked slots are fair game once no
worker has touched them for that long (**idle**: they no longer keep other
chunks out); the last worker starts the **stream**, which runs at the rate
``sim.rates`` solves; one chunk latency after it ends the iteration is done.
With ``Net.barrier`` the workers start together one barrier round trip after
the last is ready, and nothing parks.  A parked chunk taken by another costs
its job a few packets at the PS per iteration; the model leaves that out.
With ``Net.loss`` a chunk waits for a resend (``Net.loss_share``) a
retransmission timeout and a PS round trip longer (``Net.loss_wait_ns``):
mid-stream it holds its place in the window that much longer, which slows
the window's rate (``lossy_rate``), and at the end of an iteration the
last window's lost chunks delay it as stranded ones do (``stranded_tail``).
The resends' load on the links, the switch and the PS is left out.  When
the controller moves the slots of a job with chunks in the switch (a
recut, a home traded), the chunks straddling the write wait for their
workers' timeout (``FluidSim._strand_at_recut``).
"""

from __future__ import annotations

import bisect
import enum
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from esa.job import JobSpec
from esa.schemes import Scheme
from esa.spec import Policy
from sim.control import Partitions, priorities
from sim.params import Net, spread_max_ns, spread_range_ns
from sim.rates import Flow, Parked, SolveConstants, park_slots, solve
from sim.workload import compute_times, lags


class Phase(enum.Enum):
    QUEUED = 0
    COMPUTE = 1
    PARK = 2
    IDLE = 3
    STREAM = 4
    TAIL = 5
    DONE = 6


INSIDE = (Phase.PARK, Phase.IDLE, Phase.STREAM)
"""The phases in which a job has chunks in the switch."""


@dataclass
class FluidJob:
    spec: JobSpec
    marks: np.ndarray
    """per iteration, ns after it starts: parking starts, parked slots turn
    idle, the stream starts (equal marks skip a phase)."""
    skew: np.ndarray
    """per iteration, ns by which the slowest worker starts after the first."""
    flow: Flow
    parked: float = 0.0
    """slots its early workers hold while it parks."""
    phase: Phase = Phase.QUEUED
    plan: list[tuple[float, Phase]] = field(default_factory=list)
    it: int = 0
    remaining: float = 0.0
    t_next: float = math.inf
    admitted_at: float = 0.0
    slots: tuple[int, int] = (0, 0)
    """(base, size) of the slots the controller last gave it."""
    stranded_ns: float = 0.0
    """ns its iteration's end waits for chunks a recut stranded."""
    finish: float = 0.0


def phase_marks(compute_ns: np.ndarray, net: Net, squat_ns: float) -> np.ndarray:
    """(iterations, 3) park, idle and stream marks from the workers' compute times.

    Each early worker's contributions touch the parked slots when it becomes
    ready; with a squat timeout they keep other chunks out only until the
    timeout after each touch.  The blocking stretches are summed into one
    park phase from the first worker on (their total is what matters)."""
    ready = np.sort(compute_ns, axis=1)
    first, last = ready[:, 0], ready[:, -1]
    if net.barrier:
        start = last + net.barrier_ns
        return np.stack([start, start, start], axis=1)
    idle = last
    if squat_ns > 0:
        idle = first + np.minimum(np.diff(ready, axis=1), squat_ns).sum(axis=1)
    return np.stack([first, idle, last], axis=1)


Observer = Callable[[float, list[Flow]], None]
"""Told after every rate solve: the time (ns) and the streaming flows."""


class FluidSim:
    def __init__(
        self,
        jobs: list[JobSpec],
        pool_size: int,
        scheme: Scheme,
        net: Net,
        seed: int = 0,
        observer: Observer | None = None,
    ) -> None:
        self.net, self.scheme, self.pool = net, scheme, pool_size
        self.observer = observer
        self.paths = SolveConstants.of(scheme, net, pool_size)
        self.parts = Partitions(
            scheme, pool_size, net.bdp_partition(pool_size), net.esa_homes, net.esa_home_size
        )
        self.now = 0.0
        self.dirty = False
        self.solves = 0
        """rate solves run; each converged, or the run raised ``NotConverged``."""
        self.prios: dict[int, int] = {}
        """the priorities last given to the running jobs."""
        self.jobs: dict[int, FluidJob] = {}
        self.live: list[FluidJob] = []
        """the admitted jobs not done, in the order of ``jobs``: kept as
        they come and go, so an event costs the same however many jobs
        came before."""
        self.order = {spec.job: i for i, spec in enumerate(jobs)}
        for spec in jobs:
            ct = compute_times(spec, seed) * 1e9
            lag = lags(spec, net, seed)
            skew = np.zeros(spec.iterations) if net.barrier else ct.max(axis=1) - ct.min(axis=1)
            flow = Flow(
                spec.workers,
                0,
                skew=0.0,
                lag_spread=float(lag.max() - lag.min())
                + spread_range_ns(net.jitter_ns, spec.workers),
                lag_max=float(lag.max()) + spread_max_ns(net.jitter_ns, spec.workers),
            )
            marks = phase_marks(ct, net, self.paths.squat)
            self.jobs[spec.job] = FluidJob(spec, marks, skew, flow)

    def run(self) -> dict[int, float]:
        pending = deque(sorted(self.jobs.values(), key=lambda j: (j.spec.arrival_s, j.spec.job)))
        live = self.live
        stream = Phase.STREAM  # (Enum lookups are slow)
        while pending or live:
            t_arr = pending[0].spec.arrival_s * 1e9 if pending else math.inf
            t = min(t_arr, min([j.t_next for j in live], default=math.inf))
            for j in live:
                if j.phase is stream:
                    j.remaining -= j.flow.rate * (t - self.now)
            self.now = t
            due = [j for j in live if j.t_next <= t]
            while pending and pending[0].spec.arrival_s * 1e9 <= t:
                self._arrive(pending.popleft())
            for j in due:
                self._advance(j)
            if self.dirty:
                self._resolve()
        return {jid: j.finish * 1e-9 - j.spec.arrival_s for jid, j in self.jobs.items()}

    # the controller -------------------------------------------------------
    def _arrive(self, j: FluidJob) -> None:
        if self.parts.request(j.spec.job):
            self._admit([j.spec.job])

    def _admit(self, ids: list[int]) -> None:
        for jid in ids:
            j = self.jobs[jid]
            bisect.insort(self.live, j, key=lambda k: self.order[k.spec.job])
            j.admitted_at = self.now
            self._start_iteration(j)
        self._reprioritise()

    def _reprioritise(self) -> None:
        running = [self.jobs[jid] for jid in self.parts.running]
        ranked = [(j.spec, j.it, j.admitted_at * 1e-9) for j in running]
        prios = self.prios = priorities(self.scheme, self.net, ranked, self.prios)
        layout = self.parts.layout(prios)
        for j in running:
            slots = layout[j.spec.job]
            if slots != j.slots:
                if j.phase in INSIDE and (slots[1] or j.slots[1]):
                    self._strand_at_recut(j)
                j.slots = slots
            new = (prios[j.spec.job], slots[1])
            if new != (j.flow.prio, j.flow.part):
                j.flow.prio, j.flow.part = new
                self.dirty = True

    def _strand_at_recut(self, j: FluidJob) -> None:
        """The controller moved the slots of a job whose chunks are in the
        switch (STATIC_EQUAL's recut, ESA's home traded at a rank change, a
        STATIC_FB job given a partition): a chunk whose contributions
        straddle the write meets in no slot until its workers' timeout.
        Parked, that is the whole window (the early workers' contributions
        wait in the old slots); streaming, the chunks sent over one spread
        of its workers, which hold that share of its window for the timeout
        (Little's law).  The iteration ends that much later (``_tail``)."""
        f = j.flow
        held = 1.0
        if j.phase is Phase.STREAM:
            spread = self.paths.hold(f.rate, f.latency, f.skew, f.lag_spread)[3]
            held = min(1.0, f.rate * spread / max(1, f.window))
        j.stranded_ns += held * self.net.rto_for()

    # a job's iterations ---------------------------------------------------
    def _start_iteration(self, j: FluidJob) -> None:
        start = self.now
        park, idle, stream = j.marks[j.it].tolist()
        plan = [(start + park, Phase.PARK), (start + idle, Phase.IDLE)]
        j.plan = [(t, p) for t, p in plan if t < start + stream]
        j.plan.append((start + stream, Phase.STREAM))
        j.phase = Phase.COMPUTE
        j.t_next = j.plan[0][0]

    def _advance(self, j: FluidJob) -> None:
        if j.phase is Phase.STREAM:
            j.phase, j.t_next = Phase.TAIL, self.now + self._tail(j)
            self.dirty = True
            return
        if j.phase is Phase.TAIL:
            self._end_iteration(j)
            return
        _, j.phase = j.plan.pop(0)
        if j.phase is Phase.STREAM:
            j.remaining = float(j.spec.chunks)
            j.flow.rate = j.flow.held = j.flow.lent = 0.0
            j.flow.skew = float(j.skew[j.it])
            self.dirty = True
            return
        j.t_next = j.plan[0][0]
        if self.scheme.is_static:
            return
        if j.phase is Phase.PARK:
            streaming = [k.flow for k in self.live if k.phase is Phase.STREAM]
            j.parked = park_slots(j.flow.prio, streaming, self._parked(), self.paths)
        self.dirty = True

    def _tail(self, j: FluidJob) -> float:
        """ns from the stream's end (its chunks sent at the solved rate) to
        its last result: one chunk latency where the line rate binds; where
        the window or a queue binds, the rate already counts each chunk's
        wait, and what remains is the time to send the last window.  Under
        ESA, then the wait of the last window's stranded chunks
        (``stranded_tail``): the rate counts a stranded chunk's wait as a
        share of the mean latency, which the window hides mid-stream, but
        the iteration ends only when its last chunk is answered.  The packet
        model shows no such tail under ATP (charged there, the fluid model's
        time beyond compute would be 16-52 % above the packet model's in
        ``sim.calibrate``'s lag cases), so ATP is not charged it."""
        f = j.flow
        base = min(f.latency + f.queue, f.window * self.paths.tx) + j.stranded_ns
        j.stranded_ns = 0.0
        last = min(f.window, j.spec.chunks)
        if self.net.loss > 0:
            lost = self.net.loss_share(j.spec.workers)
            base += stranded_tail(lost, self.net.loss_wait_ns, 1.0 / f.rate, last)
        if f.stranded <= 0.0 or self.scheme.policy is not Policy.ESA:
            return base
        late = (1.0 - f.stranded) * f.strand_wait  # beyond the share counted in the mean
        return base + stranded_tail(f.stranded, late, 1.0 / f.rate, last)

    def _end_iteration(self, j: FluidJob) -> None:
        j.it += 1
        if j.it < j.spec.iterations:
            self._start_iteration(j)
            if self.net.report_progress and self.scheme.ranked:
                self._reprioritise()
            return
        j.phase, j.finish, j.t_next = Phase.DONE, self.now, math.inf
        self.live.remove(j)
        admitted = self.parts.release(j.spec.job)
        self._reprioritise()
        self._admit(admitted)

    def _parked(self) -> list[Parked]:
        """The jobs parking, in job order."""
        park = Phase.PARK
        return [(j.flow.prio, j.parked) for j in self.live if j.phase is park]

    def _resolve(self) -> None:
        stream = Phase.STREAM
        streaming = [j for j in self.live if j.phase is stream]
        solve([j.flow for j in streaming], self._parked(), self.paths, self.net)
        self.solves += 1
        if self.observer is not None:
            self.observer(self.now, [j.flow for j in streaming])
        for j in streaming:
            if self.net.loss > 0:
                j.flow.rate = lossy_rate(j.flow.rate, j.flow.window, j.spec.workers, self.net)
            j.t_next = self.now + max(0.0, j.remaining) / j.flow.rate
        self.dirty = False


def lossy_rate(rate: float, window: int, workers: int, net: Net) -> float:
    """Chunks per ns of a stream at ``rate`` without loss, when each of its
    chunks waits ``net.loss_wait_ns`` longer with ``net.loss_share``: the
    waiting chunk holds one of the ``window`` places, so the stream loses
    that share of the wait per place (Little's law)."""
    extra = net.loss_share(workers) * net.loss_wait_ns / max(1, window)
    return 1.0 / (1.0 / rate + extra)


def stranded_tail(share: float, late: float, gap: float, last: int) -> float:
    """Expected ns by which the last of ``last`` chunks, sent ``gap`` ns
    apart, each stranded with probability ``share`` (independently) and then
    answered ``late`` ns after the last chunk would be, delays the
    iteration's end: the stranded chunk nearest the end decides, and the
    one ``k`` chunks before the last is ``late - k * gap`` late.  The sum of
    ``share * (1 - share)**k * (late - k * gap)`` over the ``k`` where that
    is positive, in closed form."""
    if share <= 0.0 or late <= 0.0:
        return 0.0
    if share >= 1.0:
        return late
    m = min(last - 1, math.floor(late / gap))
    q, log_q = 1.0 - share, math.log1p(-share)
    # share * sum(k q**k) = q (1 - q**m) / share - m q**(m+1), with expm1
    # keeping the first term exact for a small share
    weighted = q * -math.expm1(m * log_q) / share - m * q ** (m + 1)
    return late * -math.expm1((m + 1) * log_q) - gap * weighted


def simulate(
    jobs: list[JobSpec], pool_size: int, scheme: Scheme, net: Net, seed: int = 0
) -> dict[int, float]:
    return FluidSim(jobs, pool_size, scheme, net, seed).run()
