"""Wire job ids, leased as the controller leases them.

A simulated job is known by its ``JobSpec.job``, any int >= 1 (a trace
index); the switch's job table and every packet carry a wire id, 1..``n``
(``esa.wire.MAX_JOB_ID``).  A job takes the lowest free wire id when the
controller admits it and returns it when it finishes; while every id is
held, an arriving job waits, first come first served, for the next one
freed.
"""

from __future__ import annotations

import heapq
from collections import deque


class Leases:
    def __init__(self, n: int) -> None:
        """``n``: the wire ids 1..n to lease."""
        if n < 1:
            raise ValueError(f"there must be at least one wire id to lease, got {n}")
        self.free = list(range(1, n + 1))
        """the free ids, a heap (a sorted list is one)."""
        self.held: dict[int, int] = {}
        """job -> the wire id it holds."""
        self.waiting: deque[int] = deque()
        """jobs waiting for an id, first come first."""

    def lease(self, job: int) -> int | None:
        """The wire id ``job`` now holds, or None: it waits for one."""
        if job in self.held:
            raise ValueError(f"job {job} already holds wire id {self.held[job]}")
        if not self.free or self.waiting:
            self.waiting.append(job)
            return None
        return self._give(job, heapq.heappop(self.free))

    def release(self, job: int) -> int | None:
        """``job`` finished: its id goes to the first waiting job, which is
        returned (None: the id is free)."""
        if job not in self.held:
            raise ValueError(f"job {job} holds no wire id")
        wire = self.held.pop(job)
        if self.waiting:
            nxt = self.waiting.popleft()
            self._give(nxt, wire)
            return nxt
        heapq.heappush(self.free, wire)
        return None

    def _give(self, job: int, wire: int) -> int:
        self.held[job] = wire
        return wire
