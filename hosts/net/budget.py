"""A token bucket: what bounds the replies junk traffic can draw from the PS."""

from __future__ import annotations


class Budget:
    """A token bucket: at most ``burst`` tokens, refilled at ``rate`` per second."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.at = burst, float("-inf")

    def take(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + max(0.0, now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True
