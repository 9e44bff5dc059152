"""The admin API's replies, built from the controller's records.

A reply joins what the state file holds (``JobRecord``, ``State``) with what
each switch was last given (``JobEntry``: a job's priority and partition are
the planner's, not the request's).  Nothing here decides or checks anything.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from controller.api.messages import (
    HostInfo,
    JobInfo,
    JobPart,
    PolicyState,
    Slots,
    Stats,
    Status,
    SwitchLink,
    SwitchSlots,
    SwitchStats,
)
from controller.device.entries import PolicyEntry, SwitchEntries
from controller.device.switch import Counters
from controller.world.fabric import Device, Fabric
from controller.world.partition import Layout
from controller.world.state import JobRecord, State
from esa.job import Mode
from esa.jobrow import JobEntry
from esa.spec import Drop, Event, mgid_all, mgid_workers


def job_info(rec: JobRecord, top: str, entries: Mapping[str, JobEntry]) -> JobInfo:
    """A job as admitted, with its entry on each switch that holds one;
    ``top`` is where its sums complete."""
    entry = entries.get(top)
    return JobInfo(
        job=rec.job,
        workers=rec.placement.workers,
        ps=rec.placement.ps,
        mode=rec.priority.mode.value,
        priority=entry.priority if entry else None,
        static_priority=rec.priority.priority if rec.priority.mode is Mode.STATIC else None,
        remaining=rec.priority.remaining if rec.priority.mode is Mode.AUTO else None,
        admitted_at=rec.admitted_at,
        partition=(entry.part_base, entry.part_size) if entry else None,
        mgid_all=tuple(mgid_all(rec.job, shard) for shard in range(len(rec.placement.ps))),
        mgid_workers=mgid_workers(rec.job),
        top=top,
        switches={
            name: JobPart(e.fan_in, e.worker_mask, (e.part_base, e.part_size))
            for name, e in entries.items()
        },
    )


def policy_state(policy: PolicyEntry, part_size: int, layout: Layout) -> PolicyState:
    return PolicyState(
        policy.policy.name.lower(), policy.stale_us, policy.squat_us, part_size, layout.value
    )


def switch_link(device: Device, connected: bool, applied: SwitchEntries) -> SwitchLink:
    return SwitchLink(
        name=device.name,
        device_id=device.device_id,
        address=device.p4runtime,
        connected=connected,
        jobs=len(applied.jobs),
        entries=applied.count(),
    )


def status(
    links: list[SwitchLink],
    state: State,
    pool_size: int,
    aging_period_s: float,
    fabric: Fabric,
) -> Status:
    policy = policy_state(state.policy, state.part_size, state.layout)
    return Status(
        switches=tuple(links),
        policy=policy.policy,
        stale_us=policy.stale_us,
        squat_us=policy.squat_us,
        part_size=policy.part_size,
        layout=policy.layout,
        pool_size=pool_size,
        jobs=len(state.jobs),
        entries=sum(link.entries for link in links),
        aging_period_s=aging_period_s,
        hosts={
            n: HostInfo(fabric.home(n), h.port, h.mac, h.ip, h.udp_port)
            for n, h in sorted(fabric.hosts.items())
        },
    )


def _events(counters: Counters, jobs: Iterable[int]) -> dict[int, dict[str, int]]:
    """Every event of each job, zeros included."""
    return {j: {e.name.lower(): counters.events.get(j, {}).get(e, 0) for e in Event} for j in jobs}


def stats(
    counters: Mapping[str, Counters], held: Mapping[str, Iterable[int]], jobs: Iterable[int]
) -> Stats:
    """Each switch's events of the jobs it ``held`` and its drops; the sums
    over those switches of every admitted job's events (zeros included) and
    of every drop reason."""
    total = {j: {e.name.lower(): 0 for e in Event} for j in jobs}
    drops = {d.name.lower(): 0 for d in Drop}
    switches = {}
    for name, c in counters.items():
        for j, counts in _events(c, total).items():
            for event, n in counts.items():
                total[j][event] += n
        for d, n in c.drops.items():
            drops[d.name.lower()] += n
        switches[name] = SwitchStats(
            jobs=_events(c, sorted(held[name])),
            drops={d.name.lower(): n for d, n in c.drops.items()},
        )
    return Stats(jobs=total, drops=drops, switches=switches)


def _slots(owners: list[int]) -> SwitchSlots:
    """Pool size, slots in use, and slots held per job (``owner >> 32``)."""
    held = Counter(o >> 32 for o in owners if o)
    return SwitchSlots(len(owners), sum(held.values()), dict(sorted(held.items())))


def slots(owners: Mapping[str, list[int]]) -> Slots:
    """Each switch's slots, and their sums."""
    switches = {name: _slots(o) for name, o in owners.items()}
    by_job: Counter[int] = Counter()
    for s in switches.values():
        by_job.update(s.by_job)
    return Slots(
        pool_size=sum(s.pool_size for s in switches.values()),
        used=sum(s.used for s in switches.values()),
        by_job=dict(sorted(by_job.items())),
        switches=switches,
    )
