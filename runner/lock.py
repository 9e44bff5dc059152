"""A run's claim on its results directory (``run.pid``), and ``make stop``.

The launcher of ``make run`` writes ``<out>/run.pid`` before it starts the
run's private world and removes it when the world has ended, so two runs
never write one results directory.  The file names the launcher, the
``unshare`` process that holds the world (the run inside is its child, PID
1 of the world's PID namespace) and the run's work directory; each process
with its start time, so a PID the system has since given to another
program is never taken for the run's.

``stop`` ends a run left behind, only through what that file names: it
sends SIGTERM to the run inside its world (which then stops everything
as on Ctrl-C), SIGKILL to the ``unshare`` process if that did not end it
(``unshare --kill-child`` takes the run, and with PID 1 its whole
namespace, along), and removes the work directory and the file.  Nothing
else is looked at or killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path

PIDFILE = "run.pid"
STOP_WAIT_S = 30.0


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after it
    return stat[stat.rindex(")") + 2 :].split()


def start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), or None if there
    is no such process or it has exited (a zombie waiting for its parent)."""
    fields = _stat(pid)
    if fields is None or fields[0] == "Z":
        return None
    return int(fields[19])


def parent_of(pid: int) -> int | None:
    fields = _stat(pid)
    return None if fields is None else int(fields[1])


@dataclass(frozen=True)
class Proc:
    pid: int
    started: int

    @classmethod
    def of(cls, pid: int) -> Proc:
        started = start_time(pid)
        if started is None:
            raise ProcessLookupError(pid)
        return cls(pid, started)

    @property
    def alive(self) -> bool:
        return start_time(self.pid) == self.started

    def children(self) -> list[int]:
        return [
            int(p.name)
            for p in Path("/proc").iterdir()
            if p.name.isdigit() and parent_of(int(p.name)) == self.pid
        ]


@dataclass(frozen=True)
class Record:
    launcher: Proc
    work: str
    """the run's work directory (sockets, state): removed with the run."""
    world: Proc | None = None
    """the ``unshare`` process holding the run's namespaces."""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Record:
        raw = json.loads(text)
        world = raw.get("world")
        return cls(Proc(**raw["launcher"]), str(raw["work"]), Proc(**world) if world else None)

    @property
    def alive(self) -> bool:
        return self.launcher.alive or (self.world is not None and self.world.alive)


class Busy(RuntimeError):
    """Another run holds the results directory."""


def read(out: Path) -> Record | None:
    try:
        return Record.from_json((out / PIDFILE).read_text())
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        raise RuntimeError(f"{out / PIDFILE} is not a run's PID file; remove it by hand") from None


class RunLock:
    """``<out>/run.pid`` for the launcher of a run working in ``work``."""

    def __init__(self, out: Path, work: Path) -> None:
        self.path = out / PIDFILE
        self.record = Record(Proc.of(os.getpid()), str(work))

    def acquire(self) -> str:
        """Claim the directory; returns a note when a dead run's file was
        replaced.  Raises ``Busy`` while a live run holds it."""
        note = ""
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                old = read(self.path.parent)
                if old is not None and old.alive:
                    raise Busy(
                        f"a run (pid {old.launcher.pid}) is writing {self.path.parent}; "
                        "wait for it, or end it with make stop"
                    ) from None
                if old is not None:
                    shutil.rmtree(old.work, ignore_errors=True)
                    note = f"removed the PID file of a run that ended (pid {old.launcher.pid})"
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
                continue
            with os.fdopen(fd, "w") as f:
                f.write(self.record.to_json())
            return note
        raise Busy(f"could not claim {self.path}: another run keeps claiming it")

    def world_started(self, pid: int) -> Proc:
        """Record the ``unshare`` process holding the run's world."""
        world = Proc.of(pid)
        self.record = Record(self.record.launcher, self.record.work, world)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(self.record.to_json())
        tmp.replace(self.path)
        return world

    def release(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def _wait(gone: list[Proc], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(p.alive for p in gone):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def stop(out: Path, wait_s: float = STOP_WAIT_S) -> list[str]:
    """End the run that holds ``out`` (see the module's doc); what was done."""
    rec = read(out)
    if rec is None:
        return [f"{out}: no run"]
    said = []
    world = rec.world
    if world is not None and world.alive:
        for pid in world.children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        if not _wait([world], wait_s):
            with contextlib.suppress(ProcessLookupError):
                os.kill(world.pid, signal.SIGKILL)
            _wait([world], wait_s)
        said.append(f"{out}: stopped the run (world pid {world.pid}) and all it started")
    if rec.launcher.alive and not _wait([rec.launcher], wait_s):
        said.append(f"{out}: the launcher (pid {rec.launcher.pid}) is still running; not touched")
        return said
    if Path(rec.work).exists():
        shutil.rmtree(rec.work, ignore_errors=True)
        said.append(f"{out}: removed the run's work directory {rec.work}")
    if (out / PIDFILE).exists():
        (out / PIDFILE).unlink()
        said.append(f"{out}: removed {PIDFILE} (pid {rec.launcher.pid})")
    return said or [f"{out}: the run had ended and tidied up"]
