"""A program on a pseudo-terminal, driven as a user at a keyboard would
(stdlib only: what pexpect does, for the few calls the tests need)."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import time
from collections.abc import Mapping, Sequence


class PtySession:
    """The program starts with SIGINT ignored, as a command a script starts
    with ``&`` does (and so a test suite run in the background): its Ctrl-C
    must work all the same, whichever way the suite was started."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], cwd: str) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: the terminal is its stdin, stdout and stderr
            try:
                os.chdir(cwd)
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                os.execvpe(argv[0], list(argv), dict(env))
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        self.seen = ""
        """everything the program wrote, carriage returns left out."""
        self.pos = 0
        """where the next ``expect`` starts looking."""
        self.status: int | None = None

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the program closed the terminal
            return False
        if not data:
            return False
        self.seen += data.decode(errors="replace").replace("\r", "")
        return True

    def expect(self, pattern: str, timeout: float) -> re.Match[str]:
        """Wait for ``pattern`` (a regex) past what earlier calls matched."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            m = rx.search(self.seen, self.pos)
            if m is not None:
                self.pos = m.end()
                return m
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(min(left, 0.5)):
                m = rx.search(self.seen, self.pos)
                if m is None:
                    raise AssertionError(
                        f"no {pattern!r} within {timeout:g} s; the terminal shows:\n"
                        f"{self.seen[self.pos :][-4000:]}"
                    )
                self.pos = m.end()
                return m

    def send(self, line: str) -> None:
        os.write(self.fd, (line + "\n").encode())

    def wait(self, timeout: float) -> int:
        """The program's exit status, reading its output until it exits."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._read(0.2)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                while self._read(0.1) and select.select([self.fd], [], [], 0)[0]:
                    pass
                self.status = os.waitstatus_to_exitcode(status)
                return self.status
        raise AssertionError(f"the program did not exit within {timeout:g} s:\n{self.seen[-4000:]}")

    def close(self) -> None:
        """Kill what still runs of the program's process group (a test that
        failed half-way), and close the terminal."""
        if self.status is None:
            os.killpg(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.fd)
