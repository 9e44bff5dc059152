"""Job priorities: what the controller writes into each job's ``priority``.

The switch compares priorities only when a contribution finds its slot held
by another job: under the ESA policy it preempts the holder if its own job's
priority is strictly higher (``esa.job.MAX_PRIORITY`` is the most urgent).
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

Urgency.  A job with ``R`` bytes left has urgency ``log2(1 + R)``, less is
more urgent.  With an aging period ``T`` it also counts the periods since
admission, ``log2(1 + R) + admitted_at / T``: the remaining volume counts
half as much for every ``T`` seconds a job has waited (its virtual deadline
``admitted_at + T * log2(1 + R)``, earliest first).  The key is ``(urgency,
remaining bytes, admission time, job id)``; without aging (period 0) that
is less remaining first, then the earlier admitted.  Every running job ages
at the same rate, so aging never reorders running jobs; it decides where a
newcomer lands.

Hysteresis.  Ranked from scratch, the order is the key's.  Given the levels
the jobs hold (``held``), a running job keeps its place relative to the
others unless one below it is ahead by more than the swap margin: urgency
lower by more than ``log2(1 + margin)``, that is ``1 + R`` smaller by more
than a factor ``1 + margin`` once aging is counted.  Jobs of similar
remaining volume that report progress at different moments would otherwise
swap at every report, and under ESA every swap evicts the partial sums of
the job that falls.  The rank keeps SRPT's order for any two jobs farther
apart than the margin, and ranking again from its own levels changes
nothing.  See ``_rank`` for the rule and ``docs/controller.md`` for the
starvation bound.

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
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from esa.job import Mode, Priority

DEFAULT_AGING_PERIOD_S = 10.0
SWAP_MARGIN = 0.25
"""a running auto job is overtaken only by one whose ``1 + remaining`` is
smaller by more than a factor ``1 + SWAP_MARGIN`` (aging counted)."""

AUTO_TOP = 191
"""priority of the most urgent auto job."""
AUTO_BOTTOM = 64
"""lowest priority an auto job gets; the band holds 128 levels."""


class Admission(NamedTuple):
    """A running job as the ranking sees it."""

    job: int
    spec: Priority
    admitted_at: float
    """seconds on any clock shared by all jobs; only differences matter."""


class _Key(NamedTuple):
    """An auto job's SRPT key, most urgent least."""

    urgency: float
    remaining: int
    admitted_at: float
    job: int


def priorities(
    jobs: Iterable[Admission],
    aging_period_s: float,
    held: Mapping[int, int] | None = None,
    margin: float = SWAP_MARGIN,
) -> dict[int, int]:
    """The priority of every job, by job id: static jobs their own number,
    auto jobs the level of their rank (see the module docstring).

    ``held``: the level each job holds now, by job id (jobs absent or not
    running are ignored); None or empty ranks from scratch."""
    if margin < 0:
        raise ValueError(f"swap margin must be >= 0, got {margin}")
    jobs = list(jobs)
    out = {j.job: j.spec.priority for j in jobs if j.spec.mode is Mode.STATIC}
    auto = [j for j in jobs if j.spec.mode is Mode.AUTO]
    keys = _keys(auto, aging_period_s)
    for rank, k in enumerate(_rank(keys, held or {}, math.log2(1 + margin))):
        out[k.job] = max(AUTO_BOTTOM, AUTO_TOP - rank)
    return out


def _keys(auto: list[Admission], aging_period_s: float) -> list[_Key]:
    origin = min((j.admitted_at for j in auto), default=0.0)

    def urgency(j: Admission) -> float:
        u = math.log2(1 + j.spec.remaining)
        if aging_period_s > 0:
            # periods after the first admission, which keeps floats precise
            u += (j.admitted_at - origin) / aging_period_s
        return u

    return [_Key(urgency(j), j.spec.remaining, j.admitted_at, j.job) for j in auto]


def _rank(keys: list[_Key], held: Mapping[int, int], swap: float) -> list[_Key]:
    """The order, most urgent first.

    The jobs holding a level are taken in the order of their levels (equal
    levels by key) and each is placed above the highest one already placed
    that it beats by more than ``swap``, else last.  Jobs without a level are
    then taken by key and each is placed just below the lowest job whose key
    is less than its own, else first.  Either way no job ends below one
    that beats it by more than ``swap``, and a newcomer never ends above a
    job with a lesser key."""
    running = sorted((k for k in keys if k.job in held), key=lambda k: (-held[k.job], k))
    order: list[_Key] = []
    for k in running:
        at = next((i for i, o in enumerate(order) if k.urgency + swap < o.urgency), len(order))
        order.insert(at, k)
    for k in sorted(k for k in keys if k.job not in held):
        at = next((i for i in range(len(order), 0, -1) if order[i - 1] < k), 0)
        order.insert(at, k)
    return order
