"""The retransmission timeout of a worker, shared by the worker agent
(seconds) and the packet simulator (nanoseconds): any unit works.

RFC 6298 smoothing with Karn's rule, held for the whole sum: only a chunk
sent once whose sum holds every worker's first send gives a sample (the
caller reports each chunk's first send, its resends and its sum, and the
sum says whether a resend went into it, ``sums_first_sends``), its
gains divided by the samples one round trip gives (the chunks in flight,
each sampled), as RFC 7323 (appendix G) does for TCP with timestamps:
otherwise ``srtt`` and ``rttvar`` forget a queueing spike within one
window, and the next spike finds the timeout as short as before.
Two departures, both measured on loss:

- A sample counts at most twice the smoothed time.  Before sums said
  whether a resend went into them, a chunk sent once could wait for a
  peer's retransmission under loss and its sample measure the peer's
  timeout; RFC 6298 would feed the timeout back into itself and drag it to
  its cap.  Kept since: without it the packet model's ATP was 15-19 %
  slower at two of ``bench.sim_loss``'s rows (docs/hosts.md).  A real
  slowdown still raises ``srtt`` within a few samples.
- The timeout doubles only when, within one timeout, more than half a window
  of chunks expired and none gave a sample: the sums then take longer than
  the timeout, and Karn's rule alone would keep it too low for ever.  A loss
  does not double it: random loss must not slow the rest of the window.

A timeout proven spurious (``spurious``: the sum of every worker's first
transmission arrived after the chunk was resent) is a sample too, taken in
full, uncapped and with RFC 6298's own gains: such a sum waited for no
peer's timeout, and under a switch's queueing the timeout must learn at
once the delay it fell short of.  On a software switch a resent chunk
costs about 2 x fan-in packets (the PS pulls the other contributions), so
a timeout too short is not cheap.
"""

from __future__ import annotations

from esa.wire import Flag, PacketType

MAX_RTO = 1.0
"""Upper bound of a worker's adaptive retransmission timeout, seconds (or
the initial timeout, if that is larger): the longest a worker waits before
it resends, which bounds the PS's stall too."""


def sums_first_sends(ptype: int, flags: int) -> bool:
    """A result taken for the sum of every worker's first transmission: the
    switch's RESULT, or a PS_RESULT flagged HOLD (the PS's answer to ATP's
    held RESULT, or a sum the PS gathered from first sends alone).
    A resent contribution joins a slot's sum only where it is new to the
    chunk's partial (docs/dataplane.md, S5 and S7): the resend of a chunk
    whose first send was lost then ends a partial that waited for it, and
    the sample is as long as a spurious one would be."""
    if ptype == PacketType.RESULT:
        return not flags & Flag.RETX
    return bool(flags & Flag.HOLD and ptype == PacketType.PS_RESULT)


RETX, FALLBACK = int(Flag.RETX), int(PacketType.FALLBACK)
"""As plain ints: the packet model's PS asks ``holds_first_sends`` of every
packet it serves."""


def holds_first_sends(ptype: int, flags: int, bitmap: int) -> bool:
    """A packet a PS merges that holds first sends alone, so that a sum made
    of such packets only is flagged HOLD (``sums_first_sends``): a switch's
    sum or partial not flagged RETX, or one worker's FALLBACK that is no
    resend.  A FALLBACK of several workers is a child switch's sum, which
    goes up without the flag (docs/dataplane.md), so it counts as resent."""
    return not flags & RETX and (ptype != FALLBACK or bitmap.bit_count() == 1)


class RetransmitTimeout:
    def __init__(self, initial: float, maximum: float) -> None:
        if not initial > 0:
            raise ValueError(f"initial timeout must be > 0, got {initial}")
        self.floor = initial
        """The timeout never drops below its initial value."""
        self.cap = max(initial, maximum)
        self.value = initial
        self.learnt = initial
        """the timeout the samples give, without the backoff: what holds a
        timer set before it grew (``hosts.worker.inflight``).  A backoff
        answers expiries without samples and times the resends; held to it,
        every chunk in flight would wait the longer timeout for its loss."""
        self.srtt: float | None = None
        self.rttvar = 0.0
        self._sampled = False
        self._expired = 0
        self._round_ends = 0.0
        self._first_sent: dict[int, float] = {}
        """first send time of chunks not resent yet: only they give samples."""
        self._resent: dict[int, float] = {}
        """first send time of chunks resent since their timer expired."""

    def sent(self, chunk: int, now: float) -> None:
        """``chunk`` went out for the first time at ``now``."""
        self._first_sent[chunk] = now

    def resend(self, chunk: int) -> None:
        """``chunk``'s timer expired and it goes out again: it gives no sample,
        but a sum of its first transmissions would show the timeout spurious."""
        sent = self._first_sent.pop(chunk, None)
        if sent is not None:
            self._resent[chunk] = sent

    def forget(self, chunk: int) -> None:
        """``chunk`` goes out again at the PS's request: it gives no sample."""
        self._first_sent.pop(chunk, None)

    def answered(self, chunk: int, now: float, in_flight: int, ptype: int, flags: int) -> bool:
        """``chunk``'s sum (a result of type ``ptype`` with ``flags``) came at
        ``now`` while ``in_flight`` chunks, itself included, waited for theirs:
        a sample if it was sent once, a spurious timeout (True) if it was
        resent and this is the sum of first transmissions."""
        sent = self._first_sent.pop(chunk, None)
        first = self._resent.pop(chunk, None)
        if not sums_first_sends(ptype, flags):
            return False
        if sent is not None:
            self.sample(now - sent, in_flight)
        elif first is not None:
            self.spurious(now - first)
            return True
        return False

    def clear(self) -> None:
        """A new call (or iteration): the chunks of the last one give no samples."""
        self._first_sent.clear()
        self._resent.clear()

    def sample(self, rtt: float, in_flight: int = 1) -> None:
        """A chunk sent once got its sum ``rtt`` after it was sent, while
        ``in_flight`` chunks (itself included) were waiting for theirs."""
        if in_flight < 1:
            raise ValueError(f"a sampled chunk is in flight itself, got {in_flight}")
        self._update(rtt if self.srtt is None else min(rtt, 2 * self.srtt), 1 / in_flight)

    def spurious(self, rtt: float) -> None:
        """A chunk's timer expired, yet the sum of first transmissions came
        ``rtt`` after its first send: a sample, not capped, at full gain."""
        self._update(rtt, 1.0)

    def _update(self, rtt: float, gain: float) -> None:
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            beta, alpha = 0.25 * gain, 0.125 * gain
            self.rttvar = (1 - beta) * self.rttvar + beta * abs(self.srtt - rtt)
            self.srtt = (1 - alpha) * self.srtt + alpha * rtt
        self.value = self.learnt = min(max(self.floor, self.srtt + 4 * self.rttvar), self.cap)
        self._sampled = True

    def expired(self, now: float, window: int) -> None:
        """A chunk's timer expired at ``now``; ``window`` chunks may be in flight."""
        self._expired += 1
        if now >= self._round_ends:
            if not self._sampled and 2 * self._expired > window:
                self.value = min(2 * self.value, self.cap)
            self._sampled, self._expired, self._round_ends = False, 0, now + self.value
