"""Bring a switch from the entries it holds to the entries it should hold.

The same diff serves three cases: an admin change (from the entries the
controller last applied to the new plan), a controller restart (from what it
reads back from the switch) and a switch restart (from empty tables).
Writes go in phases so that no packet meets a half-installed job: replicas,
PS routes, groups, L2 and children entries exist before the job entry that
points at them, and a job entry is gone before what it points at is deleted.  Within a
phase the order does not matter, so each phase is one batch.
"""

from __future__ import annotations

from typing import Any

from controller.device.entries import SwitchEntries
from controller.device.switch import Change, Kind, Switch
from esa.target import Op

_SUPPORT = (Kind.REPLICAS, Kind.PS_ROUTES, Kind.GROUPS, Kind.L2, Kind.CHILDREN)


def _diff(kind: Kind, want: dict[Any, Any], have: dict[Any, Any]) -> tuple[list[Change], ...]:
    """(inserts and modifies, deletes) of one collection."""
    writes = [
        Change(kind, Op.MODIFY if key in have else Op.INSERT, key, value)
        for key, value in sorted(want.items())
        if have.get(key) != value
    ]
    deletes = [Change(kind, Op.DELETE, key) for key in sorted(have) if key not in want]
    return writes, deletes


def plan_changes(want: SwitchEntries, have: SwitchEntries) -> list[list[Change]]:
    """The batches that turn ``have`` into ``want``, in the order to apply them."""
    support_writes: list[Change] = []
    support_deletes: list[Change] = []
    for kind in _SUPPORT:
        w, d = _diff(kind, getattr(want, kind.value), getattr(have, kind.value))
        support_writes += w
        support_deletes += d
    job_writes, job_deletes = _diff(Kind.JOBS, want.jobs, have.jobs)
    phases = [support_writes, job_writes, job_deletes, support_deletes]
    return [p for p in phases if p]


def reconcile(switch: Switch, want: SwitchEntries, have: SwitchEntries) -> int:
    """Apply the difference; returns the number of changes written."""
    n = 0
    if want.policy != have.policy:
        switch.set_policy(want.policy)
        n += 1
    for batch in plan_changes(want, have):
        switch.apply(batch)
        n += len(batch)
    return n
