"""The run's topology, as data: ``mininet/topologies/<name>.json``.

A topology is a fabric in the controller's format (``controller.world.fabric``:
switches with their device ids and P4Runtime addresses, hosts on switch
ports, switch-to-switch links), the very file the controller is given, with
one field of the run's own, ``link_properties``, taken out before the
fabric is read::

    {"description": "...",
     "subnet": "10.0.0.0/24",
     "switches": {"s1": {"device_id": 0, "p4runtime": "127.0.0.1:9559",
                         "ip": "10.0.0.254", "mac": "02:00:00:00:00:fe"}},
     "hosts": {"h1": {"switch": "s1", "port": 1, "ip": "10.0.0.1", "mac": "02:00:00:00:00:01"}},
     "link_properties": [{"host": "h1", "bw_mbps": 100, "delay_ms": 0, "loss_pct": 0},
                         {"switch": "t1", "peer": "s1", "bw_mbps": 1000, "delay_ms": 1}]}

The run needs more than the controller does: a ``subnet`` (the hosts'
prefix), an address (``ip`` and ``mac``) on every switch, where a PS sends
what it completes (``esa-ps --switch-addr``) and which every host reaches
without ARP, and Mininet's names (letters then digits: interfaces are
``NAME-ethN``).  A host's link or a switch-to-switch link may state
``bw_mbps``, ``delay_ms`` and ``loss_pct`` (default: a plain veth; no loss
between switches); the scenario's ``link`` and the run's flags override
them on every host's link.

Jobs map onto hosts in ``assign``: a job with a placement (``worker_hosts``
and ``ps_hosts``, in any racks) runs there; a job without takes the next
hosts nobody named, in the file's order, its workers first and then its one
PS.  A host plays one part in one job: each runs its program on its ESA
port, as the controller's topology says.  A job's PS sends what it
completes to the job's top switch (``Fabric.job_roles``: where its sum
completes).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from controller.errors import ControllerError
from controller.world.fabric import Device, Fabric
from controller.world.fabric import Link as FabricLink
from controller.world.topology import Host
from esa.job import Placement
from runner.paths import ROOT
from runner.scenario import LINK_FIELDS, LinkShape, RunJob, Scenario, parse_link

TOPOLOGIES = ROOT / "mininet" / "topologies"
RUN_FIELD = "link_properties"
_NAME = re.compile(r"^[a-z][a-z0-9]*[0-9]$")
"""Mininet's node names: letters then digits (interfaces are NAME-ethN)."""


@dataclass(frozen=True)
class Attachment:
    """A host on its link: the host (on its switch's port), the switch, and
    the link's properties."""

    host: Host
    switch: str
    link: LinkShape

    @property
    def port(self) -> int:
        return self.host.port


@dataclass(frozen=True)
class Trunk:
    """A switch-to-switch link and its properties."""

    switch: str
    port: int
    peer: str
    peer_port: int
    link: LinkShape


@dataclass(frozen=True)
class Network:
    """The run's network: the controller's fabric and where each host and
    trunk attaches (``mininet/topologies/<name>.json``)."""

    name: str
    fabric: Fabric
    links: tuple[Attachment, ...]
    """one per host, in the file's order of hosts."""
    trunks: tuple[Trunk, ...] = ()

    @property
    def switches(self) -> tuple[Device, ...]:
        """In the file's order."""
        return tuple(self.fabric.devices.values())

    @property
    def hosts(self) -> tuple[Host, ...]:
        return tuple(a.host for a in self.links)

    def host(self, name: str) -> Host:
        return self.attachment(name).host

    def attachment(self, name: str) -> Attachment:
        return next(a for a in self.links if a.host.name == name)

    @property
    def prefix_len(self) -> int:
        assert self.fabric.subnet is not None  # parse requires it
        return self.fabric.subnet.prefixlen

    @property
    def default_switch(self) -> str:
        """The switch a fault that names none hits: the only one, or the first ToR."""
        tors = [d.name for d in self.switches if d.role == "tor"]
        return tors[0] if tors else self.switches[0].name

    def top(self, placement: Placement) -> str:
        """The switch where a job placed there completes its sums."""
        return self.fabric.top(placement.workers, placement.ps)

    def address(self, switch: str) -> str:
        """The switch's ip (every switch of a run's topology has one)."""
        return str(self.fabric.devices[switch].ip)


