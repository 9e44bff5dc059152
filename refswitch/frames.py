"""One frame through the reference switch: what p4src/esa.p4 does to it,
with ``esa.model`` in place of the slot pool.

``esa.model`` decides every ESA packet (verdict, counters, the packet that
leaves); this module does what p4src does around it, byte for byte as BMv2
emits it:

* parse as ``parser.p4``: Ethernet, IPv4 only with ihl 5 and no fragment
  offset, UDP, and ESA only on UDP port ``wire.UDP_PORT``; anything else is
  plain L2; a frame cut short inside a header the parser reaches (the
  parser's error) is dropped and counted (rule A0, ``Drop.MALFORMED``);
* ``forwarding.p4``: the ``l2`` table for non-ESA frames (unicast or a flood
  group); for ESA packets the UDP checksum is zeroed, a PS-bound packet gets
  the ``ps_route`` entry of the chunk *in its header* (its job exact, the low
  bits of its seq ternary, the highest priority of those that match; after
  a preemption, the evicted chunk's), a RESULT to all takes the PS's address
  as its source and the group of that entry, a PULL or PS result the
  arriving job's "workers" group;
* ``replicas.p4``: each multicast copy with a rid is rewritten to the
  ``replicas`` entry of that rid (MAC, IP, UDP port, and for a PS's entry
  the address of the switch where the job's sums complete as the source);
  a non-ESA copy never leaves by the port it came in on;
* the IPv4 checksum is recomputed only where an address changed.

Where BMv2 would set ``mcast_grp`` 0 it sends to ``egress_spec``, which
nothing set: port 0.  A packet whose slot index lies outside
the pool (a job entry whose partition reaches beyond it, where BMv2 leaves
the fields it reads unchanged) is dropped.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from esa import wire
from esa.jobrow import JobEntry
from esa.model import JobConfig, Out, Output, Packet, SwitchModel, route_key
from esa.p4names import (
    CHILDREN_TABLE,
    FLOOD,
    JOBS_TABLE,
    L2_TABLE,
    POLICY_TABLE,
    PS_TABLE,
    REPLICAS_TABLE,
    SET_DST,
    SET_DST_FROM_SWITCH,
)
from esa.spec import PS_SHARD_BITS, Drop, Policy
from esa.wire import PacketType
from refswitch.tables import ActionCall, Key, Replicas, Tables

ESA_AT = 14 + 20 + 8
"""Offset of the ESA header: Ethernet, IPv4 without options, UDP."""
VALUES_AT = ESA_AT + wire.HEADER_BYTES
ESA_END = VALUES_AT + wire.VALUES_BYTES
ESA_PORT = wire.UDP_PORT.to_bytes(2, "big")
HEADER = struct.Struct(wire.struct_format())
VALUES = struct.Struct(f"!{wire.K}i")
IP_WORDS = struct.Struct("!10H")
U16 = struct.Struct("!H")
PTYPES = {int(p): p for p in PacketType}

Frames = list[tuple[int, bytes]]
"""Frames leaving the switch, each with its egress port."""


def ipv4_checksum(buf: bytearray) -> None:
    """Recompute the checksum of the 20-byte IPv4 header at offset 14."""
    U16.pack_into(buf, 24, 0)
    total = sum(IP_WORDS.unpack_from(buf, 14))
    total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    U16.pack_into(buf, 24, ~total & 0xFFFF)


def _udp(frame: bytes) -> bool:
    """The parser goes on from IPv4 to UDP (a complete IPv4 header)."""
    return frame[14] & 0x0F == 5 and frame[20] & 0x1F == 0 and frame[21] == 0 and frame[23] == 17


def parse_error(frame: bytes) -> bool:
    """The frame ends inside a header the parser extracts
    (``standard_metadata.parser_error`` is set)."""
    if len(frame) < 14:
        return True
    if frame[12:14] != b"\x08\x00":
        return False
    if len(frame) < 34:
        return True
    if not _udp(frame):
        return False
    if len(frame) < ESA_AT:
        return True
    return frame[36:38] == ESA_PORT and len(frame) < ESA_END


def is_esa(frame: bytes) -> bool:
    """The parser reaches the ESA header (``hdr.esa.isValid()``) of a frame
    without a parser error."""
    return frame[12:14] == b"\x08\x00" and _udp(frame) and frame[36:38] == ESA_PORT


@dataclass(frozen=True)
class Config:
    """The tables and groups as the frame path reads them: where a rule
    writes bytes into the frame, the entry holds those bytes."""

    l2: Mapping[bytes, tuple[int, int]] = field(default_factory=dict)
    """destination MAC -> (egress port, multicast group); group 0: unicast."""
    mgid_workers: Mapping[int, int] = field(default_factory=dict)
    """job -> its "workers" group."""
    up_ports: Mapping[int, int] = field(default_factory=dict)
    """job -> its up port (0: the job completes here)."""
    ps_routes: Mapping[tuple[int, int], Route] = field(default_factory=dict)
    """``esa.model.route_key`` -> the ``ps_route`` entry that matches, for
    every value of the bits it matches."""
    replicas: Mapping[int, tuple[bytes, bytes, bytes, bytes | None]] = field(default_factory=dict)
    """rid -> MAC, IP, UDP port, and the source IP of ``set_dst_from_switch``
    (None: ``set_dst`` leaves the source as it is)."""
    groups: Mapping[int, Replicas] = field(default_factory=dict)


@dataclass(frozen=True)
class Route:
    """One ``set_ps``: the PS's port, MAC and IP, the "all" group, and the
    source IP of a sum sent to the PS alone (None: the source stays)."""

    port: int
    mac: bytes
    ip: bytes
    mgid_all: int
    switch_ip: bytes | None


def _b(value: int, size: int) -> bytes:
    return value.to_bytes(size, "big")


def _routes(rows: Mapping[Key, ActionCall]) -> dict[tuple[int, int], Route]:
    """The ``ps_route`` entries by the chunks they route (highest priority first)."""
    out = {}
    best: dict[tuple[int, int], int] = {}
    for (job, value, mask, priority), c in rows.items():
        for low in range(1 << PS_SHARD_BITS):
            key = route_key(job, low)
            if low & mask == value and priority > best.get(key, 0):
                best[key] = priority
                a = c.args
                source = _b(a["switch_ip"], 4) if a["switch_ip"] else None
                out[key] = Route(a["port"], _b(a["mac"], 6), _b(a["ip"], 4), a["mgid_all"], source)
    return out


def _config(tables: Tables) -> tuple[Config, dict[int, JobConfig]]:
    e = tables.entries
    l2 = {
        _b(k[0], 6): (0, c.args["mgid"]) if c.action == FLOOD else (c.args["port"], 0)
        for k, c in e[L2_TABLE].items()
    }
    children: dict[int, list[tuple[int, int]]] = {}
    for (job, port), c in e[CHILDREN_TABLE].items():
        children.setdefault(job, []).append((port, c.args["bitmap"]))
    rows = {k[0]: JobEntry.from_args(c.args) for k, c in e[JOBS_TABLE].items()}
    jobs = {
        job: JobConfig.from_entry(row, tuple(sorted(children.get(job, ()))))
        for job, row in rows.items()
    }
    mgid_workers = {job: row.mgid_workers for job, row in rows.items()}
    replicas = {
        k[0]: (
            _b(c.args["mac"], 6),
            _b(c.args["ip"], 4),
            _b(c.args["udp_port"], 2),
            _b(c.args["switch_ip"], 4) if c.action == SET_DST_FROM_SWITCH else None,
        )
        for k, c in e[REPLICAS_TABLE].items()
        if c.action in (SET_DST, SET_DST_FROM_SWITCH)
    }
    up_ports = {job: row.up_port for job, row in rows.items()}
    routes = _routes(e[PS_TABLE])
    config = Config(l2, mgid_workers, up_ports, routes, replicas, dict(tables.groups))
    return config, jobs


class Pipeline:
    """The program with its state: the slot pool and counters (``model``)
    and the tables.  ``lock`` guards both; ``process`` takes it per frame."""

    def __init__(self, pool_size: int) -> None:
        self.model = SwitchModel(pool_size=pool_size)
        self.config = Config()
        self.lock = threading.Lock()

    def load(self, tables: Tables) -> None:
        """Follow the tables after a write."""
        config, jobs = _config(tables)
        policy = tables.defaults[POLICY_TABLE].args
        with self.lock:
            self.config = config
            self.model.jobs = jobs
            self.model.ps_routes = set(config.ps_routes)
            self.model.policy = Policy(policy["policy"])
            self.model.stale_us = policy["stale_us"]
            self.model.squat_us = policy["squat_us"]

    def process(self, in_port: int, frame: bytes, now_us: int) -> Frames:
        """The frames that leave for one frame arriving on ``in_port`` at
        ``now_us`` (switch microseconds)."""
        if parse_error(frame):
            with self.lock:
                self.model.drops[Drop.MALFORMED] += 1
            return []
        if not is_esa(frame):
            return self._l2(in_port, frame)
        return self._esa(in_port, frame, now_us)

    def _l2(self, in_port: int, frame: bytes) -> Frames:
        config = self.config
        entry = config.l2.get(frame[0:6])
        if entry is None:
            return []  # l2_drop
        return [(p, frame) for p, _ in _copies(config, *entry) if p != in_port]

    def _esa(self, in_port: int, frame: bytes, now_us: int) -> Frames:
        ptype, flags, job, seq, bitmap, count = HEADER.unpack_from(frame, ESA_AT)
        values = VALUES.unpack_from(frame, VALUES_AT)
        with self.lock:
            known = PTYPES.get(ptype)
            if known is None:
                # A1 for a code that is no PacketType, which a model Packet can not hold
                self.model.drops[Drop.BAD_TYPE] += 1
                return []
            pkt = Packet(known, job, seq, bitmap, values, flags, count)
            try:
                outputs = self.model.process(pkt, now_us, in_port).outputs
            except IndexError:
                return []
            config = self.config
        out: Frames = []
        for o in outputs:
            out += _emit(config, frame, pkt, o, in_port)
        return out


def _copies(config: Config, egress_spec: int, mcast_grp: int) -> Replicas:
    """Where BMv2 sends a packet: every replica of the group, or one unicast copy."""
    if mcast_grp:
        return config.groups.get(mcast_grp, ())
    return ((egress_spec, 0),)


def _emit(config: Config, frame: bytes, arrived: Packet, o: Output, in_port: int) -> Frames:
    """The copies of one model output, as forwarding.p4 and replicas.p4 write
    them: a PS result or pull never goes back out of the port it came in on."""
    p = o.packet
    buf = bytearray(frame)
    HEADER.pack_into(buf, ESA_AT, p.ptype, p.flags, p.job, p.seq, p.bitmap, p.count)
    if p.values is not arrived.values:
        VALUES.pack_into(buf, VALUES_AT, *p.values)
    buf[40:42] = b"\x00\x00"
    rewritten = False
    if o.to is Out.PS:
        route = config.ps_routes[route_key(p.job, p.seq)]
        buf[0:6], buf[30:34] = route.mac, route.ip
        if p.ptype is PacketType.RESULT and route.switch_ip is not None:
            buf[26:30] = route.switch_ip  # a held sum comes from the switch
        egress_spec, mcast_grp, rewritten = route.port, 0, True
    elif o.to is Out.ALL:
        buf[26:30] = buf[30:34]  # results come from the PS's address
        mgid_all = config.ps_routes[route_key(p.job, p.seq)].mgid_all
        egress_spec, mcast_grp, rewritten = 0, mgid_all, True
    elif o.to is Out.UP:
        egress_spec, mcast_grp = config.up_ports[arrived.job], 0
    else:
        egress_spec, mcast_grp = 0, config.mgid_workers[arrived.job]
    spread = p.ptype in (PacketType.PS_RESULT, PacketType.PULL)
    out: Frames = []
    for port, rid in _copies(config, egress_spec, mcast_grp):
        if spread and port == in_port:
            continue
        copy = buf
        replica = config.replicas.get(rid) if rid else None
        if replica is not None:
            copy = bytearray(buf)
            copy[0:6], copy[30:34], copy[36:38], source = replica
            if source is not None:
                copy[26:30] = source
        if rewritten or replica is not None:
            if copy is buf:
                copy = bytearray(buf)
            ipv4_checksum(copy)
        out.append((port, bytes(copy)))
    return out
