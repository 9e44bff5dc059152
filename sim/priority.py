"""The controller's priority rules, applied to simulated jobs.

The rule is ``controller.priority``'s (the real system's): auto jobs ranked
by remaining bytes (SRPT), ties by admission order, aging by admission time,
and the rank mapped to distinct levels.  This module only decides what the
controller would be told: a job declares its volume at admission and, with
``Net.report_progress``, reports what is left at each iteration boundary.
A rank depends on every running job, so the caller recomputes all
priorities when a job is admitted, finishes or reports progress, and writes
those that changed into the job table (``SwitchModel.add_job``), as the
controller does.  The switch never computes a priority.
"""

from __future__ import annotations

from collections.abc import Iterable

from controller.priority import Admission, PrioritySpec, priorities
from sim.params import JobSpec, Net, Scheme

Running = tuple[JobSpec, int, float]
"""A running job: its spec, the iterations it has done, its admission time in s."""


def job_priorities(scheme: Scheme, net: Net, running: Iterable[Running]) -> dict[int, int]:
    """Priority of every running job, by job id."""
    running = list(running)
    if scheme not in (Scheme.ESA_SRPT, Scheme.ESA_AGING):
        return {spec.job_id: spec.priority for spec, _, _ in running}
    aging = net.aging_period_s if scheme is Scheme.ESA_AGING else 0.0
    return priorities(
        (
            Admission(
                spec.job_id,
                PrioritySpec.auto(spec.remaining_bytes(done if net.report_progress else 0)),
                admitted_at,
            )
            for spec, done, admitted_at in running
        ),
        aging,
    )
