"""The worker processes of one job at a PS: which one holds each worker
index, and what became of the others (docs/agreement.md, Processes).

A process is known by its nonce, from its first authentic CALL on.  It
holds its index until it says BYE or, silent for ``LIVE_TTL``, another
process takes the index.  A second process that claims an index whose
holder is alive waits (it is a *contender*): if the holder speaks again
the two run at once and both are banned; if the holder stays silent for
``LIVE_TTL`` it was dead, and the contender takes the index.  A newer
contender displaces an older one, which may be dead too.  A process that
was displaced or silent while another took its index and then speaks
again was alive all along: it and every live claimant of the index are
banned.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass, field

from esa.wire import LIVE_TTL, ControlType
from hosts.agreement.auth import ReplayWindow
from hosts.net import payload
from hosts.net.transport import Addr

RETIRED_KEPT = 1 << 14
"""Processes that left, were superseded or banned, remembered per job (so
that their recorded messages stay copies); only authentic CALLs add any."""


class RosterState(enum.Enum):
    HOLDER = "holder"
    """holds its index: its announcements count."""
    CONTENDER = "contender"
    """claims an index a live holder holds; waits until that one is silent."""
    GONE = "gone"
    """said BYE."""
    SUPERSEDED = "superseded"
    """was silent while another process took its index, or was displaced
    as a contender by a newer one."""
    BANNED = "banned"
    """ran as the same index as another process at the same time."""


@dataclass
class WorkerProcess:
    index: int
    nonce: int
    addr: Addr
    heard: float
    state: RosterState
    window: ReplayWindow = field(default_factory=ReplayWindow)


class Roster:
    def __init__(self) -> None:
        self.procs: OrderedDict[int, WorkerProcess] = OrderedDict()
        self.holders: dict[int, WorkerProcess] = {}
        self.contenders: dict[int, WorkerProcess] = {}

    def known(self, nonce: int) -> WorkerProcess | None:
        return self.procs.get(nonce)

    @staticmethod
    def live(p: WorkerProcess, now: float) -> bool:
        return p.state in (RosterState.HOLDER, RosterState.CONTENDER) and now - p.heard < LIVE_TTL

    def live_rivals(
        self, index: int, now: float, other_than: WorkerProcess | None = None
    ) -> list[WorkerProcess]:
        """The live processes that hold or claim ``index``, but ``other_than``."""
        found = (self.holders.get(index), self.contenders.get(index))
        return [r for r in found if r is not None and r is not other_than and self.live(r, now)]

    def hear(
        self, p: WorkerProcess, msg: payload.Control, addr: Addr, now: float
    ) -> list[WorkerProcess]:
        """An authentic, fresh message of known process ``p``; returns the
        processes it shows running as one index (banned now)."""
        p.window.take(msg.counter)
        p.heard, p.addr = now, addr
        if msg.ctype == ControlType.BYE:
            self._retire(p, RosterState.GONE)
            return []
        if p.state is RosterState.SUPERSEDED:
            return self._ban(p, *self.live_rivals(p.index, now))
        c = self.contenders.get(p.index)
        if p.state is RosterState.HOLDER and c is not None and self.live(c, now):
            return self._ban(p, c)
        return []

    def claim(
        self, msg: payload.Control, addr: Addr, now: float
    ) -> tuple[WorkerProcess, list[WorkerProcess]]:
        """The process of CALL ``msg`` (authentic, fresh, for an index of the
        job and, if the process is known, for its index), and the processes
        found running as one index (banned now).  The process goes on to
        announce only if it is the holder."""
        p = self.procs.get(msg.nonce)
        if p is None:
            return self._newcomer(msg, addr, now)
        banned = self.hear(p, msg, addr, now)
        if p.state is RosterState.CONTENDER:
            return self._contend(p, now), banned
        return p, banned

    def _newcomer(
        self, msg: payload.Control, addr: Addr, now: float
    ) -> tuple[WorkerProcess, list[WorkerProcess]]:
        i = msg.worker
        p = WorkerProcess(i, msg.nonce, addr, now, RosterState.CONTENDER)
        p.window.take(msg.counter)
        self.procs[p.nonce] = p
        rival = self.contenders.get(i)
        if rival is not None:
            self._retire(rival, RosterState.SUPERSEDED)
        self.contenders[i] = p
        return self._contend(p, now), []

    def _contend(self, p: WorkerProcess, now: float) -> WorkerProcess:
        holder = self.holders.get(p.index)
        if holder is not None and self.live(holder, now):
            return p
        if holder is not None:
            self._retire(holder, RosterState.SUPERSEDED)
        del self.contenders[p.index]
        p.state = RosterState.HOLDER
        self.holders[p.index] = p
        return p

    def _ban(self, *procs: WorkerProcess) -> list[WorkerProcess]:
        for p in procs:
            self._retire(p, RosterState.BANNED)
        return list(procs)

    def _retire(self, p: WorkerProcess, state: RosterState) -> None:
        for table in (self.holders, self.contenders):
            if table.get(p.index) is p:
                del table[p.index]
        p.state = state
        self.procs.move_to_end(p.nonce)
        retired = [
            n
            for n, q in self.procs.items()
            if q.state not in (RosterState.HOLDER, RosterState.CONTENDER)
        ]
        for n in retired[: max(0, len(retired) - RETIRED_KEPT)]:
            del self.procs[n]

    def snapshot(self) -> tuple[object, ...]:
        """Everything the roster holds, to compare."""
        return tuple(
            (p.index, p.nonce, p.addr, p.heard, p.state, p.window.top, p.window.seen)
            for p in self.procs.values()
        )
