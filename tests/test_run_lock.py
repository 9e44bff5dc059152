"""The run's PID file and ``make stop``, on processes the test starts itself."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner import lock
from runner.lock import Busy, Proc, Record, RunLock
from tests.wait import LIMIT_S, until


def ended() -> Proc:
    """A process that has exited: its pid and start time."""
    p = subprocess.Popen(["sleep", "0.2"])
    proc = Proc.of(p.pid)
    p.wait()
    return proc


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait()


def write(out: Path, rec: Record) -> None:
    (out / lock.PIDFILE).write_text(rec.to_json())


def test_a_live_run_holds_the_directory(tmp_path: Path) -> None:
    work = tmp_path / "work"
    first = RunLock(tmp_path, work)
    assert first.acquire() == ""
    raw = json.loads((tmp_path / "run.pid").read_text())
    assert raw["launcher"]["pid"] == os.getpid() and raw["world"] is None
    assert raw["work"] == str(work)
    with pytest.raises(Busy, match=f"a run \\(pid {os.getpid()}\\) is writing {tmp_path}"):
        RunLock(tmp_path, tmp_path / "other").acquire()
    first.release()
    assert not (tmp_path / "run.pid").exists()


def test_a_dead_runs_file_is_replaced_and_its_work_removed(tmp_path: Path) -> None:
    old_work = tmp_path / "old-work"
    old_work.mkdir()
    dead = ended()
    write(tmp_path, Record(dead, str(old_work)))
    assert RunLock(tmp_path, tmp_path / "w").acquire() == (
        f"removed the PID file of a run that ended (pid {dead.pid})"
    )
    assert not old_work.exists()


def test_a_reused_pid_is_not_the_run() -> None:
    me = Proc.of(os.getpid())
    assert me.alive
    assert not Proc(me.pid, me.started + 1).alive
    assert not ended().alive


def test_stop_without_a_run(tmp_path: Path) -> None:
    assert lock.stop(tmp_path) == [f"{tmp_path}: no run"]


def test_stop_tidies_what_an_ended_run_left(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    launcher = ended()
    write(tmp_path, Record(launcher, str(work), ended()))
    assert lock.stop(tmp_path) == [
        f"{tmp_path}: removed the run's work directory {work}",
        f"{tmp_path}: removed run.pid (pid {launcher.pid})",
    ]
    assert not work.exists() and not (tmp_path / "run.pid").exists()


def test_stop_asks_the_run_inside_to_stop(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    """A world (as unshare) whose run inside ends on SIGTERM: it gets SIGTERM,
    the world ends with it, and the files go."""
    world = subprocess.Popen(
        [sys.executable, "-c", "import subprocess; subprocess.run(['sleep', '300'])"]
    )
    procs.append(world)
    (inner,) = until(Proc.of(world.pid).children, "the world's child")
    work = tmp_path / "work"
    work.mkdir()
    launcher = ended()
    write(tmp_path, Record(launcher, str(work), Proc.of(world.pid)))
    assert lock.stop(tmp_path, wait_s=LIMIT_S) == [
        f"{tmp_path}: stopped the run (world pid {world.pid}) and all it started",
        f"{tmp_path}: removed the run's work directory {work}",
        f"{tmp_path}: removed run.pid (pid {launcher.pid})",
    ]
    assert world.wait(timeout=LIMIT_S) == 0
    assert lock.start_time(inner) is None


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")
def test_a_run_deaf_to_sigterm_is_killed_with_its_world(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    """The run inside ignores SIGTERM: after the wait, the world (unshare
    --kill-child, as the run's) is killed, and takes the run along."""
    world = subprocess.Popen(
        ["unshare", "--fork", "--kill-child", "--", "bash", "-c", "trap '' TERM; exec sleep 300"]
    )
    procs.append(world)
    (inner,) = until(Proc.of(world.pid).children, "the world's child")
    write(tmp_path, Record(ended(), str(tmp_path / "gone"), Proc.of(world.pid)))
    said = lock.stop(tmp_path, wait_s=1)
    assert said[0] == f"{tmp_path}: stopped the run (world pid {world.pid}) and all it started"
    assert world.wait(timeout=LIMIT_S) == -9
    until(lambda: lock.start_time(inner) is None, "the run inside ends with its world")
