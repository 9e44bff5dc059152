"""The sums a PS has open: int partial sums and float sums of unfinished chunks.

A chunk is open from its first contribution (or FLOAT resend) until it
completes, the PS gives up on it or its job starts anew.  A job may hold at
most ``max_open`` open chunks, partial and float sums together, so that its
junk can cost only bounded memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from esa import wire
from hosts.net import quant

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
Key = tuple[int, int]
"""(job, seq): one chunk of one job."""


@dataclass
class Partial:
    """The int sum of the workers of ``bitmap`` in one chunk, open since ``opened``."""

    touched: float
    opened: float
    bitmap: int = 0
    count: int = 0
    overflow: bool = False
    pulls: int = 0
    pulled: float = float("-inf")
    resent: bool = False
    """it merged a piece that may hold a resend (``hosts.timing.rto.holds_first_sends``):
    its sum tells no worker that its timeout was spurious."""
    values: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(wire.K, np.int64))

    def merge(
        self,
        bitmap: int,
        count: int,
        overflow: bool,
        values: npt.NDArray[np.int32],
        now: float,
        first: bool = False,
    ) -> None:
        """Add the sum of the workers of ``bitmap`` (none of them held yet);
        ``first``: it holds their first sends alone."""
        self.values += values
        self.bitmap |= bitmap
        self.count += count
        self.overflow |= overflow
        self.resent |= not first
        self.touched, self.pulls = now, 0

    def result(self) -> tuple[bool, npt.NDArray[np.int64]]:
        """Whether the sum overflows int32 (or a part did), and the sum clipped to int32."""
        v = self.values
        overflow = self.overflow or bool((v > INT32_MAX).any() or (v < INT32_MIN).any())
        return overflow, np.clip(v, INT32_MIN, INT32_MAX)


@dataclass
class FloatSum:
    """The float32 resends of one overflowed chunk, by worker bit."""

    touched: float
    pulls: int = 0
    parts: dict[int, npt.NDArray[np.float32]] = field(default_factory=dict)

    def add(self, bit: int, values: npt.NDArray[np.int32], now: float) -> None:
        self.parts[bit] = quant.from_bits(values.astype(np.int32))
        self.touched, self.pulls = now, 0

    def covers(self, mask: int) -> bool:
        return sum(self.parts) == mask

    def total(self) -> npt.NDArray[np.float32]:
        """The float32 sum of the parts, added in worker order (every PS adds
        the same way, so every worker gets the same bits)."""
        total = np.zeros(wire.K, np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            for bit in sorted(self.parts):
                total += self.parts[bit]
        return total


class OpenSums:
    """The open chunks of every job, at most ``max_open`` per job."""

    def __init__(self, max_open: int) -> None:
        self.max_open = max_open
        self.partials: dict[Key, Partial] = {}
        self.floats: dict[Key, FloatSum] = {}
        self.open: dict[int, int] = {}
        """job -> chunks with a partial or float sum in progress."""

    def add_job(self, job: int) -> None:
        self.open.setdefault(job, 0)

    def partial(self, key: Key, now: float) -> Partial | None:
        """The chunk's partial sum, opened if new; None: the job may open no more."""
        p = self.partials.get(key)
        if p is None and self._may_open(key[0]):
            p = self.partials[key] = Partial(touched=now, opened=now)
        return p

    def float_sum(self, key: Key, now: float) -> FloatSum | None:
        """The chunk's float sum, opened if new; None: the job may open no more."""
        acc = self.floats.get(key)
        if acc is None and self._may_open(key[0]):
            acc = self.floats[key] = FloatSum(touched=now)
        return acc

    def _may_open(self, job: int) -> bool:
        if self.open[job] >= self.max_open:
            return False
        self.open[job] += 1
        return True

    def close_partial(self, key: Key) -> None:
        if self.partials.pop(key, None) is not None:
            self.open[key[0]] -= 1

    def close_float(self, key: Key) -> None:
        if self.floats.pop(key, None) is not None:
            self.open[key[0]] -= 1

    def forget(self, job: int) -> None:
        """Close every open chunk of ``job``."""
        for key in [k for k in self.partials if k[0] == job]:
            self.close_partial(key)
        for key in [k for k in self.floats if k[0] == job]:
            self.close_float(key)

    def held(self, job: int, covers: Callable[[int], bool]) -> list[int]:
        """The bitmaps of the partial sums of ``job``'s chunks whose seqs ``covers``."""
        return [p.bitmap for (j, seq), p in self.partials.items() if j == job and covers(seq)]

    def stalled_partials(self, now: float, stall: float) -> Iterator[tuple[Key, Partial]]:
        """The partial sums untouched for ``stall`` (safe to close while iterating)."""
        return ((k, p) for k, p in list(self.partials.items()) if now - p.touched >= stall)

    def stalled_floats(self, now: float, stall: float) -> Iterator[tuple[Key, FloatSum]]:
        """The float sums untouched for ``stall`` (safe to close while iterating)."""
        return ((k, a) for k, a in list(self.floats.items()) if now - a.touched >= stall)
