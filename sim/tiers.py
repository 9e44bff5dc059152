"""Packet-level simulator of a multi-rack fabric (``sim.racks``): a chain of
switch models, one ``esa.model.SwitchModel`` per ToR and one at the spine.

Two-tier aggregation (``Racks.tor_aggregation``):

* A job inside one rack is its ToR's alone, exactly as the one switch of
  ``sim.packet`` has it: it completes there, and its PS is in the rack.
* A job across racks has a row at each of its ToRs for its workers there
  (their fan-in and bits) and one at the spine whose "workers" are its racks
  (rack ``used[i]`` is bit ``i``).  A ToR that completes its rack's sum
  sends it upward as one contribution; the spine sums the racks and
  multicasts the result down, which each ToR takes as its PS's result (rule
  S12: ATP's ToR releases the slot it held for it) and passes to its
  workers.  So preemption, release at completion, the squat timeout and the
  PS fallback all act at each tier, by the same rules.
* What a ToR sends to its PS (a fallback, an evicted or flushed partial)
  goes to the job's PS with its workers' bits.  The PS merges by worker:
  a rack bit from the spine stands for all that rack's workers.  When the
  pieces it holds complete a rack while nothing of the chunk has come from
  the spine, the PS sends that rack's sum up to the spine in the ToR's
  place, so the spine's partial of the other racks does not wait for it;
  its PULL then names every worker of the racks it has nothing of, so only
  the rack that fell back resends.

Without ToR aggregation the ToRs forward and the spine aggregates every
job as ``sim.packet``'s one switch does, its workers two links further.
Every switch is a FIFO server of ``Net.switch_pkt_ns`` per packet it
processes; forwarding costs link time only.  Each switch has its own pool
and, under STATIC, its own partitions, sized to a bandwidth-delay product
of its path.  A job, any int >= 1, leases one wire id for the whole fabric
(``sim.control.FabricPartitions``, ``sim.leases``) as ``sim.packet``'s
does: every switch's job table and every packet carry it; the results and
counters are keyed by the job's own number.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from esa.job import JobSpec
from esa.model import JobConfig, Out, Output, Packet, SwitchModel
from esa.schemes import Scheme
from esa.spec import Verdict
from esa.wire import PacketType
from sim.control import FabricPartitions, Partitions, priorities
from sim.hostsim import ZEROS, HostSim
from sim.hoststate import JobRun, PsHost, SimplexLink, WorkerState
from sim.params import Net
from sim.racks import Paths, RackJob, Racks, spine_rtt, tor_rtt

TOR_UPLINK = 1
"""A ToR's port to the spine."""
SPINE_PORT_BASE = 100


def spine_port(rack: int) -> int:
    """The spine's port to a rack's ToR."""
    return SPINE_PORT_BASE + rack


@dataclass
class TierSwitch:
    name: str
    model: SwitchModel
    parts: Partitions
    free_at: float = 0.0
    verdicts: Counter[tuple[int, Verdict]] = field(default_factory=Counter)
    """(job, verdict) -> packets."""


@dataclass
class Uplink:
    """A ToR's link to the spine, both directions."""

    up: SimplexLink
    down: SimplexLink


