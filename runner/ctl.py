"""The run's calls to the controller's admin API.

Admissions happen when a job arrives; progress reports (which move the
automatic priorities, SRPT) and removals of finished jobs are queued and
sent by ``flush`` from the run's loop, so a controller that is down for a
moment (a fault) delays them instead of failing the run.  A fault that
compares the switch's entries before and after a restart holds ``quiet``
meanwhile: no write of the run lands between its two reads.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import grpc

from controller.api.admin import AdminClient, AdminError
from controller.api.messages import AdmitRequest, JobRef, ProgressRequest, Stats
from esa.job import EQUAL_PRIORITY, JobSpec, Placement
from esa.schemes import Ranking, Scheme
from runner.scenario import controller_policy

ADMIT_TIMEOUT_S = 60.0
STATS_TIMEOUT_S = 3.0


class Ctl:
    def __init__(self, admin: str | AdminClient) -> None:
        """``admin``: the controller's admin address, or a client for it."""
        self.client = AdminClient(admin) if isinstance(admin, str) else admin
        self.quiet = threading.Lock()
        self.progress_due: dict[int, int] = {}
        self.remove_due: list[int] = []
        self.one_priority = False
        """``esa-equal``: every job at ``EQUAL_PRIORITY``, no progress reports."""

    def close(self) -> None:
        self.client.close()

    def set_scheme(
        self, scheme: str, stale_us: int, squat_us: int | None, part_size: int, layout: str
    ) -> None:
        """Set the switch's policy behind the run's ``scheme``
        (``runner.scenario.SCHEMES``)."""
        req = controller_policy(scheme, part_size, layout)
        self.one_priority = Scheme(scheme).ranking is Ranking.ONE
        self.client.policy(replace(req, stale_us=stale_us, squat_us=squat_us))

    def admit(self, job: JobSpec, placement: Placement) -> None:
        """Admit ``job`` on its hosts, waiting out a fault in progress (up to
        ADMIT_TIMEOUT_S)."""
        priority = EQUAL_PRIORITY if self.one_priority else job.priority
        size = job.volume_bytes if priority is None else None
        req = AdmitRequest(job.job, placement.workers, placement.ps, priority=priority, size=size)
        deadline = time.monotonic() + ADMIT_TIMEOUT_S
        while True:
            with self.quiet:
                try:
                    self.client.admit(req)
                    return
                except AdminError as e:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"could not admit job {job.job}: {e}") from None
            time.sleep(0.5)

    def progress(self, job: int, remaining: int) -> None:
        if not self.one_priority:
            self.progress_due[job] = remaining

    def remove(self, job: int) -> None:
        self.progress_due.pop(job, None)
        self.remove_due.append(job)

    def flush(self) -> None:
        """Send what is queued, unless a fault holds ``quiet``; keep what fails."""
        if not self.quiet.acquire(blocking=False):
            return
        try:
            for job, remaining in list(self.progress_due.items()):
                self.client.progress(ProgressRequest(job, remaining))
                del self.progress_due[job]
            while self.remove_due:
                try:
                    self.client.remove(JobRef(self.remove_due[0]))
                except AdminError as e:
                    if e.code is not grpc.StatusCode.NOT_FOUND:
                        raise
                self.remove_due.pop(0)
        except AdminError:
            return
        finally:
            self.quiet.release()

    def stats(self) -> Stats:
        """Per-job counters; raises AdminError when they can not be read."""
        return self.client.stats(timeout=STATS_TIMEOUT_S)
