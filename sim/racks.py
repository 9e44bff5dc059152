"""A multi-rack fabric: racks of hosts under top-of-rack (ToR) switches,
the ToRs under one spine (``sim.tiers`` runs packets through it).

Every host link runs at ``Net.gbps`` with ``Net.hop_ns`` of latency; a ToR's
uplink to the spine has the same latency and ``hosts_per_rack * gbps /
oversubscription`` of bandwidth in each direction.  A job's PS shards sit in
the rack of its worker 0, so a job inside one rack never leaves it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from esa.job import JobSpec
from esa.schemes import Scheme
from sim.params import Net


@dataclass(frozen=True)
class Racks:
    """The simulated cluster's shape: how many racks, how many hosts under
    each top-of-rack switch, and their uplinks (the topology a controller
    serves is ``controller.world.fabric.Fabric``)."""

    racks: int = 4
    hosts_per_rack: int = 8
    """hosts under one ToR: with the host link rate they set the uplink's."""
    oversubscription: float = 2.0
    """the hosts' bandwidth under a ToR over its uplink's (1: non-blocking)."""
    tor_aggregation: bool = True
    """the ToRs aggregate their own workers of a job and send one partial
    upward (two tiers); False: they only forward, and the spine aggregates
    every job alone (one aggregating switch)."""

    def __post_init__(self) -> None:
        if self.racks < 1 or self.hosts_per_rack < 1 or self.oversubscription <= 0:
            raise ValueError("a fabric has >= 1 rack, >= 1 host per rack, oversubscription > 0")

    def uplink_ns(self, net: Net) -> float:
        """Serialisation of one packet on a ToR's uplink."""
        return net.pkt_ns * self.oversubscription / self.hosts_per_rack


@dataclass(frozen=True)
class RackJob:
    """A job and the rack of each of its workers (worker ``i`` in ``racks[i]``)."""

    spec: JobSpec
    racks: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.racks) != self.spec.workers or min(self.racks) < 0:
            raise ValueError(f"job {self.spec.job}: one rack (>= 0) per worker")

    @property
    def ps_rack(self) -> int:
        return self.racks[0]

    @property
    def used(self) -> tuple[int, ...]:
        """The racks it spans, ascending: rack ``used[i]`` is bit ``i`` at the spine."""
        return tuple(sorted(set(self.racks)))

    @property
    def cross(self) -> bool:
        return len(self.used) > 1

    def rack_mask(self, rack: int) -> int:
        """The bitmap of its workers in ``rack``."""
        return sum(1 << i for i, r in enumerate(self.racks) if r == rack)


def place(specs: list[JobSpec], fabric: Racks, spread: int) -> list[RackJob]:
    """Workers filled rack by rack, each job on ``min(spread, workers)``
    consecutive racks (as evenly as they divide), the first rack of job
    ``k`` being rack ``k % racks``: ``spread`` 1 keeps every job inside one
    rack."""
    out = []
    for k, spec in enumerate(specs):
        n = min(spread, spec.workers, fabric.racks)
        racks = tuple((k + i * n // spec.workers) % fabric.racks for i in range(spec.workers))
        out.append(RackJob(spec, racks))
    return out


@dataclass(frozen=True)
class Paths:
    """Round trips of one job's paths through the fabric."""

    net: Net
    fabric: Racks
    job: RackJob

    @property
    def via_spine(self) -> bool:
        """The spine aggregates it: it spans racks, or the ToRs only forward."""
        return self.job.cross or not self.fabric.tor_aggregation

    def rtt(self, scheme: Scheme) -> float:
        """A chunk's round trip without contention; under ATP through the PS
        and back before the workers hear of it."""
        n = self.net
        if not self.via_spine:
            return n.rtt_ns(scheme)
        base = spine_rtt(n, self.fabric)
        if scheme is not Scheme.ATP:
            return base
        to_ps = 2 * n.hop_ns + n.pkt_ns + self.fabric.uplink_ns(n)
        return base + 2 * to_ps + n.ps_ns + n.switch_pkt_ns

    def window(self, scheme: Scheme) -> int:
        """Each scheme's bandwidth-delay product of this job's path, unless
        ``Net.window`` fixes it."""
        if self.net.window > 0:
            return self.net.window
        return math.ceil(self.rtt(scheme) / self.net.pkt_ns)

    def barrier_ns(self) -> float:
        """The last worker's message to the PS and the PS's release back."""
        n = self.net
        far = 2 * n.hop_ns + 2 * self.fabric.uplink_ns(n) if self.job.cross else 0.0
        return n.barrier_ns + 2 * far


def tor_rtt(net: Net) -> float:
    """Worker, ToR, worker: the ToR tier's own round trip (the one switch's)."""
    return net.rtt_ns(Scheme.ESA)


def spine_rtt(net: Net, fabric: Racks) -> float:
    """Worker, ToR, spine, ToR, worker; with two tiers the ToR processes the
    contribution and the result as well."""
    up = 2 * net.hop_ns + 2 * fabric.uplink_ns(net) + net.switch_pkt_ns
    return tor_rtt(net) + up + (net.switch_pkt_ns if fabric.tor_aggregation else 0.0)
