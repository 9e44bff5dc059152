"""Packet-level, event-driven simulator: exact at small scale.

Every contribution, result, fallback, partial, pull and PS result is a packet
on a link with bandwidth and latency; the switch is ``esa.model.SwitchModel``
(the executable statement of the P4 program), so every verdict and output
comes from the same rules BMv2 runs.  Values are zeros: only timing matters.

Hosts (our design; no ESA host code is public):

* a worker streams its iteration's chunks with a window of outstanding
  chunks; a chunk is resolved by the switch's RESULT or the PS's PS_RESULT.
  With ``Net.rto_ns`` it also resends (RETX) a chunk left unresolved for its
  retransmission timeout, adapted as ``hosts.worker`` adapts it.
* the PS of a job serves, one packet each ``Net.ps_ns``, every FALLBACK and
  PARTIAL it receives and, under ATP, every held RESULT (it answers those
  with the PS_RESULT that releases the slot).  When a chunk reaches it
  incomplete it sends a PULL naming the workers it has (at once, or, with
  ``Net.ps_stall_ns``, once the chunk has been untouched that long, again
  every such period); the others resend (RETX) or will send as RETX, so a
  stranded partial sum is flushed.
* the switch is one FIFO server shared by all ports: each arriving packet
  waits for it and takes ``Net.switch_pkt_ns`` before ``SwitchModel.process``.
* STATIC jobs wait for a free partition of the pool (SwitchML's per-job pool).
"""

from __future__ import annotations

import functools
import heapq
import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from esa import wire
from esa.model import JobConfig, Out, Packet, SwitchModel
from esa.spec import Verdict
from esa.wire import Flag, PacketType
from sim.params import JobSpec, Net, Scheme
from sim.priority import priority
from sim.workload import compute_times

ZEROS = (0,) * wire.K
PS_PORT_BASE = 1000
MAX_RTO_NS = 2e9
"""``hosts.worker.MAX_RTO``: the timeout backs off no further."""


class Link:
    """One direction of a link: FIFO, serialisation then propagation."""

    def __init__(self, net: Net) -> None:
        self.free_at = 0.0
        self.tx = net.pkt_ns
        self.delay = net.hop_ns

    def arrival(self, now: float) -> float:
        start = max(now, self.free_at)
        self.free_at = start + self.tx
        return self.free_at + self.delay


@dataclass
class Worker:
    idx: int
    up: Link
    down: Link
    it: int = 0
    base: int = 0
    next_i: int = 0
    done: int = 0
    ready: bool = False
    outstanding: set[int] = field(default_factory=set)
    retx_pending: set[int] = field(default_factory=set)
    rto: float = 0.0
    srtt: float | None = None
    rttvar: float = 0.0
    sent_at: dict[int, float] = field(default_factory=dict)
    """first send of chunks not retransmitted yet (Karn: only they give samples)."""
    deadline: dict[int, float] = field(default_factory=dict)
    backed_off_at: float = -1.0
    retransmits: int = 0

    @property
    def bit(self) -> int:
        return 1 << self.idx


@dataclass
class PsHost:
    up: Link
    down: Link
    busy_until: float = 0.0
    bitmaps: dict[int, int] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)
    pulled: set[int] = field(default_factory=set)
    touched: dict[int, float] = field(default_factory=dict)


@dataclass
class JobRun:
    spec: JobSpec
    workers: list[Worker]
    ps: PsHost
    compute: np.ndarray
    window: int
    iters_done: int = 0
    workers_in_iter: Counter[int] = field(default_factory=Counter)
    admitted_at: float = 0.0
    finish: float | None = None
    part_base: int = 0
    part_size: int = 0
    admitted: bool = False


Event = tuple[float, int, Callable[[], None]]


