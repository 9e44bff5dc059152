"""Alibaba PAI 2020 (github.com/alibaba/clusterdata, cluster-trace-gpu-v2020):
``pai_job_table.csv`` and, beside it, ``pai_task_table.csv``.

Both as released: no header line (the columns are in the ``.header``
files), though a first line equal to that header is read past.  Read:
the job table's ``job_name`` and ``start_time`` (its submission), the task
table's ``job_name``, ``inst_num``, ``start_time``, ``end_time`` and
``plan_gpu`` (per instance, in percent of one GPU).  A job's GPUs are the
sum over its tasks of ``inst_num x plan_gpu / 100``, rounded up (two
instances at 50 % are one GPU); its run is from the first start to the
last end of its GPU tasks, none if one of them has no start (a 0, as the
trace writes it) or no end.  Times are seconds on the trace's shifted clock.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sim.traces.record import TraceError, TraceJob, number

JOB_COLUMNS = ("job_name", "inst_id", "user", "status", "start_time", "end_time")
TASK_COLUMNS = (
    "job_name",
    "task_name",
    "inst_num",
    "status",
    "start_time",
    "end_time",
    "plan_cpu",
    "plan_mem",
    "plan_gpu",
    "gpu_type",
)
TASKS = "pai_task_table.csv"


def rows(path: Path, columns: tuple[str, ...]) -> Iterator[tuple[str, dict[str, str]]]:
    """Each row as (where, column -> text)."""
    with path.open(newline="") as fh:
        reader = csv.reader(fh)
        for row in reader:
            if not row or (reader.line_num == 1 and tuple(row) == columns):
                continue
            where = f"{path}: line {reader.line_num}"
            if len(row) != len(columns):
                raise TraceError(f"{where}: {len(row)} fields, expected {len(columns)}")
            yield where, dict(zip(columns, row, strict=True))


@dataclass
class GpuTasks:
    """A job's tasks that hold GPUs, summed."""

    gpus: float = 0.0
    start: float = math.inf
    end: float = -math.inf
    gap: bool = False
    """one of them has no start or no end."""

    def add(self, gpus: float, start: float | None, end: float | None) -> None:
        self.gpus += gpus
        if start is None or end is None:
            self.gap = True
        else:
            self.start, self.end = min(self.start, start), max(self.end, end)

    @property
    def run_s(self) -> float | None:
        return None if self.gap or not self.gpus else self.end - self.start


def read(path: Path) -> list[TraceJob]:
    tasks_path = path.parent / TASKS
    if not tasks_path.is_file():
        raise TraceError(f"{path}: no {TASKS} beside it (the task table holds the GPU counts)")
    tasks: dict[str, GpuTasks] = {}
    for where, t in rows(tasks_path, TASK_COLUMNS):
        inst = number(t["inst_num"], where, "inst_num") or 0.0
        gpu = number(t["plan_gpu"], where, "plan_gpu") or 0.0
        if inst * gpu > 0:
            start = number(t["start_time"], where, "start_time") or None
            end = number(t["end_time"], where, "end_time")
            tasks.setdefault(t["job_name"], GpuTasks()).add(inst * gpu / 100, start, end)
    out = []
    for where, j in rows(path, JOB_COLUMNS):
        submit = number(j["start_time"], where, "start_time")
        if submit is None:
            raise TraceError(f"{where}: no start_time (the submission)")
        job = tasks.get(j["job_name"], GpuTasks())
        gpus = math.ceil(round(job.gpus, 6))
        out.append(TraceJob(j["job_name"], submit, gpus, job.run_s))
    return out
