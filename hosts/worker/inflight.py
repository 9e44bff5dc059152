"""The retransmission timers of a worker's chunks in flight.

Each chunk in flight has one deadline; a heap orders them.  Re-arming a
chunk leaves its old heap entry in place, and entries that are no longer a
chunk's deadline are skipped as they come up, so arming costs O(log n) and
nothing is ever searched.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator


class InFlight:
    """Chunk -> its retransmission deadline (iterates the chunks, in arming order)."""

    def __init__(self) -> None:
        self.deadlines: dict[int, float] = {}
        self._heap: list[tuple[float, int]] = []
        """(deadline, chunk); entries no longer in ``deadlines`` are skipped."""

    def __len__(self) -> int:
        return len(self.deadlines)

    def __iter__(self) -> Iterator[int]:
        return iter(self.deadlines)

    def arm(self, chunk: int, deadline: float) -> None:
        self.deadlines[chunk] = deadline
        heapq.heappush(self._heap, (deadline, chunk))

    def disarm(self, chunk: int) -> None:
        self.deadlines.pop(chunk, None)

    def clear(self) -> None:
        self.deadlines.clear()
        self._heap.clear()

    def expired(self, now: float) -> Iterator[int]:
        """The chunks whose deadline is ``now`` or earlier, earliest first.
        Each stays in flight at its old deadline until re-armed or disarmed;
        one re-armed at ``now`` or earlier while this runs comes up again."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            deadline, chunk = heapq.heappop(heap)
            if self.deadlines.get(chunk) == deadline:
                yield chunk

    def next_deadline(self) -> float | None:
        """The earliest deadline of a chunk in flight (None: none in flight)."""
        heap = self._heap
        while heap and self.deadlines.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None
