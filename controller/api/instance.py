"""One controller per state file and per admin socket: exclusive lock files.

``esa-ctl serve`` takes an exclusive ``flock`` on ``<state file>.lock`` and,
for a unix admin socket, on ``<socket>.lock``; each lock file holds one line
naming its holder (pid, state file, admin address), which a refused second
``serve`` prints.  The kernel drops the lock when the holder exits, even when
it is killed, so a stale lock file never blocks a restart.  The holder
removes the file when it releases the lock; a process that locked the file
just before it was removed finds it no longer at its path and tries again.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from controller.errors import InUse, StateError


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def holder(pid: int, state_file: Path, admin: str) -> str:
    """How a running controller is named in a refusal."""
    return f"esa-ctl serve pid {pid} (state file {state_file}, admin {admin})"


class Claim:
    """An exclusive lock on ``path`` held by this process, until ``release``."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd

    def release(self) -> None:
        if self.fd < 0:
            return
        self.path.unlink(missing_ok=True)
        os.close(self.fd)
        self.fd = -1


def _at_path(fd: int, path: Path) -> bool:
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def claim(path: Path, name: str, what: str) -> Claim:
    """Lock ``path`` and write ``name`` into it; ``InUse`` if another process
    holds it, naming that process as its lock file does."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise StateError(f"{what}: cannot create the lock file {path}: {e.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.read(fd, 4096).decode(errors="replace").strip()
            os.close(fd)
            raise InUse(f"{what} is in use by {other or 'another esa-ctl serve'}") from None
        if _at_path(fd, path):
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, f"{name}\n".encode())
    return Claim(path, fd)
