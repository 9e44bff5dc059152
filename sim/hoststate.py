"""State of the packet models' links and hosts (behaviour: ``sim.hostsim``)."""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

import numpy as np

from esa.job import JobSpec, ps_shard
from esa.model import Packet
from hosts.timing.ps_stall import PullStall
from hosts.timing.rto import RetransmitTimeout

DRAW_BLOCK = 256
"""Extra delays a link with jitter draws at a time."""


class SimplexLink:
    """One direction of a link: FIFO, serialisation then propagation, and
    with ``jitter_ns`` an exponential extra delay of that mean per packet
    (``Net.jitter_ns``), drawn from ``rng``; with ``loss`` it loses each
    packet it serialised with that probability (``Net.loss``), drawn from
    ``loss_rng``."""

    def __init__(
        self,
        tx_ns: float,
        delay_ns: float,
        jitter_ns: float = 0.0,
        rng: np.random.Generator | None = None,
        loss: float = 0.0,
        loss_rng: np.random.Generator | None = None,
    ) -> None:
        if jitter_ns > 0 and rng is None:
            raise ValueError("a link with jitter needs a random generator")
        if loss > 0 and loss_rng is None:
            raise ValueError("a lossy link needs a random generator")
        self.loss = loss
        self.loss_rng = loss_rng
        self.lost = 0
        """packets it lost."""
        self.free_at = 0.0
        self.tx = tx_ns
        """serialisation of one packet."""
        self.delay = delay_ns
        self.jitter = jitter_ns
        self.rng = rng
        self.sent = 0
        """packets it has carried."""
        self._drawn: list[float] = []
        """extra delays drawn ahead, next last: a block of draws is the same
        sequence as as many single draws, at a fraction of their cost."""

    def arrival(self, now: float) -> float:
        self.free_at = (now if now > self.free_at else self.free_at) + self.tx
        self.sent += 1
        if self.rng is None or self.jitter <= 0:
            return self.free_at + self.delay
        if not self._drawn:
            self._drawn = self.rng.exponential(self.jitter, DRAW_BLOCK).tolist()[::-1]
        return self.free_at + self.delay + self._drawn.pop()

    def loses(self) -> bool:
        """Whether the packet it just serialised is lost."""
        if self.loss <= 0 or self.loss_rng is None or self.loss_rng.random() >= self.loss:
            return False
        self.lost += 1
        return True


@dataclass
class WorkerState:
    """A simulated worker's place in its job: its links, iteration, window
    and timers (what ``sim.hostsim`` advances)."""

    idx: int
    up: SimplexLink
    down: SimplexLink
    it: int = 0
    base: int = 0
    next_i: int = 0
    done: int = 0
    ready: bool = False
    outstanding: set[int] = field(default_factory=set)
    retx_pending: set[int] = field(default_factory=set)
    timeout: RetransmitTimeout | None = None
    """the worker's retransmission timeout in ns (``hosts.timing.rto``);
    None: none."""
    deadline: dict[int, float] = field(default_factory=dict)
    sent_at: dict[int, float] = field(default_factory=dict)
    """when each chunk in flight was last sent: a timer that comes due
    before that plus the current timeout is set again for then."""
    timers: list[tuple[float, int, int]] = field(default_factory=list)
    """(deadline, event counter, seq) of each chunk sent, a heap
    (``sim.hostsim``: the timers)."""
    alarms: set[tuple[float, int]] = field(default_factory=set)
    """(deadline, event counter) of the alarms set in the event queue."""
    retransmits: int = 0
    spurious: int = 0
    bit: int = field(init=False)
    """its bit in the job's bitmaps, ``1 << idx``: read for every chunk it sends."""

    def __post_init__(self) -> None:
        self.bit = 1 << self.idx


@dataclass
class PsHost:
    """One PS shard of a job: the chunks ``esa.job.ps_shard`` gives it."""

    up: SimplexLink
    down: SimplexLink
    port: int
    """the switch port it injects through (the job's ``ps_ports``)."""
    busy_until: float = 0.0
    fifo: deque[tuple[float, int, Packet, int]] = field(default_factory=deque)
    """(time, event counter, packet, workers' bitmap) of each packet queued
    for service, in the order it comes due (``sim.hostsim._to_ps``)."""
    bitmaps: dict[int, int] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)
    resent: set[int] = field(default_factory=set)
    """seqs incomplete here that merged a packet that may hold a resend
    (``hosts.timing.rto.holds_first_sends``): their sum is not flagged HOLD."""
    pulled: set[int] = field(default_factory=set)
    touched: dict[int, float] = field(default_factory=dict)
    scans: list[tuple[float, int, int, float]] = field(default_factory=list)
    """(time, event counter, seq, touched) of each scan set, a heap
    (``sim.hostsim``: the scans)."""
    alarms: set[tuple[float, int]] = field(default_factory=set)
    """(time, event counter) of the alarms set in the event queue."""
    stall: PullStall | None = None
    """its stall learnt from what it observes (``Net.ps_stall_adapts``);
    None: ``Net.ps_stall_ns``, constant."""
    opened: dict[int, float] = field(default_factory=dict)
    """seq -> when its first packet was served (with ``stall``)."""
    pulled_at: dict[int, float] = field(default_factory=dict)
    """seq -> when it was last pulled (with ``stall``)."""
    unanswered: dict[int, int] = field(default_factory=dict)
    """seq -> pulls since its last progress (with ``stall``: each doubles
    the wait for the next, ``PullStall.wait``)."""
    pulls: int = 0
    """PULLs it sent."""
    served: int = 0
    """packets it spent service time on."""


@dataclass
class JobRun:
    spec: JobSpec
    workers: list[WorkerState]
    shards: list[PsHost]
    compute: np.ndarray
    window: int
    iters_done: int = 0
    workers_in_iter: Counter[int] = field(default_factory=Counter)
    at_barrier: Counter[int] = field(default_factory=Counter)
    admitted_at: float = 0.0
    finish: float | None = None
    part_base: int = 0
    part_size: int = 0
    admitted: bool = False
    wire: int = 0
    """the job id its packets carry: ``sim.packet`` leases it one at
    admission, ``sim.tiers`` sends its own."""
    mask: int = field(init=False)
    """the job's worker bitmap, complete."""
    chunks: int = field(init=False)
    """``spec.chunks``, read for every chunk a worker sends or is answered."""

    def __post_init__(self) -> None:
        self.mask = self.spec.worker_set.mask
        self.chunks = self.spec.chunks

    def shard(self, seq: int) -> PsHost:
        return self.shards[ps_shard(seq, len(self.shards))]
