"""The retransmission timers of a worker's chunks in flight.

Each chunk in flight has one deadline; a heap orders them.  Re-arming a
chunk leaves its old heap entry in place, and entries that are no longer a
chunk's deadline are skipped as they come up, so arming costs O(log n) and
nothing is ever searched; a chunk armed twice for the same deadline comes
up once.

A chunk's timer runs from when it was last sent for the timeout as the
worker's samples give it when the timer comes due
(``hosts.timing.rto.RetransmitTimeout.learnt``), not as it was when the
chunk went out: a timeout that grew meanwhile (its samples showed a deeper
queue) sets the timer again, as TCP's one retransmission timer, restarted
at every acknowledgement with the current timeout (RFC 6298, 5.3), never
fires on a timeout it has outgrown.  Behind a queue that builds faster than one window
of samples teaches the timeout, a chunk's timer set at its send otherwise
expires for every chunk sent before the timeout learnt, and each resend
deepens the queue (docs/hosts.md, "Worker").
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator


class InFlight:
    """Chunk -> its retransmission deadline (iterates the chunks, in arming order)."""

    def __init__(self) -> None:
        self.deadlines: dict[int, float] = {}
        self.sent: dict[int, float] = {}
        """when each chunk was last sent, if its timer runs from then; a
        chunk due at once (``due``) has none."""
        self._heap: list[tuple[float, int]] = []
        """(deadline, chunk); entries no longer in ``deadlines`` are skipped."""

    def __len__(self) -> int:
        return len(self.deadlines)

    def __iter__(self) -> Iterator[int]:
        return iter(self.deadlines)

    def arm(self, chunk: int, sent: float, timeout: float) -> None:
        """``chunk`` went out at ``sent``: due ``timeout`` later, or later
        still if the timeout has grown by then."""
        self.sent[chunk] = sent
        self._set(chunk, sent + timeout)

    def due(self, chunk: int, deadline: float) -> None:
        """``chunk`` is due at ``deadline`` whatever the timeout."""
        self.sent.pop(chunk, None)
        self._set(chunk, deadline)

    def _set(self, chunk: int, deadline: float) -> None:
        self.deadlines[chunk] = deadline
        heapq.heappush(self._heap, (deadline, chunk))

    def disarm(self, chunk: int) -> None:
        self.deadlines.pop(chunk, None)
        self.sent.pop(chunk, None)

    def clear(self) -> None:
        self.deadlines.clear()
        self.sent.clear()
        self._heap.clear()

    def expired(self, now: float, timeout: float) -> Iterator[int]:
        """The chunks due at ``now`` or earlier under ``timeout``, earliest
        first; one whose deadline came but was sent less than ``timeout``
        ago is armed again for then.  Each stays in flight at its old
        deadline until re-armed or disarmed; one re-armed at ``now`` or
        earlier while this runs comes up again."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)
            while heap and heap[0] == entry:
                heapq.heappop(heap)
            deadline, chunk = entry
            if self.deadlines.get(chunk) != deadline:
                continue
            sent = self.sent.get(chunk)
            if sent is not None and sent + timeout > now:
                self._set(chunk, sent + timeout)
                continue
            yield chunk

    def next_deadline(self) -> float | None:
        """The earliest deadline of a chunk in flight (None: none in flight)."""
        heap = self._heap
        while heap and self.deadlines.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None
