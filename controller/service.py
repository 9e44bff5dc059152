"""The controller: the admin API's operations on one switch.

Every change follows one path: check the request (``controller.validate``;
a refusal changes nothing), plan the complete entry set for the new state
(``controller.plan``), write the difference to the switch
(``controller.session``), and only then persist the new state and take it
as the current one.  If the switch cannot be reached the request fails with
``SwitchUnavailable`` and neither the switch nor the state file changed; if
it refuses a write half-way, it is synced back to the persisted state and
the request fails with ``SwitchError``.  Replies are built by
``controller.views``.  One lock serialises the requests, so each reply
shows the state its own request left.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from controller import validate, views
from controller.errors import ControllerError, FailedPrecondition, SwitchError
from controller.messages import (
    AdmitRequest,
    Identity,
    JobInfo,
    JobList,
    JobRef,
    PolicyRequest,
    PolicyState,
    PrioRequest,
    ProgressRequest,
    Removed,
    Slots,
    Stats,
    Status,
    SwitchLink,
)
from controller.plan import entries_for
from controller.priority import DEFAULT_AGING_PERIOD_S
from controller.session import Connector, Planner, SwitchSession
from controller.slots import read_owners
from controller.state import JobRecord, State, Store
from controller.topology import Topology

log = logging.getLogger("esa.controller")


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
        self.topology = topology
        self.pool_size = pool_size
        self.aging_period_s = aging_period_s
        self.clock = clock
        self.switch_addr = switch_addr
        self.thrift_cli = thrift_cli
        self.lock = threading.RLock()
        self.session = SwitchSession(connector)
        self.state = store.load()
        validate.hosts_known(self.state.jobs, topology.hosts)
        store.set_hosts(topology.hosts)
        store.set_pool_size(pool_size)

    # -- the switch --

    @property
    def connected(self) -> bool:
        return self.session.connected

    def sync(self) -> int:
        """(Re)connect if needed and make the switch match the state; changes written."""
        with self.lock:
            return self.session.sync(self._planner(self.state))

    def _planner(self, state: State) -> Planner:
        return functools.partial(
            entries_for, state, self.topology.hosts, self.pool_size, self.aging_period_s
        )

    def _change(self, after: State, new_job: int | None = None) -> None:
        """Write ``after`` to the switch; the caller persists it, then takes it."""
        if not self.session.connected:
            self.sync()
        try:
            self.session.commit(self._planner(after), new_job)
        except SwitchError:
            self._restore()
            raise

    def _restore(self) -> None:
        """After a refused batch, put the switch back to the persisted state."""
        try:
            self.sync()
        except ControllerError as e:
            log.error("could not restore the switch after a failed change: %s", e)

    def _put_job(self, rec: JobRecord, new: bool = False) -> JobInfo:
        after = replace(self.state, jobs={**self.state.jobs, rec.job: rec})
        self._change(after, new_job=rec.job if new else None)
        self.store.put_job(rec)
        self.state = after
        return self._job_info(rec)

    def _job_info(self, rec: JobRecord) -> JobInfo:
        return views.job_info(rec, self.session.applied.jobs.get(rec.job))

    # -- changes --

    def admit(self, req: AdmitRequest) -> JobInfo:
        with self.lock:
            rec = validate.admission(req, self.topology, self.state.jobs, self.clock())
            info = self._put_job(rec, new=True)
            log.info("admitted job %d: workers %s, PS %s", rec.job, ", ".join(rec.workers), rec.ps)
            return info

    def remove(self, req: JobRef) -> Removed:
        with self.lock:
            rec = validate.known_job(req.job, self.state.jobs)
            jobs = {j: r for j, r in self.state.jobs.items() if j != rec.job}
            after = replace(self.state, jobs=jobs)
            self._change(after)
            self.store.delete_job(rec.job)
            self.state = after
            log.info("removed job %d", rec.job)
            return Removed(job=rec.job, removed=True)

    def prio(self, req: PrioRequest) -> JobInfo:
        """Pin a static priority, or switch the job to auto with a new size hint."""
        with self.lock:
            rec = validate.known_job(req.job, self.state.jobs)
            return self._put_job(replace(rec, spec=validate.priority_spec(req.priority, req.size)))

    def progress(self, req: ProgressRequest) -> JobInfo:
        """An auto job reports the bytes it still has to aggregate."""
        with self.lock:
            rec = validate.auto_job(validate.known_job(req.job, self.state.jobs))
            return self._put_job(replace(rec, spec=validate.priority_spec(None, req.remaining)))

    def policy(self, req: PolicyRequest) -> PolicyState:
        """Switch the policy (``validate.policy_change`` says what is kept)."""
        with self.lock:
            entry, part_size = validate.policy_change(
                req, self.state.policy, self.state.part_size, self.pool_size
            )
            after = replace(self.state, policy=entry, part_size=part_size)
            self._change(after)
            self.store.set_policy(entry)
            self.store.set_part_size(part_size)
            self.state = after
            return views.policy_state(entry, part_size)

    # -- views --

    def jobs(self) -> JobList:
        with self.lock:
            return JobList(tuple(self._job_info(r) for r in self.state.jobs.values()))

    def status(self) -> Status:
        with self.lock:
            return views.status(
                SwitchLink(self.switch_addr, self.connected),
                self.state,
                self.pool_size,
                self.session.applied.count(),
                self.aging_period_s,
                self.topology.hosts,
            )

    def stats(self) -> Stats:
        with self.lock:
            if not self.session.connected:
                self.sync()
            return views.stats(self.session.read_counters(), self.state.jobs)

    def slots(self) -> Slots:
        """Slot occupancy per job, through BMv2's Thrift CLI."""
        if not self.thrift_cli:
            raise FailedPrecondition("the slots view needs `serve --thrift-cli CMD`")
        return views.slots(read_owners(self.thrift_cli))

    def identify(self) -> Identity:
        """This process and its state file; takes no lock, so it answers while
        a request waits for the switch."""
        return Identity(pid=os.getpid(), state_file=str(self.store.path))
