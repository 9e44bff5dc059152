"""What a PS sends to the switch, and the per-job budget of its replies.

Sums go out as they complete.  A pull or an answer from the result cache is
what one junk datagram could make the PS send many of, so each job may
draw at most ``budget`` of them per worker per ``stall`` (a token bucket,
``hosts.net.budget``); the rest are counted as ``suppressed`` and not sent.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from esa import wire
from esa.wire import PacketType
from hosts.net import payload
from hosts.net.budget import Budget
from hosts.net.counters import PSCounters
from hosts.net.transport import Addr, Transport
from hosts.ps.sums import Key


class Outbox:
    """The PS's datagrams to the switch at ``switch_addr``, encoded in one buffer."""

    def __init__(self, transport: Transport, switch_addr: Addr, counters: PSCounters) -> None:
        self.transport, self.switch_addr, self.counters = transport, switch_addr, counters
        self.budgets: dict[int, Budget] = {}
        self.frame = payload.Frame()

    def add_job(self, job: int, fan_in: int, budget: int, stall: float) -> None:
        """``budget`` replies per worker per ``stall`` seconds, as a burst too."""
        self.budgets[job] = Budget(budget * fan_in / stall, budget * fan_in)

    def encode(
        self, ptype: int, flags: int, key: Key, bitmap: int, count: int, values: npt.ArrayLike
    ) -> bytes:
        header = payload.Header(ptype, flags, key[0], key[1], bitmap, count)
        return bytes(self.frame.pack(header, values))

    def send(self, datagram: bytes) -> None:
        self.transport.send(datagram, self.switch_addr)

    def reply(self, job: int, datagram: bytes, now: float) -> bool:
        """Send a pull or an answer from the cache, within the job's budget."""
        if not self.budgets[job].take(now):
            self.counters.suppressed += 1
            return False
        self.send(datagram)
        return True

    def pull(self, key: Key, bitmap: int, count: int, now: float) -> bool:
        """Ask the workers missing from ``bitmap`` to resend chunk ``key``."""
        zeros = np.zeros(wire.K, np.int32)
        sent = self.reply(key[0], self.encode(PacketType.PULL, 0, key, bitmap, count, zeros), now)
        self.counters.pulls_sent += sent
        return sent
