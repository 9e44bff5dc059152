"""The controller's priority rules for ESA (0..255, higher = more urgent).

The switch never computes a priority: the controller writes it into the job
table (``SwitchModel.add_job``) when it changes, at iteration boundaries and
on its periodic tick.
"""

from __future__ import annotations

import math

from esa.spec import MAX_PRIORITY
from sim.params import JobSpec, Net, Scheme

SRPT_STEPS_PER_DOUBLING = 8
"""SRPT: priority drops by 8 each time the remaining volume doubles, so jobs
that differ by 9% or more in remaining volume get different priorities."""

AGING_STEPS_PER_ITERATION = 16
"""Aging: +16 per ideal iteration time spent waiting beyond the first."""


def srpt_priority(remaining_chunks: int) -> int:
    """Less remaining volume -> higher priority; stateless per job."""
    drop = round(SRPT_STEPS_PER_DOUBLING * math.log2(1 + max(0, remaining_chunks)))
    return MAX_PRIORITY - min(MAX_PRIORITY - 1, drop)


def aging_bonus(waited_s: float, ideal_iteration_s: float) -> int:
    """Grows without bound while a job waits, so any job ends at MAX_PRIORITY,
    which nobody can preempt."""
    if ideal_iteration_s <= 0:
        return 0
    return max(0, math.floor(AGING_STEPS_PER_ITERATION * (waited_s / ideal_iteration_s - 1.0)))


def priority(scheme: Scheme, job: JobSpec, net: Net, iters_done: int, waited_s: float) -> int:
    """Priority of ``job`` after ``iters_done`` iterations, ``waited_s`` after
    its last iteration ended (or it arrived)."""
    if scheme not in (Scheme.ESA_SRPT, Scheme.ESA_AGING):
        return job.priority
    p = srpt_priority((job.iterations - iters_done) * job.chunks)
    if scheme is Scheme.ESA_AGING:
        p += aging_bonus(waited_s, job.ideal_iteration_s(net))
    return min(MAX_PRIORITY, p)


def controller_tick_s(jobs: list[JobSpec], net: Net) -> float:
    """The controller re-reads priorities every quarter of the shortest ideal
    iteration time (only aging needs it)."""
    return 0.25 * min(j.ideal_iteration_s(net) for j in jobs)
