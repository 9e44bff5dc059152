"""The controller's session with one switch: connect, sync, commit, drop.

The session remembers the entries it last wrote (``applied``).  A change is
written as the difference between ``applied`` and the new plan, and
``applied`` moves only once the switch took it.  A broken connection is
dropped; the next ``sync`` reconnects, reads what the switch holds and
reconciles it with the plan, which after a switch restart writes everything
and after a controller restart only the drift.  Each switch of the fabric
has a session of its own, so a restart of one is reconciled on that one
alone.  Callers serialise access (the controller's lock).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from controller.device.entries import SwitchEntries
from controller.device.reconcile import reconcile
from controller.device.switch import Counters, Switch
from controller.errors import SwitchUnavailable

Connector = Callable[[], Switch]
"""Opens a session with the switch, pipeline in place; raises SwitchUnavailable."""

Planner = Callable[[SwitchEntries], SwitchEntries]
"""The entries the switch should hold, given those it holds (fixed static
partitions stay where the switch has them)."""


def remembered(held: SwitchEntries, applied: SwitchEntries) -> SwitchEntries:
    """What the switch holds, and for each job it lost (a switch restarted
    empty) the entry this session last wrote: the plan keeps a job's home
    where the switch had it before the restart, as it keeps one the switch
    still holds, so a restart gives back the entries it lost, not a new
    layout."""
    return dataclasses.replace(held, jobs=applied.jobs | held.jobs)


class SwitchSession:
    def __init__(self, connector: Connector) -> None:
        self.connector = connector
        self.switch: Switch | None = None
        self.applied = SwitchEntries()

    @property
    def connected(self) -> bool:
        return self.switch is not None and self.switch.alive

    def sync(self, plan: Planner) -> int:
        """(Re)connect if needed and make the switch hold the plan; changes written."""
        if self.switch is not None and not self.switch.alive:
            self.drop()
        if self.switch is None:
            self.switch = self.connector()
        try:
            held = self.switch.read_entries()
            want = plan(remembered(held, self.applied))
            n = reconcile(self.switch, want, held)
        except SwitchUnavailable:
            self.drop()
            raise
        self.applied = want
        return n

    def commit(self, plan: Planner, new_job: int | None = None) -> None:
        """Write the plan over what was last applied.  A ``new_job``'s counters
        are zeroed first where the plan gives it an entry, so a reused id
        starts at 0.  Raises
        ``SwitchUnavailable`` (the connection is dropped) or ``SwitchError``
        (the switch is left half-written: the caller syncs it back)."""
        switch = self._live()
        want = plan(self.applied)
        try:
            if new_job is not None and new_job in want.jobs:
                switch.reset_job_counters(new_job)
            reconcile(switch, want, self.applied)
        except SwitchUnavailable:
            self.drop()
            raise
        self.applied = want

    def read_counters(self, jobs: Iterable[int] | None = None) -> Counters:
        switch = self._live()
        try:
            return switch.read_counters(jobs)
        except SwitchUnavailable:
            self.drop()
            raise

    def read_registers(self, *names: str) -> dict[str, list[int]]:
        """Every cell of these register arrays (``Switch.read_registers``)."""
        switch = self._live()
        try:
            return switch.read_registers(*names)
        except SwitchUnavailable:
            self.drop()
            raise

    def drop(self) -> None:
        """Close the connection; the next ``sync`` opens a new one."""
        if self.switch is not None:
            self.switch.close()
        self.switch = None

    def _live(self) -> Switch:
        if self.switch is None or not self.switch.alive:
            raise SwitchUnavailable("switch not connected")
        return self.switch
