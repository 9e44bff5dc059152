"""The parameter server: finishes the sums the switch could not.

It merges contributions (FALLBACK) and partial sums (PARTIAL) of many jobs
by worker bitmap, completes a chunk when the bitmaps cover the job's
workers, and sends the sum as PS_RESULT to the switch, which multicasts it
to the workers.  It also acknowledges held results (ATP), answers
retransmissions from a bounded cache of recent results, pulls missing
contributions of stalled chunks, and sums FLOAT resends of overflowed chunks.

Every datagram is checked field by field against its job (``hosts.net.drops``
lists what is dropped and why), and a job's junk can cost only bounded
work: at most ``max_open`` chunks open at once and at most ``budget``
pulls and answers from the cache per worker per ``stall`` (a held result
is acknowledged regardless: ATP needs one answer per chunk).  With a
control transport the PS also agrees each call with the job's workers
(``hosts.agreement.desk``, ``hosts.agreement``; docs/agreement.md) and drops
data outside the agreed calls.  Without one (the packet simulator's tests,
``testbed.simnet``) it agrees nothing and fences nothing: no CLI or rig
runs a PS that way.

A job's chunks may be spread over several PS hosts: this one is shard
``shard`` of ``shards`` and completes only the chunks ``esa.job.ps_shard``
gives it.  It still agrees every call (each shard fences the whole call),
drops another shard's contributions, partials and floats (``shard``), and
ignores the copies of other shards' switch sums the switch may send it
(counted in ``other_shard_results``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from esa import wire
from esa.job import MAX_PS_SHARDS, Workers, valid_shards
from hosts.agreement import auth
from hosts.agreement.callbook import CallBook
from hosts.agreement.desk import ControlDesk
from hosts.net.counters import PSCounters
from hosts.net.drops import HostDrop
from hosts.net.transport import Addr, Transport, wait_any
from hosts.ps.aggregate import Aggregator, Outbox
from hosts.ps.results import ResultCache
from hosts.ps.sums import OpenSums
from hosts.timing.ps_stall import PullStall
from hosts.timing.rto import MAX_RTO

MIN_STALL = 1e-3
"""Seconds: the PS's stall learns no shorter (``hosts.timing.ps_stall``); its scan
runs every quarter stall."""


class ParameterServer:
    """The PS of the jobs in ``jobs``.  Each datagram it receives goes, top
    to bottom, through its ``aggregator`` (``Aggregator.handle``), over its
    parts: the open sums (``sums``), the finished chunks' answers
    (``done``), what it sends (``outbox``) and, with a control transport,
    the calls it agreed (``desk``)."""

    def __init__(
        self,
        transport: Transport,
        switch_addr: Addr,
        jobs: dict[int, Workers] | None = None,
        stall: float = 0.2,
        max_pulls: int = 10,
        cache_size: int = 1 << 16,
        clock: Callable[[], float] = time.monotonic,
        control: Transport | None = None,
        budget: int = 512,
        max_open: int = 4096,
        shard: int = 0,
        shards: int = 1,
        keys: Mapping[int, bytes] | None = None,
        session: int | None = None,
    ) -> None:
        """``stall``: seconds the PS waits on an incomplete chunk before it
        pulls it, until it has learnt how long (``hosts.timing.ps_stall``: from
        ``MIN_STALL`` to the workers' longest timeout, ``MAX_RTO``); also
        the period of the reply budget.  ``keys``: each job's control key (a
        job without one has its open key, ``hosts.agreement.auth.open_key``);
        ``session``: this PS process's session (default random)."""
        if not valid_shards(shards) or not 0 <= shard < shards:
            raise ValueError(
                f"PS shard {shard} of {shards}: shards must be 1, 2, 4 or 8 "
                f"(up to {MAX_PS_SHARDS}) and the shard below them"
            )
        self.shard, self.shards = shard, shards
        self.transport, self.clock = transport, clock
        self.stall, self.budget = stall, budget
        self.jobs: dict[int, Workers] = {}
        self.books: dict[int, CallBook] = {}
        self.counters = PSCounters()
        self.sums = OpenSums(max_open)
        self.done = ResultCache(cache_size)
        self.outbox = Outbox(transport, switch_addr, self.counters)
        self.pull_stall = PullStall(stall, min(MIN_STALL, stall), max(stall, MAX_RTO))
        self.aggregator = Aggregator(
            self.jobs, self.books, self.sums, self.done, self.outbox, self.counters,
            self.pull_stall, max_pulls, shard, shards,
        )  # fmt: skip
        self.rbuf = bytearray(wire.PAYLOAD_BYTES + 1)
        self.next_scan = 0.0
        self.desk = None if control is None else ControlDesk(
            control, self.books, auth.Keys(keys), self.aggregator.forget, self.aggregator.held,
            self._count,
            self._drop, session,
        )  # fmt: skip
        for job, spec in (jobs or {}).items():
            self.add_job(job, spec)

    def add_job(self, job: int, spec: Workers) -> None:
        if not 1 <= job <= wire.MAX_JOB_ID:
            raise ValueError(f"job must be 1..{wire.MAX_JOB_ID}, got {job}")
        self.jobs[job] = spec
        self.outbox.add_job(job, spec.fan_in, self.budget, self.stall)
        self.sums.add_job(job)
        if self.desk is not None:
            self.books[job] = CallBook(job, spec.fan_in, spec.mask)

    def serve(self, stop: Callable[[], bool]) -> None:
        """Run until ``stop()`` is true (checked at least every quarter stall)."""
        transports = (
            [self.transport] if self.desk is None else [self.transport, self.desk.transport]
        )
        while not stop():
            self.poll(self.clock())
            wait_any(transports, self.pull_stall.value / 4)

    def poll(self, now: float) -> float:
        """Handle waiting datagrams and pull stalled chunks; returns the next scan time."""
        while (got := self.transport.recv_into(self.rbuf)) is not None:
            self.aggregator.handle(self.rbuf, *got, now)
        if self.desk is not None:
            self.desk.poll(now)
        if now >= self.next_scan:
            self.aggregator.scan(now)
            self.next_scan = now + self.pull_stall.value / 4
        return self.next_scan

    # -- control ------------------------------------------------------------

    def _drop(self, reason: HostDrop) -> None:
        self.counters.dropped[reason] += 1

    def _count(self, name: str) -> None:
        setattr(self.counters, name, getattr(self.counters, name) + 1)

    @property
    def session(self) -> int:
        """This PS process's session (0 without a control transport)."""
        return 0 if self.desk is None else self.desk.session

    def handle_control(self, buf: bytearray, n: int, addr: Addr, now: float) -> None:
        assert self.desk is not None
        self.desk.handle(buf, n, addr, now)
