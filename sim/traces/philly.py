"""Microsoft Philly: ``cluster_job_log`` (github.com/msr-fiddle/philly-traces).

A JSON list of jobs, each with ``jobid``, ``submitted_time`` and
``attempts`` (each attempt's ``start_time``, ``end_time`` and ``detail``,
a list of ``{"ip", "gpus"}``); other keys (``user``, ``vc``, ``status``)
are read past.  As the trace's own analysis counts them, a job's GPUs are
those of its first attempt and its run is from the first attempt's start
to the last one's end.  A job without attempts has no GPU.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sim.traces.record import TraceError, TraceJob, clock_s, span


def read(path: Path) -> list[TraceJob]:
    try:
        entries = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise TraceError(f"{path}: not JSON: {e.msg} at line {e.lineno}") from None
    if not isinstance(entries, list):
        raise TraceError(f"{path}: not a JSON list of jobs")
    return [job(entry, f"{path}: job {i}") for i, entry in enumerate(entries, 1)]


def field(entry: Any, key: str, where: str) -> Any:
    if not isinstance(entry, dict) or key not in entry:
        raise TraceError(f"{where}: no {key!r}")
    return entry[key]


def job(entry: Any, where: str) -> TraceJob:
    jobid = str(field(entry, "jobid", where))
    where = f"{where} ({jobid})"
    submit = clock_s(field(entry, "submitted_time", where), where, "submitted_time")
    if submit is None:
        raise TraceError(f"{where}: no submitted_time")
    attempts = field(entry, "attempts", where)
    if not isinstance(attempts, list):
        raise TraceError(f"{where}: attempts is not a list")
    if not attempts:
        return TraceJob(jobid, submit, 0, None)
    first, last = attempts[0], attempts[-1]
    gpus = 0
    for d in field(first, "detail", f"{where}: attempt 1"):
        gpu_list = field(d, "gpus", f"{where}: attempt 1 detail")
        if not isinstance(gpu_list, list):
            raise TraceError(f"{where}: attempt 1 detail: gpus is not a list")
        gpus += len(gpu_list)
    start = clock_s(field(first, "start_time", f"{where}: attempt 1"), where, "start_time")
    last_where = f"{where}: attempt {len(attempts)}"
    end = clock_s(field(last, "end_time", last_where), where, "end_time")
    return TraceJob(jobid, submit, gpus, span(start, end))
