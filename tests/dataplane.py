"""A BMv2 switch running p4src/esa.p4 beside esa.model, fed the same packets.

Sixteen ports, four jobs of two workers each, on hosts of their own: job 1
(LOW, priority 1) has workers on ports 1 and 2 and its PS on 3; job 2 (HIGH,
priority 5) workers on 4 and 5, PS on 6; job 3 (TWO, priority 3) workers on
7 and 8 and its chunks on two PS hosts, ports 9 and 10; job 4 (FOUR,
priority 2) workers on 11 and 12 and four PS hosts on 13 to 16.  The rig's
jobs are the controller's ``JobPlan``s, chunk ``seq`` of a job belonging to
``plan.ps_for(seq)`` (``esa.job.ps_shard``); the switch is programmed
through the controller's switch API and entry plan (``controller.world.plan``),
the very entries the controller writes, and the model's job rows come from
the same entries (``testbed.fabric_model.job_configs``).

A rig runs one job set: ``JOBS`` above, or ``WIDE_JOBS``, three jobs with
fan-ins of 3 and 4 on the same ports, where a contribution can add itself
to a partial that stays incomplete (a retransmission too, rule S7): job 5
(TRIO_LOW, priority 1) workers on 1 to 3, PS on 4; job 6 (QUAD_HIGH,
priority 5) workers on 5 to 8, two PS hosts on 9 and 10; job 7 (TRIO_MID,
priority 3) workers on 11 to 13, two PS hosts on 14 and 15; port 16 idle.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from controller.device.entries import PolicyEntry, SwitchEntries
from controller.device.reconcile import reconcile
from controller.device.switch import Counters, P4RuntimeSwitch
from controller.world.plan import JobPlan, desired
from controller.world.topology import Host, ip_to_int
from esa import spec, wire
from esa.model import Out, Packet, Result, SwitchModel
from esa.p4names import register
from esa.spec import Policy
from esa.toolchain import compile_p4
from runner.paths import ROOT
from testbed.bmv2_veth import Bmv2Switch
from testbed.fabric_model import job_configs
from tests.wait import LIMIT_S

POOL = 16
PORTS = 16
PROBE = 0x88B6
"""Ethertype of the L2 frame that follows each packet (``Rig.send``)."""
HEADER = struct.Struct(wire.struct_format())
VALUES = struct.Struct(f"!{wire.K}i")


def host(port: int, udp_port: int = 0) -> Host:
    return Host(
        f"h{port}", port, f"02:00:00:00:00:{port:02x}", f"10.0.0.{port}", udp_port or 40000 + port
    )


def ps_hosts(*ports: int) -> tuple[Host, ...]:
    return tuple(host(p, wire.UDP_PORT) for p in ports)


SWITCH_IP = "10.0.0.254"
"""The switch's address: a PS's copy of a sum completed in the switch comes from it."""
AT = ip_to_int(SWITCH_IP)

LOW = JobPlan(1, (host(1), host(2)), ps_hosts(3), 1, 0, 4, switch_ip=AT)
HIGH = JobPlan(2, (host(4), host(5)), ps_hosts(6), 5, 4, 4, switch_ip=AT)
TWO = JobPlan(3, (host(7), host(8)), ps_hosts(9, 10), 3, 8, 4, switch_ip=AT)
FOUR = JobPlan(4, (host(11), host(12)), ps_hosts(13, 14, 15, 16), 2, 12, 4, switch_ip=AT)
JOBS = {j.job: j for j in (LOW, HIGH, TWO, FOUR)}

TRIO_LOW = JobPlan(5, (host(1), host(2), host(3)), ps_hosts(4), 1, 0, 4)
QUAD_HIGH = JobPlan(6, tuple(host(p) for p in range(5, 9)), ps_hosts(9, 10), 5, 4, 4)
TRIO_MID = JobPlan(7, (host(11), host(12), host(13)), ps_hosts(14, 15), 3, 8, 4)
WIDE_JOBS = {j.job: j for j in (TRIO_LOW, QUAD_HIGH, TRIO_MID)}

Jobs = Mapping[int, JobPlan]


def hosts_of(jobs: Jobs) -> list[Host]:
    return [h for j in jobs.values() for h in (*j.workers, *j.ps)]


def entries(
    policy: PolicyEntry, parts: Iterable[int] | None = None, jobs: Jobs = JOBS
) -> SwitchEntries:
    """What the controller's plan writes for ``jobs``: the jobs named in
    ``parts`` keep their partitions of 4 slots, the others have none (by
    default all of them under STATIC, none under ESA and ATP, as with the
    controller's equal split)."""
    keep = set(jobs if policy.policy is Policy.STATIC else ()) if parts is None else set(parts)
    plans = [j if j.job in keep else replace(j, part_base=0, part_size=0) for j in jobs.values()]
    return desired(hosts_of(jobs), plans, policy)


def counter_arrays(c: Counters) -> tuple[list[int], list[int]]:
    """Counters as the model keeps them: the event counter array indexed by
    ``spec.counter_index``, and the drop counter array indexed by reason."""
    events = [0] * spec.COUNTER_SIZE
    for job, counts in c.events.items():
        for ev, n in counts.items():
            events[spec.counter_index(job, ev)] = n
    drops = [0] * (len(spec.Drop) + 1)
    for d, n in c.drops.items():
        drops[d] = n
    return events, drops


def frame(pkt: Packet, src: Host, dst_ip: str) -> bytes:
    payload = HEADER.pack(pkt.ptype, pkt.flags, pkt.job, pkt.seq, pkt.bitmap, pkt.count)
    payload += VALUES.pack(*pkt.values)
    eth = Ether(src=src.mac, dst="02:00:00:00:00:ff")
    ip = IP(src=src.ip, dst=dst_ip)
    return bytes(eth / ip / UDP(sport=src.udp_port, dport=wire.UDP_PORT) / payload)


@dataclass(frozen=True)
class Seen:
    """An ESA packet that left a switch port, with where it was addressed."""

    port: int
    packet: Packet
    mac: str
    ip: str
    udp_port: int
    src_ip: str = field(default="", compare=False)
    """the IPv4 source; the differential rigs compare the rest."""


def parse(port: int, data: bytes) -> Seen | None:
    eth = Ether(data)
    if UDP not in eth:
        return None
    body = bytes(eth[UDP].payload)
    if len(body) != wire.PAYLOAD_BYTES:
        return None
    ptype, flags, job, seq, bitmap, count = HEADER.unpack_from(body)
    values = VALUES.unpack_from(body, wire.HEADER_BYTES)
    pkt = Packet(wire.PacketType(ptype), job, seq, bitmap, values, flags=flags, count=count)
    return Seen(port, pkt, eth.dst, eth[IP].dst, eth[UDP].dport, eth[IP].src)


def expected(out_to: Out, pkt: Packet, jobs: Jobs = JOBS) -> list[Seen]:
    """The frames the switch should emit for one model output: a PS-bound
    packet and a result to all reach the PS of the chunk's shard."""
    job = jobs[pkt.job]
    ps = job.ps_for(pkt.seq)
    if out_to is Out.PS:
        return [Seen(ps.port, pkt, ps.mac, ps.ip, wire.UDP_PORT)]
    dests: Sequence[Host] = job.workers + ((ps,) if out_to is Out.ALL else ())
    return [Seen(h.port, pkt, h.mac, h.ip, h.udp_port) for h in dests]


def by_port(frames: list[Seen]) -> dict[int, list[Seen]]:
    return {p: [s for s in frames if s.port == p] for p in {s.port for s in frames}}


class Rig:
    """The switch and the model, configured alike: the switch through the
    controller's P4Runtime API (``controller.world.plan`` entries), registers alone
    through BMv2's Thrift CLI, which BMv2 forces.  ``results``: each packet
    sent since the last ``reset`` with what the model made of it, in order."""

    def __init__(self, program: tuple[Path, Path], jobs: Jobs = JOBS) -> None:
        self.jobs = jobs
        self.results: list[tuple[Packet, Result]] = []
        self.sw = Bmv2Switch(ports=PORTS)
        self.sw.start()
        self.p4rt = P4RuntimeSwitch.connect(self.sw.grpc_addr)
        self.p4rt.push_pipeline(*program)
        self.model = SwitchModel(pool_size=POOL)
        self.probes = 0
        self.pending: dict[int, list[bytes]] = {p: [] for p in range(1, PORTS + 1)}
        """frames taken off a port while waiting for a probe, not yet collected."""
        self.base = self._read_counters()
        self.set_policy(Policy.ESA)

    def set_policy(
        self,
        policy: Policy,
        stale_us: int = 10_000_000,
        squat_us: int = 10_000_000,
        parts: Iterable[int] | None = None,
    ) -> None:
        """Timeouts default to 10 s, which no test outlasts: the switch's clock
        and the model's are not the same, so a test that wants a slot to
        age says so.  ``parts``: the jobs with partitions (``entries``)."""
        want = entries(PolicyEntry(policy, stale_us, squat_us), parts, self.jobs)
        reconcile(self.p4rt, want, self.p4rt.read_entries())
        for job, cfg in job_configs(want).items():
            self.model.add_job(job, cfg)
        self.model.policy = policy
        self.model.stale_us = stale_us
        self.model.squat_us = squat_us

    def reset(
        self,
        policy: Policy = Policy.ESA,
        stale_us: int = 10_000_000,
        squat_us: int = 10_000_000,
        parts: Iterable[int] | None = None,
    ) -> None:
        """Empty slots, counters from zero (the switch's are read relative to now)."""
        self.sw.cli("\n".join(f"register_reset {register(r.name)}" for r in spec.SLOT_REGISTERS))
        self.base = self._read_counters()
        self.set_policy(policy, stale_us, squat_us, parts)
        self.model.slots = SwitchModel(pool_size=POOL).slots
        self.model.job_events = [0] * spec.COUNTER_SIZE
        self.model.drops = [0] * (len(spec.Drop) + 1)
        self.sw.flush()
        self.pending = {p: [] for p in self.pending}
        self.results = []

    def send(self, pkt: Packet, src: Host, dst_ip: str | None = None) -> list[Seen]:
        """Send one packet to the switch and the model; returns what the model
        says must come out.  Returns once the switch has taken the packet: a
        probe sent after it on its port, an L2 frame to the next port, has
        come out (the next port with a host: the switch forwards L2 frames only
        to its hosts).  BMv2 takes each port's frames in order, but one that falls
        behind (a loaded machine) takes frames of different ports in the
        order it reaches them, and the slot rules would give another outcome."""
        first = next(iter(self.jobs.values()))
        dst = dst_ip or self.jobs.get(pkt.job, first).ps_for(pkt.seq).ip
        ports = sorted({h.port for h in hosts_of(self.jobs)})
        to = next((p for p in ports if p > src.port), ports[0])
        self.probes += 1
        probe = bytes(Ether(src=src.mac, dst=host(to).mac, type=PROBE))
        probe += self.probes.to_bytes(4, "big")
        self.sw.send(src.port, frame(pkt, src, dst))
        self.sw.send(src.port, probe)
        res = self.model.process(pkt, int(time.monotonic() * 1e6), in_port=src.port)
        self.results.append((pkt, res))
        deadline = time.monotonic() + LIMIT_S
        while True:
            got = self.sw.recv(to, timeout=0.001)
            self.pending[to] += [f for f in got if f != probe]
            if probe in got:
                return [s for o in res.outputs for s in expected(o.to, o.packet, self.jobs)]
            assert time.monotonic() < deadline, f"probe {self.probes} did not come back"

    def collect(self, want: int = 0, quiet: float = 0.25, timeout: float = LIMIT_S) -> list[Seen]:
        """Every ESA frame that left the switch, port by port in arrival order:
        until ``want`` came and then none for ``quiet`` seconds, or until
        ``timeout`` passed (BMv2 on a loaded machine may lag far behind a
        trace: the limit is only for a switch that lost frames)."""
        frames: dict[int, list[Seen]] = {p: [] for p in range(1, self.sw.ports + 1)}
        start = last = time.monotonic()
        n = 0
        while time.monotonic() - start < timeout:
            for p, seen in frames.items():
                got, self.pending[p] = self.pending[p] + self.sw.recv(p, timeout=0.001), []
                for data in got:
                    s = parse(p, data)
                    last = time.monotonic()
                    if s is not None:
                        seen.append(s)
                        n += 1
            if n >= want and time.monotonic() - last >= quiet:
                break
        return [s for seen in frames.values() for s in seen]

    def run(self, trace: Iterable[tuple[Packet, Host]]) -> list[Seen]:
        """Send a trace; assert the switch emitted exactly what the model says
        (per port, in order) and that every counter agrees.  Returns the frames."""
        want: list[Seen] = []
        for pkt, src in trace:
            want += self.send(pkt, src)
        got = self.collect(len(want))
        assert by_port(got) == by_port(want)
        assert self.counters() == (self.model.job_events, self.model.drops)
        return got

    def _read_counters(self) -> tuple[list[int], list[int]]:
        return counter_arrays(self.p4rt.read_counters())

    def counters(self) -> tuple[list[int], list[int]]:
        """Job events and drops counted since the last ``reset``, indexed as
        the model's ``job_events`` and ``drops``."""
        now = self._read_counters()
        return (
            [a - b for a, b in zip(now[0], self.base[0], strict=True)],
            [a - b for a, b in zip(now[1], self.base[1], strict=True)],
        )

    def close(self) -> None:
        self.p4rt.close()
        self.sw.close()


def build_program(out_dir: Path) -> tuple[Path, Path]:
    """The program's BMv2 JSON and P4Info, compiled with the rig's pool size."""
    return compile_p4(ROOT / "p4src" / "esa.p4", out_dir, pool=POOL)
