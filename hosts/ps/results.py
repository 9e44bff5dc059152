"""The PS's cache of finished chunks: each one's PS_RESULT, to answer retransmissions.

A worker that lost a chunk's sum resends its contribution; the PS answers
from this cache rather than merging anew.  The cache keeps the ``size``
chunks finished or asked for most recently.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

from hosts.ps.sums import Key


@dataclass(frozen=True)
class Answer:
    """A finished chunk's PS_RESULT, encoded once, resent on retransmissions."""

    flags: int
    payload: bytes


class ResultCache:
    """The answers of the ``size`` chunks used most recently (iterates
    their keys, least recent first)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._answers: OrderedDict[Key, Answer] = OrderedDict()

    def __iter__(self) -> Iterator[Key]:
        return iter(self._answers)

    def __len__(self) -> int:
        return len(self._answers)

    def __contains__(self, key: object) -> bool:
        return key in self._answers

    def get(self, key: Key) -> Answer | None:
        """The chunk's answer, if kept (its place in the cache unchanged)."""
        return self._answers.get(key)

    def use(self, key: Key) -> Answer | None:
        """The chunk's answer, if kept, now the most recently used."""
        answer = self._answers.get(key)
        if answer is not None:
            self._answers.move_to_end(key)
        return answer

    def put(self, key: Key, answer: Answer) -> bool:
        """Keep the chunk's answer; True if that evicted the least recent one."""
        self._answers[key] = answer
        self._answers.move_to_end(key)
        if len(self._answers) > self.size:
            self._answers.popitem(last=False)
            return True
        return False

    def forget(self, job: int) -> None:
        """Drop every answer of ``job``."""
        for key in [k for k in self._answers if k[0] == job]:
            del self._answers[key]
