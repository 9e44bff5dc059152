"""What a soak (``bench.soak``) checks, apart from running it: the
switch's entries against the controller's state, the processes' memory and
descriptors, and whether a failed call failed as docs/agreement.md says it
must.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.device.entries import SwitchEntries
from controller.device.switch import P4RuntimeSwitch
from controller.errors import ControllerError
from controller.world.fabric import Fabric
from controller.world.plan import device_entries
from controller.world.priority import DEFAULT_AGING_PERIOD_S
from controller.world.state import Store

READER_ELECTION_ID = (0, 1)
"""Below the controller's: the soak's reads never take the switch from it."""
ASK_S = 3.0
"""How long past its deadline a call may take to fail: the worker asks the
PS hosts who is missing (at most 3 x 0.2 s) on a loaded machine."""
KINDS = ("jobs", "children", "l2", "ps_routes", "replicas", "groups", "policy")


def switch_entries(grpc_addr: str) -> SwitchEntries | None:
    """What the switch holds, over a read-only P4Runtime session (an empty
    set if it runs no program yet); None if it can not be reached."""
    try:
        reader = P4RuntimeSwitch.connect(grpc_addr, 0, READER_ELECTION_ID, require_primary=False)
    except ControllerError:
        return None
    try:
        if reader.session.cookie is None:
            return SwitchEntries()
        return reader.read_entries()
    except ControllerError:
        return None
    finally:
        reader.close()


def disagreement(grpc_addr: str, db: Path, fabric: Fabric, pool: int) -> str | None:
    """None when the switch holds exactly what a controller started on the
    state file would write there (nothing: ``in_agreement`` of
    tests/test_controller_fuzz.py, on the real switch); else what differs."""
    held = switch_entries(grpc_addr)
    if held is None:
        return "the switch does not answer"
    try:
        store = Store(db)
    except ControllerError as e:
        return f"the state file: {e}"
    try:
        state = store.load()
    finally:
        store.close()
    name = next(iter(fabric.devices))
    want = device_entries(state, fabric, name, pool, DEFAULT_AGING_PERIOD_S, held)
    diff = [k for k in KINDS if getattr(want, k) != getattr(held, k)]
    return None if not diff else "differ in " + ", ".join(diff)


# -- processes ----------------------------------------------------------------


def sample(pid: int) -> tuple[int, int] | None:
    """(resident KiB, open descriptors) of a live process, None if gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]), fds
    return None


@dataclass
class Growth:
    """How much a process's memory and descriptors grew over its life."""

    name: str
    seconds: float
    rss_kib: int
    fds: int
    bound_kib: int = 0
    """how much its RSS may grow (the soak's bound for its kind)."""


def growth(name: str, samples: list[tuple[float, int, int]], warm: float) -> Growth | None:
    """From samples (seconds since start, KiB, descriptors) after ``warm``
    seconds: the median of the last third less that of the first third
    (a process warms up: imports, buffers, the first calls).  None with
    fewer than six samples."""
    kept = [s for s in samples if s[0] >= warm]
    if len(kept) < 6:
        return None
    third = len(kept) // 3
    first, last = kept[:third], kept[-third:]

    def med(xs: list[tuple[float, int, int]], i: int) -> int:
        return int(statistics.median(x[i] for x in xs))

    return Growth(name, kept[-1][0], med(last, 1) - med(first, 1), med(last, 2) - med(first, 2))


def left_behind(marker: str) -> list[str]:
    """Processes whose command line holds ``marker`` (the soak's work
    directory): ``PID command`` each."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmd:
            out.append(f"{entry} {cmd.strip()}")
    return out


# -- failed calls -------------------------------------------------------------


@dataclass
class Failure:
    """A call a worker failed, as it reported it (``bench.soak_hosts``)."""

    job: int
    run: int
    index: int
    event: dict[str, Any]

    @property
    def error(self) -> str:
        return str(self.event.get("error", ""))


@dataclass
class RunFaults:
    """What struck one run of a job: the workers killed in it, and the PS
    restarts (shard, seconds since the epoch) while it ran."""

    victims: set[int] = field(default_factory=set)
    ps_restarts: list[tuple[int, float]] = field(default_factory=list)


def judge(f: Failure, faults: RunFaults, failed: set[int]) -> str | None:
    """None if failure ``f`` is as docs/agreement.md promises, else why not.

    ``failed``: the workers of the run that failed a call (each said BYE
    after).  A run's calls may fail only because a worker of it was killed
    (or, at a PS restarted during the call, at the deadline saying so); the
    error names the job and the call, comes within the call's deadline, and
    is a timeout naming a killed worker as missing (unless a PS restarted
    during the call, losing its record of it) and no live worker but those
    that gave up and left."""
    e, j = f.event, f.job
    if not f.error.startswith(f"job {j} call {e.get('call')}"):
        return f"the error does not name job {j} and call {e.get('call')}"
    seconds, deadline = float(e.get("s", 0)), float(e.get("timeout", 0))
    if seconds > deadline + ASK_S:
        return f"it failed {seconds:.1f} s after it began, past its {deadline:g} s deadline"
    if e.get("type") != "AllreduceTimeout":
        return f"{e.get('type')}: no fault of the soak makes a PS refuse a call"
    missing = e.get("missing")
    named = set(missing or []) | set(e.get("left") or [])
    end = float(e.get("t", 0))
    ps_struck = any(end - seconds <= t <= end for _, t in faults.ps_restarts)
    if faults.victims:
        if missing is None and ps_struck:
            return None  # the PS restarted during the call: its record of the call is gone
        if missing is None or not faults.victims & set(missing):
            return f"it does not name the killed worker(s) {sorted(faults.victims)} as missing"
        wrong = named - faults.victims - (failed - {f.index})
        if wrong:
            return f"it names workers {sorted(wrong)}, which were neither killed nor gave up"
        return None
    if ps_struck and "restarted during the call" in f.error:
        return None
    return "no fault of the run explains it"