@dataclass(frozen=True)
class HostRole:
    """One part of a job on one host."""

    host: Host
    role: str
    """``j<job>w<index>`` for a worker, ``j<job>ps<index>`` for a PS: names its log."""
    index: int
    """the worker's bit in the job's bitmap, or the PS's shard."""

    @property
    def name(self) -> str:
        return self.host.name

    @property
    def ip(self) -> str:
        return self.host.ip

    @property
    def udp_port(self) -> int:
        return self.host.udp_port


@dataclass(frozen=True)
class JobHosts:
    """A job's parts on the topology: worker ``i`` on ``workers[i]``, PS
    shard ``i`` on ``ps[i]``."""

    workers: tuple[HostRole, ...]
    ps: tuple[HostRole, ...]
    top: str
    """the switch where its sums complete."""
    switch_addr: str
    """the top's address, where its PSes send what they complete."""

    @property
    def members(self) -> tuple[HostRole, ...]:
        return (*self.workers, *self.ps)

    @property
    def ps_addresses(self) -> str:
        """The PS hosts as the workers take them (``--ps``, ``ESA_PS``):
        ``HOST:PORT`` in shard order, comma-separated."""
        return ",".join(f"{m.ip}:{m.udp_port}" for m in self.ps)

    @property
    def placement(self) -> Placement:
        return Placement(tuple(m.name for m in self.workers), tuple(m.name for m in self.ps))


def _error(where: str, msg: str) -> ValueError:
    return ValueError(f"topology {where}: {msg}")


def path_of(ref: str) -> Path:
    """A topology's file: a bare name is one in mininet/topologies/."""
    if "/" in ref or ref.endswith(".json"):
        return Path(ref)
    return TOPOLOGIES / f"{ref}.json"


def load(ref: str) -> Network:
    path = path_of(ref)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        known = ", ".join(sorted(p.stem for p in TOPOLOGIES.glob("*.json")))
        raise _error(ref, f"no file {path} (known topologies: {known})") from None
    except ValueError as e:
        raise _error(ref, f"{path} is not valid JSON: {e}") from None
    return parse(raw, ref)


def _properties(where: str, raw: Any, what: str) -> LinkShape:
    props = {k: v for k, v in raw.items() if k in LINK_FIELDS}
    try:
        return LinkShape().overridden(parse_link(props))
    except ValueError as e:
        raise _error(where, f"link of {what}: {e}") from None


def _pair(link: FabricLink) -> frozenset[str]:
    return frozenset((link.switch, link.peer))


def _link_properties(
    where: str, raw: Any, fabric: Fabric
) -> tuple[dict[str, LinkShape], dict[frozenset[str], LinkShape]]:
    """Each entry's properties: by host, and by the pair of switches a link joins."""
    if not isinstance(raw, list):
        raise _error(where, f"{RUN_FIELD} must be a list")
    hosts: dict[str, LinkShape] = {}
    trunks: dict[frozenset[str], LinkShape] = {}
    joined = {_pair(k) for k in fabric.links}
    for item in raw:
        ends = set(item) - set(LINK_FIELDS) if isinstance(item, dict) else set()
        if ends == {"host"}:
            name = item["host"]
            if name not in fabric.hosts:
                raise _error(where, f"{RUN_FIELD} names the unknown host {name!r}")
            if name in hosts:
                raise _error(where, f"{RUN_FIELD} gives the link of {name} twice")
            hosts[name] = _properties(where, item, name)
        elif ends == {"switch", "peer"}:
            pair = frozenset((item["switch"], item["peer"]))
            what = f"{item['switch']} and {item['peer']}"
            if pair not in joined:
                raise _error(where, f"{RUN_FIELD}: no link joins {what}")
            if pair in trunks:
                raise _error(where, f"{RUN_FIELD} gives the link of {what} twice")
            trunks[pair] = _properties(where, item, what)
            if trunks[pair].loss_pct:
                raise _error(where, f"link of {what}: loss is for hosts' links only")
        else:
            raise _error(
                where,
                f"{RUN_FIELD} entry {item!r} must name a host, or a switch and its peer, "
                f"and give only {', '.join(LINK_FIELDS)}",
            )
    return hosts, trunks


