"""Several switches in a tree, and where the hosts are: the fabric one
controller programs, with a P4Runtime session per device.

The file is JSON::

    {"description": "two racks under one spine",
     "subnet": "10.0.0.0/24",
     "pool_size": 1024,
     "switches": {"s1": {"device_id": 0, "p4runtime": "127.0.0.1:9559", "role": "spine",
                         "ip": "10.0.0.254", "mac": "02:00:00:00:00:fe"},
                  "t1": {"device_id": 1, "p4runtime": "127.0.0.1:9560", "role": "tor"}},
     "hosts": {"h1": {"switch": "t1", "port": 1, "mac": "02:00:00:00:00:01",
                      "ip": "10.0.0.1", "udp_port": 58784}},
     "links": [{"switch": "t1", "port": 5, "peer": "s1", "peer_port": 1}]}

``switches`` and ``hosts`` are required, the rest optional.  A switch has
its device id (0..2^64-1) and P4Runtime address (``HOST:PORT`` or
``unix:PATH``), optionally a ``role`` (``spine`` or ``tor``) and an address
of its own (``ip`` and ``mac``, both or neither: where a PS sends what it
completes, as the Mininet run's switch has).  A host is as in
``controller.world.topology`` plus the switch it hangs off.  A link joins
``switch``'s port ``port`` and ``peer``'s port ``peer_port``.

Checked, each failure one line: names are letters, digits, ``_.-`` (a host
and a switch never share one); device ids, P4Runtime addresses, MACs and
IPs are unique; ports are 1..510 (0 is the data plane's "no up port") and
each switch port holds one host or one link end; the links make the
switches a tree; addresses lie in ``subnet`` when it is given.  JSON keys
given twice are refused by ``load``.

The tree is rooted at the switch whose role is ``spine`` (at most one), else
at the first switch of the file.  A job's aggregation goes up the tree from
its workers and completes at the workers' lowest common ancestor, its *top*:
a job inside one rack completes at its ToR and never touches the spine.
Its PS hosts may be anywhere and do not move the top; a switch on the way
from the top to a PS but on no worker's way is a *transit* of the job: it
sums nothing and passes what is bound for the PS one way and what the PS
sends the other (docs/dataplane.md, "A device without a role").

The file of one switch, ``controller.world.topology``'s, reads as a fabric of that
one switch (``one_switch``, or ``load`` given a file without ``switches``).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.errors import InvalidRequest, NotFound
from controller.world.topology import Host, Topology, parse_host
from esa import wire
from esa.job import MAX_PS_SHARDS, valid_shards
from esa.strictjson import unique_keys

MIN_PORT = 1
MAX_PORT = 510
"""BMv2 ports are 9 bits and 511 is its drop port; 0 means "no up port"."""
MAX_DEVICE_ID = 2**64 - 1
ROLES = ("spine", "tor")

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_MAC = re.compile(r"^([0-9a-f]{2}:){5}[0-9a-f]{2}$")
_TOP_FIELDS = {"description", "subnet", "pool_size", "switches", "hosts", "links"}
_SWITCH_FIELDS = {"device_id", "p4runtime", "role", "ip", "mac"}
_LINK_FIELDS = {"switch", "port", "peer", "peer_port"}


def _error(msg: str) -> InvalidRequest:
    return InvalidRequest(f"fabric: {msg}")


@dataclass(frozen=True)
class Device:
    """One switch of the fabric."""

    name: str
    device_id: int
    p4runtime: str
    role: str | None = None
    ip: str | None = None
    mac: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"device_id": self.device_id, "p4runtime": self.p4runtime}
        optional = {"role": self.role, "ip": self.ip, "mac": self.mac}
        return out | {k: v for k, v in optional.items() if v is not None}


DEFAULT_DEVICE = Device("s1", 0, "127.0.0.1:9559")
"""The switch of a one-switch file: ``esa-ctl serve``'s defaults."""


@dataclass(frozen=True)
class Link:
    """``switch``'s port ``port`` is wired to ``peer``'s port ``peer_port``."""

    switch: str
    port: int
    peer: str
    peer_port: int

    def to_json(self) -> dict[str, Any]:
        return {
            "switch": self.switch,
            "port": self.port,
            "peer": self.peer,
            "peer_port": self.peer_port,
        }


