"""An in-memory switch with BMv2's write rules, for tests and dry runs.

It refuses what P4Runtime refuses (inserting an existing key, modifying or
deleting a missing one) and applies a batch update by update, as BMv2 does,
so a reconciliation bug shows up here as it would on the real switch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from controller.device.entries import PolicyEntry, SwitchEntries
from controller.device.switch import Change, Counters, Switch, counters_from_indices
from controller.errors import SwitchError, SwitchUnavailable
from esa.spec import EVENTS_PER_JOB, Drop
from esa.target import Op


class MemorySwitch(Switch):
    def __init__(self) -> None:
        self.entries = SwitchEntries()
        self.job_events: dict[int, int] = {}
        self.drops: dict[Drop, int] = {}
        self.up = True
        self.batches: list[list[Change]] = []
        self.policy_writes = 0
        self.closed = False

    def _check(self) -> None:
        if not self.up:
            raise SwitchUnavailable("switch unreachable at memory")

    @property
    def alive(self) -> bool:
        return self.up and not self.closed

    def close(self) -> None:
        self.closed = True

    def apply(self, changes: list[Change]) -> None:
        self._check()
        self.batches.append(list(changes))
        errors = []
        for c in changes:
            table: dict[Any, Any] = getattr(self.entries, c.kind.value)
            if c.op is Op.INSERT and c.key in table:
                errors.append(f"{c.kind.value} {c.key}: already exists")
            elif c.op is not Op.INSERT and c.key not in table:
                errors.append(f"{c.kind.value} {c.key}: not found")
            elif c.op is Op.DELETE:
                del table[c.key]
            else:
                table[c.key] = c.value
        if errors:
            raise SwitchError("switch refused the request: " + "; ".join(errors))

    def set_policy(self, entry: PolicyEntry) -> None:
        self._check()
        self.policy_writes += 1
        self.entries.policy = entry

    def read_entries(self) -> SwitchEntries:
        self._check()
        e = self.entries
        return replace(
            e,
            jobs=dict(e.jobs),
            children=dict(e.children),
            l2=dict(e.l2),
            ps_routes=dict(e.ps_routes),
            replicas=dict(e.replicas),
            groups=dict(e.groups),
        )

    def read_counters(self, jobs: Iterable[int] | None = None) -> Counters:
        self._check()
        out = counters_from_indices(self.job_events)
        if jobs is not None:
            out.events = {j: out.events[j] for j in set(jobs) if j in out.events}
        out.drops = {d: self.drops.get(d, 0) for d in Drop}
        return out

    def reset_job_counters(self, job: int) -> None:
        self._check()
        for i in range(job * EVENTS_PER_JOB, (job + 1) * EVENTS_PER_JOB):
            self.job_events.pop(i, None)

    def restart(self) -> None:
        """Lose every entry, as a restarted BMv2 does."""
        self.entries = SwitchEntries()
        self.job_events.clear()
        self.drops.clear()
