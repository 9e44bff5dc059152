"""The retransmission timeout of a worker, shared by the worker agent
(seconds) and the packet simulator (nanoseconds): any unit works.

RFC 6298 smoothing with Karn's rule (the caller samples only chunks sent
once).  Two departures, both measured on loss:

- A sample counts at most twice the smoothed time.  Under loss a chunk sent
  once can still wait for a peer's retransmission, so some samples measure a
  peer's timeout rather than the network; RFC 6298 would feed the timeout
  back into itself and drag it to its cap.  A real slowdown still raises
  ``srtt`` within a few samples.
- The timeout doubles only when, within one timeout, more than half a window
  of chunks expired and none gave a sample: the sums then take longer than
  the timeout, and Karn's rule alone would keep it too low for ever.  A loss
  does not double it: random loss must not slow the rest of the window.
"""

from __future__ import annotations


class RetransmitTimeout:
    def __init__(self, initial: float, maximum: float) -> None:
        if not initial > 0:
            raise ValueError(f"initial timeout must be > 0, got {initial}")
        self.floor = initial
        """The timeout never drops below its initial value."""
        self.cap = max(initial, maximum)
        self.value = initial
        self.srtt: float | None = None
        self.rttvar = 0.0
        self._sampled = False
        self._expired = 0
        self._round_ends = 0.0

    def sample(self, rtt: float) -> None:
        """A chunk sent once got its sum ``rtt`` after it was sent."""
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            rtt = min(rtt, 2 * self.srtt)
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
        self.value = min(max(self.floor, self.srtt + 4 * self.rttvar), self.cap)
        self._sampled = True

    def expired(self, now: float, window: int) -> None:
        """A chunk's timer expired at ``now``; ``window`` chunks may be in flight."""
        self._expired += 1
        if now >= self._round_ends:
            if not self._sampled and 2 * self._expired > window:
                self.value = min(2 * self.value, self.cap)
            self._sampled, self._expired, self._round_ends = False, 0, now + self.value
