"""Carrying out a run's faults (``runner.faults``) at their times.

A restart is judged on the switches themselves: the entries each holds are
read over a read-only P4Runtime session just before the crash and again
after it, while the run's own writes wait (``Ctl.quiet``); the fault
succeeded when the two are equal on every switch within RESYNC_TIMEOUT_S.
A killed worker's job is expected to fail; the run reports how.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from controller.device.entries import SwitchEntries
from controller.errors import ControllerError
from runner.ctl import Ctl
from runner.faults import Fault, FaultKind
from runner.world import World

RESYNC_TIMEOUT_S = 30.0

KillWorker = Callable[[int, int, Fault], bool]
"""Kills worker (job, index) for ``fault``; False when it was not running."""


@dataclass(frozen=True)
class FaultEvent:
    fault: Fault
    at_s: float
    """when it was carried out, seconds into the run."""
    what: str
    ok: bool
    """False when the restarted pieces did not re-sync."""


Entries = dict[str, SwitchEntries]
"""what each switch holds, by name."""


def _differences(before: Entries, after: Entries) -> str:
    kinds = ("jobs", "l2", "ps_routes", "replicas", "groups", "policy")
    diff = []
    for name, held in before.items():
        now = after.get(name, SwitchEntries())
        kind = [k for k in kinds if getattr(held, k) != getattr(now, k)]
        diff += [f"{name} {k}" if len(before) > 1 else k for k in kind]
    return ", ".join(diff) or "none"


class Injector:
    """Runs ``faults`` on a thread, each at ``t0 + fault.at_s``."""

    def __init__(
        self, faults: tuple[Fault, ...], world: World, ctl: Ctl, kill: KillWorker, t0: float
    ) -> None:
        self.faults = sorted(faults, key=lambda f: f.at_s)
        self.world, self.ctl, self.kill = world, ctl, kill
        self.t0 = t0
        self.events: list[FaultEvent] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="faults", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        for fault in self.faults:
            if self._stop.wait(max(0.0, self.t0 + fault.at_s - time.monotonic())):
                return
            at = time.monotonic() - self.t0
            try:
                what, ok = self._carry_out(fault)
            except Exception as e:  # any failure to carry it out fails the run, by name
                what, ok = f"could not be carried out: {type(e).__name__}: {e}", False
            self.events.append(FaultEvent(fault, at, what, ok))

    def _carry_out(self, fault: Fault) -> tuple[str, bool]:
        if fault.kind is FaultKind.KILL_WORKER:
            if self.kill(fault.job, fault.index, fault):
                return f"killed worker {fault.index} of job {fault.job}", True
            return f"worker {fault.index} of job {fault.job} was not running; nothing killed", True
        with self.ctl.quiet:
            before = self.world.entries()
            started = time.monotonic()
            if fault.kind is FaultKind.BMV2_RESTART:
                self.world.restart_switch(fault.switch)
                piece = f"{self.world.program.kind.label} killed and restarted empty"
                if len(before) > 1:
                    piece = f"{fault.switch or self.world.topo.default_switch}: {piece}"
            else:
                self.world.restart_controller()
                piece = "controller killed and restarted on its state file"
            after = self._resynced(before)
            took = time.monotonic() - started
        held, whose = "the switch holds", "the switch's"
        if len(before) > 1:
            held, whose = "the switches hold", "the switches'"
        if after == before:
            count = sum(e.count() for e in before.values())
            return f"{piece}; {held} the same {count} entries as before ({took:.1f} s)", True
        return (
            f"{piece}; after {RESYNC_TIMEOUT_S:g} s {whose} entries differ from "
            f"before in: {_differences(before, after)}",
            False,
        )

    def _resynced(self, before: Entries) -> Entries:
        """The switches' entries once they equal ``before``, or at the deadline."""
        deadline = time.monotonic() + RESYNC_TIMEOUT_S
        after: Entries = {}
        while time.monotonic() < deadline:
            try:
                after = self.world.entries()
            except ControllerError:
                after = {}
            if after == before:
                break
            time.sleep(0.3)
        return after
