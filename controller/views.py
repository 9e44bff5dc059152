"""The admin API's replies, built from the controller's records.

A reply joins what the state file holds (``JobRecord``, ``State``) with what
the switch was last given (``JobEntry``: a job's priority and partition are
the planner's, not the request's).  Nothing here decides or checks anything.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from controller.entries import JobEntry, PolicyEntry
from controller.messages import HostInfo, JobInfo, PolicyState, Slots, Stats, Status, SwitchLink
from controller.state import JobRecord, State
from controller.switch import Counters
from controller.topology import Host
from esa.job import Mode
from esa.spec import Event, mgid_all, mgid_workers


def job_info(rec: JobRecord, entry: JobEntry | None) -> JobInfo:
    """A job as admitted, with its entry on the switch if it has one."""
    return JobInfo(
        job=rec.job,
        workers=rec.workers,
        ps=rec.ps,
        mode=rec.spec.mode.value,
        priority=entry.prio if entry else None,
        static_priority=rec.spec.priority if rec.spec.mode is Mode.STATIC else None,
        remaining=rec.spec.remaining if rec.spec.mode is Mode.AUTO else None,
        admitted_at=rec.admitted_at,
        partition=(entry.part_base, entry.part_size) if entry else None,
        mgid_all=mgid_all(rec.job),
        mgid_workers=mgid_workers(rec.job),
    )


def policy_state(policy: PolicyEntry, part_size: int) -> PolicyState:
    return PolicyState(policy.policy.name.lower(), policy.stale_us, policy.squat_us, part_size)


def host_info(h: Host) -> HostInfo:
    return HostInfo(port=h.port, mac=h.mac, ip=h.ip, udp_port=h.udp_port)


def status(
    link: SwitchLink,
    state: State,
    pool_size: int,
    entries: int,
    aging_period_s: float,
    hosts: Mapping[str, Host],
) -> Status:
    policy = policy_state(state.policy, state.part_size)
    return Status(
        switch=link,
        policy=policy.policy,
        stale_us=policy.stale_us,
        squat_us=policy.squat_us,
        part_size=policy.part_size,
        pool_size=pool_size,
        jobs=len(state.jobs),
        entries=entries,
        aging_period_s=aging_period_s,
        hosts={n: host_info(h) for n, h in sorted(hosts.items())},
    )


def stats(counters: Counters, jobs: Iterable[int]) -> Stats:
    """Every event of every admitted job (zeros included), and every drop reason."""
    return Stats(
        jobs={
            j: {e.name.lower(): counters.events.get(j, {}).get(e, 0) for e in Event} for j in jobs
        },
        drops={d.name.lower(): n for d, n in counters.drops.items()},
    )


def slots(owners: list[int]) -> Slots:
    """Pool size, slots in use, and slots held per job (``owner >> 32``)."""
    held = Counter(o >> 32 for o in owners if o)
    return Slots(pool_size=len(owners), used=sum(held.values()), by_job=dict(sorted(held.items())))
