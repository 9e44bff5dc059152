"""One job, as every part of the project sees it: its workers and how its
priority is set.  The controller, the hosts, the Mininet run and the tests
each add their own fields to these by composition.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from esa import wire


def popcount(x: int) -> int:
    return bin(x).count("1")


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


@dataclass(frozen=True)
class Workers:
    """A job's workers as the switch and the PS count them: how many, and
    their bits in the worker bitmap (worker ``i`` owns bit ``i``)."""

    fan_in: int
    mask: int

    def __post_init__(self) -> None:
        if not 1 <= self.fan_in <= wire.MAX_WORKERS:
            raise ValueError(f"fan-in must be 1..{wire.MAX_WORKERS}, got {self.fan_in}")
        if not 0 < self.mask < 1 << wire.MAX_WORKERS:
            raise ValueError(f"mask {self.mask:#x} is not a {wire.MAX_WORKERS}-bit worker mask")
        if popcount(self.mask) != self.fan_in:
            raise ValueError(
                f"mask {self.mask:#x} has {popcount(self.mask)} workers, fan-in is {self.fan_in}"
            )

    @classmethod
    def of(cls, fan_in: int, mask: int | None = None) -> Workers:
        if mask is None and not 1 <= fan_in <= wire.MAX_WORKERS:
            raise ValueError(f"fan-in must be 1..{wire.MAX_WORKERS}, got {fan_in}")
        return cls(fan_in, (1 << fan_in) - 1 if mask is None else mask)
