"""Packet-level, event-driven simulator: exact at small scale.

Every contribution, result, fallback, partial, pull and PS result is a packet
on a link with bandwidth and latency; the switch is ``esa.model.SwitchModel``
(the executable statement of the P4 program), so every verdict and output
comes from the same rules BMv2 runs.  Values are zeros: only timing matters.

Hosts (our design; no ESA host code is public):

* a worker streams its iteration's chunks with a window of outstanding
  chunks (``Net.window_for``: its scheme's bandwidth-delay product unless
  set); a chunk is resolved by the switch's RESULT or the PS's PS_RESULT.
  With ``Net.rto_ns`` it also resends (RETX) a chunk left unresolved for its
  retransmission timeout, adapted as ``hosts.worker`` adapts it.  With
  ``Net.barrier`` a job's workers start each iteration's stream together,
  a barrier round trip after the last of them is ready.
* a job's PS is ``Net.ps_shards`` hosts, chunk ``seq`` on shard
  ``seq % shards``, each behind its own link.  A shard serves, one packet
  each ``Net.ps_ns``, every packet the switch sends it: FALLBACK, PARTIAL,
  the RESULT copy of a chunk completed in the switch and, under ATP, every
  held RESULT (it answers those with the PS_RESULT that releases the slot).
  When a chunk reaches it incomplete it sends a PULL naming the workers it
  has (at once, or, with ``Net.ps_stall_ns``, once the chunk has been
  untouched that long, again every such period); the others resend (RETX) or
  will send as RETX, so a stranded partial sum is flushed.  All shards of a
  job inject through the job's PS port.
* the switch is one FIFO server shared by all ports: each arriving packet
  waits for it and takes ``Net.switch_pkt_ns`` before ``SwitchModel.process``.
* the controller writes the job table: priorities (``sim.control``) and,
  under the STATIC schemes, partitions (``sim.control.Partitions``); a job
  that finds no partition waits for one.
"""

from __future__ import annotations

import functools
import heapq
import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from esa import wire
from esa.model import JobConfig, Out, Packet, SwitchModel
from esa.spec import Verdict
from esa.wire import Flag, PacketType
from sim.control import Partitions, priorities
from sim.hosts import JobRun, Link, PsHost, Worker
from sim.params import JobSpec, Net, Scheme
from sim.workload import compute_times, lags

ZEROS = (0,) * wire.K
PS_PORT_BASE = 1000
MAX_RTO_NS = 2e9
"""``hosts.worker.MAX_RTO``: the timeout backs off no further."""


Event = tuple[float, int, Callable[[], None]]


class Deadlock(RuntimeError):
    """The run ended with jobs unfinished: a chunk's partial sum was stranded
    and no timer (``Net.rto_ns``, ``Net.ps_stall_ns``) recovers it.  The
    controller's recut of the partitions under STATIC_EQUAL strands the
    chunks in flight; the switch's stale timeout frees their slots only when
    another chunk lands there."""


