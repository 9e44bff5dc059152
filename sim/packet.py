"""Packet-level, event-driven simulator of one switch: exact at small scale.

Every contribution, result, fallback, partial, pull and PS result is a packet
on a link with bandwidth and latency; the switch is ``esa.model.SwitchModel``
(the executable statement of the P4 program), so every verdict and output
comes from the same rules BMv2 runs.  Values are zeros: only timing matters.
The hosts are ``sim.hostsim``'s; here:

* every worker and PS shard has its own full-duplex link to the switch;
* the switch is one FIFO server shared by all ports: each arriving packet
  waits for it, is processed (``SwitchModel.process``) when its turn comes,
  and its outputs leave ``Net.switch_pkt_ns`` later, or ``Net.switch_sum_ns``
  when it was summed into a slot or read out of one (``SUMMED``).
* the controller writes the job table: priorities (``sim.control``) and,
  under the STATIC schemes, partitions (``sim.control.Partitions``); a job
  that finds no partition waits for one.  The switch and the packets know a
  job by the wire id it leased (``sim.leases``); the results, by its own.
"""

from __future__ import annotations

import functools
from collections import Counter, deque

from esa.job import JobSpec
from esa.model import TO_ALL, TO_PS, TO_WORKERS, JobConfig, Packet, Result, SwitchModel
from esa.schemes import Scheme
from esa.spec import Verdict
from sim.control import Partitions, priorities
from sim.hostsim import HostSim
from sim.hoststate import JobRun, PsHost, WorkerState
from sim.params import IDEAL_POOL, Net

SUMMED = frozenset(
    {Verdict.CLAIM, Verdict.ADD, Verdict.COMPLETE, Verdict.FLUSH, Verdict.PREEMPT, Verdict.RECLAIM}
)
"""Verdicts whose packet wrote a slot's values or read them out."""


class PacketSim(HostSim):
    def __init__(
        self,
        jobs: list[JobSpec],
        pool_size: int,
        scheme: Scheme,
        net: Net,
        seed: int = 0,
        model: type[SwitchModel] = SwitchModel,
    ) -> None:
        """``model``: the switch's rules; another than ``SwitchModel`` only to
        weigh a candidate rule (``sim.evictions``)."""
        if scheme is Scheme.IDEAL:
            pool_size = max(pool_size, IDEAL_POOL)
        self.pool_size = pool_size
        squat = net.squat_us_for(scheme)
        self.switch = model(pool_size, scheme.policy, net.stale_us, squat)
        self.parts = Partitions(
            scheme, pool_size, net.bdp_partition(pool_size), net.esa_homes, net.esa_home_size
        )
        self.verdicts: Counter[tuple[int, Verdict]] = Counter()
        """(job, verdict) -> packets."""
        self.switch_queue: deque[tuple[Packet, int]] = deque()
        self.switch_busy = False
        self.instant = net.switch_pkt_ns <= 0 and net.switch_sum_ns <= 0
        """the switch takes no time: a packet is processed as it arrives."""
        self._at_switch = self._switch_now if self.instant else self._switch_queue
        """what a packet's arrival at the switch runs, chosen once."""
        super().__init__(jobs, scheme, net, seed)

    def _window(self, spec: JobSpec) -> int:
        return self.net.window_for(self.scheme)

    def _barrier_ns(self, job: JobRun) -> float:
        return self.net.barrier_ns

    # controller -----------------------------------------------------------
    def _request(self, jid: int) -> bool:
        return self.parts.request(jid)

    def _release(self, jid: int) -> list[int]:
        self.switch.remove_job(self.parts.wire(jid))
        return self.parts.release(jid)

    def _write_jobs(self) -> None:
        """A worker's window follows its partition under STATIC."""
        running = [self.jobs[jid] for jid in self.parts.running]
        held = {self.on_wire[w].spec.job: cfg.priority for w, cfg in self.switch.jobs.items()}
        ranked = [(j.spec, j.iters_done, j.admitted_at * 1e-9) for j in running]
        prios = priorities(self.scheme, self.net, ranked, held)
        layout = self.parts.layout(prios)
        for job in running:
            jid = job.spec.job
            self._on_wire(job, self.parts.wire(jid))
            job.part_base, job.part_size = layout[jid]
            cfg = JobConfig(
                fan_in=job.spec.workers,
                worker_mask=job.mask,
                priority=prios[jid],
                ps_ports=tuple(ps.port for ps in job.shards),
                part_base=job.part_base,
                part_size=job.part_size,
            )
            if self.switch.jobs.get(job.wire) != cfg:
                self.switch.add_job(job.wire, cfg)
            if self.scheme.is_static:
                job.window = self.net.static_window(self.scheme, job.part_size, job.spec.workers)
                for w in job.workers:
                    self._pump(job, w)

    # switch ---------------------------------------------------------------
    def _worker_out(self, job: JobRun, w: WorkerState, pkt: Packet) -> None:
        self.hop(w.up, functools.partial(self._at_switch, pkt, w.idx))

    def _ps_out(self, job: JobRun, ps: PsHost, pkt: Packet) -> None:
        self.hop(ps.up, functools.partial(self._at_switch, pkt, ps.port))

    def _switch_now(self, pkt: Packet, in_port: int) -> None:
        """A switch that takes no time: the packet is processed as it arrives."""
        res = self._process(pkt, in_port)
        if res.outputs:
            self._emit(res)

    def _switch_queue(self, pkt: Packet, in_port: int) -> None:
        """The switch's one FIFO server: every packet waits its turn, is
        processed, and its outputs leave after its service time."""
        self.switch_queue.append((pkt, in_port))
        if not self.switch_busy:
            self._serve()

    def _serve(self) -> None:
        if not self.switch_queue:
            self.switch_busy = False
            return
        self.switch_busy = True
        res = self._process(*self.switch_queue.popleft())
        summed = res.verdict in SUMMED and self.net.switch_sum_ns > 0
        service = self.net.switch_sum_ns if summed else self.net.switch_pkt_ns
        self.at(self.now + service, lambda: self._done(res))

    def _done(self, res: Result) -> None:
        self._emit(res)
        self._serve()

    def _process(self, pkt: Packet, in_port: int) -> Result:
        res = self.switch.process(pkt, int(self.now // 1000), in_port)
        self.verdicts[(self.on_wire[pkt.job].spec.job, res.verdict)] += 1
        return res

    def _emit(self, res: Result) -> None:
        for out in res.outputs:
            to, pkt = out.to, out.packet
            dest = self.on_wire[pkt.job]
            if to is TO_PS or to is TO_ALL:
                self._to_ps(dest, pkt, pkt.bitmap)
            if to is TO_WORKERS or to is TO_ALL:
                self._to_workers(dest, dest.workers, pkt)


def simulate(
    jobs: list[JobSpec], pool_size: int, scheme: Scheme, net: Net, seed: int = 0
) -> dict[int, float]:
    return PacketSim(jobs, pool_size, scheme, net, seed).run()
