"""SenseTime Helios: a cluster's ``cluster_log.csv``
(github.com/S-Lab-System-Group/HeliosData).

A CSV with a header; the columns read are ``job_id``, ``gpu_num``,
``submit_time``, ``start_time`` and ``end_time`` (others, such as
``state``, ``duration`` and ``queue``, are read past).  The run is
``end_time`` less ``start_time``, which is the trace's ``duration``.
"""

from __future__ import annotations

import csv
from pathlib import Path

from sim.traces.record import TraceError, TraceJob, clock_s, count, span

COLUMNS = ("job_id", "gpu_num", "submit_time", "start_time", "end_time")


def read(path: Path) -> list[TraceJob]:
    with path.open(newline="") as fh:
        rows = csv.reader(fh)
        header = next(rows, [])
        for col in COLUMNS:
            if col not in header:
                raise TraceError(f"{path}: no column {col!r} (needs {', '.join(COLUMNS)})")
        at = {col: header.index(col) for col in COLUMNS}
        out = []
        for row in rows:
            if not row:
                continue
            where = f"{path}: line {rows.line_num}"
            if len(row) != len(header):
                raise TraceError(f"{where}: {len(row)} fields, the header names {len(header)}")
            submit = clock_s(row[at["submit_time"]], where, "submit_time")
            if submit is None:
                raise TraceError(f"{where}: no submit_time")
            start = clock_s(row[at["start_time"]], where, "start_time")
            end = clock_s(row[at["end_time"]], where, "end_time")
            gpus = count(row[at["gpu_num"]], where, "gpu_num")
            out.append(TraceJob(row[at["job_id"]], submit, gpus, span(start, end)))
    return out
