"""The controller's checks of a request against the world it acts on.

``controller.api.codec`` has already checked each field's kind; what is left
needs the numbers' meaning or the controller's state: ranges, job ids
admitted or not, hosts of the topology, worker and PS counts.  Each check
raises the ``ControllerError`` the admin API answers with and changes
nothing, so a refused request leaves the switch and the state file as they
were.  The checks repeat the kind checks where a value can still be of the
wrong kind (a ``bool`` is an ``int``; the controller is also called
directly).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import TypeVar

from controller.api.codec import MAX_INT
from controller.api.messages import AdmitRequest, PolicyRequest
from controller.device.entries import PolicyEntry
from controller.errors import AlreadyExists, FailedPrecondition, InvalidRequest, NotFound
from controller.world.partition import Layout, layout_named
from controller.world.state import JobRecord
from controller.world.topology import Host, Topology
from esa import wire
from esa.job import (
    PS_COUNTS,
    Mode,
    Placement,
    Priority,
    check_job_id,
    check_priority,
    valid_shards,
)
from esa.ranges import check_range
from esa.schemes import POLICY_NAMES
from esa.spec import Policy, check_squat_us, check_stale_us, default_squat_us

MIN_WORKERS = 2
MAX_PART_SIZE = 2**32 - 1
"""a slot index is 32 bits wide; the pool size bounds it further."""


V = TypeVar("V")
T = TypeVar("T")


def valid(check: Callable[[V], T], value: V) -> T:
    """``check(value)``, its ``ValueError`` the request's ``InvalidRequest``."""
    try:
        return check(value)
    except ValueError as e:
        raise InvalidRequest(str(e)) from None


def check_volume(what: str, volume: object) -> int:
    """Bytes a job still has to aggregate (a size hint, a progress report):
    0..2^63-1, what the state file stores; the one check of that range, for
    esa-ctl's arguments and the controller's requests."""
    return check_range(what, volume, 0, MAX_INT, "0..2^63-1")


def job_id(job: object) -> int:
    return valid(check_job_id, job)


def known_job(job: object, jobs: Mapping[int, JobRecord]) -> JobRecord:
    """The record of an admitted job (``NotFound`` otherwise)."""
    job = job_id(job)
    if job not in jobs:
        raise NotFound(f"unknown job {job}")
    return jobs[job]


def job_priority(priority: int | None, size: int | None) -> Priority:
    """A static priority or an SRPT size hint: exactly one of them."""
    if (priority is None) == (size is None):
        raise InvalidRequest("give either a priority (static) or a size hint in bytes (auto)")
    if priority is not None:
        return Priority.static(valid(check_priority, priority))
    return Priority.auto(valid(partial(check_volume, "size hint"), size))


def auto_job(rec: JobRecord) -> JobRecord:
    """``rec`` if its priority is automatic: progress applies to those only."""
    if rec.priority.mode is not Mode.AUTO:
        raise FailedPrecondition(
            f"job {rec.job} has a static priority; progress applies to auto jobs"
        )
    return rec


def admission(
    req: AdmitRequest, topology: Topology, jobs: Mapping[int, JobRecord], now: float
) -> JobRecord:
    """The record of a job to admit at ``now``: a new id, 2..32 workers and
    1, 2, 4 or 8 PS hosts, each a distinct host of the topology, and one
    priority mode."""
    job = job_id(req.job)
    if job in jobs:
        raise AlreadyExists(f"job {job} already exists: remove it first")
    if len(req.workers) > wire.MAX_WORKERS:
        raise InvalidRequest(
            f"job {job} has {len(req.workers)} workers; at most {wire.MAX_WORKERS} "
            "(one bit each in the worker bitmap)"
        )
    if len(req.workers) < MIN_WORKERS:
        raise InvalidRequest(
            f"job {job} has {len(req.workers)} worker(s); at least {MIN_WORKERS} are needed: "
            "a one-worker job has nothing to aggregate, run it without the switch"
        )
    if not valid_shards(len(req.ps)):
        raise InvalidRequest(f"job {job} has {len(req.ps)} PS hosts; {PS_COUNTS}")
    priority = job_priority(req.priority, req.size)
    workers = [topology.resolve(w).name for w in req.workers]
    ps = [topology.resolve(p).name for p in req.ps]
    for names, what in ((workers, "worker(s)"), (ps, "PS host(s)")):
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise InvalidRequest(f"job {job}: {what} listed twice: {', '.join(dup)}")
    both = sorted(set(workers) & set(ps))
    if both:
        raise InvalidRequest(f"job {job}: {', '.join(both)} cannot be both worker and PS")
    return JobRecord(job, Placement(tuple(workers), tuple(ps)), priority, now)


def policy_name(name: object) -> Policy:
    try:
        return Policy[str(name).upper()]
    except KeyError:
        names = "|".join(POLICY_NAMES)
        raise InvalidRequest(f"unknown policy {name!r} (expected {names})") from None


def policy_change(
    req: PolicyRequest, current: PolicyEntry, part_size: int, layout: Layout, pool_size: int
) -> tuple[PolicyEntry, int, Layout]:
    """The policy entry, partition size and ESA layout a request asks for:
    the stale timeout, the partition size and the layout stay as they were
    unless given, the squat timeout is the policy's default unless given
    (0 turns it off)."""
    policy = policy_name(req.policy)
    stale_us = valid(check_stale_us, current.stale_us if req.stale_us is None else req.stale_us)
    squat_us = valid(
        check_squat_us, default_squat_us(policy) if req.squat_us is None else req.squat_us
    )
    size = part_size if req.part_size is None else req.part_size
    size = valid(lambda n: check_range("partition size", n, 0, pool_size), size)
    chosen = layout if req.layout is None else valid(layout_named, req.layout)
    return PolicyEntry(policy, stale_us, squat_us), size, chosen


def hosts_known(jobs: Mapping[int, JobRecord], hosts: Mapping[str, Host]) -> None:
    """Every host the persisted jobs use is still in the topology."""
    for rec in jobs.values():
        for name in (*rec.placement.workers, *rec.placement.ps):
            if name not in hosts:
                raise InvalidRequest(
                    f"job {rec.job} uses host {name!r}, which the topology no longer has"
                )


def devices(name: str | None, known: Iterable[str]) -> list[str]:
    """The switches a view asks for: the one named, or all (``None``)."""
    names = list(known)
    if name is None:
        return names
    if name not in names:
        raise NotFound(f"unknown device {name!r} (devices: {', '.join(names)})")
    return [name]
