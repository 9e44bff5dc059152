"""When a running job has stalled, and the reason it is stopped with.

A job makes progress while its workers sum steps, or while its chunks go
through the switch.  A step is an iteration an ``esa-worker`` finished or a
DDP step a worker's hook summed (``runner.torchworker`` relays every one),
counted as each worker's line reaches the run: any worker's counts, however
many iterations the scenario gave the job.  A chunk goes through the switch
when it is summed there or passed on to the PS: the job's ``completed`` and
``fallback`` counters, which the slot timeline reads from the controller,
so a long step whose buckets are still being summed is progress too.

A job that makes neither for its limit (``limit_s``: the scenario's
``stall_s``, or the workers' all-reduce deadline and ``GRACE_S``, plus a
synthetic job's compute time) has stalled: a worker waiting for a sum
fails by itself within the deadline, naming what it misses, so a job
silent for longer hangs somewhere else (its script, Gloo, a peer that
exited).  Until its first progress a job has at least ``START_S``: its
workers start Python, torch and Gloo first.
"""

from __future__ import annotations

from dataclasses import dataclass

from esa.job import JobSpec
from runner.scenario import TORCH, Scenario

GRACE_S = 30.0
"""beyond a job's compute time and all-reduce deadline, the default limit's margin."""
START_S = 120.0
"""the least time a job has for its first progress (a loaded machine starting torch)."""


def limit_s(s: Scenario, job: JobSpec) -> float:
    """How long ``job`` may go without progress (a training job's compute
    time is its script's, which the scenario does not know)."""
    if s.stall_s is not None:
        return s.stall_s
    compute = 0.0 if s.train == TORCH else job.compute_s * (1 + job.jitter)
    return compute + s.timeout_s + GRACE_S


def counted(n: int, unit: str) -> str:
    """``1 step``, ``3 steps``."""
    return f"{n} {unit}{'' if n == 1 else 's'}"


@dataclass
class Watch:
    """One job's progress as the run sees it."""

    limit_s: float
    unit: str
    """what a step is called: ``iteration`` or ``step``."""
    since: float
    """when the job last made progress, or started."""
    marks: tuple[int, int]
    """steps summed by all its workers together, and chunks through the switch."""
    started: bool = False
    """it made progress once."""

    def see(self, now: float, steps: int, chunks: int) -> None:
        """The job's counts at ``now``: progress if either moved."""
        if (steps, chunks) != self.marks:
            self.marks, self.since, self.started = (steps, chunks), now, True

    def stalled(self, now: float, done: int) -> str:
        """Why the job is to be stopped at ``now`` ("" while it is not),
        ``done`` steps after every worker's."""
        nothing = f"no {self.unit} summed and no chunk through the switch"
        if not self.started:
            wait = max(self.limit_s, START_S)
            return f"{nothing} in its first {wait:g} s; stopped" if now - self.since > wait else ""
        if now - self.since > self.limit_s:
            return f"{nothing} for {self.limit_s:g} s after {counted(done, self.unit)}; stopped"
        return ""
