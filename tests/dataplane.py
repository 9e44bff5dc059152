"""A BMv2 switch running p4src/esa.p4 beside esa.model, fed the same packets.

Six ports: job 1 (low priority) has workers on ports 1 and 2 and its PS on
port 3; job 2 (high priority) has workers on 4 and 5 and its PS on 6.  The
switch is configured through BMv2's Thrift CLI so that these tests depend on
the P4 program alone, not on the controller.
"""

from __future__ import annotations

import re
import struct
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from esa import spec, wire
from esa.model import JobConfig, Out, Packet, SwitchModel
from esa.spec import Policy
from esa.toolchain import compile_p4
from tests.bmv2 import ROOT, Bmv2Switch

POOL = 8
HEADER = struct.Struct(wire.struct_format())
VALUES = struct.Struct(f"!{wire.K}i")


@dataclass(frozen=True)
class Host:
    port: int
    mac: str
    ip: str
    udp_port: int
    rid: int


def host(port: int, udp_port: int = 0) -> Host:
    return Host(
        port, f"02:00:00:00:00:{port:02x}", f"10.0.0.{port}", udp_port or 40000 + port, port
    )


@dataclass(frozen=True)
class Job:
    job: int
    prio: int
    workers: tuple[Host, ...]
    ps: Host
    part_base: int
    part_size: int

    @property
    def mgid_all(self) -> int:
        return 2 * self.job - 1

    @property
    def mgid_workers(self) -> int:
        return 2 * self.job

    def config(self) -> JobConfig:
        return JobConfig(
            fan_in=len(self.workers),
            worker_mask=(1 << len(self.workers)) - 1,
            priority=self.prio,
            ps_port=self.ps.port,
            part_base=self.part_base,
            part_size=self.part_size,
        )


LOW = Job(1, 1, (host(1), host(2)), host(3, wire.UDP_PORT), 0, 4)
HIGH = Job(2, 5, (host(4), host(5)), host(6, wire.UDP_PORT), 4, 4)
JOBS = {j.job: j for j in (LOW, HIGH)}


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
    """The switch and the model, configured alike."""

    def __init__(self, json_path: Path) -> None:
        self.sw = Bmv2Switch(ports=6, json_path=json_path)
        self.sw.start()
        self.model = SwitchModel(pool_size=POOL)
        self._configure()

    def _configure(self) -> None:
        cmds = []
        handle = 0
        for job in JOBS.values():
            c = job.config()
            cmds.append(
                f"table_add EsaIngress.admission.jobs EsaIngress.admission.set_job {job.job} => "
                f"{c.fan_in} {c.worker_mask} {c.priority} {c.ps_port} {job.mgid_all} "
                f"{job.mgid_workers} {c.part_base} {c.part_size}"
            )
            cmds.append(
                f"table_add EsaIngress.forwarding.ps_route EsaIngress.forwarding.set_ps "
                f"{job.job} => {job.ps.port} {job.ps.mac} {job.ps.ip}"
            )
            members = {job.mgid_all: (*job.workers, job.ps), job.mgid_workers: job.workers}
            for mgid, hosts in members.items():
                cmds.append(f"mc_mgrp_create {mgid}")
                for h in hosts:
                    cmds.append(f"mc_node_create {h.rid} {h.port}")
                    cmds.append(f"mc_node_associate {mgid} {handle}")
                    handle += 1
            for h in (*job.workers, job.ps):
                cmds.append(
                    f"table_add EsaEgress.rewrite.replicas EsaEgress.rewrite.set_dst {h.rid} => "
                    f"{h.mac} {h.ip} {h.udp_port}"
                )
            self.model.add_job(job.job, c)
        self.sw.cli("\n".join(cmds))

    def set_policy(self, policy: Policy, stale_us: int = 10_000_000) -> None:
        self.sw.cli(
            "table_set_default EsaIngress.admission.policy EsaIngress.admission.set_policy "
            f"{int(policy)} {stale_us}"
        )
        self.model.policy = policy
        self.model.stale_us = stale_us

    def reset(self, policy: Policy = Policy.ESA, stale_us: int = 10_000_000) -> None:
        lines = [f"register_reset EsaIngress.pool.{r.name}" for r in spec.SLOT_REGISTERS]
        lines += ["counter_reset EsaIngress.accounting.job_events"]
        lines += ["counter_reset EsaIngress.accounting.drops"]
        self.sw.cli("\n".join(lines))
        self.set_policy(policy, stale_us)
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

    def counters(self) -> tuple[list[int], list[int]]:
        lines = []
        for job in (0, *JOBS):
            for ev in range(spec.EVENTS_PER_JOB):
                idx = spec.EVENTS_PER_JOB * job + ev
                lines.append(f"counter_read EsaIngress.accounting.job_events {idx}")
        lines += [
            f"counter_read EsaIngress.accounting.drops {d}" for d in range(len(spec.Drop) + 1)
        ]
        out = self.sw.cli("\n".join(lines))
        counts = [int(n) for n in re.findall(r"bytes, (\d+) packets\)", out)]
        assert len(counts) == len(lines), out
        n = spec.EVENTS_PER_JOB * (len(JOBS) + 1)
        events = [0] * spec.COUNTER_SIZE
        events[:n] = counts[:n]
        return events, counts[n:]

    def close(self) -> None:
        self.sw.close()


def build_program(out_dir: Path) -> Path:
    json_path, _ = compile_p4(ROOT / "p4src" / "esa.p4", out_dir, pool=POOL)
    return json_path
