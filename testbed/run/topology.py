"""The run's topology, as data: ``mininet/topologies/<name>.json``.

A topology is one switch and its hosts, each on a link to one switch port::

    {"description": "...",
     "subnet": "10.0.0.0/24",
     "switch": {"name": "s1", "ip": "10.0.0.254", "mac": "02:00:00:00:00:fe"},
     "hosts": [{"name": "h1", "ip": "10.0.0.1", "mac": "02:00:00:00:00:01"}, ...],
     "links": [{"host": "h1", "port": 1, "bw_mbps": 100, "delay_ms": 0, "loss_pct": 0}, ...]}

The switch's address is where a PS sends what it completes (``esa-ps
--switch-addr``); every host reaches it without ARP.  A link's properties
are optional (default: a plain veth); the scenario's ``link`` and the run's
flags override them on every link.

Jobs map onto hosts in ``assign``: a job's ``worker_hosts`` and ``ps_host``
name them; a job that names none takes the next hosts nobody named, in the
file's order, its workers first and then its PS.  A host plays one part in
one job: each runs its program on the ESA port (``esa.wire.UDP_PORT``), as
the controller's topology says.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.topology import Host
from esa import wire
from testbed.paths import ROOT
from testbed.run.scenario import LINK_FIELDS, JobSpec, Link, Scenario, parse_link

TOPOLOGIES = ROOT / "mininet" / "topologies"
MAX_PORT = 510
"""BMv2 ports are 9 bits and 511 is its drop port."""
_NAME = re.compile(r"^[a-z][a-z0-9]*[0-9]$")
"""Mininet's node names: letters then digits (interfaces are NAME-ethN)."""
_MAC = re.compile(r"^([0-9a-f]{2}:){5}[0-9a-f]{2}$")


@dataclass(frozen=True)
class Node:
    """The switch's addresses, where a PS sends what it completes."""

    name: str
    ip: str
    mac: str


@dataclass(frozen=True)
class Attachment:
    """A host on its link: the host (on the switch port the link ends at)
    and the link's properties."""

    host: Host
    link: Link

    @property
    def port(self) -> int:
        return self.host.port


@dataclass(frozen=True)
class Topology:
    name: str
    switch: Node
    subnet: ipaddress.IPv4Network
    links: tuple[Attachment, ...]
    """one per host, in the file's order of hosts."""
    description: str = ""

    @property
    def hosts(self) -> tuple[Host, ...]:
        return tuple(a.host for a in self.links)

    def host(self, name: str) -> Host:
        return self.attachment(name).host

    def attachment(self, name: str) -> Attachment:
        return next(a for a in self.links if a.host.name == name)

    @property
    def prefix_len(self) -> int:
        return self.subnet.prefixlen


@dataclass(frozen=True)
class Member:
    """One part of a job on one host."""

    host: Host
    role: str
    """``j<job>w<index>`` for a worker, ``ps<job>`` for the PS: names its log."""
    index: int
    """the worker's bit in the job's bitmap; -1 for the PS."""

    @property
    def name(self) -> str:
        return self.host.name

    @property
    def ip(self) -> str:
        return self.host.ip

    @property
    def udp_port(self) -> int:
        return self.host.udp_port


def _error(where: str, msg: str) -> ValueError:
    return ValueError(f"topology {where}: {msg}")


def path_of(ref: str) -> Path:
    """A topology's file: a bare name is one in mininet/topologies/."""
    if "/" in ref or ref.endswith(".json"):
        return Path(ref)
    return TOPOLOGIES / f"{ref}.json"


def load(ref: str) -> Topology:
    path = path_of(ref)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        known = ", ".join(sorted(p.stem for p in TOPOLOGIES.glob("*.json")))
        raise _error(ref, f"no file {path} (known topologies: {known})") from None
    except ValueError as e:
        raise _error(ref, f"{path} is not valid JSON: {e}") from None
    return parse(raw, ref)


def _node(where: str, raw: Any, what: str) -> Node:
    if not isinstance(raw, dict) or set(raw) != {"name", "ip", "mac"}:
        raise _error(where, f"{what} must be an object with exactly name, ip and mac")
    name, ip, mac = raw["name"], raw["ip"], raw["mac"]
    if not isinstance(name, str) or not _NAME.match(name):
        raise _error(where, f"{what} name {name!r} is not letters then digits (h1, s1)")
    try:
        ipaddress.IPv4Address(ip)
    except ValueError:
        raise _error(where, f"{name}: {ip!r} is not an IPv4 address") from None
    if not isinstance(mac, str) or not _MAC.match(mac.lower()):
        raise _error(where, f"{name}: {mac!r} is not a MAC address")
    return Node(name, ip, mac.lower())


