"""Job priorities: what the controller writes into each job's ``prio``.

The switch compares priorities only when a contribution finds its slot held
by another job: under the ESA policy it preempts the holder if its own job's
priority is strictly higher (``esa.spec.MAX_PRIORITY`` is the most urgent).
So only the order of priorities matters, and equal priorities never preempt
each other.

Two modes, chosen per job:

``static``
    The operator's number, written as given and never changed by the
    controller.
``auto``
    Shortest remaining processing time first: the job declares how many
    bytes it still has to aggregate, and reports progress as it goes.  The
    base priority falls by ``SRPT_STEP`` per doubling of the remaining
    volume, so a job twice as large as another is one step behind it; a
    job's priority rises as its remaining volume shrinks.  On top of that,
    **aging** adds one level per ``aging_period_s`` seconds since the job was
    admitted.  SRPT alone lets a large job starve behind a stream of small
    ones; with aging every ``auto`` job reaches ``MAX_PRIORITY`` at most
    ``MAX_PRIORITY * aging_period_s`` seconds after admission, and from then
    on no job can preempt it (preemption needs a strictly higher priority).
    Static jobs are not aged: their number is the operator's decision.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from esa.spec import MAX_PRIORITY

SRPT_STEP = 3
"""Priority levels per doubling of the remaining volume: 2**64 bytes still
maps above 0 (255 - 3 * 65 = 60), which leaves aging room below the top."""

DEFAULT_AGING_PERIOD_S = 10.0


class Mode(enum.Enum):
    STATIC = "static"
    AUTO = "auto"


@dataclass(frozen=True)
class PrioritySpec:
    """How one job's priority is set."""

    mode: Mode
    priority: int = 0
    """the static priority (``Mode.STATIC``)."""
    remaining: int = 0
    """bytes still to aggregate (``Mode.AUTO``)."""

    @classmethod
    def static(cls, priority: int) -> PrioritySpec:
        return cls(Mode.STATIC, priority=priority)

    @classmethod
    def auto(cls, remaining: int) -> PrioritySpec:
        return cls(Mode.AUTO, remaining=remaining)


def srpt_priority(remaining: int) -> int:
    """Base priority of an ``auto`` job with ``remaining`` bytes left."""
    return max(0, MAX_PRIORITY - SRPT_STEP * remaining.bit_length())


def aging_bonus(admitted_at: float, now: float, aging_period_s: float) -> int:
    """Levels gained by waiting; 0 when aging is off (period 0)."""
    if aging_period_s <= 0 or now <= admitted_at:
        return 0
    return int((now - admitted_at) // aging_period_s)


def effective_priority(
    spec: PrioritySpec, admitted_at: float, now: float, aging_period_s: float
) -> int:
    """The priority the switch should hold for a job right now."""
    if spec.mode is Mode.STATIC:
        return spec.priority
    base = srpt_priority(spec.remaining)
    return min(MAX_PRIORITY, base + aging_bonus(admitted_at, now, aging_period_s))
