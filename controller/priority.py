"""Job priorities: what the controller writes into each job's ``prio``.

The switch compares priorities only when a contribution finds its slot held
by another job: under the ESA policy it preempts the holder if its own job's
priority is strictly higher (``esa.spec.MAX_PRIORITY`` is the most urgent).
So only the order of priorities matters, and two jobs on one level never
preempt each other: between themselves they share slots as under ATP.

Two modes, chosen per job:

``static``
    The operator's number, written as given and never changed by the
    controller.
``auto``
    A strict order, shortest remaining processing time first: the job
    declares how many bytes it still has to aggregate and reports progress
    as it goes.  All auto jobs are ranked together and the rank is the
    priority: the most urgent gets ``AUTO_TOP``, the next ``AUTO_TOP - 1``,
    and so on down to ``AUTO_BOTTOM``, so no two auto jobs share a level.
    A job's rank, and so its priority, depends on the other auto jobs:
    admitting, removing or a progress report of one job can move others.

Ranking.  Without aging (period 0) the key is ``(remaining bytes, admission
time, job id)``: less remaining first, then the earlier admitted.  With an
aging period ``T`` the remaining volume counts half as much for every ``T``
seconds a job has waited, and the key becomes ``(virtual deadline,
remaining bytes, admission time, job id)``, the deadline being
``admitted_at + T * log2(1 + remaining)``, earliest first.  Every running
job ages at the same rate, so aging never reorders jobs that are already
running; it decides where a newcomer lands: behind an older job unless
``1 + its bytes`` is smaller by more than a factor ``2 ** (gap / T)``,
``gap`` being the time between their admissions.

Starvation bound.  A job with ``R`` bytes left ranks ahead of every job
admitted more than ``T * log2(1 + R)`` seconds after it (that job's deadline
is past its own).  ``R`` shrinks as the job progresses, so a job of
size ``S`` waits only for jobs admitted before ``T * log2(1 + S)`` seconds
after its own admission: ``T`` per doubling of its size, 300 s for 1 GiB
with the default ``T`` of 10 s.  Without aging a large job can wait behind
an endless stream of smaller ones.

Interleaving with static jobs.  Auto jobs occupy the band
``AUTO_BOTTOM..AUTO_TOP`` (64..191): a static job above the band (192..255)
preempts every auto job, one below it (0..63) loses to every auto job.  A
static number inside the band sits among the auto jobs by value: it
preempts those ranked below its level and ties with the one on it.  With
more auto jobs than the band has levels, the least urgent ones all get
``AUTO_BOTTOM`` and tie among themselves.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

from esa.job import Mode as Mode
from esa.job import PrioritySpec as PrioritySpec

DEFAULT_AGING_PERIOD_S = 10.0

AUTO_TOP = 191
"""priority of the most urgent auto job."""
AUTO_BOTTOM = 64
"""lowest priority an auto job gets; the band holds 128 levels."""


class Admission(NamedTuple):
    """A running job as the ranking sees it."""

    job: int
    spec: PrioritySpec
    admitted_at: float
    """seconds on any clock shared by all jobs; only differences matter."""


def priorities(jobs: Iterable[Admission], aging_period_s: float) -> dict[int, int]:
    """The priority of every job, by job id: static jobs their own number,
    auto jobs the level of their rank (see the module docstring)."""
    jobs = list(jobs)
    out = {j.job: j.spec.priority for j in jobs if j.spec.mode is Mode.STATIC}
    auto = [j for j in jobs if j.spec.mode is Mode.AUTO]
    origin = min((j.admitted_at for j in auto), default=0.0)

    def key(j: Admission) -> tuple[float, int, float, int]:
        deadline = 0.0  # seconds after the first admission, which keeps floats precise
        if aging_period_s > 0:
            deadline = j.admitted_at - origin + aging_period_s * math.log2(1 + j.spec.remaining)
        return (deadline, j.spec.remaining, j.admitted_at, j.job)

    for rank, j in enumerate(sorted(auto, key=key)):
        out[j.job] = max(AUTO_BOTTOM, AUTO_TOP - rank)
    return out