@dataclass(frozen=True)
class JobRole:
    """What one switch does for one job.

    ``local`` maps the port of each worker on this switch to its bit,
    ``children`` the port of each child switch below which workers are to
    the bitmap of those workers: a child's partial sum arrives with it.
    """

    local: dict[int, int]
    children: dict[int, int]
    up_port: int | None
    """where a partial sum goes on; None where the job completes."""

    @property
    def fan_in(self) -> int:
        """Contributions that make a sum here: one per local worker and child."""
        return len(self.local) + len(self.children)

    @property
    def worker_mask(self) -> int:
        """The bits of the workers whose contributions pass through here."""
        mask = 0
        for bits in (*self.local.values(), *self.children.values()):
            mask |= bits
        return mask

    @property
    def local_ports(self) -> tuple[int, ...]:
        return tuple(sorted(self.local))

    @property
    def completes(self) -> bool:
        return self.up_port is None

    @property
    def transit(self) -> bool:
        """On the way to a PS only: no worker here or below, fan-in 0."""
        return not self.local and not self.children


@dataclass(frozen=True)
class _Up:
    """A switch's way to its parent: its own port, the parent, the parent's port."""

    port: int
    parent: str
    parent_port: int


@dataclass(frozen=True)
class Fabric:
    """Built by ``from_json``, ``load`` or ``one_switch``, which check every
    field; the checks across fields and the tree run on construction."""

    devices: dict[str, Device]
    """in the file's order; the first is the root unless a spine is named."""
    hosts: dict[str, Host]
    """each with its port on its own switch (``home``)."""
    homes: dict[str, str]
    """host name -> the switch it hangs off."""
    links: tuple[Link, ...] = ()
    pool_size: int | None = None
    subnet: ipaddress.IPv4Network | None = None
    description: str = ""
    _peers: dict[tuple[str, int], tuple[str, int]] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )
    _toward: dict[str, dict[str, int]] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )
    """target switch -> switch -> that switch's port toward the target."""
    _up: dict[str, _Up] = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._check()
        for link in self.links:
            self._peers[(link.switch, link.port)] = (link.peer, link.peer_port)
            self._peers[(link.peer, link.peer_port)] = (link.switch, link.port)
        for target in self.devices:
            self._toward[target] = {there: port for _, _, there, port in self._walk(target)}
        for here, port, there, there_port in self._walk(self.root):
            self._up[there] = _Up(there_port, here, port)

    # -- checks --

    def _check(self) -> None:
        if not self.devices:
            raise _error("no switches")
        for name in self.devices:
            if name in self.hosts:
                raise _error(f"'{name}' names both a switch and a host")
        for h in self.hosts.values():
            if self.homes.get(h.name) not in self.devices:
                raise _error(f"host '{h.name}': unknown switch {self.homes.get(h.name)!r}")
        if self.subnet is not None:
            addresses = [(d.name, d.ip) for d in self.devices.values() if d.ip is not None]
            for name, ip in addresses + [(h.name, h.ip) for h in self.hosts.values()]:
                if ipaddress.IPv4Address(ip) not in self.subnet:
                    raise _error(f"{name}'s address {ip} is outside the subnet {self.subnet}")
        self._unique()
        spines = [d.name for d in self.devices.values() if d.role == "spine"]
        if len(spines) > 1:
            raise _error(f"switches {', '.join(spines)} are all spines (one at most: the root)")
        self._check_ports()
        self._check_tree()

    def _unique(self) -> None:
        named: list[tuple[str, str, Any]] = []
        for d in self.devices.values():
            named += [
                (d.name, "device id", d.device_id),
                (d.name, "P4Runtime address", d.p4runtime),
            ]
            if d.ip is not None:
                named += [(d.name, "ip", d.ip), (d.name, "mac", d.mac)]
        for h in self.hosts.values():
            named += [(h.name, "ip", h.ip), (h.name, "mac", h.mac)]
        seen: dict[tuple[str, Any], str] = {}
        for name, what, value in named:
            if (what, value) in seen:
                raise _error(f"'{seen[what, value]}' and '{name}' share {what} {value}")
            seen[what, value] = name

    def _check_ports(self) -> None:
        used: dict[tuple[str, int], str] = {}

        def claim(switch: str, port: int, what: str) -> None:
            if (switch, port) in used:
                raise _error(f"port {switch}:{port} holds both {used[switch, port]} and {what}")
            used[switch, port] = what

        for h in self.hosts.values():
            claim(self.homes[h.name], h.port, f"host '{h.name}'")
        for link in self.links:
            for name in (link.switch, link.peer):
                if name not in self.devices:
                    raise _error(f"a link names the unknown switch {name!r}")
            if link.switch == link.peer:
                raise _error(f"link {_ends(link)} joins a switch to itself")
            claim(link.switch, link.port, f"the link to {link.peer}:{link.peer_port}")
            claim(link.peer, link.peer_port, f"the link to {link.switch}:{link.port}")

    def _check_tree(self) -> None:
        group = {name: name for name in self.devices}

        def find(name: str) -> str:
            while group[name] != name:
                name = group[name]
            return name

        for link in self.links:
            a, b = find(link.switch), find(link.peer)
            if a == b:
                raise _error(f"link {_ends(link)} closes a cycle (the switches must form a tree)")
            group[a] = b
        first = next(iter(self.devices))
        for name in self.devices:
            if find(name) != find(first):
                raise _error(
                    f"switch {name} is not linked to {first} (the switches must form a tree)"
                )

    # -- the tree --

    def _walk(self, start: str) -> list[tuple[str, int, str, int]]:
        """The links in breadth-first order from ``start``, each oriented
        away from it: (near switch, its port, far switch, its port)."""
        out = []
        seen = {start}
        queue = [start]
        while queue:
            here = queue.pop(0)
            for (switch, port), (there, there_port) in self._peers.items():
                if switch == here and there not in seen:
                    seen.add(there)
                    queue.append(there)
                    out.append((here, port, there, there_port))
        return out

    @property
    def root(self) -> str:
        spine = [d.name for d in self.devices.values() if d.role == "spine"]
        return spine[0] if spine else next(iter(self.devices))

    def device(self, switch: str) -> Device:
        if switch not in self.devices:
            known = ", ".join(self.devices)
            raise NotFound(f"fabric: unknown switch {switch!r} (known switches: {known})")
        return self.devices[switch]

    def home(self, host: str) -> str:
        """The switch ``host`` hangs off."""
        if host not in self.hosts:
            known = ", ".join(self.hosts) or "none"
            raise NotFound(f"fabric: unknown host {host!r} (known hosts: {known})")
        return self.homes[host]

    def peer(self, switch: str, port: int) -> tuple[str, int] | None:
        """The switch and port at the other end of ``switch:port``'s link, if a link is there."""
        return self._peers.get((switch, port))

    def uplink(self, switch: str) -> int | None:
        """``switch``'s port toward the root; None at the root."""
        self.device(switch)
        up = self._up.get(switch)
        return None if up is None else up.port

    def port_toward(self, switch: str, host: str) -> int:
        """The port ``switch`` sends a frame for ``host`` out of."""
        self.device(switch)
        home = self.home(host)
        return self.hosts[host].port if home == switch else self._toward[home][switch]

    def hosts_as_seen_by(self, switch: str) -> list[Host]:
        """Every host, on the port ``switch`` reaches it through: what the
        one-switch planning of L2 entries, PS routes and replicas takes."""
        return [
            Host(h.name, self.port_toward(switch, h.name), h.mac, h.ip, h.udp_port)
            for h in self.hosts.values()
        ]

    def topology_of(self, switch: str) -> Topology:
        """The fabric as the controller of ``switch`` alone would load it."""
        return Topology({h.name: h for h in self.hosts_as_seen_by(switch)}, self.pool_size)

    def _to_root(self, switch: str) -> list[str]:
        path = [switch]
        while path[-1] in self._up:
            path.append(self._up[path[-1]].parent)
        return path

    def job_roles(self, workers: Sequence[str], ps: Sequence[str]) -> dict[str, JobRole]:
        """Each switch's role in a job whose worker ``i`` owns bit ``i``: the
        switches on the workers' ways up to their top aggregate; every other
        switch on the way from the top to a PS host is a transit (``JobRole.transit``)."""
        _check_job(self, workers, ps)
        paths = [self._to_root(self.home(w)) for w in workers]
        common = set(paths[0]).intersection(*paths[1:])
        top = next(s for s in paths[0] if s in common)
        local: dict[str, dict[int, int]] = {}
        children: dict[str, dict[int, int]] = {}
        for bit, (worker, path) in enumerate(zip(workers, paths, strict=True)):
            local.setdefault(path[0], {})[self.hosts[worker].port] = 1 << bit
            for below in path[: path.index(top)]:
                up = self._up[below]
                child = children.setdefault(up.parent, {})
                child[up.parent_port] = child.get(up.parent_port, 0) | 1 << bit
        on_path = {s for path in paths for s in path[: path.index(top) + 1]}
        roles = {
            s: JobRole(local.get(s, {}), children.get(s, {}), self._toward[top].get(s))
            for s in on_path
        }
        for host in ps:
            for s in self._way(self.home(host), top):
                roles.setdefault(s, JobRole({}, {}, self._toward[top][s]))
        return {s: roles[s] for s in self.devices if s in roles}

    def top(self, workers: Sequence[str], ps: Sequence[str]) -> str:
        """The switch where a job's sums complete."""
        return next(s for s, r in self.job_roles(workers, ps).items() if r.completes)

    def _way(self, start: str, end: str) -> list[str]:
        """The switches from ``start`` to ``end``, ``end`` not included."""
        out = []
        while start != end:
            out.append(start)
            start = self._peers[(start, self._toward[end][start])][0]
        return out

    # -- JSON --

    @classmethod
    def from_json(cls, data: Any) -> Fabric:
        if not isinstance(data, dict):
            raise _error("expected an object with switches, hosts and links")
        unknown = set(data) - _TOP_FIELDS
        if unknown:
            raise _error(f"unknown field(s) {', '.join(sorted(unknown))}")
        switches, hosts = data.get("switches"), data.get("hosts")
        if not isinstance(switches, dict):
            raise _error('expected "switches": {name: {device_id, p4runtime, ...}}')
        if not isinstance(hosts, dict):
            raise _error('expected "hosts": {name: {switch, port, mac, ip}}')
        links = data.get("links", [])
        if not isinstance(links, list):
            raise _error('expected "links": [{switch, port, peer, peer_port}, ...]')
        parsed = [_host(name, raw) for name, raw in hosts.items()]
        description = data.get("description", "")
        if not isinstance(description, str):
            raise _error("description must be a string")
        return cls(
            devices={name: _device(name, raw) for name, raw in switches.items()},
            hosts={h.name: h for h, _ in parsed},
            homes={h.name: home for h, home in parsed},
            links=tuple(_link(i, raw) for i, raw in enumerate(links)),
            pool_size=_pool_size(data.get("pool_size")),
            subnet=_subnet(data.get("subnet")),
            description=description,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.description:
            out["description"] = self.description
        if self.subnet is not None:
            out["subnet"] = str(self.subnet)
        if self.pool_size is not None:
            out["pool_size"] = self.pool_size
        out["switches"] = {n: d.to_json() for n, d in self.devices.items()}
        out["hosts"] = {n: {"switch": self.homes[n], **h.to_json()} for n, h in self.hosts.items()}
        out["links"] = [link.to_json() for link in self.links]
        return out

    @classmethod
    def load(cls, path: Path, single: Device = DEFAULT_DEVICE) -> Fabric:
        """A fabric file, or a one-switch topology file as a fabric of ``single``."""
        try:
            data = json.loads(path.read_bytes(), object_pairs_hook=unique_keys)
        except OSError as e:
            raise _error(f"cannot read {path}: {e.strerror}") from None
        except ValueError as e:
            raise _error(f"{path} is not valid JSON: {e}") from None
        if isinstance(data, dict) and "switches" not in data:
            return one_switch(Topology.from_json(data), single)
        return cls.from_json(data)


def one_switch(topology: Topology, device: Device = DEFAULT_DEVICE) -> Fabric:
    """A one-switch topology as a fabric of that switch, checked as any fabric."""
    hosts = {n: {"switch": device.name, **h.to_json()} for n, h in topology.hosts.items()}
    switches = {device.name: device.to_json()}
    return Fabric.from_json({"pool_size": topology.pool_size, "switches": switches, "hosts": hosts})


def _ends(link: Link) -> str:
    return f"{link.switch}:{link.port} - {link.peer}:{link.peer_port}"


def _name(name: str, what: str) -> None:
    if not _NAME.match(name):
        raise _error(f"{what} name {name!r} is not 1..64 letters, digits, '_', '.', '-'")


def _port(where: str, port: Any) -> int:
    if not isinstance(port, int) or isinstance(port, bool) or not MIN_PORT <= port <= MAX_PORT:
        raise _error(f"{where}: port {port!r} is not a switch port ({MIN_PORT}..{MAX_PORT})")
    return port


def _address(name: str, addr: Any) -> str:
    ok = False
    if isinstance(addr, str) and addr.startswith("unix:"):
        ok = len(addr) > len("unix:")
    elif isinstance(addr, str) and ":" in addr:
        host, port = addr.rsplit(":", 1)
        ok = bool(host) and port.isdigit() and 0 < int(port) < 65536
    if not ok:
        raise _error(f"switch {name}: p4runtime {addr!r} is not HOST:PORT or unix:PATH")
    return str(addr)


def _device(name: str, raw: Any) -> Device:
    _name(name, "switch")
    if not isinstance(raw, dict) or not {"device_id", "p4runtime"} <= set(raw):
        raise _error(f"switch {name}: expected an object with device_id and p4runtime")
    unknown = set(raw) - _SWITCH_FIELDS
    if unknown:
        raise _error(f"switch {name}: unknown field(s) {', '.join(sorted(unknown))}")
    device_id = raw["device_id"]
    if not isinstance(device_id, int) or isinstance(device_id, bool):
        raise _error(f"switch {name}: device_id {device_id!r} is not an integer")
    if not 0 <= device_id <= MAX_DEVICE_ID:
        raise _error(f"switch {name}: device_id {device_id} is out of range (0..2^64-1)")
    role = raw.get("role")
    if role is not None and role not in ROLES:
        raise _error(f"switch {name}: role {role!r} is not one of {', '.join(ROLES)}")
    ip, mac = raw.get("ip"), raw.get("mac")
    if (ip is None) != (mac is None):
        raise _error(f"switch {name}: give both ip and mac, or neither")
    if ip is not None:
        try:
            ipaddress.IPv4Address(ip)
        except ValueError:
            raise _error(f"switch {name}: {ip!r} is not an IPv4 address") from None
        if not isinstance(mac, str) or not _MAC.match(mac.lower()):
            raise _error(f"switch {name}: {mac!r} is not a MAC address")
        mac = mac.lower()
    return Device(name, device_id, _address(name, raw["p4runtime"]), role, ip, mac)


def _host(name: str, raw: Any) -> tuple[Host, str]:
    _name(name, "host")
    if not isinstance(raw, dict) or not isinstance(raw.get("switch"), str):
        raise _error(f"host '{name}': expected an object with switch (a name), port, mac, ip")
    if "port" in raw:
        _port(f"host '{name}'", raw["port"])
    try:
        host = parse_host(name, {k: v for k, v in raw.items() if k != "switch"})
    except InvalidRequest as e:
        raise _error(str(e)) from None
    return host, raw["switch"]


def _link(index: int, raw: Any) -> Link:
    if not isinstance(raw, dict) or set(raw) != _LINK_FIELDS:
        raise _error(f"links[{index}]: expected exactly switch, port, peer, peer_port")
    for key in ("switch", "peer"):
        if not isinstance(raw[key], str):
            raise _error(f"links[{index}]: {key} {raw[key]!r} is not a switch name")
    where = f"link of {raw['switch']} and {raw['peer']}"
    return Link(
        raw["switch"], _port(where, raw["port"]), raw["peer"], _port(where, raw["peer_port"])
    )


def _pool_size(pool: Any) -> int | None:
    if pool is not None and (not isinstance(pool, int) or isinstance(pool, bool) or pool < 1):
        raise _error(f"pool_size {pool!r} must be a positive integer")
    return pool


def _subnet(raw: Any) -> ipaddress.IPv4Network | None:
    if raw is None:
        return None
    try:
        return ipaddress.IPv4Network(raw)
    except (ValueError, TypeError):
        raise _error(f"subnet {raw!r} is not an IPv4 network") from None


def _check_job(fabric: Fabric, workers: Sequence[str], ps: Sequence[str]) -> None:
    if not 1 <= len(workers) <= wire.MAX_WORKERS:
        raise InvalidRequest(f"a job has 1..{wire.MAX_WORKERS} workers, not {len(workers)}")
    if not valid_shards(len(ps)):
        raise InvalidRequest(f"a job has 1, 2, 4 .. {MAX_PS_SHARDS} PS hosts, not {len(ps)}")
    for name in (*workers, *ps):
        fabric.home(name)
    for what, names in (("worker", workers), ("PS", ps)):
        if len(set(names)) != len(names):
            raise InvalidRequest(f"a {what} host is given twice: {', '.join(names)}")
    both = sorted(set(workers) & set(ps))
    if both:
        raise InvalidRequest(f"host(s) {', '.join(both)} given as both worker and PS")
