"""The controller: the admin API's operations on every switch of a fabric.

Every change follows one path: check the request (``controller.api.validate``;
a refusal changes nothing), plan the complete entry set of each switch for
the new state (``controller.world.plan.device_entries``), write the difference to
each switch over its own session (``controller.device.session``), and only then
persist the new state and take it as the current one.  A switch whose plan
did not change gets no write.  If a switch whose plan changes cannot be
reached the request fails with ``SwitchUnavailable`` before anything is
written; if one refuses a write or goes away half-way, the switches being
changed are synced back to the persisted state and the request fails.  Each
switch is synced on its own, so a restarted switch is rebuilt and the others
are left alone.  Replies are built by ``controller.api.views``.  One lock
serialises the requests, so each reply shows the state its own request left.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

from controller.api import validate, views
from controller.api.messages import (
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
)
from controller.api.metrics import Scrape, SwitchSample
from controller.device.session import Connector, Planner, SwitchSession
from controller.device.slots import no_owners, read_owners, served_owners
from controller.errors import ControllerError, SwitchError, SwitchUnavailable
from controller.world.fabric import Fabric
from controller.world.plan import device_entries
from controller.world.priority import DEFAULT_AGING_PERIOD_S
from controller.world.state import JobRecord, State, Store
from controller.world.topology import Topology

log = logging.getLogger("esa.controller")


class Controller:
    def __init__(
        self,
        store: Store,
        fabric: Fabric,
        pool_size: int,
        connectors: Mapping[str, Connector],
        aging_period_s: float = DEFAULT_AGING_PERIOD_S,
        clock: Callable[[], float] = time.time,
        thrift_cli: Mapping[str, list[str]] | None = None,
    ) -> None:
        """``connectors`` opens a session with each switch of ``fabric``;
        ``thrift_cli`` runs ``simple_switch_CLI`` for those it names."""
        self.store = store
        self.fabric = fabric
        self.topology = Topology(fabric.hosts, fabric.pool_size)
        """the hosts on their own switches' ports, as requests name them."""
        self.pool_size = pool_size
        self.aging_period_s = aging_period_s
        self.clock = clock
        self.thrift_cli = dict(thrift_cli or {})
        self.lock = threading.RLock()
        self.sessions = {name: SwitchSession(connectors[name]) for name in fabric.devices}
        self.state = store.load()
        validate.hosts_known(self.state.jobs, fabric.hosts)
        store.set_fabric(fabric)
        store.set_pool_size(pool_size)

    # -- the switches --

    @property
    def connected(self) -> bool:
        """Every switch is connected."""
        return all(s.connected for s in self.sessions.values())

    def disconnected(self) -> list[str]:
        return [name for name, s in self.sessions.items() if not s.connected]

    def sync(self, device: str | None = None) -> int:
        """(Re)connect if needed and make one switch, or each, match the state;
        changes written.  Every switch asked for is tried; the first failure
        is raised after."""
        with self.lock:
            written = 0
            failed: ControllerError | None = None
            levels = self._levels()
            for name in validate.devices(device, self.sessions):
                try:
                    written += self.sessions[name].sync(self._planner(self.state, name, levels))
                except ControllerError as e:
                    failed = failed or e
            if failed is not None:
                raise failed
            return written

    def _levels(self) -> dict[int, int]:
        """The priority each job holds on the switches, taken once before a
        change so that every switch is planned from the same levels."""
        return {j: e.priority for s in self.sessions.values() for j, e in s.applied.jobs.items()}

    def _planner(self, state: State, device: str, levels: dict[int, int]) -> Planner:
        return functools.partial(
            device_entries,
            state,
            self.fabric,
            device,
            self.pool_size,
            self.aging_period_s,
            levels=levels,
        )

    def _change(self, after: State, new_job: int | None = None) -> None:
        """Write ``after`` to each switch whose plan changes; the caller
        persists it, then takes it.  Those not connected are synced first, so
        an unreachable one fails the change before anything is written; one
        whose plan stays as it is is left alone, even unreachable (it is
        synced to the new state when it comes back)."""
        levels = self._levels()
        planners = {name: self._planner(after, name, levels) for name in self.sessions}
        changed = [
            name
            for name, session in self.sessions.items()
            if planners[name](session.applied) != session.applied
        ]
        for name in changed:
            if not self.sessions[name].connected:
                self.sync(name)
        try:
            for name in changed:
                self.sessions[name].commit(planners[name], new_job)
        except (SwitchError, SwitchUnavailable):
            self._restore(changed)
            raise

    def _restore(self, names: list[str]) -> None:
        """After a refused or broken batch, put the switches back to the persisted state."""
        for name in names:
            try:
                self.sync(name)
            except ControllerError as e:
                log.error("could not restore switch %s after a failed change: %s", name, e)

    def _put_job(self, rec: JobRecord, new: bool = False) -> JobInfo:
        after = replace(self.state, jobs={**self.state.jobs, rec.job: rec})
        self._change(after, new_job=rec.job if new else None)
        self.store.put_job(rec)
        self.state = after
        return self._job_info(rec)

    def _job_info(self, rec: JobRecord) -> JobInfo:
        roles = self.fabric.job_roles(rec.placement.workers, rec.placement.ps)
        top = next(name for name, role in roles.items() if role.completes)
        held = {name: s.applied.jobs.get(rec.job) for name, s in self.sessions.items()}
        return views.job_info(rec, top, {n: e for n, e in held.items() if e is not None})

    # -- changes --

    def admit(self, req: AdmitRequest) -> JobInfo:
        with self.lock:
            rec = validate.admission(req, self.topology, self.state.jobs, self.clock())
            info = self._put_job(rec, new=True)
            log.info(
                "admitted job %d: workers %s, PS %s",
                rec.job,
                ", ".join(rec.placement.workers),
                ", ".join(rec.placement.ps),
            )
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
            return self._put_job(
                replace(rec, priority=validate.job_priority(req.priority, req.size))
            )

    def progress(self, req: ProgressRequest) -> JobInfo:
        """An auto job reports the bytes it still has to aggregate."""
        with self.lock:
            rec = validate.auto_job(validate.known_job(req.job, self.state.jobs))
            return self._put_job(replace(rec, priority=validate.job_priority(None, req.remaining)))

    def policy(self, req: PolicyRequest) -> PolicyState:
        """Switch the policy (``validate.policy_change`` says what is kept)."""
        with self.lock:
            entry, part_size, layout = validate.policy_change(
                req, self.state.policy, self.state.part_size, self.state.layout, self.pool_size
            )
            after = replace(self.state, policy=entry, part_size=part_size, layout=layout)
            self._change(after)
            self.store.set_policy(entry)
            self.store.set_part_size(part_size)
            self.store.set_layout(layout)
            self.state = after
            return views.policy_state(entry, part_size, layout)

    # -- views --

    def jobs(self) -> JobList:
        with self.lock:
            return JobList(tuple(self._job_info(r) for r in self.state.jobs.values()))

    def status(self) -> Status:
        with self.lock:
            return views.status(
                [
                    views.switch_link(self.fabric.devices[name], s.connected, s.applied)
                    for name, s in self.sessions.items()
                ],
                self.state,
                self.pool_size,
                self.aging_period_s,
                self.fabric,
            )

    def stats(self, device: str | None = None) -> Stats:
        """Counters of one switch, or of each, and their sums."""
        with self.lock:
            names = validate.devices(device, self.sessions)
            for name in names:
                if not self.sessions[name].connected:
                    self.sync(name)
            held = {name: self.sessions[name].applied.jobs for name in names}
            read = {
                name: self.sessions[name].read_counters(set(self.state.jobs) | set(held[name]))
                for name in names
            }
            return views.stats(read, held, self.state.jobs)

    def slots(self, device: str | None = None) -> Slots:
        """Slot occupancy per job on one switch, or on each: ``slot_owner``
        over P4Runtime where the switch serves register reads (the reference
        switch), else through BMv2's Thrift CLI (``serve --thrift-cli``),
        run without the lock."""
        owners = {}
        for name in validate.devices(device, self.sessions):
            with self.lock:
                if not self.sessions[name].connected:
                    self.sync(name)
                served = served_owners(self.sessions[name])
            if served is None:
                if name not in self.thrift_cli:
                    raise no_owners(name, len(self.sessions) == 1)
                served = read_owners(self.thrift_cli[name])
            owners[name] = served
        return views.slots(owners)

    def sample(self) -> Scrape:
        """What a metrics scrape shows (``controller.api.metrics``): each switch's
        counters and slot owners, read under the lock one switch at a time,
        as ``stats`` and ``slots`` read them, the Thrift CLI run without the
        lock.  Unlike them it reconnects no switch (the serve loop does), and
        a switch that is down or fails a read is shown as down, not raised."""
        with self.lock:
            jobs = len(self.state.jobs)
        switches = {}
        for name, session in self.sessions.items():
            with self.lock:
                if not session.connected:
                    switches[name] = SwitchSample(up=False)
                    continue
                priorities = {j: e.priority for j, e in session.applied.jobs.items()}
                try:
                    counters = session.read_counters(priorities)
                    owners = served_owners(session)
                except ControllerError:
                    switches[name] = SwitchSample(up=False)
                    continue
            if owners is None and name in self.thrift_cli:
                try:
                    owners = read_owners(self.thrift_cli[name])
                except ControllerError:
                    owners = None
            switches[name] = SwitchSample(True, priorities, counters, owners)
        return Scrape(jobs, self.pool_size, switches)

    def identify(self) -> Identity:
        """This process and its state file; takes no lock, so it answers while
        a request waits for a switch."""
        return Identity(pid=os.getpid(), state_file=str(self.store.path))
