"""The controller's priority rules, applied to simulated jobs.

The formulas are ``controller.priority``'s (the real system's): SRPT from
the bytes a job still has to aggregate, plus aging by time since admission.
This module only decides what the controller would be told and when it
re-evaluates: a job declares its volume at admission and, with
``Net.report_progress``, reports what is left at each iteration boundary;
aged priorities are re-read every ``Net.tick_s`` (the controller's
interval).  The switch never computes a priority: the simulator writes it
into the job table (``SwitchModel.add_job``) when it changes.
"""

from __future__ import annotations

from controller.priority import PrioritySpec, effective_priority
from sim.params import JobSpec, Net, Scheme


def priority(scheme: Scheme, job: JobSpec, net: Net, iters_done: int, age_s: float) -> int:
    """Priority of ``job`` after ``iters_done`` iterations, ``age_s`` seconds
    after its admission."""
    if scheme not in (Scheme.ESA_SRPT, Scheme.ESA_AGING):
        return job.priority
    spec = PrioritySpec.auto(job.remaining_bytes(iters_done if net.report_progress else 0))
    aging = net.aging_period_s if scheme is Scheme.ESA_AGING else 0.0
    return effective_priority(spec, 0.0, age_s, aging)
