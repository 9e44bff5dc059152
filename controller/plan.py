"""The entries the switch must hold for a set of jobs: a pure function.

Identifiers are derived from the job id, never allocated, so a restarted
controller computes the same groups and rids as the one before it and
reconciliation finds nothing to change:

* multicast group ``2*job`` ("all": workers and PS) and ``2*job + 1``
  ("workers"); group ``BCAST_MGID`` (1) floods L2 broadcast to every host
  port with rid 0, which the egress leaves unrewritten;
* egress rid ``job*RID_STRIDE + 1 + i`` for worker ``i`` (bit ``i`` of the
  worker mask) and ``job*RID_STRIDE + 1 + MAX_WORKERS`` for the PS; a worker
  has one rid in both of its job's groups.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.entries import JobEntry, L2Entry, PolicyEntry, PsRoute, Replica, SwitchEntries
from controller.topology import Host, ip_to_int, mac_to_int
from esa import wire

BCAST_MGID = 1
BROADCAST_MAC = 0xFFFFFFFFFFFF
RID_STRIDE = 64
PS_MEMBER = wire.MAX_WORKERS


@dataclass(frozen=True)
class JobPlan:
    """What the plan needs of one admitted job."""

    job: int
    workers: tuple[Host, ...]
    ps: Host
    prio: int
    part_base: int
    part_size: int


def mgid_all(job: int) -> int:
    return 2 * job


def mgid_workers(job: int) -> int:
    return 2 * job + 1


def rid(job: int, member: int) -> int:
    """Egress rid of worker ``member`` (0..31) or of the PS (``PS_MEMBER``)."""
    return job * RID_STRIDE + 1 + member


def _replica(h: Host) -> Replica:
    return Replica(mac_to_int(h.mac), ip_to_int(h.ip), h.udp_port)


def desired(hosts: list[Host], jobs: list[JobPlan], policy: PolicyEntry) -> SwitchEntries:
    out = SwitchEntries(policy=policy)
    for h in hosts:
        out.l2[mac_to_int(h.mac)] = L2Entry(port=h.port)
    if hosts:
        out.l2[BROADCAST_MAC] = L2Entry(mgid=BCAST_MGID)
        out.groups[BCAST_MGID] = frozenset((port, 0) for port in {h.port for h in hosts})
    for j in jobs:
        n = len(j.workers)
        out.jobs[j.job] = JobEntry(
            fan_in=n,
            worker_mask=(1 << n) - 1,
            prio=j.prio,
            ps_port=j.ps.port,
            mgid_all=mgid_all(j.job),
            mgid_workers=mgid_workers(j.job),
            part_base=j.part_base,
            part_size=j.part_size,
        )
        out.ps_routes[j.job] = PsRoute(j.ps.port, mac_to_int(j.ps.mac), ip_to_int(j.ps.ip))
        workers = frozenset((w.port, rid(j.job, i)) for i, w in enumerate(j.workers))
        ps_rid = rid(j.job, PS_MEMBER)
        out.groups[mgid_workers(j.job)] = workers
        out.groups[mgid_all(j.job)] = workers | {(j.ps.port, ps_rid)}
        for i, w in enumerate(j.workers):
            out.replicas[rid(j.job, i)] = _replica(w)
        out.replicas[ps_rid] = _replica(j.ps)
    return out
