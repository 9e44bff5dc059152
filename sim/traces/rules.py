"""The rules that turn a trace's jobs into the simulator's
(docs/simulator.md, "Replaying cluster traces").

* Window: ``START:END``, seconds from the trace's first submission (of any
  job in the file); a job is in it if submitted at or after START and
  before END.  Arrivals are seconds from START.
* Workers: one per GPU (``GPUS_PER_WORKER``).  A job on more GPUs than the
  switch's worker bitmap holds (``esa.wire.MAX_WORKERS``) runs with that
  many workers, and is counted.
* Dropped, and counted by reason (``DropReason``): jobs without a GPU, on a
  single GPU (nothing to aggregate), without a recorded start or end, or
  ending before they start.  Every status is kept: a failed or killed job
  loaded the network until it stopped.
* Model: traces name none, so each job's is drawn from ``sim.workload``'s
  mix by a hash of the seed and its trace id (sha256 of ``"SEED/ID"``: the
  first 8 bytes pick the model, the next 8 a static priority 1..255, as
  ``make_jobs`` draws one).  A seed is one assignment of models.
* Iterations: the run divided by the job's uncontended iteration time
  (``sim.workload.ideal_iteration_s``), rounded, at least 1 and at most
  ``MAX_ITERATIONS``.  ``speedup`` divides arrivals and runs alike: the
  trace's concurrency in fewer iterations.
"""

from __future__ import annotations

import enum
import hashlib
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from esa import wire
from esa.job import MAX_PRIORITY, JobSpec
from sim.params import Net
from sim.traces.record import TraceJob
from sim.workload import MIXES, MODELS, DnnModel, WorkloadSpec, ideal_iteration_s

GPUS_PER_WORKER = 1
MAX_ITERATIONS = 1000
"""Keeps a replay's events bounded: a day-long job would be about a million
iterations.  Use ``speedup`` to keep runs under it."""
JITTER = WorkloadSpec().jitter
"""Every job's compute spread, as in the synthetic workload."""


class DropReason(enum.Enum):
    NO_GPU = "no GPU"
    SINGLE_GPU = "single GPU"
    NO_TIME = "no start or end time"
    BACKWARDS = "ends before it starts"


@dataclass(frozen=True)
class Window:
    start_s: float = 0.0
    end_s: float = math.inf

    def __str__(self) -> str:
        return "all" if self == Window() else f"{self.start_s:.12g}:{self.end_s:.12g}"


def parse_window(text: str) -> Window:
    """``START:END`` in seconds, 0 <= START < END."""
    start, sep, end = text.partition(":")
    try:
        if not sep:
            raise ValueError
        w = Window(float(start), float(end))
    except ValueError:
        raise ValueError(f"window {text!r} is not START:END (seconds)") from None
    if not 0 <= w.start_s < w.end_s or not math.isfinite(w.end_s):
        raise ValueError(f"window {text!r}: needs 0 <= START < END")
    return w


def workers(gpus: int) -> int:
    return min(gpus // GPUS_PER_WORKER, wire.MAX_WORKERS)


def drop(job: TraceJob) -> DropReason | None:
    """Why ``job`` is not replayed, or None."""
    if job.gpus == 0:
        return DropReason.NO_GPU
    if workers(job.gpus) < 2:
        return DropReason.SINGLE_GPU
    if job.run_s is None:
        return DropReason.NO_TIME
    if job.run_s < 0:
        return DropReason.BACKWARDS
    return None


@dataclass(frozen=True)
class Slice:
    """What a window of a trace replays."""

    jobs: tuple[TraceJob, ...]
    """kept, in submission order (the file's order among equal times)."""
    start_s: float
    """the window's START on the trace's clock."""
    submitted: int
    """jobs submitted in the window, kept or dropped."""
    dropped: dict[DropReason, int]

    @property
    def capped(self) -> int:
        """Jobs on more GPUs than workers they run with."""
        return sum(j.gpus // GPUS_PER_WORKER > wire.MAX_WORKERS for j in self.jobs)


def select(jobs: Sequence[TraceJob], window: Window) -> Slice:
    first = min(j.submit_s for j in jobs)
    inside = sorted(
        (j for j in jobs if window.start_s <= j.submit_s - first < window.end_s),
        key=lambda j: j.submit_s,
    )
    dropped: Counter[DropReason] = Counter()
    kept = []
    for j in inside:
        reason = drop(j)
        if reason is None:
            kept.append(j)
        else:
            dropped[reason] += 1
    return Slice(tuple(kept), first + window.start_s, len(inside), dict(dropped))


def draw(seed: int, trace_id: str, mix: str) -> tuple[DnnModel, int]:
    """The model and static priority of one job under one seed."""
    digest = hashlib.sha256(f"{seed}/{trace_id}".encode()).digest()
    names = MIXES[mix]
    model = MODELS[names[int.from_bytes(digest[:8], "big") % len(names)]]
    return model, 1 + int.from_bytes(digest[8:16], "big") % MAX_PRIORITY


def to_specs(
    sl: Slice, net: Net, seed: int, mix: str = "mixed", speedup: float = 1.0
) -> list[JobSpec]:
    """Job ids 1..N in arrival order."""
    out = []
    for i, j in enumerate(sl.jobs, 1):
        model, priority = draw(seed, j.trace_id, mix)
        one = JobSpec(
            job=i,
            workers=workers(j.gpus),
            values=round(model.params_m * 1e6),
            iterations=1,
            priority=priority,
            arrival_s=(j.submit_s - sl.start_s) / speedup,
            compute_s=model.compute_ms * 1e-3,
            jitter=JITTER,
            name=model.name,
        )
        run_s = (j.run_s or 0.0) / speedup
        its = min(max(1, round(run_s / ideal_iteration_s(one, net))), MAX_ITERATIONS)
        out.append(replace(one, iterations=its))
    return out