class PacketSim:
    def __init__(
        self, jobs: list[JobSpec], pool_size: int, scheme: Scheme, net: Net, seed: int = 0
    ) -> None:
        self.net = net
        self.scheme = scheme
        self.pool_size = pool_size
        squat = net.squat_us_for(scheme)
        self.switch = SwitchModel(pool_size, scheme.policy, net.stale_us, squat)
        self.parts = Partitions(scheme, pool_size, net)
        self.now = 0.0
        self.queue: list[Event] = []
        self.counter = itertools.count()
        self.verdicts: Counter[tuple[int, Verdict]] = Counter()
        self.ps_completed: Counter[int] = Counter()
        self.switch_free_at = 0.0
        window = net.window_for(scheme)
        self.jobs: dict[int, JobRun] = {}
        for spec in jobs:
            lag = lags(spec, net, seed)
            ws = [
                Worker(i, Link(net, float(lag[i])), Link(net), rto=net.rto_ns)
                for i in range(spec.workers)
            ]
            shards = [PsHost(Link(net), Link(net)) for _ in range(net.ps_shards)]
            ct = compute_times(spec, net, seed)
            self.jobs[spec.job_id] = JobRun(spec, ws, shards, ct, window)

    # event plumbing -------------------------------------------------------
    def at(self, t: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self.queue, (t, next(self.counter), fn))

    def run(self) -> dict[int, float]:
        """Simulate until every job finished; JCT in seconds per job id."""
        for jid, job in self.jobs.items():
            self.at(job.spec.arrival_s * 1e9, functools.partial(self._arrive, jid))
        while self.queue:
            self.now, _, fn = heapq.heappop(self.queue)
            fn()
        stuck = sorted(jid for jid, job in self.jobs.items() if job.finish is None)
        if stuck:
            raise Deadlock(f"jobs {stuck} never finished: chunks stranded without a timer")
        return {
            jid: (job.finish or 0.0) * 1e-9 - job.spec.arrival_s for jid, job in self.jobs.items()
        }

    # controller -----------------------------------------------------------
    def _write_jobs(self) -> None:
        """Write the entry of every running job whose priority or partition
        changed; a worker's window follows its partition under STATIC."""
        running = [self.jobs[jid] for jid in self.parts.running]
        prios = priorities(
            self.scheme, self.net, [(j.spec, j.iters_done, j.admitted_at * 1e-9) for j in running]
        )
        layout = self.parts.layout()
        for job in running:
            jid = job.spec.job_id
            job.part_base, job.part_size = layout[jid]
            cfg = JobConfig(
                fan_in=job.spec.workers,
                worker_mask=job.spec.mask,
                priority=prios[jid],
                ps_port=PS_PORT_BASE + jid,
                part_base=job.part_base,
                part_size=job.part_size,
            )
            if self.switch.jobs.get(jid) != cfg:
                self.switch.add_job(jid, cfg)
            if self.scheme.is_static:
                job.window = self.net.static_window(self.scheme, job.part_size)
                for w in job.workers:
                    self._pump(job, w)

    def _arrive(self, jid: int) -> None:
        if self.parts.request(jid):
            self._admit([jid])

    def _admit(self, ids: list[int]) -> None:
        for jid in ids:
            self.jobs[jid].admitted, self.jobs[jid].admitted_at = True, self.now
        self._write_jobs()
        for jid in ids:
            for w in self.jobs[jid].workers:
                self._compute(self.jobs[jid], w)

    def _finish(self, job: JobRun) -> None:
        job.finish = self.now
        self.switch.remove_job(job.spec.job_id)
        admitted = self.parts.release(job.spec.job_id)
        self._write_jobs()
        self._admit(admitted)

    # workers --------------------------------------------------------------
    def _compute(self, job: JobRun, w: Worker) -> None:
        def ready() -> None:
            if not self.net.barrier:
                w.ready = True
                self._pump(job, w)
                return
            job.at_barrier[w.it] += 1
            if job.at_barrier[w.it] == job.spec.workers:
                self.at(self.now + self.net.barrier_ns, functools.partial(self._go, job))

        self.at(self.now + float(job.compute[w.it, w.idx]) * 1e9, ready)

    def _go(self, job: JobRun) -> None:
        """The PS's barrier releases every worker of the job at once."""
        for w in job.workers:
            w.ready = True
            self._pump(job, w)

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
                self._write_jobs()
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
        ps = job.shard(pkt.seq)
        self.at(ps.down.arrival(self.now), lambda: self._at_ps(job, ps, pkt))

    def _at_ps(self, job: JobRun, ps: PsHost, pkt: Packet) -> None:
        ps.busy_until = max(self.now, ps.busy_until) + self.net.ps_ns
        ps.served += 1
        self.at(ps.busy_until, lambda: self._ps_serve(job, ps, pkt))

    def _ps_serve(self, job: JobRun, ps: PsHost, pkt: Packet) -> None:
        if pkt.ptype is PacketType.RESULT and not pkt.flags & Flag.HOLD:
            ps.done.add(pkt.seq)
            return
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
            self.at(self.now + stall, functools.partial(self._ps_scan, job, ps, pkt.seq, self.now))
        elif pkt.seq not in ps.pulled:
            ps.pulled.add(pkt.seq)
            self._to_switch(ps.up, Packet(PacketType.PULL, pkt.job, pkt.seq, bitmap, ZEROS), port)

    def _ps_scan(self, job: JobRun, ps: PsHost, seq: int, touched: float) -> None:
        """``hosts.ps`` pulls a chunk left incomplete and untouched for its stall time."""
        if seq in ps.done or ps.touched.get(seq) != touched:
            return
        ps.touched[seq] = self.now
        pull = Packet(PacketType.PULL, job.spec.job_id, seq, ps.bitmaps[seq], ZEROS)
        self._to_switch(ps.up, pull, PS_PORT_BASE + job.spec.job_id)
        self.at(
            self.now + self.net.ps_stall_ns,
            functools.partial(self._ps_scan, job, ps, seq, self.now),
        )


def simulate(
    jobs: list[JobSpec], pool_size: int, scheme: Scheme, net: Net, seed: int = 0
) -> dict[int, float]:
    return PacketSim(jobs, pool_size, scheme, net, seed).run()
