"""The switch's control-plane state as plain values.

``SwitchEntries`` is both what the controller wants on the switch (built by
``controller.world.plan``) and what it reads back (``Switch.read_entries``), so
reconciliation is a comparison of two of these.  Keys and values are ints
and small frozen records, never protobuf objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from esa.jobrow import JobEntry
from esa.spec import DEFAULT_STALE_US, Policy, default_squat_us


@dataclass(frozen=True)
class PolicyEntry:
    """Action data of ``set_policy``: the policy and its two timeouts (microseconds)."""

    policy: Policy = Policy.ESA
    stale_us: int = DEFAULT_STALE_US
    squat_us: int = default_squat_us(Policy.ESA)


@dataclass(frozen=True)
class L2Entry:
    """``to_port(port)`` when ``mgid`` is 0, else ``flood(mgid)``."""

    port: int = 0
    mgid: int = 0


@dataclass(frozen=True, order=True)
class ShardKey:
    """A key of the ``ps_route`` table: the job, exact, and the sequence
    number's low bits, ternary: chunk ``seq`` of ``job`` matches when
    ``seq & mask == value``."""

    job: int
    value: int
    mask: int

    @classmethod
    def of(cls, job: int, shard: int, shards: int) -> ShardKey:
        """The entry of shard ``shard`` of a job with ``shards`` PS hosts."""
        return cls(job, shard, shards - 1)


@dataclass(frozen=True, order=True)
class ChildKey:
    """A key of the ``children`` table: a job and the port of a child switch."""

    job: int
    port: int


@dataclass(frozen=True)
class Child:
    """``set_child``: the workers below a child switch, whose sum arrives
    with exactly these bits (one contribution toward the fan-in)."""

    bitmap: int


@dataclass(frozen=True)
class PsRoute:
    """``set_ps``: the PS of one shard, and the group a sum completed in the
    switch goes to (the job's workers and that PS); with ``switch_ip``, a
    sum sent to that PS alone (ATP's held sum) leaves with that source, as
    a ``Replica``'s copy does."""

    port: int
    mac: int
    ip: int
    mgid_all: int
    switch_ip: int | None = None


@dataclass(frozen=True)
class Replica:
    """``set_dst``: where one multicast copy is addressed; with
    ``switch_ip``, ``set_dst_from_switch``: the copy also leaves with that
    source, the address of the switch where the job's sums complete (a PS's
    copy of such a sum; ``controller.world.plan.JobPlan.switch_ip``)."""

    mac: int
    ip: int
    udp_port: int
    switch_ip: int | None = None


Members = frozenset[tuple[int, int]]
"""A multicast group's replicas as ``(egress port, rid)`` pairs."""


@dataclass
class SwitchEntries:
    policy: PolicyEntry = field(default_factory=PolicyEntry)
    jobs: dict[int, JobEntry] = field(default_factory=dict)
    l2: dict[int, L2Entry] = field(default_factory=dict)
    """keyed by destination MAC as an int."""
    children: dict[ChildKey, Child] = field(default_factory=dict)
    ps_routes: dict[ShardKey, PsRoute] = field(default_factory=dict)
    replicas: dict[int, Replica] = field(default_factory=dict)
    """keyed by egress rid."""
    groups: dict[int, Members] = field(default_factory=dict)
    """keyed by multicast group id."""

    def count(self) -> int:
        """Number of entries and groups (the policy default not counted)."""
        tables = (self.jobs, self.children, self.l2, self.ps_routes, self.replicas, self.groups)
        return sum(len(t) for t in tables)
