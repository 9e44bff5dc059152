"""The controller: validates requests, plans entries, writes them, persists.

Every change follows one path: check the request against the topology and
the current jobs (a refusal changes nothing), plan the complete entry set for
the new state, write the difference to the switch, and only then persist it.
If the switch cannot be reached the request fails with ``SwitchUnavailable``
and neither the switch nor the state file changed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from controller.entries import PolicyEntry, SwitchEntries
from controller.errors import (
    AlreadyExists,
    ControllerError,
    FailedPrecondition,
    InvalidRequest,
    NotFound,
    SwitchError,
    SwitchUnavailable,
)
from controller.partition import partition
from controller.plan import JobPlan, desired, mgid_all, mgid_workers
from controller.priority import (
    DEFAULT_AGING_PERIOD_S,
    Mode,
    PrioritySpec,
    effective_priority,
)
from controller.reconcile import reconcile
from controller.slots import read_owners, summarise
from controller.state import JobRecord, Store
from controller.switch import Switch
from controller.topology import Topology
from esa import wire
from esa.spec import MAX_PRIORITY, Event, Policy

log = logging.getLogger("esa.controller")

Connector = Callable[[], Switch]
"""Opens a session with the switch, pipeline in place; raises SwitchUnavailable."""

MIN_WORKERS = 2
MAX_STALE_US = 2**48 - 1


def check_job_id(job: Any) -> int:
    if not isinstance(job, int) or isinstance(job, bool) or not 1 <= job <= wire.MAX_JOB_ID:
        raise InvalidRequest(f"job id {job!r} is out of range (1..{wire.MAX_JOB_ID})")
    return job


def priority_spec(priority: Any, size: Any) -> PrioritySpec:
    """A static priority or an SRPT size hint: exactly one of them."""
    if (priority is None) == (size is None):
        raise InvalidRequest("give either a priority (static) or a size hint in bytes (auto)")
    if priority is not None:
        if not isinstance(priority, int) or not 0 <= priority <= MAX_PRIORITY:
            raise InvalidRequest(f"priority {priority!r} is out of range (0..{MAX_PRIORITY})")
        return PrioritySpec.static(priority)
    if not isinstance(size, int) or size < 0:
        raise InvalidRequest(f"size hint {size!r} must be a number of bytes >= 0")
    return PrioritySpec.auto(size)


def parse_policy(name: Any) -> Policy:
    try:
        return Policy[str(name).upper()]
    except KeyError:
        names = "|".join(p.name.lower() for p in Policy)
        raise InvalidRequest(f"unknown policy {name!r} (expected {names})") from None


class Controller:
    def __init__(
        self,
        store: Store,
        topology: Topology,
        pool_size: int,
        connector: Connector,
        aging_period_s: float = DEFAULT_AGING_PERIOD_S,
        clock: Callable[[], float] = time.time,
        switch_addr: str = "",
        thrift_cli: list[str] | None = None,
    ) -> None:
        self.store = store
        self.hosts = topology.hosts
        self.pool_size = pool_size
        self.connector = connector
        self.aging_period_s = aging_period_s
        self.clock = clock
        self.switch_addr = switch_addr
        self.thrift_cli = thrift_cli
        self.lock = threading.RLock()
        self.switch: Switch | None = None
        self.applied = SwitchEntries()
        self.jobs = store.jobs()
        self.policy = store.policy()
        for rec in self.jobs.values():
            for name in (*rec.workers, rec.ps):
                if name not in self.hosts:
                    raise InvalidRequest(
                        f"job {rec.job} uses host {name!r}, which the topology no longer has"
                    )
        store.set_hosts(self.hosts)
        store.set_pool_size(pool_size)

    # -- switch link --

    def _plan(self, jobs: dict[int, JobRecord], policy: PolicyEntry) -> SwitchEntries:
        now = self.clock()
        parts = partition(self.pool_size, list(jobs))
        plans = [
            JobPlan(
                job=rec.job,
                workers=tuple(self.hosts[w] for w in rec.workers),
                ps=self.hosts[rec.ps],
                prio=effective_priority(rec.spec, rec.admitted_at, now, self.aging_period_s),
                part_base=parts[rec.job][0],
                part_size=parts[rec.job][1],
            )
            for rec in jobs.values()
        ]
        return desired(list(self.hosts.values()), plans, policy)

    @property
    def connected(self) -> bool:
        return self.switch is not None and self.switch.alive

    def sync(self) -> int:
        """(Re)connect if needed and make the switch match the state; changes written."""
        with self.lock:
            if self.switch is not None and not self.switch.alive:
                self.switch.close()
                self.switch = None
            if self.switch is None:
                self.switch = self.connector()
            try:
                have = self.switch.read_entries()
                want = self._plan(self.jobs, self.policy)
                n = reconcile(self.switch, want, have)
            except SwitchUnavailable:
                self._drop_switch()
                raise
            self.applied = want
            return n

    def _drop_switch(self) -> None:
        if self.switch is not None:
            self.switch.close()
        self.switch = None

    def _live_switch(self) -> Switch:
        if not self.connected:
            self.sync()
        assert self.switch is not None
        return self.switch

    def _commit(
        self, jobs: dict[int, JobRecord], policy: PolicyEntry, new_job: int | None = None
    ) -> None:
        """Write the plan for ``jobs`` and ``policy``; the caller persists after.

        A ``new_job``'s counters are zeroed first, so a reused id starts at 0.
        """
        switch = self._live_switch()
        want = self._plan(jobs, policy)
        try:
            if new_job is not None:
                switch.reset_job_counters(new_job)
            reconcile(switch, want, self.applied)
        except SwitchUnavailable:
            self._drop_switch()
            raise
        except SwitchError:
            self._restore()
            raise
        self.applied = want

    def _restore(self) -> None:
        """After a refused batch, put the switch back to the persisted state."""
        try:
            self.sync()
        except ControllerError as e:
            log.error("could not restore the switch after a failed change: %s", e)

    # -- requests --

    def admit(
        self,
        job: Any,
        workers: list[str],
        ps: str,
        priority: Any = None,
        size: Any = None,
    ) -> dict[str, Any]:
        with self.lock:
            job = check_job_id(job)
            if job in self.jobs:
                raise AlreadyExists(f"job {job} already exists: remove it first")
            if len(workers) > wire.MAX_WORKERS:
                raise InvalidRequest(
                    f"job {job} has {len(workers)} workers; at most {wire.MAX_WORKERS} "
                    "(one bit each in the worker bitmap)"
                )
            if len(workers) < MIN_WORKERS:
                raise InvalidRequest(
                    f"job {job} has {len(workers)} worker(s); at least {MIN_WORKERS} are needed: "
                    "a one-worker job has nothing to aggregate, run it without the switch"
                )
            spec = priority_spec(priority, size)
            topo = Topology(self.hosts)
            worker_hosts = [topo.resolve(w) for w in workers]
            ps_host = topo.resolve(ps)
            names = [h.name for h in worker_hosts]
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise InvalidRequest(f"job {job}: worker(s) listed twice: {', '.join(dup)}")
            if ps_host.name in names:
                raise InvalidRequest(f"job {job}: {ps_host.name} cannot be both worker and PS")
            rec = JobRecord(job, tuple(names), ps_host.name, spec, self.clock())
            jobs = {**self.jobs, job: rec}
            self._commit(jobs, self.policy, new_job=job)
            self.store.put_job(rec)
            self.jobs = jobs
            log.info("admitted job %d: workers %s, PS %s", job, ", ".join(names), ps_host.name)
            return self.job_view(rec)

    def _job(self, job: Any) -> JobRecord:
        job = check_job_id(job)
        if job not in self.jobs:
            raise NotFound(f"unknown job {job}")
        return self.jobs[job]

    def remove(self, job: Any) -> dict[str, Any]:
        with self.lock:
            rec = self._job(job)
            jobs = {j: r for j, r in self.jobs.items() if j != rec.job}
            self._commit(jobs, self.policy)
            self.store.delete_job(rec.job)
            self.jobs = jobs
            log.info("removed job %d", rec.job)
            return {"job": rec.job, "removed": True}

    def _update(self, rec: JobRecord) -> dict[str, Any]:
        jobs = {**self.jobs, rec.job: rec}
        self._commit(jobs, self.policy)
        self.store.put_job(rec)
        self.jobs = jobs
        return self.job_view(rec)

    def set_priority(self, job: Any, priority: Any = None, size: Any = None) -> dict[str, Any]:
        """Pin a static priority, or switch the job to auto with a new size hint."""
        with self.lock:
            rec = self._job(job)
            return self._update(replace(rec, spec=priority_spec(priority, size)))

    def progress(self, job: Any, remaining: Any) -> dict[str, Any]:
        """An auto job reports the bytes it still has to aggregate."""
        with self.lock:
            rec = self._job(job)
            if rec.spec.mode is not Mode.AUTO:
                raise FailedPrecondition(
                    f"job {rec.job} has a static priority; progress applies to auto jobs"
                )
            return self._update(replace(rec, spec=priority_spec(None, remaining)))

    def set_policy(self, policy: Any, stale_us: Any = None) -> dict[str, Any]:
        with self.lock:
            pol = parse_policy(policy)
            if stale_us is None:
                stale_us = self.policy.stale_us
            if not isinstance(stale_us, int) or not 0 < stale_us <= MAX_STALE_US:
                raise InvalidRequest(f"stale timeout {stale_us!r} us is out of range (1..2^48-1)")
            entry = PolicyEntry(pol, stale_us)
            self._commit(self.jobs, entry)
            self.store.set_policy(entry)
            self.policy = entry
            return self.policy_view()

    def tick(self) -> int:
        """Age auto jobs: rewrite the job entries whose priority changed."""
        with self.lock:
            if not self.connected:
                return 0
            want = self._plan(self.jobs, self.policy)
            if want.jobs == self.applied.jobs:
                return 0
            assert self.switch is not None
            try:
                n = reconcile(self.switch, want, self.applied)
            except SwitchUnavailable:
                self._drop_switch()
                raise
            self.applied = want
            return n

    # -- views --

    def policy_view(self) -> dict[str, Any]:
        return {"policy": self.policy.policy.name.lower(), "stale_us": self.policy.stale_us}

    def job_view(self, rec: JobRecord) -> dict[str, Any]:
        entry = self.applied.jobs.get(rec.job)
        return {
            "job": rec.job,
            "workers": list(rec.workers),
            "ps": rec.ps,
            "mode": rec.spec.mode.value,
            "priority": entry.prio if entry else None,
            "static_priority": rec.spec.priority if rec.spec.mode is Mode.STATIC else None,
            "remaining": rec.spec.remaining if rec.spec.mode is Mode.AUTO else None,
            "admitted_at": rec.admitted_at,
            "partition": [entry.part_base, entry.part_size] if entry else None,
            "mgid_all": mgid_all(rec.job),
            "mgid_workers": mgid_workers(rec.job),
        }

    def list_jobs(self) -> list[dict[str, Any]]:
        with self.lock:
            return [self.job_view(r) for r in self.jobs.values()]

    def status(self) -> dict[str, Any]:
        with self.lock:
            return {
                "switch": {"address": self.switch_addr, "connected": self.connected},
                **self.policy_view(),
                "pool_size": self.pool_size,
                "jobs": len(self.jobs),
                "entries": self.applied.count(),
                "aging_period_s": self.aging_period_s,
                "hosts": {n: h.to_json() for n, h in sorted(self.hosts.items())},
            }

    def stats(self) -> dict[str, Any]:
        with self.lock:
            switch = self._live_switch()
            try:
                counters = switch.read_counters()
            except SwitchUnavailable:
                self._drop_switch()
                raise
            jobs = {
                str(j): {e.name.lower(): counters.events.get(j, {}).get(e, 0) for e in Event}
                for j in self.jobs
            }
            return {
                "jobs": jobs,
                "drops": {d.name.lower(): n for d, n in counters.drops.items()},
            }

    def slots(self) -> dict[str, Any]:
        """Slot occupancy per job, through BMv2's Thrift CLI."""
        if not self.thrift_cli:
            raise FailedPrecondition("the slots view needs `serve --thrift-cli CMD`")
        return summarise(read_owners(self.thrift_cli))
