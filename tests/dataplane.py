"""A BMv2 switch running p4src/esa.p4 beside esa.model, fed the same packets.

Six ports: job 1 (low priority) has workers on ports 1 and 2 and its PS on
port 3; job 2 (high priority) has workers on 4 and 5 and its PS on 6.  The
switch is programmed through the controller's switch API and entry plan
(``controller.plan``), the very entries the controller writes.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from controller.entries import PolicyEntry, SwitchEntries
from controller.plan import JobPlan, desired
from controller.reconcile import reconcile
from controller.switch import P4RuntimeSwitch
from controller.topology import Host
from esa import spec, wire
from esa.model import JobConfig, Out, Packet, SwitchModel
from esa.p4names import register
from esa.spec import Policy
from esa.toolchain import compile_p4
from testbed.bmv2_veth import Bmv2Switch
from testbed.paths import ROOT

POOL = 8
HEADER = struct.Struct(wire.struct_format())
VALUES = struct.Struct(f"!{wire.K}i")


def host(port: int, udp_port: int = 0) -> Host:
    return Host(
        f"h{port}", port, f"02:00:00:00:00:{port:02x}", f"10.0.0.{port}", udp_port or 40000 + port
    )


def config(job: JobPlan) -> JobConfig:
    """The model's row of ``job``, as the plan's ``set_job`` entry holds it."""
    return JobConfig(
        fan_in=len(job.workers),
        worker_mask=(1 << len(job.workers)) - 1,
        priority=job.prio,
        ps_port=job.ps.port,
        part_base=job.part_base,
        part_size=job.part_size,
    )


LOW = JobPlan(1, (host(1), host(2)), host(3, wire.UDP_PORT), 1, 0, 4)
HIGH = JobPlan(2, (host(4), host(5)), host(6, wire.UDP_PORT), 5, 4, 4)
JOBS = {j.job: j for j in (LOW, HIGH)}
HOSTS = [h for j in JOBS.values() for h in (*j.workers, j.ps)]


def entries(policy: PolicyEntry) -> SwitchEntries:
    """What the controller's plan writes for the rig's two jobs."""
    return desired(HOSTS, list(JOBS.values()), policy)


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
    return Seen(port, pkt, eth.dst, eth[IP].dst, eth[UDP].dport)


def expected(out_to: Out, pkt: Packet) -> list[Seen]:
    """The frames the switch should emit for one model output."""
    job = JOBS[pkt.job]
    if out_to is Out.PS:
        return [Seen(job.ps.port, pkt, job.ps.mac, job.ps.ip, wire.UDP_PORT)]
    dests: Sequence[Host] = job.workers + ((job.ps,) if out_to is Out.ALL else ())
    return [Seen(h.port, pkt, h.mac, h.ip, h.udp_port) for h in dests]


def by_port(frames: list[Seen]) -> dict[int, list[Seen]]:
    return {p: [s for s in frames if s.port == p] for p in {s.port for s in frames}}


class Rig:
    """The switch and the model, configured alike: the switch through the
    controller's P4Runtime API (``controller.plan`` entries), registers alone
    through BMv2's Thrift CLI, which BMv2 forces."""

    def __init__(self, program: tuple[Path, Path]) -> None:
        self.sw = Bmv2Switch(ports=6)
        self.sw.start()
        self.p4rt = P4RuntimeSwitch.connect(self.sw.grpc_addr)
        self.p4rt.push_pipeline(*program)
        self.model = SwitchModel(pool_size=POOL)
        self.base = self._read_counters()
        for job in JOBS.values():
            self.model.add_job(job.job, config(job))
        self.set_policy(Policy.ESA)

    def set_policy(
        self, policy: Policy, stale_us: int = 10_000_000, squat_us: int = 10_000_000
    ) -> None:
        """Timeouts default to 10 s, which no test outlasts: the switch's clock
        and the model's are not the same, so a test that wants a slot to
        age says so."""
        reconcile(
            self.p4rt,
            entries(PolicyEntry(policy, stale_us, squat_us)),
            self.p4rt.read_entries(),
        )
        self.model.policy = policy
        self.model.stale_us = stale_us
        self.model.squat_us = squat_us

    def reset(
        self, policy: Policy = Policy.ESA, stale_us: int = 10_000_000, squat_us: int = 10_000_000
    ) -> None:
        """Empty slots, counters from zero (the switch's are read relative to now)."""
        self.sw.cli("\n".join(f"register_reset {register(r.name)}" for r in spec.SLOT_REGISTERS))
        self.base = self._read_counters()
        self.set_policy(policy, stale_us, squat_us)
        self.model.slots = SwitchModel(pool_size=POOL).slots
        self.model.job_events = [0] * spec.COUNTER_SIZE
        self.model.drops = [0] * (len(spec.Drop) + 1)
        self.sw.flush()

    def send(
        self, pkt: Packet, src: Host, dst_ip: str | None = None, gap: float = 0.002
    ) -> list[Seen]:
        """Send one packet to the switch and the model; returns what the model
        says must come out."""
        dst = dst_ip or (JOBS[pkt.job].ps.ip if pkt.job in JOBS else LOW.ps.ip)
        self.sw.send(src.port, frame(pkt, src, dst))
        res = self.model.process(pkt, int(time.monotonic() * 1e6), in_port=src.port)
        time.sleep(gap)
        return [s for o in res.outputs for s in expected(o.to, o.packet)]

    def collect(self, timeout: float = 0.5) -> list[Seen]:
        """Every ESA frame that left the switch, port by port in arrival order."""
        seen: list[Seen] = []
        for p in range(1, self.sw.ports + 1):
            for data in self.sw.recv(p, timeout=timeout if p == 1 else 0.05):
                s = parse(p, data)
                if s is not None:
                    seen.append(s)
        return seen

    def run(self, trace: Iterable[tuple[Packet, Host]]) -> list[Seen]:
        """Send a trace; assert the switch emitted exactly what the model says
        (per port, in order) and that every counter agrees.  Returns the frames."""
        want: list[Seen] = []
        for pkt, src in trace:
            want += self.send(pkt, src)
        got = self.collect()
        assert by_port(got) == by_port(want)
        assert self.counters() == (self.model.job_events, self.model.drops)
        return got

    def _read_counters(self) -> tuple[list[int], list[int]]:
        c = self.p4rt.read_counters()
        events = [0] * spec.COUNTER_SIZE
        for job, counts in c.events.items():
            for ev, n in counts.items():
                events[spec.counter_index(job, ev)] = n
        drops = [0] * (len(spec.Drop) + 1)
        for d, n in c.drops.items():
            drops[d] = n
        return events, drops

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
