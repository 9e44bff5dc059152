"""Waiting, in tests, for what a loaded machine may delay: on the event
itself, with an outer limit generous enough that only a test that went
wrong ever reaches it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

LIMIT_S = 300.0
"""the outer limit of a test's wait for an event."""


def until(check: Callable[[], T], what: str, limit: float = LIMIT_S) -> T:
    """``check()``'s first truthy value, polled every 50 ms; fails naming
    ``what`` after ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while not (got := check()):
        assert time.monotonic() < deadline, f"{what}: not within {limit:g} s"
        time.sleep(0.05)
    return got
