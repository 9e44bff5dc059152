"""Progress of long commands, drawn by tqdm where it suits.

At a terminal a live bar.  In a file or a pipe (a log, CI) no bar: a
``Stage`` writes a line as it starts and one as it ends (tasks done,
elapsed), nothing in between.

A stage's tasks are of kinds (a sweep's schemes) whose costs differ a lot,
and they do not run in a random order, so the time left (``Estimate``) is
the remaining tasks' cost, each at its kind's mean so far, at the pace the
finished tasks kept, not the first tasks' pace times the tasks left.
"""

from __future__ import annotations

import io
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from types import TracebackType
from typing import IO, NoReturn

from tqdm import tqdm

LEAST = 3
"""finished tasks before a time left is shown (fewer if they cover every
kind still to run)."""

BAR = "{l_bar}{bar}| {n_fmt}/{total_fmt} {unit} [{elapsed}{postfix}]"


def clock_time(seconds: float) -> str:
    """``01:05``, ``1:01:40``: as the bar shows its elapsed time."""
    return tqdm.format_interval(seconds)


def bar(
    label: str, total: int, unit: str, initial: int = 0, *, quiet: bool = False
) -> tqdm[NoReturn]:
    """A bar of ``total`` ``unit`` on stderr, off unless stderr is a terminal
    (or if ``quiet``): check ``.disable`` to write lines instead."""
    sized = terminal_size(sys.stderr) != (0, 0)
    return tqdm(
        total=total,
        initial=initial,
        desc=label,
        unit=unit,
        file=sys.stderr,
        disable=True if quiet else None,
        bar_format=BAR,
        # a terminal that reports no size (a pty nobody sized) gets the
        # stats without a meter, untrimmed, and tqdm's own fallback height:
        # it would take 0 rows as no room for any bar and print nothing
        dynamic_ncols=sized,
        ncols=None if sized else 0,
        nrows=None if sized else 20,
    )


def terminal_size(stream: IO[str]) -> tuple[int, int] | None:
    """(columns, rows) of the terminal behind ``stream``, (0, 0) where it
    reports none; None where ``stream`` has no file descriptor or it is no
    terminal (tqdm then sizes the bar itself)."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        return None
    return size.columns, size.lines


class Estimate:
    """The time left of a stage's tasks of ``kinds`` (one per task), from the
    tasks finished so far: each remaining task costs the mean time of the
    finished tasks of its kind (of all finished tasks while none of its kind
    has), and the tasks go at the pace the finished ones went, their time
    over the time since the start (about the number of tasks that run side
    by side)."""

    def __init__(
        self,
        kinds: Iterable[Hashable],
        least: int = LEAST,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.todo: Counter[Hashable] = Counter(kinds)
        self.count: Counter[Hashable] = Counter()
        self.spent: dict[Hashable, float] = {}
        """seconds the finished tasks of each kind took."""
        self.least, self.clock = least, clock
        self.t0 = clock()

    def finish(self, kind: Hashable, seconds: float) -> None:
        """A task of ``kind`` finished; it took ``seconds`` where it ran."""
        self.todo[kind] -= 1
        self.count[kind] += 1
        self.spent[kind] = self.spent.get(kind, 0.0) + seconds

    def left(self) -> float | None:
        """Seconds left; None until ``least`` tasks, or one of each kind
        still to run, finished."""
        done = sum(self.count.values())
        todo = {k: n for k, n in self.todo.items() if n > 0}
        if not done or (done < self.least and any(k not in self.count for k in todo)):
            return None
        spent = sum(self.spent.values())
        elapsed = self.clock() - self.t0
        if spent <= 0 or elapsed <= 0:
            return None
        mean = spent / done
        work = sum(
            n * (self.spent[k] / self.count[k] if k in self.count else mean)
            for k, n in todo.items()
        )
        return work * elapsed / spent


class Stage:
    """A stage of ``total`` tasks, ``kinds`` those to run (one kind per task;
    the rest were done before, by an earlier run): a bar with the time left
    at a terminal; elsewhere a line as it starts and one as it ends."""

    def __init__(
        self,
        label: str,
        total: int,
        kinds: Sequence[Hashable],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label, self.todo, self.ran = label, len(kinds), 0
        self.clock = clock
        self.t0 = clock()
        self.estimate = Estimate(kinds, clock=clock)
        self.bar = bar(label, total, "tasks", total - self.todo)
        self.piped = bool(self.bar.disable)
        before = f" ({total - self.todo} of {total} done before)" if self.todo < total else ""
        self._line(f"{self.todo} tasks to run{before}")

    def __enter__(self) -> Stage:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.bar.close()
        if not self.todo:
            return
        elapsed = clock_time(self.clock() - self.t0)
        if self.ran < self.todo:
            self._line(f"stopped after {self.ran} of {self.todo} tasks, {elapsed}")
        else:
            self._line(f"{self.ran} tasks done in {elapsed}")

    def done(self, kind: Hashable, seconds: float) -> None:
        """A task of ``kind`` finished; it took ``seconds`` where it ran."""
        self.ran += 1
        self.estimate.finish(kind, seconds)
        left = self.estimate.left() if self.ran < self.todo else None
        self.bar.set_postfix_str("" if left is None else f"{clock_time(left)} left", False)
        self.bar.update()

    def _line(self, text: str) -> None:
        if self.piped:
            print(f"{self.label}: {text}", file=sys.stderr, flush=True)
