"""The admin API's vocabulary: each RPC once, with its request and its reply.

Every RPC is an ``Rpc`` below, naming its request and reply dataclasses; the
server (``controller.admin``), the client and its CLI (``controller.cli``),
the controller's handlers and views all use these types, so an RPC's name
and its fields are spelled here and nowhere else.  Field names are the JSON
keys on the wire, and ``controller.codec`` converts at the edge, checking a
request against the field types (a field whose type admits ``None`` is
optional, every other one is required).  ``admin.proto`` documents the same
messages for readers; ``tests/test_controller_messages.py`` keeps the two
equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

SERVICE = "esa.admin.v1.Admin"


@dataclass(frozen=True)
class Empty:
    """The request of an RPC that takes no argument."""


@dataclass(frozen=True)
class JobRef:
    job: int


@dataclass(frozen=True)
class AdmitRequest:
    """Exactly one of ``priority`` (static) and ``size`` (auto: bytes to aggregate)."""

    job: int
    workers: tuple[str, ...]
    """host names, IPv4 or MAC addresses, or ``port:N``; worker ``i`` owns bit ``i``."""
    ps: str
    priority: int | None = None
    size: int | None = None


@dataclass(frozen=True)
class PrioRequest:
    """A static priority, or a size hint that makes the job auto."""

    job: int
    priority: int | None = None
    size: int | None = None


@dataclass(frozen=True)
class ProgressRequest:
    job: int
    remaining: int
    """bytes the (auto) job still has to aggregate."""


@dataclass(frozen=True)
class JobInfo:
    job: int
    workers: tuple[str, ...]
    ps: str
    mode: str
    """``static`` or ``auto``."""
    priority: int | None
    """what the switch holds now; None before the job's entry is written."""
    static_priority: int | None
    remaining: int | None
    admitted_at: float
    """unix time."""
    partition: tuple[int, ...] | None
    """``(part_base, part_size)``; None before the job's entry is written."""
    mgid_all: int
    mgid_workers: int


@dataclass(frozen=True)
class Removed:
    job: int
    removed: bool


@dataclass(frozen=True)
class JobList:
    jobs: tuple[JobInfo, ...]


@dataclass(frozen=True)
class PolicyRequest:
    """Unchanged when absent: ``stale_us`` and ``part_size``; ``squat_us``
    takes the policy's default (``esa.spec.default_squat_us``), 0 is off."""

    policy: str
    stale_us: int | None = None
    squat_us: int | None = None
    part_size: int | None = None


@dataclass(frozen=True)
class PolicyState:
    policy: str
    stale_us: int
    squat_us: int
    part_size: int
    """static partitions of this many slots; 0: an equal split."""


@dataclass(frozen=True)
class SwitchLink:
    address: str
    connected: bool


@dataclass(frozen=True)
class HostInfo:
    port: int
    mac: str
    ip: str
    udp_port: int


@dataclass(frozen=True)
class Status:
    switch: SwitchLink
    policy: str
    stale_us: int
    squat_us: int
    part_size: int
    pool_size: int
    jobs: int
    entries: int
    """table entries and multicast groups installed."""
    aging_period_s: float
    hosts: dict[str, HostInfo]


@dataclass(frozen=True)
class Stats:
    jobs: dict[int, dict[str, int]]
    """job id -> event (``esa.spec.Event`` name, lower case) -> packets."""
    drops: dict[str, int]
    """``esa.spec.Drop`` name, lower case -> packets."""


@dataclass(frozen=True)
class Slots:
    pool_size: int
    used: int
    """slots with an owner."""
    by_job: dict[int, int]
    """job id -> slots it holds."""


@dataclass(frozen=True)
class Identity:
    pid: int
    state_file: str
    """absolute path."""


Req = TypeVar("Req")
Rep = TypeVar("Rep")


@dataclass(frozen=True)
class Rpc(Generic[Req, Rep]):
    name: str
    request: type[Req]
    reply: type[Rep]


ADMIT = Rpc("Admit", AdmitRequest, JobInfo)
REMOVE = Rpc("Remove", JobRef, Removed)
JOBS = Rpc("Jobs", Empty, JobList)
PRIO = Rpc("Prio", PrioRequest, JobInfo)
PROGRESS = Rpc("Progress", ProgressRequest, JobInfo)
POLICY = Rpc("Policy", PolicyRequest, PolicyState)
STATUS = Rpc("Status", Empty, Status)
STATS = Rpc("Stats", Empty, Stats)
SLOTS = Rpc("Slots", Empty, Slots)
IDENTIFY = Rpc("Identify", Empty, Identity)
"""Which controller serves here: answered without waiting for a request in
progress (a second ``serve`` names the first with it)."""

RPCS: dict[str, Rpc[Any, Any]] = {
    rpc.name: rpc
    for rpc in (ADMIT, REMOVE, JOBS, PRIO, PROGRESS, POLICY, STATUS, STATS, SLOTS, IDENTIFY)
}
