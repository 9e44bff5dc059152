"""The launcher of ``make run``, outside the run's private world.

It claims the results directory (``run.pid``, ``runner.lock``), starts
the same command again inside fresh network, PID and mount namespaces
(``unshare``; the run inside is PID 1 there, so everything it starts ends
with it) and waits for it.  Ctrl-C reaches the run inside, which stops
everything; SIGTERM or a hang-up of the launcher is passed on to it as
SIGTERM.  At a terminal the world gets a process group of its own in the
foreground, so Ctrl-C at the Mininet prompt interrupts a command there and
neither ``make`` nor this launcher.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import FrameType

from runner.lock import Busy, RunLock

PRIVATE_ENV = "ESA_RUN_PRIVATE"
"""set for the run inside the world: the launcher's command line, run again."""
WORK_ENV = "ESA_RUN_WORK"
"""the run's work directory, made and removed by the launcher."""


class Stopped(BaseException):
    """SIGTERM (``make stop``) or a hang-up reached the run: stop everything,
    as Ctrl-C does.  Not a KeyboardInterrupt, which the prompt would swallow."""


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _stopped(signum: int, frame: FrameType | None) -> None:
    raise Stopped


def stop_on_signals() -> None:
    """In the run inside: SIGTERM and a hang-up raise ``Stopped``, and Ctrl-C
    raises ``KeyboardInterrupt`` even where the shell that started the run
    ignored SIGINT (an ``&`` command of a script does): Python leaves an
    inherited SIG_IGN in place, and the prompt's Ctrl-C would do nothing."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _stopped)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def enter_private_world(argv: list[str], work: Path, lock: RunLock) -> int:
    """Re-run this command inside fresh network, PID and mount namespaces;
    ``unshare --kill-child`` ends the run inside if ``unshare`` is killed.
    A sysfs of the new network namespace goes on /sys (the host's showed
    the host's interfaces, and BMv2's port poll could not find its own)."""
    inner = 'ip link set lo up && mount -t sysfs sysfs /sys && exec "$@"'
    cmd = [
        "unshare", "--net", "--pid", "--mount", "--fork", "--mount-proc", "--kill-child",
        "--propagation", "private", "--", "bash", "-c", inner, "bash",
        sys.executable, "-m", "runner.main", *argv,
    ]  # fmt: skip
    env = {**os.environ, PRIVATE_ENV: "1", WORK_ENV: str(work)}
    terminal = sys.stdin.isatty()
    proc = subprocess.Popen(cmd, env=env, preexec_fn=_own_terminal if terminal else None)
    world = lock.world_started(proc.pid)

    def forward(signum: int, frame: FrameType | None) -> None:
        """SIGTERM or a hang-up (the terminal closed): the run inside stops
        everything; this process waits for it and releases the lock."""
        for pid in world.children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    for sig in STOP_SIGNALS:
        signal.signal(sig, forward)
    try:
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:
                # Ctrl-C reached the run inside too; wait while it stops everything
                continue
    finally:
        if terminal:
            _take_terminal_back()


def _own_terminal() -> None:
    """In the world's first process: a process group of its own, in the
    terminal's foreground, so that Ctrl-C at the prompt reaches the run and
    not ``make`` and this launcher (make would die of it)."""
    os.setpgid(0, 0)
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # tcsetpgrp from the background
    os.tcsetpgrp(0, os.getpgrp())


def _take_terminal_back() -> None:
    before = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        os.tcsetpgrp(0, os.getpgrp())
    finally:
        signal.signal(signal.SIGTTOU, before)


def launch(argv: list[str], out: Path) -> int:
    """Claim ``out`` and run ``argv`` in a private world."""
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="esa-run-"))
    lock = RunLock(out, work)
    try:
        note = lock.acquire()
    except Busy as e:
        shutil.rmtree(work, ignore_errors=True)
        print(f"run: {e}", file=sys.stderr)
        return 1
    if note:
        print(f"run: {note}", file=sys.stderr)
    try:
        return enter_private_world(argv, work, lock)
    finally:
        lock.release()
        shutil.rmtree(work, ignore_errors=True)