def _attachment(where: str, raw: Any, hosts: dict[str, Node]) -> Attachment:
    if not isinstance(raw, dict) or not {"host", "port"} <= set(raw):
        raise _error(where, f"link {raw!r} must name its host and switch port")
    unknown = set(raw) - {"host", "port", *LINK_FIELDS}
    if unknown:
        raise _error(
            where, f"link of {raw['host']} has unknown field(s) {', '.join(sorted(unknown))}"
        )
    host, port = raw["host"], raw["port"]
    if host not in hosts:
        raise _error(where, f"a link names the unknown host {host!r}")
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= MAX_PORT:
        raise _error(where, f"{host}: port {port!r} is not a switch port (1..{MAX_PORT})")
    props = {k: v for k, v in raw.items() if k in LINK_FIELDS}
    try:
        link = Link().overridden(parse_link(props))
    except ValueError as e:
        raise _error(where, f"link of {host}: {e}") from None
    node = hosts[host]
    return Attachment(Host(host, port, node.mac, node.ip, wire.UDP_PORT), link)


def _distinct(where: str, nodes: list[Node], field: str) -> None:
    seen: dict[str, str] = {}
    for n in nodes:
        value = getattr(n, field)
        if value in seen:
            raise _error(where, f"{seen[value]} and {n.name} share the {field} {value}")
        seen[value] = n.name


def parse(raw: Any, where: str) -> Topology:
    """A topology from its JSON; ``where`` names it in errors."""
    fields = {"description", "subnet", "switch", "hosts", "links"}
    if not isinstance(raw, dict):
        raise _error(where, "expected an object with subnet, switch, hosts and links")
    unknown = set(raw) - fields
    if unknown:
        raise _error(where, f"unknown field(s) {', '.join(sorted(unknown))}")
    missing = fields - {"description"} - set(raw)
    if missing:
        raise _error(where, f"missing field(s) {', '.join(sorted(missing))}")
    try:
        subnet = ipaddress.IPv4Network(raw["subnet"])
    except (ValueError, TypeError):
        raise _error(where, f"subnet {raw['subnet']!r} is not an IPv4 network") from None
    switch = _node(where, raw["switch"], "the switch")
    if not isinstance(raw["hosts"], list) or not raw["hosts"]:
        raise _error(where, "hosts must be a non-empty list")
    hosts = [_node(where, h, "a host") for h in raw["hosts"]]
    for field in ("name", "ip", "mac"):
        _distinct(where, [switch, *hosts], field)
    for n in (switch, *hosts):
        if ipaddress.IPv4Address(n.ip) not in subnet:
            raise _error(where, f"{n.name}'s address {n.ip} is outside the subnet {subnet}")
    if not isinstance(raw["links"], list):
        raise _error(where, "links must be a list")
    names = {h.name: h for h in hosts}
    links: dict[str, Attachment] = {}
    on_port: dict[int, str] = {}
    for item in raw["links"]:
        a = _attachment(where, item, names)
        name = a.host.name
        if name in links:
            raise _error(where, f"{name} has two links (one switch port per host)")
        if a.port in on_port:
            raise _error(where, f"duplicate port {a.port}: {on_port[a.port]} and {name}")
        links[name], on_port[a.port] = a, name
    unlinked = [h.name for h in hosts if h.name not in links]
    if unlinked:
        raise _error(where, f"no link for host(s) {', '.join(unlinked)}")
    return Topology(
        name=Path(where).stem,
        switch=switch,
        subnet=subnet,
        links=tuple(links[h.name] for h in hosts),
        description=str(raw.get("description", "")),
    )


def _named(job: JobSpec) -> list[str]:
    return [*job.worker_hosts, *([job.ps_host] if job.ps_host else [])]


def assign(scenario: Scenario, topo: Topology) -> dict[int, tuple[list[Member], Member]]:
    """Each job's workers and PS on the topology's hosts (see the module's doc)."""
    known = {h.name for h in topo.hosts}
    taken: dict[str, int] = {}
    for job in scenario.jobs:
        for name in _named(job):
            if name not in known:
                raise ValueError(
                    f"job {job.job}: unknown host {name!r}: topology {topo.name} has "
                    f"{', '.join(h.name for h in topo.hosts)}"
                )
            if name in taken:
                raise ValueError(
                    f"job {job.job}: host {name} is already given to job {taken[name]} "
                    "(a host plays one part in one job)"
                )
            taken[name] = job.job
    free = [h.name for h in topo.hosts if h.name not in taken]
    need = sum(job.workers + 1 for job in scenario.jobs) - len(taken)
    if need > len(free):
        total = sum(job.workers + 1 for job in scenario.jobs)
        raise ValueError(
            f"the jobs need {total} hosts (workers and a PS each), topology {topo.name} "
            f"has {len(topo.hosts)}: use a larger topology or fewer jobs"
        )

    def member(host: str, role: str, index: int) -> Member:
        return Member(topo.host(host), role, index)

    out: dict[int, tuple[list[Member], Member]] = {}
    for job in scenario.jobs:
        hosts = list(job.worker_hosts) or [free.pop(0) for _ in range(job.workers)]
        workers = [member(h, f"j{job.job}w{i}", i) for i, h in enumerate(hosts)]
        ps = member(job.ps_host or free.pop(0), f"ps{job.job}", -1)
        out[job.job] = (workers, ps)
    return out
