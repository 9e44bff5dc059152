"""The packet models' hosts and event loop, whatever the switches between them.

Hosts (our design; no ESA host code is public):

* a job's seqs increase across its iterations; they start at 0, or, for a
  job that takes over a wire id (``sim.leases``), past its last holder's
  (``HostSim.wire_seq``);
* a worker streams its iteration's chunks with a window of outstanding
  chunks (its scheme's bandwidth-delay product unless ``Net.window`` is
  set); a chunk is resolved by the switch's RESULT or the PS's PS_RESULT.
  It also resends (RETX) a chunk left unresolved for its
  retransmission timeout, adapted as ``hosts.worker.agent`` adapts it
  (``hosts.timing.rto``).  With ``Net.barrier`` a job's workers start each
  iteration's stream together, a barrier round trip after the last of them
  is ready.
* a job's PS is ``Net.ps_shards`` hosts, chunk ``seq`` on shard
  ``esa.job.ps_shard(seq, shards)``, each behind its own link and switch
  port (the job's ``ps_ports``).  A shard serves, one packet each
  ``Net.ps_ns``, every packet the network brings it: FALLBACK, PARTIAL, the
  RESULT copy of a chunk completed in a switch and, under ATP, every held
  RESULT (it answers those with the PS_RESULT that releases the slot).  It
  merges what it gets by worker bitmap; when a chunk reaches it incomplete
  it sends a PULL naming the workers it has (at once, or, with
  ``Net.ps_stall_ns``, once the chunk has been untouched that long, again
  every such period; with ``Net.ps_stall_adapts`` that period is learnt as
  ``hosts.ps.parameter_server`` learns it, ``hosts.timing.ps_stall``); the
  others resend (RETX) or will send as RETX, so a stranded partial sum is
  flushed.

A subclass is the network: how a worker's or a PS's packet reaches a
switch, what the switches do with it, and what the controller writes into
their tables (``sim.packet``: one switch; ``sim.tiers``: ToRs and a spine).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import heapq
import itertools
from collections import Counter
from collections.abc import Callable, Iterator

import numpy as np

from esa import wire
from esa.job import MAX_PS_SHARDS, JobSpec
from esa.model import HOLD, RETX, Packet
from esa.schemes import Scheme
from esa.spec import GONE_SPAN
from esa.wire import PacketType
from hosts.timing.ps_stall import PullStall
from hosts.timing.rto import MAX_RTO, RetransmitTimeout, holds_first_sends
from sim.hoststate import JobRun, PsHost, SimplexLink, WorkerState
from sim.params import Net
from sim.workload import compute_times, lags

ZEROS = (0,) * wire.K
CONTRIB, PULL, RESULT = PacketType.CONTRIB, PacketType.PULL, PacketType.RESULT
FALLBACK, PS_RESULT = PacketType.FALLBACK, PacketType.PS_RESULT
"""The packet types the hosts read and write per packet, as module
constants (``esa.model``: an enum member read through its class is slow)."""
PS_PORT_BASE = 1000
MAX_RTO_NS = MAX_RTO * 1e9
"""``hosts.timing.rto.MAX_RTO``: the timeout backs off no further."""

Event = tuple[float, int, Callable[[], None]]


def ps_port(job: int, shard: int) -> int:
    """The switch port of one PS shard of a job."""
    return PS_PORT_BASE + MAX_PS_SHARDS * job + shard


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off: an event loop allocates millions of
    short-lived objects, freed by their counts, and the collector's passes
    over the live ones cost a fifth of its time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Deadlock(RuntimeError):
    """The run ended with jobs unfinished: a chunk's partial sum was stranded
    and no timer (``Net.rto_ns``, ``Net.ps_stall_ns``) recovers it.  The
    controller's recut of the partitions under STATIC_EQUAL strands the
    chunks in flight; the switch's stale timeout frees their slots only when
    another chunk lands there."""


class HostSim:
    """Workers, PS shards and the event loop; the network is the subclass's."""

    def __init__(self, jobs: list[JobSpec], scheme: Scheme, net: Net, seed: int) -> None:
        self.net = net
        self.ps_ns = net.ps_ns
        """``Net.ps_ns``, a property read for every packet a PS serves."""
        self.scheme = scheme
        self.now = 0.0
        self.queue: list[Event] = []
        self.counter = itertools.count()
        self.ps_completed: Counter[int] = Counter()
        """chunks each job completed at its PS rather than in a switch."""
        self.on_wire: dict[int, JobRun] = {}
        """wire id -> the job that last held it: whose the switches' packets
        of that id are."""
        self.wire_seq: dict[int, int] = {}
        """wire id -> the first seq of the next job to take it: ``GONE_SPAN``
        past its last holder's seqs, so that the markers that job left in
        the slots (``slot_gone``, ``slot_evicted``) cover none of the next
        one's chunks.  Real hosts start each epoch at a random 32-bit seq
        (``esa.wire.epoch_offset``), which a marker covers with odds of
        ``GONE_SPAN / 2^32``; seqs from 0 on every lease would have the
        next job's first chunks fall back wherever its predecessor left a
        marker."""
        self.jobs = {spec.job: self._job_run(spec, seed) for spec in jobs}

    def _on_wire(self, job: JobRun, wire: int) -> None:
        """``job`` holds wire id ``wire`` (``sim.leases``): its packets carry
        it, and packets of that id are its.  A job new to the id, yet to send,
        starts its seqs at ``wire_seq``."""
        if self.on_wire.get(wire) is not job:
            first = self.wire_seq.get(wire, 0)
            if first + job.spec.chunks * job.spec.iterations >= 2**32:
                first = 0  # the simulated hosts do not wrap seqs
            for w in job.workers:
                assert w.it == w.next_i == 0, "a job's wire id is its own until it finishes"
                w.base = first
        job.wire = wire
        self.on_wire[wire] = job

    def _job_run(self, spec: JobSpec, seed: int) -> JobRun:
        net, lag = self.net, lags(spec, self.net, seed)

        def rng(kind: int, i: int) -> np.random.Generator | None:
            """A lossy host link's own stream of the seed."""
            return np.random.default_rng([seed, spec.job, kind, i]) if net.loss > 0 else None

        workers = [
            WorkerState(
                i,
                SimplexLink(
                    net.pkt_ns,
                    net.hop_ns + float(lag[i]),
                    net.jitter_ns,
                    np.random.default_rng([seed, spec.job, 2, i]),
                    net.loss,
                    rng(3, i),
                ),
                SimplexLink(net.pkt_ns, net.hop_ns, 0.0, None, net.loss, rng(4, i)),
                timeout=self._rto(),
            )
            for i in range(spec.workers)
        ]
        shards = [
            PsHost(
                SimplexLink(net.pkt_ns, net.hop_ns, 0.0, None, net.loss, rng(5, s)),
                SimplexLink(net.pkt_ns, net.hop_ns, 0.0, None, net.loss, rng(6, s)),
                ps_port(spec.job, s),
                stall=self._pull_stall(),
            )
            for s in range(net.ps_shards)
        ]
        return JobRun(
            spec, workers, shards, compute_times(spec, seed), self._window(spec), wire=spec.job
        )

    def _pull_stall(self) -> PullStall | None:
        if not self.net.ps_stall_adapts:
            return None
        initial = self.net.ps_stall_initial()
        return PullStall(initial, min(self.net.pkt_ns, initial), max(initial, MAX_RTO_NS))

    def _rto(self) -> RetransmitTimeout | None:
        rto = self.net.rto_for()
        if rto <= 0:
            return None
        return RetransmitTimeout(rto, MAX_RTO_NS)

    # the network and the controller ---------------------------------------
    def _window(self, spec: JobSpec) -> int:
        """A worker's window before the controller writes its job."""
        raise NotImplementedError

    def _barrier_ns(self, job: JobRun) -> float:
        raise NotImplementedError

    def _worker_out(self, job: JobRun, w: WorkerState, pkt: Packet) -> None:
        """A worker's packet enters the network."""
        raise NotImplementedError

    def _ps_out(self, job: JobRun, ps: PsHost, pkt: Packet) -> None:
        """A PS shard's PS_RESULT or PULL enters the network."""
        raise NotImplementedError

    def _request(self, jid: int) -> bool:
        """``jid`` arrived: admit it now (True) or queue it (False)."""
        raise NotImplementedError

    def _release(self, jid: int) -> list[int]:
        """``jid`` finished: remove its entries; the jobs admitted in its place."""
        raise NotImplementedError

    def _write_jobs(self) -> None:
        """Write every running job's entries whose priority or partition changed."""
        raise NotImplementedError

    # event plumbing -------------------------------------------------------
    def at(self, t: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self.queue, (t, next(self.counter), fn))

    def queue_at(self, key: tuple[float, int], fn: Callable[[], None]) -> None:
        """``fn`` at the place in the queue of an event scheduled with ``key``."""
        heapq.heappush(self.queue, (key[0], key[1], fn))

    def hop(self, link: SimplexLink, then: Callable[[], None]) -> None:
        """Send over ``link``; ``then`` runs when the packet has crossed it
        (unless the link lost it)."""
        arrival = link.arrival(self.now)
        if link.loss > 0 and link.loses():
            return
        heapq.heappush(self.queue, (arrival, next(self.counter), then))

    def run(self) -> dict[int, float]:
        """Simulate until every job finished; JCT in seconds per job id."""
        for jid, job in self.jobs.items():
            self.at(job.spec.arrival_s * 1e9, functools.partial(self._arrive, jid))
        with collector_paused():
            queue, pop = self.queue, heapq.heappop
            while queue:
                self.now, _, fn = pop(queue)
                fn()
        stuck = sorted(jid for jid, job in self.jobs.items() if job.finish is None)
        if stuck:
            raise Deadlock(f"jobs {stuck} never finished: chunks stranded without a timer")
        return {
            jid: (job.finish or 0.0) * 1e-9 - job.spec.arrival_s for jid, job in self.jobs.items()
        }

    def retransmits(self) -> int:
        """Every worker's retransmission timeouts, summed over the jobs."""
        return sum(w.retransmits for job in self.jobs.values() for w in job.workers)

    def _arrive(self, jid: int) -> None:
        if self._request(jid):
            self._admit([jid])

    def _admit(self, ids: list[int]) -> None:
        for jid in ids:
            self.jobs[jid].admitted, self.jobs[jid].admitted_at = True, self.now
        self._write_jobs()
        for jid in ids:
            for w in self.jobs[jid].workers:
                self._compute(self.jobs[jid], w)

    def _finish(self, job: JobRun) -> None:
        """Every worker has every sum: the job leaves the switch, and its PS
        pulls no chunk it holds incomplete (a leftover of a sum the switch
        completed), as no worker would hear the PULL: unbounded, those pulls
        kept a lossy run going long after its last job had finished."""
        job.finish = self.now
        for ps in job.shards:
            ps.scans.clear()
        self.wire_seq[job.wire] = job.workers[0].base + GONE_SPAN
        admitted = self._release(job.spec.job)
        self._write_jobs()
        self._admit(admitted)

    # workers --------------------------------------------------------------
    def _compute(self, job: JobRun, w: WorkerState) -> None:
        def ready() -> None:
            if not self.net.barrier:
                w.ready = True
                self._pump(job, w)
                return
            job.at_barrier[w.it] += 1
            if job.at_barrier[w.it] == job.spec.workers:
                self.at(self.now + self._barrier_ns(job), functools.partial(self._go, job))

        self.at(self.now + float(job.compute[w.it, w.idx]) * 1e9, ready)

    def _go(self, job: JobRun) -> None:
        """The PS's barrier releases every worker of the job at once."""
        for w in job.workers:
            w.ready = True
            self._pump(job, w)

    def _pump(self, job: JobRun, w: WorkerState) -> None:
        chunks, outstanding, timeout = job.chunks, w.outstanding, w.timeout
        while w.ready and w.next_i < chunks and len(outstanding) < job.window:
            seq = w.base + w.next_i
            w.next_i += 1
            outstanding.add(seq)
            retx = seq in w.retx_pending
            if not retx and timeout is not None:
                timeout.sent(seq, self.now)
            self._send(job, w, seq, retx)

    def _send(self, job: JobRun, w: WorkerState, seq: int, retx: bool) -> None:
        flags = RETX if retx else 0
        self._worker_out(job, w, Packet(CONTRIB, job.wire, seq, w.bit, ZEROS, flags))
        if w.timeout is not None:
            w.sent_at[seq] = self.now
            self._arm(job, w, seq, self.now + w.timeout.value)

    def _arm(self, job: JobRun, w: WorkerState, seq: int, deadline: float) -> None:
        w.deadline[seq] = deadline
        timer = (deadline, next(self.counter), seq)
        heapq.heappush(w.timers, timer)
        if w.timers[0] is timer:
            self._alarm_at(job, w, timer)

    # A worker's timers are its own heap, not events: one per chunk sent, and
    # nearly every chunk is answered before its timer expires.  The event
    # queue holds an alarm at the key (deadline, counter) of the worker's
    # earliest timer, the key an event of that timer would have had, so a
    # timer expires exactly where such an event would have run.
    def _alarm_at(self, job: JobRun, w: WorkerState, timer: tuple[float, int, int]) -> None:
        """An alarm at ``timer``'s key, unless one at or before it is set."""
        key = timer[:2]
        if w.alarms and min(w.alarms) <= key:
            return
        w.alarms.add(key)
        self.queue_at(key, functools.partial(self._alarm, job, w, key))

    def _alarm(self, job: JobRun, w: WorkerState, key: tuple[float, int]) -> None:
        w.alarms.discard(key)
        self._drop_answered(w)
        if w.timers and w.timers[0][:2] == key:
            deadline, _, seq = heapq.heappop(w.timers)
            self._timeout(job, w, seq, deadline)
            self._drop_answered(w)
        if w.timers:
            self._alarm_at(job, w, w.timers[0])

    @staticmethod
    def _drop_answered(w: WorkerState) -> None:
        """Timers of chunks answered: never to expire, as no chunk is sent
        again once answered."""
        timers = w.timers
        while timers and timers[0][2] not in w.outstanding:
            heapq.heappop(timers)

    def _resend_summed(self, job: JobRun, w: WorkerState, seq: int) -> None:
        """``hosts.worker.stream.Stream.pulled``: a worker that has a chunk's
        sum still answers its PS's PULL, without a timer.  Only on a lossy
        network: without loss the PS lacks no sum a worker has (its copy
        comes on the same links), and the hosts' answer is only load."""
        pkt = Packet(CONTRIB, job.wire, seq, w.bit, ZEROS, RETX)
        self._worker_out(job, w, pkt)

    def _timeout(self, job: JobRun, w: WorkerState, seq: int, deadline: float) -> None:
        """``hosts.worker.agent.Worker.poll``: resend a chunk whose timer
        expired (``hosts.timing.rto`` decides whether the timeout backs off),
        and Karn's rule drops its sample; a timer the timeout outgrew since
        it was set is set again (``hosts.worker.inflight``)."""
        if seq not in w.outstanding or w.deadline.get(seq) != deadline or w.timeout is None:
            return
        later = w.sent_at[seq] + w.timeout.learnt
        if later > self.now:
            self._arm(job, w, seq, later)
            return
        w.retransmits += 1
        w.timeout.resend(seq)
        w.timeout.expired(self.now, job.window)
        self._send(job, w, seq, retx=True)

    def _to_workers(self, job: JobRun, workers: list[WorkerState], pkt: Packet) -> None:
        """One event per worker its link did not lose ``pkt`` to, or, where
        ``pkt`` reaches every worker at the same instant (links alike, as a
        job's are), one event for all: the same order, as events of one time
        run in the order they were scheduled."""
        times = [w.down.arrival(self.now) for w in workers]
        if self.net.loss > 0:
            kept = [(w, t) for w, t in zip(workers, times, strict=True) if not w.down.loses()]
        else:
            kept = list(zip(workers, times, strict=True))
        if len(kept) == len(workers) and len(set(times)) == 1:
            self.at(times[0], functools.partial(self._at_workers, job, workers, pkt))
            return
        for w, t in kept:
            self.at(t, functools.partial(self._at_worker, job, w, pkt))

    def _at_workers(self, job: JobRun, workers: list[WorkerState], pkt: Packet) -> None:
        for w in workers:
            self._at_worker(job, w, pkt)

    def _at_worker(self, job: JobRun, w: WorkerState, pkt: Packet) -> None:
        if pkt.ptype is PULL:
            if pkt.bitmap & w.bit:
                return
            if pkt.seq in w.outstanding:
                self._send(job, w, pkt.seq, retx=True)
            elif w.base + w.next_i <= pkt.seq < w.base + job.chunks:
                w.retx_pending.add(pkt.seq)
            elif pkt.seq < w.base + w.next_i and self.net.loss > 0:
                self._resend_summed(job, w, pkt.seq)
            return
        seq, outstanding = pkt.seq, w.outstanding
        if seq not in outstanding:
            return
        in_flight = len(outstanding)
        outstanding.discard(seq)
        w.deadline.pop(seq, None)
        w.sent_at.pop(seq, None)
        self._drop_answered(w)
        if w.timeout is not None and w.timeout.answered(
            seq, self.now, in_flight, pkt.ptype, pkt.flags
        ):
            w.spurious += 1
        w.done += 1
        if w.done < job.chunks:
            self._pump(job, w)
            return
        w.ready = False
        it = w.it
        w.it += 1
        w.base += job.chunks
        w.next_i = w.done = 0
        w.retx_pending.clear()
        if w.timeout is not None:
            w.timeout.clear()
        w.deadline.clear()
        w.sent_at.clear()
        job.workers_in_iter[it] += 1
        if job.workers_in_iter[it] == job.spec.workers:
            job.iters_done = it + 1
            if job.iters_done == job.spec.iterations:
                self._finish(job)
            elif self.net.report_progress and self.scheme.ranked:
                self._write_jobs()
        if w.it < job.spec.iterations:
            self._compute(job, w)

    # parameter server -----------------------------------------------------
    def _to_ps(self, job: JobRun, pkt: Packet, workers: int) -> float | None:
        """``pkt`` crosses its chunk's PS shard's link and waits for the
        shard's one server; ``workers`` is the bitmap of the workers whose
        values it carries.  Returns when it arrives (None: the link lost it).
        A shard's link is FIFO without spread, so its packets arrive in the
        order they are sent and their service is queued as they are sent:
        one event a packet, not one at arrival and one at service.  Those
        events come due in the order they are queued, so they wait in the
        shard's own FIFO, and the event queue holds only its head's, at the
        key (time, counter) each would have had there (``_ps_next``)."""
        ps = job.shard(pkt.seq)
        arrival = ps.down.arrival(self.now)
        if ps.down.loss > 0 and ps.down.loses():
            return None
        ps.busy_until = max(arrival, ps.busy_until) + self.ps_ns
        ps.served += 1
        ps.fifo.append((ps.busy_until, next(self.counter), pkt, workers))
        if len(ps.fifo) == 1:
            self._ps_head(job, ps)
        return arrival

    def _ps_head(self, job: JobRun, ps: PsHost) -> None:
        """The event of the packet at the head of the shard's FIFO."""
        due, count, _, _ = ps.fifo[0]
        self.queue_at((due, count), functools.partial(self._ps_next, job, ps))

    def _ps_next(self, job: JobRun, ps: PsHost) -> None:
        """The shard serves the packet at the head of its FIFO."""
        _, _, pkt, workers = ps.fifo.popleft()
        if ps.fifo:
            self._ps_head(job, ps)
        self._ps_serve(job, ps, pkt, workers)

    def _ps_serve(self, job: JobRun, ps: PsHost, pkt: Packet, workers: int) -> None:
        if pkt.ptype is RESULT and not pkt.flags & HOLD:
            ps.done.add(pkt.seq)
            return
        if pkt.seq in ps.done:
            if pkt.ptype is FALLBACK and pkt.flags & RETX and self.net.loss > 0:
                self._answer_done(job, ps, pkt.seq)
            return
        held = ps.bitmaps.get(pkt.seq, 0)
        bitmap = held | workers
        if ps.stall is not None:
            self._ps_observe(ps, pkt, bool(held), bitmap == job.mask)
        first = holds_first_sends(pkt.ptype, pkt.flags, workers)
        if bitmap == job.mask:
            ps.done.add(pkt.seq)
            ps.bitmaps.pop(pkt.seq, None)
            ps.touched.pop(pkt.seq, None)
            if pkt.ptype is not RESULT:
                self.ps_completed[job.spec.job] += 1
            count = job.spec.workers
            # hosts.ps.aggregate: a sum of the workers' first sends alone is
            # flagged HOLD, as the answer to ATP's held RESULT is.
            resent = pkt.seq in ps.resent
            ps.resent.discard(pkt.seq)
            held = HOLD if first and not resent else 0
            out = Packet(PS_RESULT, job.wire, pkt.seq, bitmap, ZEROS, held, count=count)
            self._ps_out(job, ps, out)
            return
        ps.bitmaps[pkt.seq] = bitmap
        if not first:
            ps.resent.add(pkt.seq)
        ps.unanswered.pop(pkt.seq, None)
        stall = self._stall_ns(ps)
        if ps.stall is not None and pkt.flags & RETX and pkt.ptype is FALLBACK:
            self._pull_soon(job, ps, pkt.seq)
        if stall > 0:
            ps.touched[pkt.seq] = self.now
            self._scan_at(job, ps, pkt.seq, stall)
        elif self._pull_now(job, ps, pkt.seq):
            self._pull(job, ps, pkt.seq)

    def _answer_done(self, job: JobRun, ps: PsHost, seq: int) -> None:
        """``hosts.ps.aggregate``: a worker's resend of a chunk the PS has the
        sum of is answered with that sum, on a lossy network (the worker may
        have lost it; without loss, or for a first send late to a finished
        chunk, the sum is on its way)."""
        count = job.spec.workers
        out = Packet(PS_RESULT, job.wire, seq, job.mask, ZEROS, 0, count=count)
        self._ps_out(job, ps, out)

    def _pull_soon(self, job: JobRun, ps: PsHost, seq: int) -> None:
        """``hosts.ps.aggregate.Aggregator._pull_soon``: a worker resent into
        an incomplete chunk, so pull the others now, unless a pull went out
        within a quarter stall."""
        assert ps.stall is not None
        if self.now - ps.pulled_at.get(seq, float("-inf")) >= ps.stall.value / 4:
            ps.pulled_at[seq] = self.now
            self._pull(job, ps, seq)

    def _stall_ns(self, ps: PsHost) -> float:
        return self.net.ps_stall_ns if ps.stall is None else ps.stall.value

    def _ps_observe(self, ps: PsHost, pkt: Packet, held: bool, complete: bool) -> None:
        """``hosts.ps.aggregate.Aggregator``'s samples of the stall: a chunk
        gathered without a pull, a pull's round trip, a first send that a
        pull overtook."""
        assert ps.stall is not None
        seq = pkt.seq
        if not held:
            ps.opened[seq] = self.now
        pulled = ps.pulled_at.get(seq)
        if pulled is None:
            if complete and held:
                ps.stall.gathered(self.now - ps.opened[seq])
        elif held and ps.touched.get(seq) == pulled:
            if pkt.ptype is FALLBACK and not pkt.flags & RETX:
                ps.stall.gathered(self.now - ps.opened[seq])
            else:
                ps.stall.answered(self.now - pulled)
        if complete:
            ps.opened.pop(seq, None)
            ps.pulled_at.pop(seq, None)
            ps.unanswered.pop(seq, None)

    def _pull_now(self, job: JobRun, ps: PsHost, seq: int) -> bool:
        """Without a stall time the PS pulls a chunk once, on its first
        incomplete packet."""
        if seq in ps.pulled:
            return False
        ps.pulled.add(seq)
        return True

    def _pull_bitmap(self, job: JobRun, ps: PsHost, seq: int) -> int:
        """The workers a PULL names: those that must not resend."""
        return ps.bitmaps[seq]

    def _pull(self, job: JobRun, ps: PsHost, seq: int) -> None:
        bitmap = self._pull_bitmap(job, ps, seq)
        ps.pulls += 1
        self._ps_out(job, ps, Packet(PULL, job.wire, seq, bitmap, ZEROS))

    def _ps_scan(self, job: JobRun, ps: PsHost, seq: int) -> None:
        """``hosts.ps.parameter_server`` pulls a chunk left incomplete and
        untouched for its stall time (a scan not stale: ``_scan_alarm``)."""
        ps.touched[seq] = self.now
        wait = self.net.ps_stall_ns
        if ps.stall is not None:
            ps.pulled_at[seq] = self.now
            unanswered = ps.unanswered[seq] = ps.unanswered.get(seq, 0) + 1
            wait = ps.stall.wait(unanswered)
        self._pull(job, ps, seq)
        self._scan_at(job, ps, seq, wait)

    # A shard's scans are its own heap, as a worker's timers are: one per
    # incomplete packet served, and nearly every one finds its chunk touched
    # again or done.  The event queue holds an alarm at the key of the
    # shard's earliest scan, the key that scan's event would have had.  A
    # scan found stale stays stale (a chunk done stays done, and its touch
    # time only grows), so stale scans are dropped from the top unrun.
    def _scan_at(self, job: JobRun, ps: PsHost, seq: int, wait: float) -> None:
        """Scan ``seq``, touched now, in ``wait``."""
        scan = (self.now + wait, next(self.counter), seq, self.now)
        heapq.heappush(ps.scans, scan)
        if ps.scans[0] is scan:
            self._scan_alarm_at(job, ps, scan)

    def _scan_alarm_at(self, job: JobRun, ps: PsHost, scan: tuple[float, int, int, float]) -> None:
        """An alarm at ``scan``'s key, unless one at or before it is set."""
        key = scan[:2]
        if ps.alarms and min(ps.alarms) <= key:
            return
        ps.alarms.add(key)
        self.queue_at(key, functools.partial(self._scan_alarm, job, ps, key))

    def _scan_alarm(self, job: JobRun, ps: PsHost, key: tuple[float, int]) -> None:
        ps.alarms.discard(key)
        self._drop_stale_scans(ps)
        if ps.scans and ps.scans[0][:2] == key:
            self._ps_scan(job, ps, heapq.heappop(ps.scans)[2])
            self._drop_stale_scans(ps)
        if ps.scans:
            self._scan_alarm_at(job, ps, ps.scans[0])

    @staticmethod
    def _drop_stale_scans(ps: PsHost) -> None:
        """Scans ``_ps_scan`` would pass over: their chunk done, or touched since."""
        scans, done, touched = ps.scans, ps.done, ps.touched
        while scans and (scans[0][2] in done or touched.get(scans[0][2]) != scans[0][3]):
            heapq.heappop(scans)
