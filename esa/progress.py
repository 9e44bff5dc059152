"""A progress line that suits where it is written.

At a terminal each state overwrites the last (a carriage return, padded to
cover a longer line before it).  In a file or a pipe (a log, CI) carriage
returns would pile every state onto one endless line, so there a state is
written as a line of its own, at most one every ``every`` seconds, and
``close`` writes the last state if it was not written yet.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TextIO


class Progress:
    def __init__(
        self, stream: TextIO, every: float = 10.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.every = every
        self.clock = clock
        self.last = ""
        """the latest state shown."""
        self.pending = False
        """``last`` is not written yet (not at a terminal)."""
        self.width = 0
        """characters of the line drawn at the terminal."""
        self.next_line = -math.inf

    def show(self, text: str) -> None:
        """The progress is now ``text`` (one line)."""
        self.last = text
        if self.tty:
            self.stream.write(f"\r{text:<{self.width}}")
            self.width = max(self.width, len(text))
            self.stream.flush()
            return
        now = self.clock()
        self.pending = now < self.next_line
        if not self.pending:
            self._line(text)
            self.next_line = now + self.every

    def close(self) -> None:
        """End the line at a terminal; elsewhere, write the last state if it is not."""
        if self.tty:
            if self.width:
                self.stream.write("\n")
                self.stream.flush()
        elif self.pending:
            self._line(self.last)
        self.pending, self.width = False, 0

    def _line(self, text: str) -> None:
        self.stream.write(text.rstrip() + "\n")
        self.stream.flush()


def tally(label: str, done: int, total: int, ran: int, elapsed_s: float) -> str:
    """``label [#####     ] done/total, 2m05s left``: the time left at the
    pace of the ``ran`` tasks this run finished in ``elapsed_s`` (tasks done
    before it, as by a resumed run, took none of that time)."""
    bar = "#" * (30 * done // total) if total else ""
    text = f"{label} [{bar:<30}] {done}/{total}"
    if ran and done < total:
        left = round(elapsed_s / ran * (total - done))
        text += f", {left // 60}m{left % 60:02d}s left"
    return text
