"""State of the packet model's links and hosts (behaviour: ``sim.packet``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from sim.params import JobSpec, Net


class Link:
    """One direction of a link: FIFO, serialisation then propagation."""

    def __init__(self, net: Net, extra_ns: float = 0.0) -> None:
        self.free_at = 0.0
        self.tx = net.pkt_ns
        self.delay = net.hop_ns + extra_ns

    def arrival(self, now: float) -> float:
        start = max(now, self.free_at)
        self.free_at = start + self.tx
        return self.free_at + self.delay


@dataclass
class Worker:
    idx: int
    up: Link
    down: Link
    it: int = 0
    base: int = 0
    next_i: int = 0
    done: int = 0
    ready: bool = False
    outstanding: set[int] = field(default_factory=set)
    retx_pending: set[int] = field(default_factory=set)
    rto: float = 0.0
    srtt: float | None = None
    rttvar: float = 0.0
    sent_at: dict[int, float] = field(default_factory=dict)
    """first send of chunks not retransmitted yet (Karn: only they give samples)."""
    deadline: dict[int, float] = field(default_factory=dict)
    backed_off_at: float = -1.0
    retransmits: int = 0

    @property
    def bit(self) -> int:
        return 1 << self.idx


@dataclass
class PsHost:
    """One PS shard of a job: the chunks whose ``seq % shards`` is its index."""

    up: Link
    down: Link
    busy_until: float = 0.0
    bitmaps: dict[int, int] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)
    pulled: set[int] = field(default_factory=set)
    touched: dict[int, float] = field(default_factory=dict)
    served: int = 0
    """packets it spent service time on."""


@dataclass
class JobRun:
    spec: JobSpec
    workers: list[Worker]
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

    def shard(self, seq: int) -> PsHost:
        return self.shards[seq % len(self.shards)]