class TierSim(HostSim):
    def __init__(
        self,
        jobs: list[RackJob],
        pool_size: int,
        scheme: Scheme,
        net: Net,
        fabric: Racks,
        seed: int = 0,
        spine_pool: int | None = None,
    ) -> None:
        """``pool_size`` slots at every ToR, ``spine_pool`` (default the
        same) at the spine."""
        self.fabric = fabric
        self.placed = {rj.spec.job: rj for rj in jobs}
        if max(r for rj in jobs for r in rj.racks) >= fabric.racks:
            raise ValueError(f"a job is placed beyond the fabric's {fabric.racks} racks")
        self.paths = {jid: Paths(net, fabric, rj) for jid, rj in self.placed.items()}
        tx_up = fabric.uplink_ns(net)
        self.uplinks = [
            Uplink(SimplexLink(tx_up, net.hop_ns), SimplexLink(tx_up, net.hop_ns))
            for _ in range(fabric.racks)
        ]
        self.tors = [
            self._switch(f"tor{r}", pool_size, scheme, net, tor_rtt(net))
            for r in range(fabric.racks)
        ]
        spine = pool_size if spine_pool is None else spine_pool
        self.spine = self._switch("spine", spine, scheme, net, spine_rtt(net, fabric))
        every = [*self.tors, self.spine]
        self.parts = FabricPartitions(
            scheme,
            {s.name: s.parts for s in every},
            {jid: tuple(s.name for s in self._uses(jid)) for jid in self.placed},
        )
        self.from_spine: set[tuple[int, int]] = set()
        """chunks of which the PS got something from the spine: the spine gave up."""
        self.sent_up: Counter[tuple[int, int]] = Counter()
        """chunk -> spine bits of the racks the PS sent up in their ToR's place."""
        self.pulled_quiet: dict[tuple[int, int], int] = {}
        """chunk -> the workers its last PULL spared (``_quiet``)."""
        self.proxied: Counter[int] = Counter()
        """job -> rack sums the PS sent up in their ToR's place."""
        super().__init__([rj.spec for rj in jobs], scheme, net, seed)

    @staticmethod
    def _switch(name: str, pool: int, scheme: Scheme, net: Net, rtt: float) -> TierSwitch:
        squat = net.squat_us_for(scheme, rtt)
        bdp = min(pool, math.ceil(rtt / net.pkt_ns))
        return TierSwitch(
            name,
            SwitchModel(pool, scheme.policy, net.stale_us, squat),
            Partitions(scheme, pool, bdp),
        )

    def _at_tor(self, jid: int, rack: int) -> bool:
        """The rack's ToR aggregates the job: two tiers, and the job has more
        than one worker there or lives in that rack alone (a lone worker's
        contribution is its rack's sum: the ToR forwards it to the spine)."""
        rj = self.placed[jid]
        many = rj.rack_mask(rack).bit_count() > 1
        return self.fabric.tor_aggregation and (many or not rj.cross)

    def _uses(self, jid: int) -> list[TierSwitch]:
        """The switches that aggregate a job."""
        rj = self.placed[jid]
        tors = [self.tors[r] for r in rj.used if self._at_tor(jid, r)]
        return [*tors, self.spine] if self.paths[jid].via_spine else tors

    def _window(self, spec: JobSpec) -> int:
        return self.paths[spec.job].window(self.scheme)

    def _barrier_ns(self, job: JobRun) -> float:
        return self.paths[job.spec.job].barrier_ns()

    def uplink_packets(self) -> tuple[int, int]:
        """Packets the ToRs' uplinks carried: (up to the spine, down from it)."""
        return sum(u.up.sent for u in self.uplinks), sum(u.down.sent for u in self.uplinks)

    # controller -----------------------------------------------------------
    def _request(self, jid: int) -> bool:
        return self.parts.request(jid)

    def _release(self, jid: int) -> list[int]:
        for s in self._uses(jid):
            s.model.remove_job(self.parts.wire(jid))
        return self.parts.release(jid)

    def _write_jobs(self) -> None:
        """Every switch's rows of the running jobs; under STATIC a worker's
        window is cut to the smallest of its job's partitions."""
        running = [self.jobs[jid] for jid in self.parts.running]
        held = {
            self.on_wire[w].spec.job: c.priority
            for s in [*self.tors, self.spine]
            for w, c in s.model.jobs.items()
        }
        ranked = [(j.spec, j.iters_done, j.admitted_at * 1e-9) for j in running]
        prios = priorities(self.scheme, self.net, ranked, held)
        for job in running:
            jid = job.spec.job
            self._on_wire(job, self.parts.wire(jid))
            parts = []
            for s in self._uses(jid):
                base, size = self.parts.layout(s.name)[jid]
                parts.append(size)
                cfg = self._row(s, self.placed[jid], job, prios[jid], base, size)
                if s.model.jobs.get(job.wire) != cfg:
                    s.model.add_job(job.wire, cfg)
            if self.scheme.is_static:
                job.window = self.net.static_window(
                    self.scheme, min(parts), job.spec.workers, self.paths[jid].window
                )
                for w in job.workers:
                    self._pump(job, w)

    def _row(
        self, s: TierSwitch, rj: RackJob, job: JobRun, prio: int, base: int, size: int
    ) -> JobConfig:
        shards = len(job.shards)
        if s is self.spine:
            two_tier = self.fabric.tor_aggregation
            fan_in = len(rj.used) if two_tier else rj.spec.workers
            mask = (1 << fan_in) - 1 if two_tier else job.mask
            ports = (spine_port(rj.ps_rack),) * shards
        else:
            mask = rj.rack_mask(self.tors.index(s))
            fan_in = mask.bit_count()
            ports = (TOR_UPLINK,) * shards if rj.cross else tuple(ps.port for ps in job.shards)
        return JobConfig(fan_in, mask, prio, ports, base, size)

    # the network ----------------------------------------------------------
    def _via(self, links: list[SimplexLink], then: Callable[[], object]) -> None:
        """Cross ``links`` one after the other (store and forward), then ``then``."""
        if not links:
            then()
            return
        self.hop(links[0], lambda: self._via(links[1:], then))

    def _up(self, links: list[SimplexLink], pkt: Packet, rack: int) -> None:
        """Over ``links`` and up rack ``rack``'s uplink into the spine."""
        self._via(
            [*links, self.uplinks[rack].up], lambda: self._into(self.spine, pkt, spine_port(rack))
        )

    def _into(self, s: TierSwitch, pkt: Packet, in_port: int) -> None:
        """The switch's FIFO server, then its model."""
        if self.net.switch_pkt_ns <= 0:
            self._process(s, pkt, in_port)
            return
        s.free_at = max(self.now, s.free_at) + self.net.switch_pkt_ns
        self.at(s.free_at, lambda: self._process(s, pkt, in_port))

    def _process(self, s: TierSwitch, pkt: Packet, in_port: int) -> None:
        res = s.model.process(pkt, int(self.now // 1000), in_port)
        s.verdicts[(self.on_wire[pkt.job].spec.job, res.verdict)] += 1
        for out in res.outputs:
            if s is self.spine:
                self._from_spine(out)
            else:
                self._from_tor(self.tors.index(s), out)

    def _worker_out(self, job: JobRun, w: WorkerState, pkt: Packet) -> None:
        rj = self.placed[job.spec.job]
        r = rj.racks[w.idx]
        if self._at_tor(rj.spec.job, r):
            self.hop(w.up, lambda: self._into(self.tors[r], pkt, w.idx))
        elif self.fabric.tor_aggregation:
            self._up([w.up], pkt._replace(bitmap=1 << rj.used.index(r)), r)
        else:
            self._up([w.up], pkt, r)

    def _ps_out(self, job: JobRun, ps: PsHost, pkt: Packet) -> None:
        jid = job.spec.job
        home = self.placed[jid].ps_rack
        if self.paths[jid].via_spine:
            self._up([ps.up], pkt, home)
        else:
            self.hop(ps.up, lambda: self._into(self.tors[home], pkt, ps.port))

    def _local(self, job: JobRun, rack: int) -> list[WorkerState]:
        racks = self.placed[job.spec.job].racks
        return [w for w in job.workers if racks[w.idx] == rack]

    def _from_tor(self, rack: int, out: Output) -> None:
        pkt = out.packet
        job = self.on_wire[pkt.job]
        rj = self.placed[job.spec.job]
        if not rj.cross:
            if out.to in (Out.PS, Out.ALL):
                self._to_ps(job, pkt, pkt.bitmap)
            if out.to in (Out.WORKERS, Out.ALL):
                self._to_workers(job, self._local(job, rack), pkt)
            return
        if out.to is Out.WORKERS:
            self._to_workers(job, self._local(job, rack), pkt)
            return
        if pkt.ptype is PacketType.RESULT:
            bit = 1 << rj.used.index(rack)
            self._up([], Packet(PacketType.CONTRIB, pkt.job, pkt.seq, bit, pkt.values), rack)
            return
        links = [] if rack == rj.ps_rack else [self.uplinks[rack].up, self.uplinks[rj.ps_rack].down]
        self._via(links, lambda: self._to_ps(job, pkt, pkt.bitmap))

    def _from_spine(self, out: Output) -> None:
        pkt = out.packet
        job = self.on_wire[pkt.job]
        rj = self.placed[job.spec.job]
        two_tier = self.fabric.tor_aggregation
        if out.to in (Out.PS, Out.ALL):
            workers = self._racks_to_workers(rj, pkt.bitmap) if two_tier else pkt.bitmap
            self._via([self.uplinks[rj.ps_rack].down], lambda: self._spine_to_ps(job, pkt, workers))
        if out.to not in (Out.WORKERS, Out.ALL):
            return
        for r in rj.used:
            into: Callable[[], None]
            if self._at_tor(rj.spec.job, r):
                down = pkt
                if pkt.ptype is not PacketType.PULL:
                    down = pkt._replace(ptype=PacketType.PS_RESULT)
                into = functools.partial(self._into, self.tors[r], down, TOR_UPLINK)
            else:
                into = functools.partial(self._to_workers, job, self._local(job, r), pkt)
            self._via([self.uplinks[r].down], into)

    @staticmethod
    def _racks_to_workers(rj: RackJob, bits: int) -> int:
        return sum(rj.rack_mask(r) for i, r in enumerate(rj.used) if bits >> i & 1)

    # parameter server -----------------------------------------------------
    def _spine_to_ps(self, job: JobRun, pkt: Packet, workers: int) -> None:
        arrival = self._to_ps(job, pkt, workers)
        if arrival is not None:
            self.at(arrival, functools.partial(self.from_spine.add, (job.spec.job, pkt.seq)))

    def _ps_serve(self, job: JobRun, ps: PsHost, pkt: Packet, workers: int) -> None:
        super()._ps_serve(job, ps, pkt, workers)
        jid = job.spec.job
        key = (jid, pkt.seq)
        if pkt.seq in ps.done:
            self.from_spine.discard(key)
            self.sent_up.pop(key, None)
            self.pulled_quiet.pop(key, None)
            return
        rj = self.placed[jid]
        if not (self.fabric.tor_aggregation and rj.cross) or key in self.from_spine:
            return
        have = ps.bitmaps.get(pkt.seq, 0)
        for i, r in enumerate(rj.used):
            rack, bit = rj.rack_mask(r), 1 << i
            if have & rack == rack and not self.sent_up[key] & bit:
                self.sent_up[key] |= bit
                self.proxied[jid] += 1
                up = Packet(PacketType.CONTRIB, job.wire, pkt.seq, bit, ZEROS)
                self._up([ps.up], up, rj.ps_rack)

    def _quiet(self, job: JobRun, ps: PsHost, seq: int) -> int:
        """Two tiers, nothing from the spine yet: the workers of the racks
        the PS has no piece of, which are aggregating upstream and must not
        resend."""
        have = ps.bitmaps[seq]
        rj = self.placed[job.spec.job]
        if not (self.fabric.tor_aggregation and rj.cross) or (rj.spec.job, seq) in self.from_spine:
            return 0
        return sum(rj.rack_mask(r) for r in rj.used if not have & rj.rack_mask(r))

    def _pull_bitmap(self, job: JobRun, ps: PsHost, seq: int) -> int:
        return ps.bitmaps[seq] | self._quiet(job, ps, seq)

    def _pull_now(self, job: JobRun, ps: PsHost, seq: int) -> bool:
        """Once per chunk, and again whenever a rack it spared comes to need
        a pull: a piece of that rack arrived, or the spine gave the chunk up."""
        quiet, key = self._quiet(job, ps, seq), (job.spec.job, seq)
        if key in self.pulled_quiet and self.pulled_quiet[key] == quiet:
            return False
        self.pulled_quiet[key] = quiet
        return True


def simulate(
    jobs: list[RackJob], pool_size: int, scheme: Scheme, net: Net, fabric: Racks, seed: int = 0
) -> dict[int, float]:
    return TierSim(jobs, pool_size, scheme, net, fabric, seed).run()
