"""One job, as every part of the project sees it: its workers and how its
priority is set.  The controller, the hosts, the Mininet run and the tests
each add their own fields to these by composition.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from esa import wire
from esa.ranges import check_range

MAX_PRIORITY = 255
"""Priorities run 0..MAX_PRIORITY; a higher number is more urgent."""


def check_priority(priority: object) -> int:
    """``priority`` if it is a static priority (an int in 0..MAX_PRIORITY);
    the one check of that range, for the command line, the controller and
    the scenario files."""
    return check_range("priority", priority, 0, MAX_PRIORITY)


def check_job_id(job: object) -> int:
    """``job`` if it is a job id (an int in 1..``wire.MAX_JOB_ID``); the one
    check of that range, for the command lines, the controller and the
    scenario files."""
    return check_range("job id", job, 1, wire.MAX_JOB_ID)


def popcount(x: int) -> int:
    return bin(x).count("1")


class Mode(enum.Enum):
    STATIC = "static"
    AUTO = "auto"


@dataclass(frozen=True)
class Priority:
    """How one job's priority is set: a static number, or ranked automatically
    by the bytes it has left."""

    mode: Mode
    priority: int = 0
    """the static priority (``Mode.STATIC``)."""
    remaining: int = 0
    """bytes still to aggregate (``Mode.AUTO``)."""

    @classmethod
    def static(cls, priority: int) -> Priority:
        return cls(Mode.STATIC, priority=priority)

    @classmethod
    def auto(cls, remaining: int) -> Priority:
        return cls(Mode.AUTO, remaining=remaining)


@dataclass(frozen=True)
class Workers:
    """A job's workers as the switch and the PS count them: how many, and
    their bits in the worker bitmap (worker ``i`` owns bit ``i``)."""

    fan_in: int
    mask: int

    def __post_init__(self) -> None:
        if not 1 <= self.fan_in <= wire.MAX_WORKERS:
            raise ValueError(f"fan-in must be 1..{wire.MAX_WORKERS}, got {self.fan_in}")
        if not 0 < self.mask < 1 << wire.MAX_WORKERS:
            raise ValueError(f"mask {self.mask:#x} is not a {wire.MAX_WORKERS}-bit worker mask")
        if popcount(self.mask) != self.fan_in:
            raise ValueError(
                f"mask {self.mask:#x} has {popcount(self.mask)} workers, fan-in is {self.fan_in}"
            )

    @classmethod
    def of(cls, fan_in: int, mask: int | None = None) -> Workers:
        if mask is None and not 1 <= fan_in <= wire.MAX_WORKERS:
            raise ValueError(f"fan-in must be 1..{wire.MAX_WORKERS}, got {fan_in}")
        return cls(fan_in, (1 << fan_in) - 1 if mask is None else mask)


EQUAL_PRIORITY = 128
"""The one static priority every job gets when ESA runs with priorities
off (the simulator's ``esa-equal``, the run's ``esa-equal`` policy): no
job then preempts another."""

MAX_PS_SHARDS = 8
"""A job's chunks spread over at most this many PS hosts."""


def valid_shards(n: int) -> bool:
    """A PS shard count is a power of two, 1..``MAX_PS_SHARDS``: the switch
    then finds a chunk's shard with one ternary match on the sequence
    number's low bits."""
    return 1 <= n <= MAX_PS_SHARDS and n & (n - 1) == 0


_COUNTS = [str(n) for n in range(1, MAX_PS_SHARDS + 1) if valid_shards(n)]
SHARD_COUNTS = f"{', '.join(_COUNTS[:-1])} or {_COUNTS[-1]}"
"""The PS shard counts ``valid_shards`` accepts, as a message shows them."""
PS_COUNTS = f"a job has {SHARD_COUNTS} PS hosts"
"""What a refused PS count is told."""


