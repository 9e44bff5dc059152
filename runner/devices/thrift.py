"""Register reads through one long-lived BMv2 runtime CLI.

BMv2 does not serve registers over P4Runtime, so they are read with
``simple_switch_CLI`` over Thrift.  Starting that CLI costs a Python start-up
and a JSON download per call, too much to sample a run several times a
second on a small machine; ``RegisterReader`` keeps one CLI running, sends
it ``register_read`` lines and reads up to its next prompts.  When the switch
goes away the CLI dies with its connection; the next read starts a new one.
"""

from __future__ import annotations

import os
import re
import select
import subprocess
import time

PROMPT = b"RuntimeCmd: "
READ_TIMEOUT_S = 5.0


def parse_register(output: str, name: str) -> list[int] | None:
    """The values of ``register_read NAME`` (the whole array) in ``output``."""
    m = re.search(re.escape(name) + r"=\s*([0-9][0-9,\s]*)", output)
    if m is None:
        return None
    return [int(v) for v in m.group(1).replace(",", " ").split()]


class RegisterReader:
    """Whole-array register reads through a runtime CLI started with ``command``."""

    def __init__(self, command: list[str], timeout: float = READ_TIMEOUT_S) -> None:
        self.command = command
        self.timeout = timeout
        self.proc: subprocess.Popen[bytes] | None = None

    def _start(self) -> None:
        self.proc = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
        self._until_prompts(1)

    def _until_prompts(self, n: int) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        buf = b""
        deadline = time.monotonic() + self.timeout
        while buf.count(PROMPT) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the runtime CLI did not answer")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise EOFError("the runtime CLI exited")
                buf += chunk
        return buf.decode(errors="replace")

    def read(self, *names: str) -> dict[str, list[int]] | None:
        """Each register's values, or None when the switch can not be read now."""
        try:
            if self.proc is None or self.proc.poll() is not None:
                self._start()
            assert self.proc is not None and self.proc.stdin is not None
            self.proc.stdin.write(b"".join(f"register_read {n}\n".encode() for n in names))
            self.proc.stdin.flush()
            text = self._until_prompts(len(names))
        except (OSError, TimeoutError, EOFError):
            self.close()
            return None
        out = {n: parse_register(text, n) for n in names}
        values = {n: v for n, v in out.items() if v is not None}
        if len(values) != len(names):
            self.close()
            return None
        return values

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout):
                if stream is not None:
                    stream.close()
        self.proc = None
