"""Where hosts are: the topology file the controller loads.

The file is JSON::

    {"pool_size": 1024,
     "hosts": {"h1": {"port": 1, "mac": "02:00:00:00:00:01",
                      "ip": "10.0.0.1", "udp_port": 58784}}}

``udp_port`` is optional (default ``esa.wire.UDP_PORT``); ``pool_size`` is
optional when the controller is given the BMv2 JSON, which states it.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.errors import InvalidRequest, NotFound
from esa import wire

MAX_PORT = 510
"""BMv2 ports are 9 bits and 511 is its drop port."""

_MAC = re.compile(r"^([0-9a-f]{2}:){5}[0-9a-f]{2}$")


@dataclass(frozen=True)
class Host:
    name: str
    port: int
    mac: str
    ip: str
    udp_port: int = wire.UDP_PORT

    def to_json(self) -> dict[str, Any]:
        return {"port": self.port, "mac": self.mac, "ip": self.ip, "udp_port": self.udp_port}


def mac_to_int(mac: str) -> int:
    return int(mac.replace(":", ""), 16)


def int_to_mac(value: int) -> str:
    raw = f"{value:012x}"
    return ":".join(raw[i : i + 2] for i in range(0, 12, 2))


def ip_to_int(ip: str) -> int:
    return int(ipaddress.IPv4Address(ip))


def int_to_ip(value: int) -> str:
    return str(ipaddress.IPv4Address(value))


def parse_host(name: str, raw: Any) -> Host:
    """One host entry, checked field by field."""
    if not isinstance(raw, dict):
        raise InvalidRequest(f"host '{name}': expected an object with port, mac, ip")
    unknown = set(raw) - {"port", "mac", "ip", "udp_port"}
    if unknown:
        raise InvalidRequest(f"host '{name}': unknown field(s) {', '.join(sorted(unknown))}")
    try:
        port, mac, ip = raw["port"], raw["mac"], raw["ip"]
    except KeyError as e:
        raise InvalidRequest(f"host '{name}': missing field {e.args[0]!r}") from None
    udp_port = raw.get("udp_port", wire.UDP_PORT)
    if not isinstance(port, int) or not 0 <= port <= MAX_PORT:
        raise InvalidRequest(f"host '{name}': port {port!r} is not a switch port (0..{MAX_PORT})")
    if not isinstance(mac, str) or not _MAC.match(mac.lower()):
        raise InvalidRequest(f"host '{name}': {mac!r} is not a MAC address")
    try:
        ipaddress.IPv4Address(ip)
    except ValueError:
        raise InvalidRequest(f"host '{name}': {ip!r} is not an IPv4 address") from None
    if not isinstance(udp_port, int) or not 0 < udp_port < 65536:
        raise InvalidRequest(f"host '{name}': udp_port {udp_port!r} is out of range")
    return Host(name, port, mac.lower(), ip, udp_port)


@dataclass(frozen=True)
class Topology:
    hosts: dict[str, Host]
    pool_size: int | None = None

    @classmethod
    def from_json(cls, data: Any) -> Topology:
        if not isinstance(data, dict) or not isinstance(data.get("hosts"), dict):
            raise InvalidRequest('topology: expected {"hosts": {name: {...}}, "pool_size": n}')
        hosts = {name: parse_host(name, raw) for name, raw in data["hosts"].items()}
        for field in ("mac", "ip"):
            seen: dict[str, str] = {}
            for h in hosts.values():
                value = getattr(h, field)
                if value in seen:
                    raise InvalidRequest(
                        f"topology: hosts '{seen[value]}' and '{h.name}' share {field} {value}"
                    )
                seen[value] = h.name
        pool = data.get("pool_size")
        if pool is not None and (not isinstance(pool, int) or pool < 1):
            raise InvalidRequest(f"topology: pool_size {pool!r} must be a positive integer")
        return cls(hosts, pool)

    @classmethod
    def load(cls, path: Path) -> Topology:
        try:
            data = json.loads(path.read_bytes())
        except OSError as e:
            raise InvalidRequest(f"topology: cannot read {path}: {e.strerror}") from None
        except ValueError as e:
            raise InvalidRequest(f"topology: {path} is not valid JSON: {e}") from None
        return cls.from_json(data)

    def to_json(self) -> dict[str, Any]:
        return {
            "pool_size": self.pool_size,
            "hosts": {n: h.to_json() for n, h in sorted(self.hosts.items())},
        }

    def resolve(self, ref: str) -> Host:
        """A host by name, IPv4 address, MAC address or ``port:N``."""
        if ref in self.hosts:
            return self.hosts[ref]
        if ref.startswith("port:"):
            try:
                port = int(ref[5:])
            except ValueError:
                raise InvalidRequest(f"{ref!r}: expected port:N with a number N") from None
            found = [h for h in self.hosts.values() if h.port == port]
            if not found:
                raise NotFound(f"unknown port {port}: no host of the topology is on it")
            if len(found) > 1:
                names = ", ".join(sorted(h.name for h in found))
                raise InvalidRequest(f"port {port} has several hosts ({names}): name one")
            return found[0]
        for h in self.hosts.values():
            if ref in (h.ip, h.mac) or ref.lower() == h.mac:
                return h
        known = ", ".join(sorted(self.hosts)) or "none"
        raise NotFound(f"unknown host {ref!r}: not in the topology (known hosts: {known})")
