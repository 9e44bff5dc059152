"""The entries each switch of the fabric must hold for a set of jobs: pure
functions.

``device_entries`` turns the controller's state into one ``JobPlan`` per job
with a role on one switch (``Fabric.job_roles``): its priority from
``controller.world.priority``, ranked among all jobs, its partition from
``controller.world.partition``, cut from that switch's pool among the jobs it
serves (under ESA handed out in priority order, so that the jobs left
without one when there are more jobs than partitions are the
lowest-ranked), and its hosts as that switch sees them (``Fabric.hosts_as_seen_by``:
a host behind a link is reached through the link's port).  ``desired`` turns
the plans into entries: L2 for every host, whether or not the switch has a
role in any job; a job's entry, PS routes, groups and replicas only where
it has a role.  A transit role (on the way from the job's top to a PS, no
worker below) gets the job's entry with fan-in 0 and no partition (it
holds no slot of the job), the PS routes and the one group toward the top.  On one
switch every job's role holds all its workers, and the plan is the switch's
whole job.

Identifiers are derived from the job id, never allocated, so a restarted
controller computes the same groups and rids as the one before it and
reconciliation finds nothing to change: multicast groups and egress
replication ids are ``esa.spec.mgid_all``, ``mgid_workers`` and ``rid``; a
worker has one rid in all of its job's groups, and group ``BCAST_MGID``
floods L2 broadcast to every host port with rid 0, which the egress leaves
unrewritten.

A job with ``n`` PS hosts (``esa.job.ps_shard``) has one ``ps_route`` entry
per shard, matching ``seq & (n - 1) == shard``, and one "all" group per
shard: its workers and that shard's PS, so a result completed in the switch
makes as many copies as with one PS (docs/dataplane.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from controller.device.entries import (
    Child,
    ChildKey,
    L2Entry,
    Members,
    PolicyEntry,
    PsRoute,
    Replica,
    ShardKey,
    SwitchEntries,
)
from controller.world.fabric import Fabric, JobRole
from controller.world.partition import Layout, by_priority, partition
from controller.world.priority import Admission, priorities
from controller.world.state import JobRecord, State
from controller.world.topology import Host, ip_to_int, mac_to_int
from esa.job import MAX_PS_SHARDS, ps_shard, valid_shards
from esa.jobrow import JobEntry
from esa.spec import BCAST_MGID, PS_MEMBER, Policy, mgid_all, mgid_workers, rid

BROADCAST_MAC = 0xFFFFFFFFFFFF


@dataclass(frozen=True)
class JobPlan:
    """What the plan needs of one admitted job."""

    job: int
    workers: tuple[Host, ...]
    ps: tuple[Host, ...]
    """chunk ``seq`` belongs to ``ps[esa.job.ps_shard(seq, len(ps))]``."""
    priority: int
    part_base: int
    part_size: int
    role: JobRole | None = None
    """what this switch does for the job, its local workers and children
    (``Fabric.job_roles``); None on a switch every worker hangs off."""
    switch_ip: int | None = None
    """the address of the job's top switch, where its sums complete: a PS's
    copy of such a sum (``set_dst_from_switch``) and a sum held for the PS
    (ATP, ``set_ps``) leave with it as their source, the address the PS takes
    them from (``esa-ps --switch-addr``).  None (a fabric that names no
    address for the switch): the PS's copy keeps the PS's own address as its
    source, like a worker's, and a held sum its sender's."""

    def __post_init__(self) -> None:
        if not valid_shards(len(self.ps)):
            raise ValueError(
                f"job {self.job}: {len(self.ps)} PS hosts, not a power of two 1..{MAX_PS_SHARDS}"
            )

    def ps_for(self, seq: int) -> Host:
        return self.ps[ps_shard(seq, len(self.ps))]


def _role(j: JobPlan) -> JobRole:
    """``j``'s role here; on one switch, every worker is local."""
    return j.role or JobRole({h.port: 1 << i for i, h in enumerate(j.workers)}, {}, None)


def job_entry(j: JobPlan) -> JobEntry:
    """The job table's entry for ``j``'s role on this switch.  Below the top
    it is the job's local part: the switch sums its local workers and the
    sums of its children (one contribution each), and sends the complete
    local sum up."""
    role = _role(j)
    return JobEntry(
        fan_in=role.fan_in,
        worker_mask=role.worker_mask,
        priority=j.priority,
        ps_ports=tuple(ps.port for ps in j.ps),
        mgid_workers=mgid_workers(j.job),
        part_base=j.part_base,
        part_size=j.part_size,
        up_port=role.up_port or 0,
    )


def child_entries(j: JobPlan) -> dict[ChildKey, Child]:
    """The ``children`` entries of ``j``'s role: each child port's bitmap."""
    return {ChildKey(j.job, port): Child(bits) for port, bits in _role(j).children.items()}


