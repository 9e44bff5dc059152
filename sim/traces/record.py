"""One job as a trace records it, before any rule of the replay applies, and
the parsing every format shares."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

CLOCK = "%Y-%m-%d %H:%M:%S"
"""Philly's and Helios's time stamps.  They carry no zone; read as UTC,
since only differences between them count."""
MISSING = ("", "None", "nan", "NaN")
"""What a trace writes for a time it did not record."""


class TraceError(ValueError):
    """A trace file the loaders refuse, naming the file and the entry."""


@dataclass(frozen=True)
class TraceJob:
    trace_id: str
    """the job's id in the trace (seeds its model draw)."""
    submit_s: float
    """submission time, seconds on the trace's clock."""
    gpus: int
    run_s: float | None
    """how long it ran (end less start); None: a start or end not recorded
    (a logging gap, or still running when the trace was cut)."""


def clock_s(text: object, where: str, field: str) -> float | None:
    """Seconds of a ``CLOCK`` time stamp; None if missing."""
    if text is None or text in MISSING:
        return None
    try:
        return datetime.strptime(str(text), CLOCK).replace(tzinfo=UTC).timestamp()
    except ValueError:
        raise TraceError(f"{where}: {field} {text!r} is not a time YYYY-MM-DD HH:MM:SS") from None


def number(text: str, where: str, field: str) -> float | None:
    """A finite number (PAI's times, counts and GPU shares); None if missing."""
    if text in MISSING:
        return None
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{where}: {field} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise TraceError(f"{where}: {field} {text!r} is not a number")
    return value


def count(text: str, where: str, field: str) -> int:
    """A whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise TraceError(f"{where}: {field} {text!r} is not a whole number") from None
    if value < 0:
        raise TraceError(f"{where}: {field} {text!r} is negative")
    return value


def span(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else end - start