class PacketSim:
    def __init__(
        self, jobs: list[JobSpec], pool_size: int, scheme: Scheme, net: Net, seed: int = 0
    ) -> None:
        self.net = net
        self.scheme = scheme
        self.pool_size = pool_size
        self.switch = SwitchModel(pool_size, scheme.policy, net.stale_us)
        self.now = 0.0
        self.queue: list[Event] = []
        self.counter = itertools.count()
        self.verdicts: Counter[tuple[int, Verdict]] = Counter()
        self.ps_completed: Counter[int] = Counter()
        self.tick_ns = net.tick_s * 1e9
        self.switch_free_at = 0.0
        window = net.static_window(pool_size) if scheme is Scheme.STATIC else net.window
        self.jobs: dict[int, JobRun] = {}
        for spec in jobs:
            ws = [Worker(i, Link(net), Link(net), rto=net.rto_ns) for i in range(spec.workers)]
            ct = compute_times(spec, net, seed)
            self.jobs[spec.job_id] = JobRun(spec, ws, PsHost(Link(net), Link(net)), ct, window)
        self.free_parts = list(range(net.static_parts))
        self.waiting: list[int] = []

    # event plumbing -------------------------------------------------------
    def at(self, t: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self.queue, (t, next(self.counter), fn))

    def run(self) -> dict[int, float]:
        """Simulate until every job finished; JCT in seconds per job id."""
        for jid, job in self.jobs.items():
            self.at(job.spec.arrival_s * 1e9, functools.partial(self._arrive, jid))
        if self.scheme is Scheme.ESA_AGING:
            self.at(self.tick_ns, self._tick)
        while self.queue:
            self.now, _, fn = heapq.heappop(self.queue)
            fn()
        return {
            jid: (job.finish or 0.0) * 1e-9 - job.spec.arrival_s for jid, job in self.jobs.items()
        }

    # controller -----------------------------------------------------------
    def _config(self, job: JobRun) -> JobConfig:
        age_s = (self.now - job.admitted_at) * 1e-9
        prio = priority(self.scheme, job.spec, self.net, job.iters_done, age_s)
        return JobConfig(
            fan_in=job.spec.workers,
            worker_mask=job.spec.mask,
            priority=prio,
            ps_port=PS_PORT_BASE + job.spec.job_id,
            part_base=job.part_base,
            part_size=job.part_size,
        )

    def _update_priorities(self) -> None:
        for jid, job in self.jobs.items():
            if not job.admitted or job.finish is not None:
                continue
            cfg = self._config(job)
            if self.switch.jobs[jid] != cfg:
                self.switch.add_job(jid, cfg)

    def _tick(self) -> None:
        self._update_priorities()
        if any(j.finish is None for j in self.jobs.values()):
            self.at(self.now + self.tick_ns, self._tick)

    def _arrive(self, jid: int) -> None:
        if self.scheme is Scheme.STATIC:
            if not self.free_parts:
                self.waiting.append(jid)
                return
            part = self.free_parts.pop(0)
            size = self.pool_size // self.net.static_parts
            self.jobs[jid].part_base, self.jobs[jid].part_size = part * size, size
        self._admit(jid)

    def _admit(self, jid: int) -> None:
        job = self.jobs[jid]
        job.admitted = True
        job.admitted_at = self.now
        self.switch.add_job(jid, self._config(job))
        for w in job.workers:
            self._compute(job, w)

    def _finish(self, job: JobRun) -> None:
        job.finish = self.now
        self.switch.remove_job(job.spec.job_id)
        if self.scheme is Scheme.STATIC:
            self.free_parts.append(job.part_base // max(1, job.part_size))
            if self.waiting:
                self._arrive(self.waiting.pop(0))

    # workers --------------------------------------------------------------
    def _compute(self, job: JobRun, w: Worker) -> None:
        def ready() -> None:
            w.ready = True
            self._pump(job, w)

        self.at(self.now + float(job.compute[w.it, w.idx]) * 1e9, ready)

    def _pump(self, job: JobRun, w: Worker) -> None:
        spec = job.spec
        while w.ready and w.next_i < spec.chunks and len(w.outstanding) < job.window:
            seq = w.base + w.next_i
            w.next_i += 1
            w.outstanding.add(seq)
            retx = seq in w.retx_pending
            if not retx:
                w.sent_at[seq] = self.now
            self._send(job, w, seq, retx)

    def _send(self, job: JobRun, w: Worker, seq: int, retx: bool) -> None:
        flags = int(Flag.RETX) if retx else 0
        self._to_switch(
            w.up, Packet(PacketType.CONTRIB, job.spec.job_id, seq, w.bit, ZEROS, flags), w.idx
        )
        if self.net.rto_ns > 0:
            deadline = w.deadline[seq] = self.now + w.rto
            self.at(deadline, functools.partial(self._timeout, job, w, seq, deadline))

    def _timeout(self, job: JobRun, w: Worker, seq: int, deadline: float) -> None:
        """``hosts.worker.Worker.poll``: resend a chunk whose timer expired; the
        timeout doubles once per expiry round, and Karn's rule drops its sample."""
        if seq not in w.outstanding or w.deadline.get(seq) != deadline:
            return
        w.retransmits += 1
        w.sent_at.pop(seq, None)
        if w.backed_off_at != self.now:
            w.rto, w.backed_off_at = min(2 * w.rto, MAX_RTO_NS), self.now
        self._send(job, w, seq, retx=True)

    def _sample(self, w: Worker, rtt: float) -> None:
        """``hosts.worker.Worker._sample``: RFC 6298 smoothing, floored at ``Net.rto_ns``."""
        if w.srtt is None:
            w.srtt, w.rttvar = rtt, rtt / 2
        else:
            w.rttvar = 0.75 * w.rttvar + 0.25 * abs(w.srtt - rtt)
            w.srtt = 0.875 * w.srtt + 0.125 * rtt
        w.rto = min(max(self.net.rto_ns, w.srtt + 4 * w.rttvar), MAX_RTO_NS)

    def _at_worker(self, job: JobRun, w: Worker, pkt: Packet) -> None:
        if pkt.ptype is PacketType.PULL:
            if pkt.bitmap & w.bit:
                return
            if pkt.seq in w.outstanding:
                self._send(job, w, pkt.seq, retx=True)
            elif w.base + w.next_i <= pkt.seq < w.base + job.spec.chunks:
                w.retx_pending.add(pkt.seq)
            return
        if pkt.seq not in w.outstanding:
            return
        w.outstanding.discard(pkt.seq)
        w.deadline.pop(pkt.seq, None)
        sent = w.sent_at.pop(pkt.seq, None)
        if sent is not None and self.net.rto_ns > 0:
            self._sample(w, self.now - sent)
        w.done += 1
        if w.done < job.spec.chunks:
            self._pump(job, w)
            return
        w.ready = False
        it = w.it
        w.it += 1
        w.base += job.spec.chunks
        w.next_i = w.done = 0
        w.retx_pending.clear()
        w.sent_at.clear()
        w.deadline.clear()
        job.workers_in_iter[it] += 1
        if job.workers_in_iter[it] == job.spec.workers:
            job.iters_done = it + 1
            if job.iters_done == job.spec.iterations:
                self._finish(job)
            elif self.net.report_progress and self.scheme in (Scheme.ESA_SRPT, Scheme.ESA_AGING):
                self._update_priorities()
        if w.it < job.spec.iterations:
            self._compute(job, w)

    # switch ---------------------------------------------------------------
    def _to_switch(self, link: Link, pkt: Packet, in_port: int) -> None:
        self.at(link.arrival(self.now), lambda: self._switch_queue(pkt, in_port))

    def _switch_queue(self, pkt: Packet, in_port: int) -> None:
        """The switch's one FIFO server: every packet waits its turn, then is processed."""
        if self.net.switch_pkt_ns <= 0:
            self._at_switch(pkt, in_port)
            return
        self.switch_free_at = max(self.now, self.switch_free_at) + self.net.switch_pkt_ns
        self.at(self.switch_free_at, lambda: self._at_switch(pkt, in_port))

    def _at_switch(self, pkt: Packet, in_port: int) -> None:
        res = self.switch.process(pkt, int(self.now // 1000), in_port)
        self.verdicts[(pkt.job, res.verdict)] += 1
        for out in res.outputs:
            dest = self.jobs[out.packet.job]
            if out.to in (Out.PS, Out.ALL):
                self._to_ps(dest, out.packet)
            if out.to in (Out.WORKERS, Out.ALL):
                for w in dest.workers:
                    deliver = functools.partial(self._at_worker, dest, w, out.packet)
                    self.at(w.down.arrival(self.now), deliver)

    # parameter server -----------------------------------------------------
    def _to_ps(self, job: JobRun, pkt: Packet) -> None:
        self.at(job.ps.down.arrival(self.now), lambda: self._at_ps(job, pkt))

    def _at_ps(self, job: JobRun, pkt: Packet) -> None:
        ps = job.ps
        if pkt.ptype is PacketType.RESULT and not pkt.flags & Flag.HOLD:
            ps.done.add(pkt.seq)
            return
        ps.busy_until = max(self.now, ps.busy_until) + self.net.ps_ns
        self.at(ps.busy_until, lambda: self._ps_serve(job, pkt))

    def _ps_serve(self, job: JobRun, pkt: Packet) -> None:
        ps = job.ps
        if pkt.seq in ps.done:
            return
        bitmap = ps.bitmaps.get(pkt.seq, 0) | pkt.bitmap
        port = PS_PORT_BASE + job.spec.job_id
        if bitmap == job.spec.mask:
            ps.done.add(pkt.seq)
            ps.bitmaps.pop(pkt.seq, None)
            ps.touched.pop(pkt.seq, None)
            if pkt.ptype is not PacketType.RESULT:
                self.ps_completed[job.spec.job_id] += 1
            out = Packet(PacketType.PS_RESULT, job.spec.job_id, pkt.seq, bitmap, ZEROS)
            self._to_switch(ps.up, replace(out, count=job.spec.workers), port)
            return
        ps.bitmaps[pkt.seq] = bitmap
        stall = self.net.ps_stall_ns
        if stall > 0:
            ps.touched[pkt.seq] = self.now
            self.at(self.now + stall, functools.partial(self._ps_scan, job, pkt.seq, self.now))
        elif pkt.seq not in ps.pulled:
            ps.pulled.add(pkt.seq)
            self._to_switch(ps.up, Packet(PacketType.PULL, pkt.job, pkt.seq, bitmap, ZEROS), port)

    def _ps_scan(self, job: JobRun, seq: int, touched: float) -> None:
        """``hosts.ps`` pulls a chunk left incomplete and untouched for its stall time."""
        ps = job.ps
        if seq in ps.done or ps.touched.get(seq) != touched:
            return
        ps.touched[seq] = self.now
        pull = Packet(PacketType.PULL, job.spec.job_id, seq, ps.bitmaps[seq], ZEROS)
        self._to_switch(ps.up, pull, PS_PORT_BASE + job.spec.job_id)
        self.at(
            self.now + self.net.ps_stall_ns, functools.partial(self._ps_scan, job, seq, self.now)
        )


def simulate(
    jobs: list[JobSpec], pool_size: int, scheme: Scheme, net: Net, seed: int = 0
) -> dict[int, float]:
    return PacketSim(jobs, pool_size, scheme, net, seed).run()
