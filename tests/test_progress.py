"""Progress: a bar at a terminal, a line per stage in a file or a pipe, and
a time left from the tasks finished, each kind of task at its own cost."""

from __future__ import annotations

import io
import os
import pty
import re
import sys

import pytest

from esa.progress import Estimate, Stage
from sim.engine import Engine


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def piped(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    return out


def test_a_pipe_gets_a_line_as_a_stage_starts_and_one_as_it_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out, clock = piped(monkeypatch), Clock()
    with Stage("sweep", 6, ["atp", "esa", "esa", "ps"], clock) as stage:
        for t, kind in ((30, "atp"), (40, "esa"), (50, "esa"), (65, "ps")):
            clock.now = t
            stage.done(kind, 10.0)
    assert out.getvalue() == (
        "sweep: 4 tasks to run (2 of 6 done before)\nsweep: 4 tasks done in 01:05\n"
    )


def test_a_stage_a_task_stopped_says_how_far_it_got(monkeypatch: pytest.MonkeyPatch) -> None:
    out, clock = piped(monkeypatch), Clock()
    with pytest.raises(RuntimeError), Stage("trace", 3, [None] * 3, clock) as stage:
        clock.now = 3725.0
        stage.done(None, 3725.0)
        raise RuntimeError("the second task failed")
    assert out.getvalue() == "trace: 3 tasks to run\ntrace: stopped after 1 of 3 tasks, 1:02:05\n"


def test_a_stage_with_nothing_to_run_says_so_once(monkeypatch: pytest.MonkeyPatch) -> None:
    out = piped(monkeypatch)
    with Stage("curves", 12, []):
        pass
    assert out.getvalue() == "curves: 0 tasks to run (12 of 12 done before)\n"


def test_a_terminal_gets_a_bar_with_the_time_left(monkeypatch: pytest.MonkeyPatch) -> None:
    out, clock = Terminal(), Clock()
    monkeypatch.setattr(sys, "stderr", out)
    with Stage("sweep", 5, ["a", "b", "b", "a"], clock) as stage:
        stage.bar.mininterval = 0.0  # redraw at every task, however fast
        for t, kind in ((10, "a"), (20, "b"), (30, "b"), (40, "a")):
            clock.now = t
            stage.done(kind, 10.0)
    # the elapsed time is the bar's own (the wall clock)
    frames = re.sub(r"\[\d\d:\d\d", "[00:00", out.getvalue()).split("\r")
    assert frames == [
        "",
        "sweep:  20%|##        | 1/5 tasks [00:00]",
        "sweep:  40%|####      | 2/5 tasks [00:00]",
        "sweep:  60%|######    | 3/5 tasks [00:00, 00:20 left]",
        "sweep:  80%|########  | 4/5 tasks [00:00, 00:10 left]",
        "sweep: 100%|##########| 5/5 tasks [00:00]            ",
        "sweep: 100%|##########| 5/5 tasks [00:00]\n",
    ]


def test_the_time_left_waits_for_a_few_tasks_and_costs_each_kind_apart() -> None:
    clock = Clock()
    est = Estimate(["a", "a", "a", "b", "b"], least=3, clock=clock)
    seen = []
    for t, kind, seconds in ((4, "a", 8.0), (8, "a", 8.0), (12, "a", 8.0), (14, "b", 4.0)):
        clock.now = t
        est.finish(kind, seconds)
        seen.append(est.left())
    # two tasks at a time (busy 2 s a second); b costs the mean of all (8 s)
    # until a b finished, then its own (4 s)
    assert seen == [None, None, 8.0, 2.0]
    clock.now = 18
    est.finish("b", 4.0)
    assert est.left() == 0.0


def test_the_time_left_shows_once_every_kind_left_has_a_finished_task() -> None:
    clock = Clock()
    est = Estimate(["a", "b", "a", "b"], least=3, clock=clock)
    clock.now = 3
    est.finish("a", 6.0)
    assert est.left() is None
    clock.now = 5
    est.finish("b", 4.0)
    assert est.left() == 5.0  # (6 + 4) s of work at 2 s a second


def test_a_slow_first_task_of_a_kind_does_not_stand_for_the_others() -> None:
    clock = Clock()
    est = Estimate(["atp"] + ["esa"] * 9, least=3, clock=clock)
    for t, kind, seconds in ((60, "atp", 60.0), (62, "esa", 2.0), (64, "esa", 2.0)):
        clock.now = t
        est.finish(kind, seconds)
    assert est.left() == 7 * 2.0  # not 7 tasks at the first one's 60 s


def square(x: int) -> int:
    if x < 0:
        raise ValueError("negative")
    return x * x


def test_the_engine_shows_a_stage_per_run(monkeypatch: pytest.MonkeyPatch) -> None:
    out = piped(monkeypatch)
    got: list[int] = []
    with Engine(0) as engine:
        engine.run(square, [1, 2, 3], lambda _, r: got.append(r), "squares", 5, lambda x: x % 2)
        with pytest.raises(ValueError):
            engine.run(square, [4, -1, 5], lambda _, r: got.append(r), "more", 3)
    assert got == [1, 4, 9, 16]
    assert out.getvalue() == (
        "squares: 3 tasks to run (2 of 5 done before)\n"
        "squares: 3 tasks done in 00:00\n"
        "more: 3 tasks to run\n"
        "more: stopped after 1 of 3 tasks, 00:00\n"
    )


def test_a_terminal_that_reports_no_size_still_shows_the_bar() -> None:
    """A pty nobody sized (as under ``make cli`` driven by a program) says 0
    columns and 0 rows; tqdm alone would print nothing there."""
    code = (
        "from esa import progress\n"
        "b = progress.bar('jobs', 10003, 'iterations')\n"
        "b.n = 17\n"
        "b.set_postfix_str('job 2: 14/10000 [1 slots]', False)\n"
        "b.refresh()\n"
        "b.close()\n"
    )
    pid, fd = pty.fork()
    if pid == 0:  # the child: its stderr is the unsized pty
        os.execv(sys.executable, [sys.executable, "-c", code])
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the child closed the pty
            break
        if not chunk:
            break
        out += chunk
    os.waitpid(pid, 0)
    assert b"job 2: 14/10000 [1 slots]" in out
