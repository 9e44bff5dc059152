"""One worker's place in its job, and where each of the job's chunks goes.

``Member`` is what the parts of a worker share about it: its job, its index
in the job's worker bitmap (``esa.job.Workers``), its quantisation bound,
and its job's PS hosts, one per shard, with their control addresses.  It
checks them once, when the worker is made.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from esa import wire
from esa.job import MAX_PS_SHARDS, Workers, ps_shard, valid_shards
from hosts.net.transport import Addr

FLOAT32_MAX = float(np.finfo(np.float32).max)


@dataclass(frozen=True)
class Member:
    """Worker ``index`` of job ``job`` with ``workers``; chunk ``seq`` goes
    to ``ps[ps_shard(seq, len(ps))]``, calls are agreed at ``control_addrs``
    (one per PS, in shard order)."""

    job: int
    index: int
    workers: Workers
    bound: float
    ps: tuple[Addr, ...]
    control_addrs: tuple[Addr, ...]

    def __post_init__(self) -> None:
        if not 1 <= self.job <= wire.MAX_JOB_ID:
            raise ValueError(f"job must be 1..{wire.MAX_JOB_ID}, got {self.job}")
        if not 0 <= self.index < wire.MAX_WORKERS or not self.mask >> self.index & 1:
            raise ValueError(f"worker bit {self.index} is not in mask {self.mask:#x}")
        if not 0 < self.bound <= FLOAT32_MAX:
            raise ValueError(f"bound must be a positive float32, got {self.bound}")
        if not valid_shards(len(self.ps)):
            raise ValueError(
                f"a job has 1, 2, 4 or 8 PS hosts (up to {MAX_PS_SHARDS}), got {len(self.ps)}"
            )
        if len(self.control_addrs) != len(self.ps):
            raise ValueError(
                f"PS control addresses for {len(self.ps)} PS hosts: {self.control_addrs}"
            )

    @classmethod
    def of(
        cls,
        job: int,
        index: int,
        workers: Workers,
        bound: float,
        ps: tuple[Addr, ...],
        control_addrs: tuple[Addr, ...] | None = None,
    ) -> Member:
        """``control_addrs`` default: each PS's host, ``CONTROL_PORT``."""
        control = control_addrs or tuple((host, wire.CONTROL_PORT) for host, _ in ps)
        return cls(job, index, workers, bound, ps, control)

    @property
    def fan_in(self) -> int:
        return self.workers.fan_in

    @property
    def mask(self) -> int:
        return self.workers.mask

    @property
    def bit(self) -> int:
        return 1 << self.index

    @property
    def shards(self) -> int:
        return len(self.ps)

    def shard_of(self, seq: int) -> int:
        return ps_shard(seq, self.shards)

    def ps_for(self, seq: int) -> Addr:
        """Where chunk ``seq`` goes (``ps_shard`` is skipped on the fast path
        of a job with one PS)."""
        return self.ps[0] if len(self.ps) == 1 else self.ps[ps_shard(seq, len(self.ps))]
