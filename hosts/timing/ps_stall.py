"""How long a PS waits on an incomplete chunk before it pulls the missing
workers, learnt from what it observes; shared by ``hosts.ps`` (seconds) and
the packet simulator's PS (nanoseconds): any unit works.

Two delays are smoothed as RFC 6298 smooths a round trip (``srtt + 4 *
rttvar``), and the stall is the larger of the two:

- ``gathered``: a chunk completed at the PS without a pull, from its first
  packet to its last; how long a chunk's contributions take to come
  together behind the switch (the spread of the workers, the switch's queue).
  A contribution sent before a pull that arrives after it (the pull was
  early: it was on its way) is such a sample too.
- ``answered``: a pull's round trip, from the PULL to the first resend it
  brings; the switch path and its queue, both ways, as the PS sees them.

Pulling sooner than a chunk's contributions take to arrive makes every worker
that was about to send resend instead (a storm behind a slow switch);
waiting longer than a pull takes to be answered only delays the chunk.  A
constant stall is right for one switch and one load only (docs/simulator.md,
"Calibration", the stall table).  Until either delay has a sample the stall
is its initial value; it stays within ``[floor, cap]``.  A chunk pulled
``n`` times without progress waits ``2^n`` stalls (up to ``cap``) before
the next pull, as a timeout backs off: what it waits for is slower than a
pull, and pulling again only loads the path it waits on.
"""

from __future__ import annotations


class SmoothedDelay:
    """One delay, smoothed as RFC 6298 smooths a round trip."""

    def __init__(self) -> None:
        self.srtt: float | None = None
        self.rttvar = 0.0

    def sample(self, delay: float) -> None:
        if self.srtt is None:
            self.srtt, self.rttvar = delay, delay / 2
            return
        self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - delay)
        self.srtt = 0.875 * self.srtt + 0.125 * delay

    @property
    def bound(self) -> float | None:
        """``srtt + 4 * rttvar``; None before the first sample."""
        return None if self.srtt is None else self.srtt + 4 * self.rttvar


class PullStall:
    """The stall of one PS before it pulls an incomplete chunk."""

    def __init__(self, initial: float, floor: float, cap: float) -> None:
        if not 0 <= floor <= initial <= cap or cap <= 0:
            raise ValueError(
                f"need 0 <= floor <= initial <= cap, cap > 0: {floor}, {initial}, {cap}"
            )
        self.initial, self.floor, self.cap = initial, floor, cap
        self.gather = SmoothedDelay()
        self.answer = SmoothedDelay()
        self.value = initial

    def gathered(self, span: float) -> None:
        """A chunk's packets came together at the PS ``span`` after its first
        one, without a pull (or despite one: it was early)."""
        self.gather.sample(span)
        self._update()

    def answered(self, rtt: float) -> None:
        """A pull's first resend came ``rtt`` after the PULL left."""
        self.answer.sample(rtt)
        self._update()

    def wait(self, pulls: int) -> float:
        """How long a chunk pulled ``pulls`` times without progress since
        waits before its next pull."""
        return min(self.value * float(2**pulls), self.cap)

    def _update(self) -> None:
        known = [b for b in (self.gather.bound, self.answer.bound) if b is not None]
        self.value = min(max(self.floor, *known), self.cap)
