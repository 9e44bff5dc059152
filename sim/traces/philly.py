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


def listed(entry: Any, key: str, where: str) -> list[Any]:
    value = field(entry, key, where)
    if not isinstance(value, list):
        raise TraceError(f"{where}: {key} is not a list")
    return value


def job(entry: Any, where: str) -> TraceJob:
    jobid = str(field(entry, "jobid", where))
    where = f"{where} ({jobid})"
    submit = clock_s(field(entry, "submitted_time", where), where, "submitted_time")
    if submit is None:
        raise TraceError(f"{where}: no submitted_time")
    attempts = listed(entry, "attempts", where)
    if not attempts:
        return TraceJob(jobid, submit, 0, None)
    first, last = f"{where}: attempt 1", f"{where}: attempt {len(attempts)}"
    gpus = sum(len(listed(d, "gpus", first)) for d in listed(attempts[0], "detail", first))
    start = clock_s(field(attempts[0], "start_time", first), first, "start_time")
    end = clock_s(field(attempts[-1], "end_time", last), last, "end_time")
    return TraceJob(jobid, submit, gpus, span(start, end))
