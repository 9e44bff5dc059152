"""Differential test of the two-tier fabric: random traces through three BMv2
switches (two ToRs under a spine, testbed/bmv2_fabric.py, programmed by the
controller) and through ``testbed.fabric_model`` configured from the entries
read back from each switch; every frame that crosses a link, every frame a
host receives and every device's counters must be the same.

t1 holds h1-h6 and t2 h7-h12 on ports 1-6, each up by port 7 to the spine
s1 (ports 1 and 2), which holds the PS hosts h13 and h14 on ports 3 and 4.
Four jobs share each device's small pool: LOW and HIGH span the racks (each
with one worker alone on one ToR, S0 there, and HIGH on two PS shards),
LOCAL completes at t1 and BULK at t2; HIGH outranks LOCAL outranks LOW
outranks BULK, so chunks preempt each other on the ToRs and on the spine.

Pacing: a cascade (one frame a host sends and all it causes) must be over
on every device before the next frame enters, or BMv2 would take frames of
different ports in another order than the model.  Each arrival the model
predicts is awaited where it enters its device (the frames a switch sends
up or down a link are read off the link's far end) and followed by an L2
probe injected into the same port; a device takes each port's frames in
order, so once the probe comes out at a host of that device, the arrival
has been processed.  Under that pacing a host receives the frames of one
cascade in causal order (``testbed.fabric_model``), so each host's frames are
compared as an exact sequence.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from scapy.layers.l2 import Ether

from controller.api.messages import AdmitRequest, JobRef, PolicyRequest
from controller.device.switch import Switch
from controller.world.fabric import Fabric
from controller.world.topology import ip_to_int, mac_to_int
from esa import spec, wire
from esa.job import ps_shard
from esa.model import INT32_MAX, Packet
from esa.p4names import register
from esa.spec import Event, Policy
from esa.toolchain import compile_p4
from esa.wire import Flag, PacketType
from runner.paths import ROOT
from testbed.bmv2_fabric import Bmv2Fabric
from testbed.fabric_model import Addr, FabricModel, Frame
from tests.dataplane import counter_arrays, frame, parse
from tests.test_controller_fabric_bmv2 import fabric_controller
from tests.wait import LIMIT_S

pytestmark = pytest.mark.bmv2

POOL = 8
LONG_US = 10_000_000
PROBE = 0x88B6
SENT_TO = mac_to_int("02:00:00:00:00:ff")
"""The destination MAC of every frame a host sends (``tests.dataplane.frame``)."""


def _host(n: int, switch: str, port: int) -> dict[str, object]:
    return {"switch": switch, "port": port, "mac": f"02:00:00:00:00:{n:02x}", "ip": f"10.0.0.{n}"}


def two_tier() -> Fabric:
    hosts = {f"h{n}": _host(n, "t1", n) for n in range(1, 7)}
    hosts |= {f"h{n}": _host(n, "t2", n - 6) for n in range(7, 13)}
    hosts |= {"h13": _host(13, "s1", 3), "h14": _host(14, "s1", 4)}
    switches = {
        name: {"device_id": i, "p4runtime": f"127.0.0.1:{9559 + i}"}
        for i, name in enumerate(("s1", "t1", "t2"))
    }
    switches["s1"]["role"] = "spine"
    links = [
        {"switch": "t1", "port": 7, "peer": "s1", "peer_port": 1},
        {"switch": "t2", "port": 7, "peer": "s1", "peer_port": 2},
    ]
    return Fabric.from_json({"switches": switches, "hosts": hosts, "links": links})


JOBS = {
    1: (("h1", "h7", "h8"), ("h13",), 2),  # LOW: alone on t1
    2: (("h2", "h3", "h9"), ("h13", "h14"), 9),  # HIGH: alone on t2, two shards
    3: (("h4", "h5"), ("h6",), 5),  # LOCAL: completes at t1
    4: (("h10", "h11"), ("h12",), 1),  # BULK: completes at t2
}
"""job -> workers, PS hosts, priority."""


def ps_of(job: int, seq: int) -> str:
    ps = JOBS[job][1]
    return ps[ps_shard(seq, len(ps))]


Seen = tuple[Packet, int, int, int]
"""An ESA frame as compared: the packet and its destination MAC, IP, UDP port."""


def seen(data: bytes) -> Seen | None:
    s = parse(0, data)
    return None if s is None else (s.packet, mac_to_int(s.mac), ip_to_int(s.ip), s.udp_port)


def as_seen(f: Frame) -> Seen:
    return (f.packet, f.dst.mac, f.dst.ip, f.dst.udp_port)


class Tiered:
    """The BMv2 fabric, its controller and the fabric model, paced as the
    module says."""

    def __init__(self, rig: Bmv2Fabric, program: tuple[Path, Path], tmp: Path) -> None:
        self.rig = rig
        self.fabric = rig.fabric
        self.ctl = fabric_controller(rig, program, tmp, POOL)
        self.model = FabricModel(self.fabric, POOL)
        self.probes = 0
        self.base: dict[str, tuple[list[int], list[int]]] = {}
        self.pending: dict[str, list[bytes]] = {}
        self.links: list[tuple[str, int, Seen | None]] = []
        self.want_links: list[tuple[str, int, Seen]] = []
        self.want_hosts: dict[str, list[Seen]] = {}

    def start(self, policy: Policy) -> None:
        """Every job admitted afresh under ``policy``, slots empty, the model
        programmed from what each switch holds, counters from zero."""
        for job in list(self.ctl.state.jobs):
            self.ctl.remove(JobRef(job))
        # ESA: one home per switch, the whole pool, for the highest-ranked job
        # there; the others hash into it and preempt by priority
        part = POOL if policy is Policy.ESA else 0
        self.ctl.policy(PolicyRequest(policy.name.lower(), LONG_US, LONG_US, part))
        for job, (workers, ps, prio) in JOBS.items():
            self.ctl.admit(AdmitRequest(job=job, workers=workers, ps=ps, priority=prio))
        resets = "\n".join(f"register_reset {register(r.name)}" for r in spec.SLOT_REGISTERS)
        self.model = FabricModel(self.fabric, POOL)
        for name in self.fabric.devices:
            self.rig.cli(name, resets)
            self.model.program(name, self._switch(name).read_entries())
            self.base[name] = self._read_counters(name)
        self.rig.flush()
        self.pending = {h: [] for h in self.fabric.hosts}
        self.links, self.want_links = [], []
        self.want_hosts = {h: [] for h in self.fabric.hosts}

    def _switch(self, name: str) -> Switch:
        session = self.ctl.sessions[name]
        assert session.switch is not None
        return session.switch

    def _read_counters(self, name: str) -> tuple[list[int], list[int]]:
        return counter_arrays(self._switch(name).read_counters())

    def counters(self, name: str) -> tuple[list[int], list[int]]:
        now, base = self._read_counters(name), self.base[name]
        return (
            [a - b for a, b in zip(now[0], base[0], strict=True)],
            [a - b for a, b in zip(now[1], base[1], strict=True)],
        )

    def send(self, host: str, pkt: Packet) -> None:
        """One cascade: ``pkt`` from ``host`` to the PS of its chunk."""
        h = self.fabric.hosts[host]
        dst_ip = self.fabric.hosts[ps_of(pkt.job, pkt.seq)].ip
        sent = Frame(pkt, Addr(SENT_TO, ip_to_int(dst_ip), wire.UDP_PORT))
        cascade = self.model.send(host, sent, int(time.monotonic() * 1e6))
        assert cascade.lost == ()
        self.rig.send(host, frame(pkt, h, dst_ip))
        self._probe(self.fabric.home(host), h.port)
        for a in cascade.arrivals[1:]:
            self.links.append((a.device, a.port, self._link_frame(a.device, a.port)))
            self.want_links.append((a.device, a.port, as_seen(a.frame)))
            self._probe(a.device, a.port)
        for d in cascade.delivered:
            self.want_hosts[d.host].append(as_seen(d.frame))

    def _link_frame(self, device: str, port: int) -> Seen | None:
        """The next ESA frame into ``device``'s port from its link; None if
        none comes (the comparison then fails)."""
        deadline = time.monotonic() + LIMIT_S
        while time.monotonic() < deadline:
            for data in self.rig.arrived(device, port, timeout=0.002, want=1):
                s = seen(data)
                if s is not None:
                    return s
        return None

    def _probe(self, device: str, port: int) -> None:
        """An L2 frame into ``device``'s ``port``, awaited at a host of the
        device: the device has processed all that came in on that port before."""
        to = next(
            n
            for n, h in self.fabric.hosts.items()
            if self.fabric.home(n) == device and h.port != port
        )
        self.probes += 1
        probe = bytes(Ether(src="02:00:00:00:00:ee", dst=self.fabric.hosts[to].mac, type=PROBE))
        probe += self.probes.to_bytes(4, "big")
        self.rig.inject(device, port, probe)
        deadline = time.monotonic() + LIMIT_S
        while True:
            got = self.rig.recv(to, timeout=0.002)
            self.pending[to] += [f for f in got if f != probe]
            if probe in got:
                return
            assert time.monotonic() < deadline, f"probe {self.probes} into {device}:{port} lost"

    def check(self) -> None:
        """Every link frame, every host's frames in order, every counter."""

        def esa(frames: list[bytes]) -> list[Seen]:
            return [s for f in frames if (s := seen(f)) is not None]

        assert self.links == self.want_links
        for device in self.fabric.devices:
            for port in self.rig.switches[device].ports:
                if self.fabric.peer(device, port) is not None:
                    assert esa(self.rig.arrived(device, port, timeout=0.02)) == []
        got: dict[str, list[Seen]] = {}
        for host, frames in self.pending.items():
            # what the host is due (a loaded switch may still be sending it), then any more
            deadline = time.monotonic() + LIMIT_S
            mine = esa(frames)
            while len(mine) < len(self.want_hosts[host]) and time.monotonic() < deadline:
                mine += esa(self.rig.recv(host, timeout=0.05))
            got[host] = mine + esa(self.rig.recv(host, timeout=0.05))
        assert got == self.want_hosts
        for name, dev in self.model.devices.items():
            assert self.counters(name) == (dev.model.job_events, dev.model.drops), name


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tiered]:
    program = compile_p4(ROOT / "p4src" / "esa.p4", tmp_path_factory.mktemp("p4"), pool=POOL)
    with Bmv2Fabric(two_tier()) as rig:
        rig.start()
        t = Tiered(rig, program, tmp_path_factory.mktemp("ctl"))
        t.ctl.sync()
        yield t
        for session in t.ctl.sessions.values():
            session.drop()


