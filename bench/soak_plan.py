"""What a soak (``bench.soak``) runs, drawn from its seed before anything
starts: the jobs (fan-in, PS shards, tensor size, priority, hosts) and the
fault schedule.  The same seed gives the same jobs and the same faults in
the same order at the same times, so a soak's counts of faults by kind are
exact for its seed; what the faults meet (a call in flight or between two)
is up to the machine.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass

SPARE_JOB = 200
"""The job ``esa-ctl admit`` and ``remove`` come and go with: on hosts of
its own, with no process of its own."""
SPARE_HOSTS = ("x1", "x2", "x3")
"""Its two workers and its PS."""
SIZES = (8192, 12288, 16384)
"""Values per call: 256 to 512 chunks, a call long enough to be met in
flight."""


class Kind(enum.Enum):
    """A fault, or an ``esa-ctl`` command issued at random."""

    WORKER_KILL = "worker kill -9"
    PS_KILL = "PS kill -9"
    PS_KILL_IN_FLIGHT = "PS kill -9 in flight"
    CONTROLLER_KILL = "controller kill -9"
    SWITCH_KILL = "switch kill -9"
    SECOND_CONTROLLER = "second controller"
    ADMIT = "esa-ctl admit"
    REMOVE = "esa-ctl remove"
    PRIO = "esa-ctl prio"
    POLICY = "esa-ctl policy"
    LOSS_BURST = "loss burst"
    LINK_DOWN = "link down/up"
    DUPLICATE = "duplicated datagrams"
    REORDER = "reordered datagrams"


NETWORK = (Kind.LOSS_BURST, Kind.LINK_DOWN, Kind.DUPLICATE, Kind.REORDER)
"""Faults of the soak's network namespace (``bench.soak_net``): drawn only
where the soak makes one."""


WEIGHTS = {
    Kind.WORKER_KILL: 3,
    Kind.PS_KILL: 1,
    Kind.PS_KILL_IN_FLIGHT: 2,
    Kind.CONTROLLER_KILL: 2,
    Kind.SWITCH_KILL: 2,
    Kind.SECOND_CONTROLLER: 1,
    Kind.ADMIT: 1,
    Kind.REMOVE: 1,
    Kind.PRIO: 2,
    Kind.POLICY: 2,
    Kind.LOSS_BURST: 2,
    Kind.LINK_DOWN: 2,
    Kind.DUPLICATE: 1,
    Kind.REORDER: 2,
}
"""How often each kind is drawn, after one of each."""
POLICIES = ("esa", "atp", "static")


@dataclass(frozen=True)
class JobLayout:
    job: int
    fan_in: int
    shards: int
    size: int
    priority: int | None
    """a static priority, or None: the job is admitted by size (automatic)."""
    volume: int
    """its size in bytes, for ``--size`` (and a ``prio --size``)."""
    workers: tuple[str, ...]
    ps: tuple[str, ...]


@dataclass(frozen=True)
class Fault:
    at: float
    """seconds after the jobs started."""
    kind: Kind
    job: int = 0
    """the job a kill or ``prio`` is for (``SPARE_JOB``: the spare one)."""
    target: int = 0
    """the worker index, or the PS shard, a kill is for."""
    args: tuple[str, ...] = ()
    """an ``esa-ctl`` command's arguments."""
    rest: float = 0.0
    """seconds a killed process stays down, or a network fault lasts."""
    percent: int = 0
    """a loss burst's, duplication's or reordering's share of the datagrams."""
    host: str = ""
    """the host whose link goes down."""

    def __str__(self) -> str:
        what = self.kind.value
        if self.kind is Kind.WORKER_KILL:
            what += f" job {self.job} worker {self.target}"
        elif self.kind in (Kind.PS_KILL, Kind.PS_KILL_IN_FLIGHT):
            what += f" job {self.job} shard {self.target}"
        elif self.args:
            what = "esa-ctl " + " ".join(self.args)
        elif self.kind is Kind.LINK_DOWN:
            what += f" {self.host} (job {self.job}) for {self.rest:g} s"
        elif self.kind in NETWORK:
            what += f" {self.percent} % for {self.rest:g} s"
        return f"{self.at:7.1f} s  {what}"


