"""Whole lines from pipes that ``select`` watches.

A pipe is read straight from its descriptor, never through a Python file
object: a file object reads ahead, and a line it holds in its buffer is
one ``select`` no longer reports, so a process that wrote two lines and
then went quiet would be heard saying one.  Standard library only
(``runner.torchworker`` starts before its script imports anything).
"""

from __future__ import annotations

import os

READ_BYTES = 1 << 16


class Lines:
    """Each descriptor's partial last line, kept until its end arrives."""

    def __init__(self) -> None:
        self.partial: dict[int, bytes] = {}

    def take(self, fd: int) -> tuple[list[str], bool]:
        """(The whole lines ``fd`` holds now, without their newline; whether
        it ended).  One read, for a descriptor ``select`` found readable, so
        it never blocks; at its end the partial last line comes too."""
        data = os.read(fd, READ_BYTES)
        held = self.partial.pop(fd, b"")
        if not data:
            return ([held.decode(errors="replace")] if held else []), True
        *whole, self.partial[fd] = (held + data).split(b"\n")
        return [w.decode(errors="replace").rstrip("\r") for w in whole], False