def trace(seed: int, n: int) -> list[tuple[str, Packet]]:
    """Contributions over a few seqs of every job, so chunks collide in the
    small pools: a worker's first send plain, later ones retransmissions,
    a few at the int32 limit; PS results and pulls, mostly from the PS of
    the chunk's shard, at times from a worker; float resends."""
    rng = random.Random(seed)
    sent: set[tuple[int, int, int]] = set()
    out: list[tuple[str, Packet]] = []
    for _ in range(n):
        job = rng.choice(list(JOBS))
        workers = JOBS[job][0]
        seq = rng.randrange(16)
        roll = rng.random()
        if roll < 0.12:
            ptype = PacketType.PS_RESULT if roll < 0.09 else PacketType.PULL
            src = rng.choice((ps_of(job, seq),) * 5 + workers[:1])
            bits = (1 << len(workers)) - 1
            vals = tuple(rng.randrange(100) for _ in range(wire.K))
            out.append((src, Packet(ptype, job, seq, bits, vals, count=len(workers))))
            continue
        w = rng.randrange(len(workers))
        if roll < 0.14:
            out.append(
                (workers[w], Packet(PacketType.FLOAT, job, seq, 1 << w, (w,) * wire.K, 0, 1))
            )
            continue
        flags = Flag.RETX if (job, seq, w) in sent else 0
        sent.add((job, seq, w))
        big = rng.random() < 0.04
        vals = tuple(
            INT32_MAX - 5 if big else rng.randrange(-(2**20), 2**20) for _ in range(wire.K)
        )
        out.append((workers[w], Packet(PacketType.CONTRIB, job, seq, 1 << w, vals, flags, 1)))
    return out


@pytest.mark.parametrize("policy", list(Policy))
def test_fabric_equals_model(tiered: Tiered, policy: Policy) -> None:
    tiered.start(policy)
    for host, pkt in trace(seed=2 * int(policy), n=200):
        tiered.send(host, pkt)
    tiered.check()
    model = {n: d.model for n, d in tiered.model.devices.items()}
    assert len(tiered.links) > 50
    assert sum(map(len, tiered.want_hosts.values())) > 100
    if policy is Policy.ESA:
        for name in ("t1", "t2", "s1"):
            assert sum(model[name].events(j)[Event.PREEMPT_WON] for j in JOBS) > 0, name
