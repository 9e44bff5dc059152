"""The progress line: redrawn in place at a terminal, plain periodic lines
in a file or a pipe."""

from __future__ import annotations

import io

from esa.progress import Progress, tally


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_terminal_sees_one_line_redrawn() -> None:
    out = Terminal()
    p = Progress(out, every=10.0)
    for text in ("job 1: 1/10", "job 1: 10/10", "done"):
        p.show(text)
    p.close()
    assert out.getvalue() == "\rjob 1: 1/10\rjob 1: 10/10\rdone        \n"


def test_a_file_gets_a_line_every_period_and_the_last_state() -> None:
    out, clock = io.StringIO(), Clock()
    p = Progress(out, every=10.0, clock=clock)
    for t, text in ((0, "0/4  "), (4, "1/4"), (10, "2/4"), (15, "3/4"), (19, "4/4")):
        clock.now = 100.0 + t
        p.show(text)
    p.close()
    assert out.getvalue() == "0/4\n2/4\n4/4\n"
    assert "\r" not in out.getvalue()


def test_a_file_gets_no_line_twice() -> None:
    out, clock = io.StringIO(), Clock()
    p = Progress(out, every=10.0, clock=clock)
    p.show("sweep 1/1")
    p.close()
    assert out.getvalue() == "sweep 1/1\n"


def test_nothing_shown_writes_nothing() -> None:
    for out in (io.StringIO(), Terminal()):
        Progress(out).close()
        assert out.getvalue() == ""


def test_a_tally_counts_and_estimates_from_the_tasks_this_run_finished() -> None:
    assert tally("sweep", 0, 10, 0, 0.0) == f"sweep [{'':<30}] 0/10"
    assert tally("sweep", 6, 10, 2, 30.0) == f"sweep [{'#' * 18:<30}] 6/10, 1m00s left"
    assert tally("sweep", 9, 10, 9, 65.0) == f"sweep [{'#' * 27:<30}] 9/10, 0m07s left"
    assert tally("sweep", 10, 10, 10, 80.0) == f"sweep [{'#' * 30}] 10/10"
    assert tally("curves", 0, 0, 0, 0.0) == f"curves [{'':<30}] 0/0"
