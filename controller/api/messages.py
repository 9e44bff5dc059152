"""The admin API's vocabulary: each RPC once, with its request and its reply.

Every RPC is an ``Rpc`` below, naming its request and reply dataclasses; the
server (``controller.api.admin``), the client and its CLI (``controller.api.cli``),
the controller's handlers and views all use these types, so an RPC's name
and its fields are spelled here and nowhere else.  Field names are the JSON
keys on the wire, and ``controller.api.codec`` converts at the edge, checking a
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
class DeviceRef:
    """One switch of the fabric by name, or all of them (``None``)."""

    device: str | None = None


@dataclass(frozen=True)
class AdmitRequest:
    """Exactly one of ``priority`` (static) and ``size`` (auto: bytes to aggregate)."""

    job: int
    workers: tuple[str, ...]
    """host names, IPv4 or MAC addresses, or ``port:N``; worker ``i`` owns bit ``i``."""
    ps: tuple[str, ...]
    """1, 2, 4 or 8 PS hosts (the same forms); chunk ``seq`` goes to
    ``ps[esa.job.ps_shard(seq, len(ps))]``."""
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
class JobPart:
    """A job's entry on one switch."""

    fan_in: int
    """contributions that make a sum there: local workers and child switches."""
    worker_mask: int
    partition: tuple[int, ...]
    """``(part_base, part_size)`` of that switch's pool."""


@dataclass(frozen=True)
class JobInfo:
    job: int
    workers: tuple[str, ...]
    ps: tuple[str, ...]
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
    mgid_all: tuple[int, ...]
    """per PS shard, the group of the job's workers and that shard's PS."""
    mgid_workers: int
    top: str
    """the switch where the job's sums complete; ``priority`` and
    ``partition`` are its entry's."""
    switches: dict[str, JobPart]
    """the job's entry on each switch that holds one, in the fabric's order."""


@dataclass(frozen=True)
class Removed:
    job: int
    removed: bool


@dataclass(frozen=True)
class JobList:
    jobs: tuple[JobInfo, ...]


@dataclass(frozen=True)
class PolicyRequest:
    """Unchanged when absent: ``stale_us``, ``part_size`` and ``layout``;
    ``squat_us`` takes the policy's default (``esa.spec.default_squat_us``),
    0 is off."""

    policy: str
    stale_us: int | None = None
    squat_us: int | None = None
    part_size: int | None = None
    layout: str | None = None
    """ESA's layout, ``controller.world.partition.LAYOUT_NAMES``."""


@dataclass(frozen=True)
class PolicyState:
    policy: str
    stale_us: int
    squat_us: int
    part_size: int
    """static partitions of this many slots; 0: an equal split."""
    layout: str
    """ESA's layout: homes (its partitions) or every job hashed."""


@dataclass(frozen=True)
class SwitchLink:
    name: str
    device_id: int
    address: str
    connected: bool
    jobs: int
    """jobs with an entry on this switch."""
    entries: int
    """table entries and multicast groups installed."""


@dataclass(frozen=True)
class HostInfo:
    switch: str
    """the switch the host hangs off; ``port`` is on it."""
    port: int
    mac: str
    ip: str
    udp_port: int


@dataclass(frozen=True)
class Status:
    switches: tuple[SwitchLink, ...]
    """in the fabric's order."""
    policy: str
    stale_us: int
    squat_us: int
    part_size: int
    layout: str
    pool_size: int
    jobs: int
    entries: int
    """table entries and multicast groups installed, on all switches."""
    aging_period_s: float
    hosts: dict[str, HostInfo]


@dataclass(frozen=True)
class SwitchStats:
    jobs: dict[int, dict[str, int]]
    """job id -> event (``esa.spec.Event`` name, lower case) -> packets, for
    the jobs with an entry on the switch."""
    drops: dict[str, int]
    """``esa.spec.Drop`` name, lower case -> packets."""


@dataclass(frozen=True)
class Stats:
    jobs: dict[int, dict[str, int]]
    """every admitted job, its counts summed over ``switches``."""
    drops: dict[str, int]
    """summed over ``switches``."""
    switches: dict[str, SwitchStats]
    """the switches asked for, in the fabric's order."""


@dataclass(frozen=True)
class SwitchSlots:
    pool_size: int
    used: int
    """slots with an owner."""
    by_job: dict[int, int]
    """job id -> slots it holds."""


@dataclass(frozen=True)
class Slots:
    pool_size: int
    used: int
    by_job: dict[int, int]
    """each summed over ``switches``."""
    switches: dict[str, SwitchSlots]
    """the switches asked for, in the fabric's order."""


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
STATS = Rpc("Stats", DeviceRef, Stats)
SLOTS = Rpc("Slots", DeviceRef, Slots)
IDENTIFY = Rpc("Identify", Empty, Identity)
"""Which controller serves here: answered without waiting for a request in
progress (a second ``serve`` names the first with it)."""

RPCS: dict[str, Rpc[Any, Any]] = {
    rpc.name: rpc
    for rpc in (ADMIT, REMOVE, JOBS, PRIO, PROGRESS, POLICY, STATUS, STATS, SLOTS, IDENTIFY)
}
