"""One controller per state file and per admin address (no switch needed).

A second ``esa-ctl serve`` on either is refused with one line naming the
running one, and creates nothing; a controller killed with SIGKILL leaves
nothing that blocks its restart.
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.api.admin import AdminClient, AdminError
from controller.api.messages import Identity
from tests.test_controller_cli import serve_argv, serve_inputs, tree

ROOT = Path(__file__).resolve().parent.parent


START_LIMIT_S = 300.0
"""how long a controller may take to say where it serves (a loaded machine)."""


class Serving:
    """``esa-ctl serve`` running in the background, its output in ``log``;
    ``admin`` is where it serves, as its log says once it does (with
    ``admin="127.0.0.1:0"``, the port it bound)."""

    def __init__(self, d: Path, **opts: str | None) -> None:
        self.log = d / f"serve-{time.monotonic_ns()}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "controller", *serve_argv(d, **opts)],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + START_LIMIT_S
        while (m := re.search(r"admin API on (\S+)\n", self.log.read_text())) is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop(signal.SIGKILL)
                raise AssertionError(self.log.read_text())
            time.sleep(0.1)
        self.admin = m[1]
        assert self.identity() is not None, self.log.read_text()

    def identity(self) -> Identity | None:
        client = AdminClient(self.admin)
        try:
            return client.identify(timeout=60.0)
        except AdminError:
            return None
        finally:
            client.close()

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=START_LIMIT_S)


@pytest.fixture
def started() -> Iterator[list[Serving]]:
    """Controllers a test starts; killed after it."""
    procs: list[Serving] = []
    yield procs
    for s in procs:
        s.stop(signal.SIGKILL)


def serve_once(d: Path, **opts: str | None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controller", *serve_argv(d, **opts)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        timeout=START_LIMIT_S,
    )


def refused(res: subprocess.CompletedProcess[str], message: str) -> None:
    assert (res.returncode, res.stdout, res.stderr) == (1, "", f"esa-ctl: error: {message}\n")


def test_second_serve_on_the_state_file_is_refused(tmp_path: Path, started: list[Serving]) -> None:
    serve_inputs(tmp_path)
    first = Serving(tmp_path)
    started.append(first)
    db = tmp_path / "s.db"
    assert first.identity() == Identity(pid=first.proc.pid, state_file=str(db))
    before = tree(tmp_path)
    res = serve_once(tmp_path, admin=f"unix:{tmp_path}/other.sock")
    refused(
        res,
        f"state file {db} is in use by esa-ctl serve pid {first.proc.pid} "
        f"(state file {db}, admin unix:{tmp_path}/admin.sock)",
    )
    assert tree(tmp_path) == before


def test_second_serve_on_the_unix_socket_is_refused(tmp_path: Path, started: list[Serving]) -> None:
    serve_inputs(tmp_path)
    first = Serving(tmp_path)
    started.append(first)
    socket_inode = (tmp_path / "admin.sock").stat().st_ino
    before = tree(tmp_path)
    res = serve_once(tmp_path, db=f"{tmp_path}/other.db")
    refused(
        res,
        f"admin address unix:{tmp_path}/admin.sock is in use by esa-ctl serve pid "
        f"{first.proc.pid} (state file {tmp_path}/s.db, admin unix:{tmp_path}/admin.sock)",
    )
    assert tree(tmp_path) == before
    assert (tmp_path / "admin.sock").stat().st_ino == socket_inode
    assert first.identity() == Identity(pid=first.proc.pid, state_file=f"{tmp_path}/s.db")


def test_second_serve_on_the_tcp_port_is_refused(tmp_path: Path, started: list[Serving]) -> None:
    serve_inputs(tmp_path)
    first = Serving(tmp_path, admin="127.0.0.1:0")
    started.append(first)
    admin = first.admin
    assert re.fullmatch(r"127\.0\.0\.1:[1-9][0-9]*", admin)
    before = tree(tmp_path)
    res = serve_once(tmp_path, admin=admin, db=f"{tmp_path}/other.db")
    refused(
        res,
        f"admin address {admin} is in use by esa-ctl serve pid {first.proc.pid} "
        f"(state file {tmp_path}/s.db, admin {admin})",
    )
    assert tree(tmp_path) == before
    assert first.identity() == Identity(pid=first.proc.pid, state_file=f"{tmp_path}/s.db")


def test_tcp_port_held_by_another_program_is_refused(tmp_path: Path) -> None:
    serve_inputs(tmp_path)
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        admin = f"127.0.0.1:{other.getsockname()[1]}"
        before = tree(tmp_path)
        res = serve_once(tmp_path, admin=admin)
    refused(res, f"admin address {admin} is in use by another program")
    assert tree(tmp_path) == before


def test_restart_after_sigkill_and_clean_exit(tmp_path: Path, started: list[Serving]) -> None:
    """SIGKILL leaves the lock files and the socket behind; they block nothing.
    A clean exit removes the lock files."""
    serve_inputs(tmp_path)
    first = Serving(tmp_path)
    started.append(first)
    assert first.stop(signal.SIGKILL) == -signal.SIGKILL
    assert {"s.db.lock", "admin.sock.lock", "admin.sock"} <= set(tree(tmp_path))
    second = Serving(tmp_path, topology=None)
    started.append(second)
    assert second.identity() == Identity(pid=second.proc.pid, state_file=f"{tmp_path}/s.db")
    assert second.stop() == 0
    assert not {"s.db.lock", "admin.sock.lock"} & set(tree(tmp_path))
