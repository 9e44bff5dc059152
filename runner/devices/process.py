"""A switch process of the test bed: started in its own session (optionally
in a network namespace), ready when its servers accept connections, stopped
by signal to its process group.  ``runner.devices.bmv2.Bmv2`` and
``runner.devices.refproc.RefSwitch`` are the two."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from runner.devices.netns import entered

START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0


def accepts(addr: str) -> bool:
    """True when something accepts connections at ``unix:PATH`` or ``HOST:PORT``."""
    if addr.startswith("unix:"):
        target = addr[len("unix:") :]
        if not os.path.exists(target):
            return False
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        dest: str | tuple[str, int] = target
    else:
        host, port = addr.rsplit(":", 1)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        dest = (host, int(port))
    with s:
        s.settimeout(1.0)
        try:
            s.connect(dest)
        except OSError:
            return False
    return True


class SwitchProcess:
    """What the two switch processes share; a subclass says what it runs
    (``command``) and where it serves (``addresses``)."""

    what = "the switch"
    """names the program in the error when it does not start."""

    def __init__(
        self, grpc_addr: str, log: Path, netns: str | None, cwd: Path | None = None
    ) -> None:
        self.grpc_addr = grpc_addr
        self.log = log
        self.netns = netns
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def addresses(self) -> list[str]:
        """Where it accepts connections once it is up."""
        return [self.grpc_addr]

    def in_ns(self, cmd: list[str]) -> list[str]:
        return cmd if self.netns is None else ["ip", "netns", "exec", self.netns, *cmd]

    def start(self) -> None:
        """Start it (output appended to ``log``) and wait until it is ready."""
        if self.grpc_addr.startswith("unix:"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.grpc_addr[len("unix:") :])
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                self.in_ns(self.command()),
                cwd=self.cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.what} did not start; see {self.log}")
            time.sleep(0.1)

    def ready(self) -> bool:
        if self.netns is None:
            return all(accepts(a) for a in self.addresses())
        with entered(self.netns):
            return all(accepts(a) for a in self.addresses())

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, crash: bool = False) -> int | None:
        """Stop it: SIGTERM, or SIGKILL when ``crash`` (as a switch dies);
        returns its exit status (None: it was not started)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL if crash else signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        return proc.returncode

    def restart(self, crash: bool = False) -> None:
        self.stop(crash)
        self.start()
