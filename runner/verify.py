"""What every worker of a run must have received: the exact sums, bit for bit."""

from __future__ import annotations

from typing import Any

import numpy as np

from esa.job import JobSpec
from hosts.net import quant
from hosts.programs.gradients import digest, synthetic_gradient

SEED = 1
"""Seed of the synthetic gradients the run's workers stream."""
BOUND = 1.0
"""The jobs' quantisation bound (the worker CLI's default)."""


def expected_digests(job: JobSpec, seed: int = SEED) -> list[str]:
    """Per iteration, the digest of numpy's sum of the workers' quantised
    gradients (``synthetic_gradient`` with ``seed``), dequantised as a
    worker does."""
    return [
        expected_digest(job.job, job.workers, job.values, seed, it) for it in range(job.iterations)
    ]


def expected_digest(job: int, workers: int, values: int, seed: int, it: int) -> str:
    """The digest of iteration ``it``'s exact sum over ``workers`` workers
    of ``values`` values each (``expected_digests``)."""
    scale = quant.job_scale(BOUND, workers)
    qs = [
        quant.quantise(synthetic_gradient(seed, job, w, it, BOUND, values), BOUND, scale)
        for w in range(workers)
    ]
    total = np.sum([q.values.astype(np.int64) for q in qs], axis=0)
    return digest(quant.dequantise(total, scale).ravel()[:values])


def exact(job: JobSpec, reports: dict[tuple[int, int], dict[str, Any]]) -> bool:
    """True when every worker of ``job`` got every iteration's exact sum."""
    want = expected_digests(job)
    mine = [r for (j, _), r in reports.items() if j == job.job]
    return len(mine) == job.workers and all(r.get("sha256") == want for r in mine)