def _check_for_the_run(where: str, fabric: Fabric) -> None:
    if fabric.subnet is None:
        raise _error(where, "give the hosts' subnet")
    if not fabric.hosts:
        raise _error(where, "no hosts")
    for name in (*fabric.devices, *fabric.hosts):
        if not _NAME.match(name):
            raise _error(where, f"name {name!r} is not letters then digits (h1, s1)")
    for d in fabric.devices.values():
        if d.ip is None:
            raise _error(where, f"switch {d.name} needs an ip and a mac (a PS sends to them)")


def parse(raw: Any, where: str) -> Network:
    """A topology from its JSON; ``where`` names it in errors."""
    if not isinstance(raw, dict):
        raise _error(where, "expected an object with subnet, switches and hosts")
    fabric_part = {k: v for k, v in raw.items() if k != RUN_FIELD}
    try:
        fabric = Fabric.from_json(fabric_part)
    except ControllerError as e:
        raise _error(where, str(e).removeprefix("fabric: ")) from None
    _check_for_the_run(where, fabric)
    hosts, trunks = _link_properties(where, raw.get(RUN_FIELD, []), fabric)
    return Network(
        name=Path(where).stem,
        fabric=fabric,
        links=tuple(
            Attachment(h, fabric.home(n), hosts.get(n, LinkShape()))
            for n, h in fabric.hosts.items()
        ),
        trunks=tuple(
            Trunk(k.switch, k.port, k.peer, k.peer_port, trunks.get(_pair(k), LinkShape()))
            for k in fabric.links
        ),
    )


def _named(job: RunJob) -> tuple[str, ...]:
    return () if job.placement is None else (*job.placement.workers, *job.placement.ps)


def assign(scenario: Scenario, topo: Network) -> dict[int, JobHosts]:
    """Each job's workers and PSes on the topology's hosts (see the module's doc)."""
    known = {h.name for h in topo.hosts}
    taken: dict[str, int] = {}
    for job in scenario.jobs:
        for name in _named(job):
            if name not in known:
                raise ValueError(
                    f"job {job.spec.job}: unknown host {name!r}: topology {topo.name} has "
                    f"{', '.join(h.name for h in topo.hosts)}"
                )
            if name in taken:
                raise ValueError(
                    f"job {job.spec.job}: host {name} is already given to job {taken[name]} "
                    "(a host plays one part in one job)"
                )
            taken[name] = job.spec.job
    free = [h.name for h in topo.hosts if h.name not in taken]
    need = sum(job.spec.workers + 1 for job in scenario.jobs if job.placement is None)
    if need > len(free):
        total = len(taken) + need
        raise ValueError(
            f"the jobs need {total} hosts (workers and PSes), topology {topo.name} "
            f"has {len(topo.hosts)}: use a larger topology or fewer jobs"
        )

    def members(names: tuple[str, ...], role: str) -> tuple[HostRole, ...]:
        return tuple(HostRole(topo.host(h), f"{role}{i}", i) for i, h in enumerate(names))

    out = {}
    for job in scenario.jobs:
        j, p = job.spec.job, job.placement
        if p is None:
            p = Placement(tuple(free.pop(0) for _ in range(job.spec.workers)), (free.pop(0),))
        top = topo.top(p)
        workers, ps = members(p.workers, f"j{j}w"), members(p.ps, f"j{j}ps")
        out[j] = JobHosts(workers, ps, top, topo.address(top))
    return out


def check_faults(scenario: Scenario, topo: Network) -> None:
    """A fault that names a switch names one of the topology's."""
    for f in scenario.faults:
        if f.switch and f.switch not in topo.fabric.devices:
            raise ValueError(
                f"fault {f}: topology {topo.name} has no switch {f.switch} "
                f"(it has {', '.join(topo.fabric.devices)})"
            )


def placed(scenario: Scenario, topo: Network) -> Scenario:
    """``scenario`` with every job placed where ``assign`` puts it."""
    hosts = assign(scenario, topo)
    jobs = tuple(replace(j, placement=hosts[j.spec.job].placement) for j in scenario.jobs)
    return replace(scenario, jobs=jobs)