def job_groups(j: JobPlan) -> dict[int, Members]:
    """The groups of ``j``'s role.  A local worker's copy is addressed to it
    (its rid: worker ``i`` of the job is bit ``i``); a child switch's copy
    leaves as it is (rid 0) and the child addresses its own.  PS results and
    pulls spread over the job's tree: to the local workers, the children and
    the device above (the egress drops the copy back out of the port it came
    in on).  A result to all reaches the PS of the chunk's shard here only
    when that PS is neither above nor behind a child, where the device on its
    way sends its copy.  A transit has only its workers group, the port
    toward the top: nothing completes there, so no result goes to all."""
    role = _role(j)
    locals_ = {(port, rid(j.job, bits.bit_length() - 1)) for port, bits in role.local.items()}
    down = frozenset(locals_ | {(port, 0) for port in role.children})
    up = {(role.up_port, 0)} if role.up_port else set()
    out = {mgid_workers(j.job): down | up}
    if role.transit:
        return out
    for shard, ps in enumerate(j.ps):
        ps_here = ps.port not in role.children and ps.port != role.up_port
        member = {(ps.port, rid(j.job, PS_MEMBER + shard))} if ps_here else set()
        out[mgid_all(j.job, shard)] = down | member
    return out


def _replica(h: Host, switch_ip: int | None = None) -> Replica:
    return Replica(mac_to_int(h.mac), ip_to_int(h.ip), h.udp_port, switch_ip)


def desired(hosts: list[Host], jobs: list[JobPlan], policy: PolicyEntry) -> SwitchEntries:
    out = SwitchEntries(policy=policy)
    for h in hosts:
        out.l2[mac_to_int(h.mac)] = L2Entry(port=h.port)
    if hosts:
        out.l2[BROADCAST_MAC] = L2Entry(mgid=BCAST_MGID)
        out.groups[BCAST_MGID] = frozenset((port, 0) for port in {h.port for h in hosts})
    for j in jobs:
        out.jobs[j.job] = job_entry(j)
        out.children |= child_entries(j)
        out.groups |= job_groups(j)
        local = set(_role(j).local)
        for i, h in enumerate(j.workers):
            if h.port in local:
                out.replicas[rid(j.job, i)] = _replica(h)
        for shard, ps in enumerate(j.ps):
            ps_rid = rid(j.job, PS_MEMBER + shard)
            out.ps_routes[ShardKey.of(j.job, shard, len(j.ps))] = PsRoute(
                ps.port, mac_to_int(ps.mac), ip_to_int(ps.ip), mgid_all(j.job, shard), j.switch_ip
            )
            if (ps.port, ps_rid) in out.groups.get(mgid_all(j.job, shard), ()):
                out.replicas[ps_rid] = _replica(ps, j.switch_ip)
    return out


def roles_on(fabric: Fabric, device: str, jobs: Iterable[JobRecord]) -> dict[int, JobRole]:
    """The role of ``device`` in each job that has one there."""
    out = {}
    for rec in jobs:
        role = fabric.job_roles(rec.placement.workers, rec.placement.ps).get(device)
        if role is not None:
            out[rec.job] = role
    return out


def _top_ip(fabric: Fabric, rec: JobRecord) -> int | None:
    """The address of the switch where ``rec``'s sums complete, if the fabric names one."""
    top = fabric.devices[fabric.top(rec.placement.workers, rec.placement.ps)]
    return None if top.ip is None else ip_to_int(top.ip)


def device_entries(
    state: State,
    fabric: Fabric,
    device: str,
    pool_size: int,
    aging_period_s: float,
    held: SwitchEntries,
    levels: Mapping[int, int] | None = None,
) -> SwitchEntries:
    """The complete entry set of ``device`` for ``state``; ``held`` is what it
    holds now, whose fixed partitions, and ESA's homes of running jobs, stay
    where they are (``partition.esa_homes``).  Auto priorities
    are ranks among all auto jobs of the fabric, so a change of one job can
    move others: the reconciliation rewrites every job entry whose priority
    changed.  The ranks keep, within the swap margin
    (``priority.SWAP_MARGIN``), the order of ``levels``, the priorities the
    jobs hold across the fabric, and of ``held`` for a job ``levels`` lacks:
    every switch is given the same ranks, however much of the fabric it
    held before (a restarted one held none)."""
    jobs = state.jobs.values()
    roles = roles_on(fabric, device, jobs)
    here = [r for r in jobs if r.job in roles]
    summing = [r for r in here if not roles[r.job].transit]
    admissions = (Admission(r.job, r.priority, r.admitted_at) for r in jobs)
    kept_levels = {j: e.priority for j, e in held.jobs.items()} | dict(levels or {})
    prios = priorities(admissions, aging_period_s, kept_levels)
    order = [r.job for r in sorted(summing, key=lambda r: (r.admitted_at, r.job))]
    esa = state.policy.policy is Policy.ESA
    if esa:
        order = by_priority(order, prios)
    kept = {j: (e.part_base, e.part_size) for j, e in held.jobs.items()}
    parts = {r.job: (0, 0) for r in here}
    if not (esa and state.layout is Layout.HASHED):
        parts |= partition(pool_size, order, state.part_size, kept, ranked=esa)
    seen = {h.name: h for h in fabric.hosts_as_seen_by(device)}
    plans = [
        JobPlan(
            job=rec.job,
            workers=tuple(seen[w] for w in rec.placement.workers),
            ps=tuple(seen[p] for p in rec.placement.ps),
            priority=prios[rec.job],
            part_base=parts[rec.job][0],
            part_size=parts[rec.job][1],
            role=roles[rec.job],
            switch_ip=_top_ip(fabric, rec),
        )
        for rec in here
    ]
    return desired(list(seen.values()), plans, state.policy)
