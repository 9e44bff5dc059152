"""A synthetic trace in Philly's format (``philly.read`` reads it), for
replays at scales no test file reaches.  Plausible, not fitted:

* submissions Poisson, one every ``GAP_S`` on average (Philly: 117,325
  jobs in about 137 days);
* GPUs per job from ``GPUS`` (most on one GPU, as in Philly), eight per
  server;
* queueing before the first attempt exponential, mean ``QUEUE_S``;
* the run log-normal, median ``RUN_MEDIAN_S``, sigma ``RUN_SIGMA`` (minutes
  to days);
* status from ``STATUS``; a ``RETRIED`` share of jobs fail their first
  attempt a third of the way in and rerun from half-way to the end.

Every job has a start and an end, so each multi-GPU one is replayed.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from sim.traces.record import CLOCK

GAP_S = 100.0
GPUS = {1: 0.55, 2: 0.15, 4: 0.15, 8: 0.10, 16: 0.03, 32: 0.015, 64: 0.005}
GPUS_PER_SERVER = 8
SERVERS = 550
QUEUE_S = 300.0
RUN_MEDIAN_S = 900.0
RUN_SIGMA = 1.5
STATUS = {"Pass": 0.70, "Killed": 0.15, "Failed": 0.15}
RETRIED = 0.10
EPOCH = datetime(2017, 10, 1, tzinfo=UTC)


def stamp(t: float) -> str:
    return (EPOCH + timedelta(seconds=round(t))).strftime(CLOCK)


def philly(jobs: int, seed: int) -> list[dict[str, Any]]:
    """``jobs`` multi-GPU jobs, and the single-GPU ones drawn between them."""
    rng = np.random.default_rng(seed)
    gpus, multi = [], 0
    while multi < jobs:
        gpus.append(int(rng.choice(list(GPUS), p=list(GPUS.values()))))
        multi += gpus[-1] > 1
    n = len(gpus)
    submits = np.cumsum(rng.exponential(GAP_S, n))
    starts = submits + rng.exponential(QUEUE_S, n)
    runs = rng.lognormal(math.log(RUN_MEDIAN_S), RUN_SIGMA, n)
    status = rng.choice(list(STATUS), n, p=list(STATUS.values()))
    retried = rng.random(n) < RETRIED
    out = []
    for i, g in enumerate(gpus):
        servers = rng.choice(SERVERS, -(-g // GPUS_PER_SERVER), replace=False)
        on = [min(GPUS_PER_SERVER, g - k * GPUS_PER_SERVER) for k in range(len(servers))]
        detail = [
            {"ip": f"m{s}", "gpus": [f"gpu{x}" for x in range(m)]}
            for s, m in zip(servers, on, strict=True)
        ]
        start, end = float(starts[i]), float(starts[i] + runs[i])
        spans = [(start, end)]
        if retried[i]:
            spans = [(start, start + runs[i] / 3), (start + runs[i] / 2, end)]
        out.append(
            {
                "status": str(status[i]),
                "vc": f"vc{i % 7}",
                "jobid": f"application_{seed}_{i + 1}",
                "attempts": [
                    {"start_time": stamp(a), "end_time": stamp(b), "detail": detail}
                    for a, b in spans
                ],
                "submitted_time": stamp(float(submits[i])),
                "user": f"u{i % 97}",
            }
        )
    return out


def write_philly(path: Path, jobs: int, seed: int) -> int:
    """Jobs written in all."""
    entries = philly(jobs, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entries, indent=1))
    return len(entries)
