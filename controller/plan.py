"""The entries the switch must hold for a set of jobs: pure functions.

``entries_for`` turns the controller's state into one ``JobPlan`` per job,
its priority from ``controller.priority`` and its partition from
``controller.partition``; ``desired`` turns the plans into entries.

Identifiers are derived from the job id, never allocated, so a restarted
controller computes the same groups and rids as the one before it and
reconciliation finds nothing to change: multicast groups and egress
replication ids are ``esa.spec.mgid_all``, ``mgid_workers`` and ``rid``; a
worker has one rid in both of its job's groups, and group ``BCAST_MGID``
floods L2 broadcast to every host port with rid 0, which the egress leaves
unrewritten.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from controller.entries import JobEntry, L2Entry, PolicyEntry, PsRoute, Replica, SwitchEntries
from controller.partition import partition
from controller.priority import Admission, priorities
from controller.state import State
from controller.topology import Host, ip_to_int, mac_to_int
from esa.spec import BCAST_MGID, PS_MEMBER, mgid_all, mgid_workers, rid

BROADCAST_MAC = 0xFFFFFFFFFFFF


@dataclass(frozen=True)
class JobPlan:
    """What the plan needs of one admitted job."""

    job: int
    workers: tuple[Host, ...]
    ps: Host
    prio: int
    part_base: int
    part_size: int


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


def entries_for(
    state: State,
    hosts: Mapping[str, Host],
    pool_size: int,
    aging_period_s: float,
    held: SwitchEntries,
) -> SwitchEntries:
    """The complete entry set for ``state``; ``held`` is what the switch holds
    now, whose fixed partitions stay where they are.  Auto priorities are
    ranks among all auto jobs, so a change of one job can move others: the
    reconciliation rewrites every job entry whose priority changed."""
    jobs = state.jobs.values()
    order = [r.job for r in sorted(jobs, key=lambda r: (r.admitted_at, r.job))]
    kept = {j: (e.part_base, e.part_size) for j, e in held.jobs.items()}
    parts = partition(pool_size, order, state.part_size, kept)
    prios = priorities((Admission(r.job, r.spec, r.admitted_at) for r in jobs), aging_period_s)
    plans = [
        JobPlan(
            job=rec.job,
            workers=tuple(hosts[w] for w in rec.workers),
            ps=hosts[rec.ps],
            prio=prios[rec.job],
            part_base=parts[rec.job][0],
            part_size=parts[rec.job][1],
        )
        for rec in jobs
    ]
    return desired(list(hosts.values()), plans, state.policy)