def ps_shard(seq: int, shards: int) -> int:
    """Which of a job's ``shards`` PS hosts owns chunk ``seq``: its low bits.
    The worker addresses the chunk there, the switch routes an evicted or
    fallen-back partial there, and that PS alone completes it."""
    if not valid_shards(shards):
        raise ValueError(f"PS shards must be a power of two 1..{MAX_PS_SHARDS}, got {shards}")
    return seq & (shards - 1)


@dataclass(frozen=True)
class Placement:
    """Where a job runs, by host name: worker ``i`` on ``workers[i]`` (it owns
    bit ``i``), chunk ``seq`` at ``ps[ps_shard(seq, len(ps))]``."""

    workers: tuple[str, ...]
    ps: tuple[str, ...]

    def __post_init__(self) -> None:
        if not 1 <= len(self.workers) <= wire.MAX_WORKERS:
            raise ValueError(f"a job has 1..{wire.MAX_WORKERS} workers, got {len(self.workers)}")
        if not valid_shards(len(self.ps)):
            raise ValueError(
                f"{PS_COUNTS} (a power of two up to {MAX_PS_SHARDS}), got {len(self.ps)}"
            )
        names = self.workers + self.ps
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"host(s) named twice in one job: {', '.join(dup)}")

    def ps_for(self, seq: int) -> str:
        return self.ps[ps_shard(seq, len(self.ps))]


@dataclass(frozen=True)
class JobSpec:
    """A training job as a scenario describes it.  The simulator runs it and
    the Mininet run starts it; each adds its own fields by composition (the
    run its ``Placement``)."""

    job: int
    """the job's identity, any int >= 1 (a trace index); what goes on the
    wire is a job id (``check_job_id``): the run checks its own, the
    simulator leases one (``sim.leases``)."""
    workers: int
    values: int
    """gradient length per iteration, in values (one per parameter)."""
    iterations: int
    priority: int | None = None
    """static priority 0..MAX_PRIORITY (higher is more urgent); None: the controller's
    automatic (SRPT) rank from the remaining volume."""
    arrival_s: float = 0.0
    compute_s: float = 0.0
    """forward and backward time of one iteration on one worker."""
    jitter: float = 0.0
    """relative spread of ``compute_s`` between workers and iterations."""
    name: str = ""
    """what the job trains, for reports (a model name)."""

    def __post_init__(self) -> None:
        if isinstance(self.job, bool) or not isinstance(self.job, int) or self.job < 1:
            raise ValueError(f"job must be an int >= 1, got {self.job!r}")
        if not 1 <= self.workers <= wire.MAX_WORKERS:
            raise ValueError(f"job {self.job}: workers must be 1..{wire.MAX_WORKERS}")
        if self.values < 1 or self.iterations < 1:
            raise ValueError(f"job {self.job}: values and iterations must be >= 1")
        if self.priority is not None:
            try:
                check_priority(self.priority)
            except ValueError as e:
                raise ValueError(f"job {self.job}: {e}") from None
        if self.arrival_s < 0 or self.compute_s < 0 or not 0 <= self.jitter < 1:
            raise ValueError(
                f"job {self.job}: arrival_s and compute_s must be >= 0, jitter in [0, 1)"
            )

    @property
    def chunks(self) -> int:
        """Packets per worker per iteration."""
        return -(-self.values // wire.K)

    @property
    def volume_bytes(self) -> int:
        """What the job aggregates in all, as it declares it to the controller
        (4-byte values)."""
        return self.remaining_bytes(0)

    def remaining_bytes(self, iters_done: int) -> int:
        return 4 * self.values * (self.iterations - iters_done)

    @property
    def worker_set(self) -> Workers:
        return Workers.of(self.workers)

    def declared_priority(self, iters_done: int = 0) -> Priority:
        """What the job tells the controller: its static priority, or its
        remaining volume for the automatic rank."""
        if self.priority is None:
            return Priority.auto(self.remaining_bytes(iters_done))
        return Priority.static(self.priority)