def layouts(seed: int, jobs: int) -> list[JobLayout]:
    """``jobs`` jobs of fan-in 2-4 and 1-2 PS shards, each on hosts of its
    own (``h1``, ``h2``, ...: its workers, then its PS hosts)."""
    rng = random.Random(f"soak-jobs-{seed}")
    out, host = [], 1
    for j in range(1, jobs + 1):
        fan_in, shards = rng.randint(2, 4), rng.choice((1, 2))
        names = [f"h{host + i}" for i in range(fan_in + shards)]
        host += fan_in + shards
        size = rng.choice(SIZES)
        priority = rng.choice((None, rng.randint(1, 250)))
        out.append(
            JobLayout(j, fan_in, shards, size, priority, size * 4 * rng.randint(100, 10_000),
                      tuple(names[:fan_in]), tuple(names[fan_in:]))
        )  # fmt: skip
    return out


def _command(
    rng: random.Random, kind: Kind, jobs: list[JobLayout], spare: bool, policy: str
) -> Fault:
    """An ``esa-ctl`` command of ``kind`` (``spare``: the spare job is
    admitted; ``policy``: the policy in force, which ``policy`` changes)."""
    if kind is Kind.ADMIT:
        args = ("admit", str(SPARE_JOB), "--workers", *SPARE_HOSTS[:2], "--ps", SPARE_HOSTS[2])
        return Fault(0, kind, SPARE_JOB, args=(*args, *_priority(rng)))
    if kind is Kind.REMOVE:
        return Fault(0, kind, SPARE_JOB, args=("remove", str(SPARE_JOB)))
    if kind is Kind.PRIO:
        job = rng.choice([j.job for j in jobs] + ([SPARE_JOB] if spare else []))
        return Fault(0, kind, job, args=("prio", str(job), *_priority(rng)))
    return Fault(0, kind, args=("policy", rng.choice([p for p in POLICIES if p != policy])))


def _priority(rng: random.Random) -> tuple[str, ...]:
    if rng.random() < 0.5:
        return ("--priority", str(rng.randint(0, 255)))
    return ("--size", str(rng.randint(1, 1 << 30)))


def schedule(
    seed: int, seconds: float, jobs: list[JobLayout], every: float, quiet: float, net: bool
) -> list[Fault]:
    """The faults of a soak of ``seconds``: one of each kind first, in an
    order of the seed's, then kinds drawn by ``WEIGHTS``, on average one
    every ``every`` seconds, none in the first ``every`` seconds nor in the
    last ``quiet`` (the soak's calls recover there).  ``admit`` and
    ``remove`` alternate (the spare job is admitted, then removed), so each
    is a request the controller accepts; each ``policy`` changes the policy.
    ``net``: the network faults too (``NETWORK``)."""
    rng = random.Random(f"soak-faults-{seed}")
    kinds = [k for k in Kind if net or k not in NETWORK]
    weights = [WEIGHTS[k] for k in kinds]
    first = list(kinds)
    rng.shuffle(first)
    out: list[Fault] = []
    at, spare, policy = every, False, POLICIES[0]
    while at < seconds - quiet:
        kind = first.pop(0) if first else rng.choices(kinds, weights)[0]
        if kind in (Kind.ADMIT, Kind.REMOVE):
            kind = Kind.REMOVE if spare else Kind.ADMIT
            spare = not spare
        if kind in (Kind.ADMIT, Kind.REMOVE, Kind.PRIO, Kind.POLICY):
            f = _command(rng, kind, jobs, spare, policy)
            policy = f.args[1] if kind is Kind.POLICY else policy
        elif kind is Kind.WORKER_KILL:
            j = rng.choice(jobs)
            f = Fault(0, kind, j.job, rng.randrange(j.fan_in))
        elif kind in (Kind.PS_KILL, Kind.PS_KILL_IN_FLIGHT):
            j = rng.choice(jobs)
            f = Fault(0, kind, j.job, rng.randrange(j.shards), rest=rng.uniform(0.1, 1.0))
        elif kind is Kind.LINK_DOWN:
            j = rng.choice(jobs)
            host = rng.choice([*j.workers, *j.ps])
            f = Fault(0, kind, j.job, rest=rng.uniform(0.5, 2.5), host=host)
        elif kind is Kind.LOSS_BURST or kind is Kind.DUPLICATE:
            f = Fault(0, kind, rest=rng.uniform(1.0, 4.0), percent=rng.randint(5, 30))
        elif kind is Kind.REORDER:
            f = Fault(0, kind, rest=rng.uniform(1.0, 4.0), percent=rng.randint(2, 10))
        else:
            f = Fault(0, kind, rest=rng.uniform(0.1, 1.0))
        out.append(
            Fault(round(at, 2), f.kind, f.job, f.target, f.args, round(f.rest, 2), f.percent,
                  f.host)
        )  # fmt: skip
        at += rng.expovariate(1.0 / every)
    return out
