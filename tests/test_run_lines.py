"""``runner.lines``: what a worker wrote reaches the run whole, however
the pipe delivers it.  A run that read a worker's stdout through a
buffered file object missed a step line that arrived behind another and
stopped the job as stalled one step short (``runner.stall``)."""

from __future__ import annotations

import contextlib
import os
import select
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.lines import Lines


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        with contextlib.suppress(OSError):  # a test closed it already
            os.close(fd)


def test_two_lines_in_one_write_both_arrive_and_the_pipe_has_nothing_left(
    pipe: tuple[int, int],
) -> None:
    r, w = pipe
    os.write(w, b"step 2\nstep 3\n")
    lines = Lines()
    assert lines.take(r) == (["step 2", "step 3"], False)
    assert select.select([r], [], [], 0)[0] == []


def test_a_line_split_across_writes_waits_for_its_end(pipe: tuple[int, int]) -> None:
    r, w = pipe
    lines = Lines()
    os.write(w, b"step 1\nst")
    assert lines.take(r) == (["step 1"], False)
    os.write(w, b"ep 2\r\n")
    assert lines.take(r) == (["step 2"], False)


def test_at_the_end_the_unfinished_last_line_comes_too(pipe: tuple[int, int]) -> None:
    r, w = pipe
    lines = Lines()
    os.write(w, b'{"steps": 3}')
    os.close(w)
    assert lines.take(r) == ([], False)
    assert lines.take(r) == (['{"steps": 3}'], True)


@given(st.lists(st.text(alphabet="abc \n", max_size=20), max_size=12))
def test_whatever_the_writes_the_lines_are_the_text_split_at_newlines(
    writes: list[str],
) -> None:
    r, w = os.pipe()
    lines, got = Lines(), []
    try:
        for piece in writes:
            os.write(w, piece.encode())
            if piece:
                got += lines.take(r)[0]
        os.close(w)
        whole, ended = lines.take(r)
        got += whole
    finally:
        os.close(r)
    text = "".join(writes)
    want = text.split("\n")
    if want[-1] == "":
        want.pop()
    assert (got, ended) == (want, True)
