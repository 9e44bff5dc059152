"""The controller's priority rules, applied to simulated jobs.

The rule is ``controller.world.priority``'s (the real system's): auto jobs ranked
by remaining bytes (SRPT), ties by admission order, aging by admission time,
and the rank mapped to distinct levels; static jobs keep their number.  This
module only decides what the controller would be told: a job declares its
mode (``esa.job.JobSpec.declared_priority``) at admission and, with
``Net.report_progress``, reports what is left at each iteration boundary.
A rank depends on every running job, so the caller recomputes all
priorities when a job is admitted, finishes or reports progress, and writes
those that changed into the job table (``SwitchModel.add_job``), as the
controller does.  The switch never computes a priority.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from controller.world.priority import Admission, priorities
from esa.job import JobSpec, Priority
from esa.schemes import Ranking, Scheme
from sim.params import Net

Running = tuple[JobSpec, int, float]
"""A running job: its spec, the iterations it has done, its admission time in s."""


def job_priorities(
    scheme: Scheme, net: Net, running: Iterable[Running], held: Mapping[int, int] | None = None
) -> dict[int, int]:
    """Priority of every running job, by job id; ``held``: the priorities the
    running jobs hold now (``controller.world.priority.priorities``).

    ``Ranking.SRPT`` and ``Ranking.SRPT_AGING`` declare every job automatic,
    whatever its spec says (without and with aging); every other scheme runs
    each job in its own mode, automatic ones ranked with the controller's
    aging."""
    auto = scheme.ranking in (Ranking.SRPT, Ranking.SRPT_AGING)
    aging = 0.0 if scheme.ranking is Ranking.SRPT else net.aging_period_s

    def declared(spec: JobSpec, done: int) -> Priority:
        done = done if net.report_progress else 0
        if auto:
            return Priority.auto(spec.remaining_bytes(done))
        return spec.declared_priority(done)

    return priorities(
        (Admission(spec.job, declared(spec, done), at) for spec, done, at in running), aging, held
    )
