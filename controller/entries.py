"""The switch's control-plane state as plain values.

``SwitchEntries`` is both what the controller wants on the switch (built by
``controller.plan``) and what it reads back (``Switch.read_entries``), so
reconciliation is a comparison of two of these.  Keys and values are ints
and small frozen records, never protobuf objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from esa.spec import DEFAULT_STALE_US, Policy, default_squat_us


@dataclass(frozen=True)
class PolicyEntry:
    """Action data of ``set_policy``: the policy and its two timeouts (microseconds)."""

    policy: Policy = Policy.ESA
    stale_us: int = DEFAULT_STALE_US
    squat_us: int = default_squat_us(Policy.ESA)


@dataclass(frozen=True)
class JobEntry:
    """Action data of ``set_job``, field for field."""

    fan_in: int
    worker_mask: int
    prio: int
    ps_port: int
    mgid_all: int
    mgid_workers: int
    part_base: int
    part_size: int


@dataclass(frozen=True)
class L2Entry:
    """``to_port(port)`` when ``mgid`` is 0, else ``flood(mgid)``."""

    port: int = 0
    mgid: int = 0


@dataclass(frozen=True)
class PsRoute:
    port: int
    mac: int
    ip: int


@dataclass(frozen=True)
class Replica:
    """``set_dst``: where one multicast copy is addressed."""

    mac: int
    ip: int
    udp_port: int


Members = frozenset[tuple[int, int]]
"""A multicast group's replicas as ``(egress port, rid)`` pairs."""


@dataclass
class SwitchEntries:
    policy: PolicyEntry = field(default_factory=PolicyEntry)
    jobs: dict[int, JobEntry] = field(default_factory=dict)
    l2: dict[int, L2Entry] = field(default_factory=dict)
    """keyed by destination MAC as an int."""
    ps_routes: dict[int, PsRoute] = field(default_factory=dict)
    replicas: dict[int, Replica] = field(default_factory=dict)
    """keyed by egress rid."""
    groups: dict[int, Members] = field(default_factory=dict)
    """keyed by multicast group id."""

    def count(self) -> int:
        """Number of entries and groups (the policy default not counted)."""
        return sum(len(t) for t in (self.jobs, self.l2, self.ps_routes, self.replicas, self.groups))
