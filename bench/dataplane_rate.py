"""Highest packet rate BMv2 sustains without loss: L2 forwarding, bare
summation and the ESA program, measured in one run on the same build.

A paced sender on port 1 offers a rate; the kernel's rx counter of the
receiving veth counts what was delivered.  The rate is sustained when at
least 99.5% of the expected frames arrive.  A binary search finds the
highest such rate per program.

ESA runs one job of two workers whose contributions alternate, so every
second packet completes a sum: that one result goes to the receiving port.
The bare summation program forwards the same one packet in two, so both
deparse and egress the same number of frames.  "esa to the PS" is the same
program and traffic with the job under the static policy without a
partition: every contribution goes on to the PS unsummed, which tells what
summing into a slot costs BMv2 against forwarding the same packet.
"""

from __future__ import annotations

import argparse
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from controller.device.entries import (
    PolicyEntry,
    PsRoute,
    Replica,
    ShardKey,
    SwitchEntries,
)
from controller.device.reconcile import reconcile
from controller.device.switch import P4RuntimeSwitch
from controller.world.topology import Host, ip_to_int, mac_to_int
from esa import wire
from esa.jobrow import JobEntry
from esa.spec import Policy
from esa.toolchain import compile_p4
from runner.devices.bmv2 import missing_bmv2
from runner.paths import ROOT
from testbed.bmv2_veth import Bmv2Switch

HEADER = struct.Struct(wire.struct_format())
SENT_FRACTION = 0.995


@dataclass(frozen=True)
class Program:
    name: str
    source: Path
    outputs_per_input: float
    setup: Callable[[Bmv2Switch, tuple[Path, Path]], None]


def esa_entries(policy: Policy = Policy.ESA) -> SwitchEntries:
    """One job of two workers whose results (and nothing else) go to port 2;
    under STATIC, without a partition, its contributions go there instead."""
    ps = Host("ps", 2, "02:00:00:00:00:02", "10.0.0.2")
    return SwitchEntries(
        policy=PolicyEntry(policy, 1_000_000, 1_000_000),
        jobs={1: JobEntry(2, 0b11, 1, (ps.port,), mgid_workers=2, part_base=0, part_size=0)},
        ps_routes={ShardKey.of(1, 0, 1): PsRoute(ps.port, mac_to_int(ps.mac), ip_to_int(ps.ip), 1)},
        replicas={1: Replica(mac_to_int(ps.mac), ip_to_int(ps.ip), ps.udp_port)},
        groups={1: frozenset({(ps.port, 1)})},
    )


def esa_setup(sw: Bmv2Switch, program: tuple[Path, Path], policy: Policy = Policy.ESA) -> None:
    """Through the controller's Switch API, as the controller programs it."""
    p4rt = P4RuntimeSwitch.connect(sw.grpc_addr)
    try:
        p4rt.ensure_pipeline(*program)
        reconcile(p4rt, esa_entries(policy), p4rt.read_entries())
    finally:
        p4rt.close()


def esa_to_ps_setup(sw: Bmv2Switch, program: tuple[Path, Path]) -> None:
    esa_setup(sw, program, Policy.STATIC)


def no_setup(sw: Bmv2Switch, program: tuple[Path, Path]) -> None:
    return None


def frames(n: int) -> list[bytes]:
    """n contributions: seq i // 2 from worker i % 2, so pairs complete."""
    out = []
    base = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(
        src="10.0.0.1", dst="10.0.0.2"
    )
    for i in range(n):
        payload = HEADER.pack(wire.PacketType.CONTRIB, 0, 1, i // 2, 1 << (i % 2), 1)
        payload += struct.pack(f"!{wire.K}i", *range(wire.K))
        out.append(bytes(base / UDP(sport=40001, dport=wire.UDP_PORT) / payload))
    return out


def rx_packets(sw: Bmv2Switch, dev: str) -> int:
    return int(sw.ns.exec("cat", f"/sys/class/net/{dev}/statistics/rx_packets"))


def offer(sw: Bmv2Switch, batch: list[bytes], rate: float) -> None:
    """Send ``batch`` at ``rate`` packets/s, in ticks of one millisecond."""
    sock = sw.sock(1)
    per_tick = max(1, int(rate / 1000))
    start = time.perf_counter()
    for i in range(0, len(batch), per_tick):
        for f in batch[i : i + per_tick]:
            while True:
                try:
                    sock.send(f)
                    break
                except BlockingIOError:
                    time.sleep(0.0001)
        due = start + (i + per_tick) / rate
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)


def sustained(sw: Bmv2Switch, prog: Program, rate: float, seconds: float) -> bool:
    n = int(rate * seconds) // 2 * 2
    batch = frames(n)
    before = rx_packets(sw, "h2")
    offer(sw, batch, rate)
    time.sleep(0.5)
    got = rx_packets(sw, "h2") - before
    return got >= SENT_FRACTION * n * prog.outputs_per_input


def max_rate(sw: Bmv2Switch, prog: Program, lo: float, hi: float, seconds: float) -> float:
    best = 0.0
    while hi - lo > max(200.0, 0.03 * lo):
        mid = (lo + hi) / 2
        if sustained(sw, prog, mid, seconds):
            best, lo = mid, mid
        else:
            hi = mid
        print(f"  {prog.name}: {mid:8.0f} pkt/s {'ok' if best == mid else 'loss'}", file=sys.stderr)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.5, help="length of one trial")
    ap.add_argument("--max-rate", type=float, default=60000)
    ap.add_argument(
        "--only", choices=("summed", "all"), default="all",
        help="summed: only ESA summing against ESA sending every packet to the PS",
    )  # fmt: skip
    args = ap.parse_args(argv)
    why = missing_bmv2()
    if why:
        print(f"dataplane_rate: {why}", file=sys.stderr)
        return 2
    build = ROOT / "build" / "bench"
    programs = [
        Program("l2 forwarding", ROOT / "p4src/bench/l2_fwd.p4", 1.0, no_setup),
        Program("bare summation", ROOT / "p4src/bench/bare_sum.p4", 0.5, no_setup),
        Program("esa", ROOT / "p4src/esa.p4", 0.5, esa_setup),
        Program("esa to the PS", ROOT / "p4src/esa.p4", 1.0, esa_to_ps_setup),
    ]
    if args.only == "summed":
        programs = programs[2:]
    rates: dict[str, float] = {}
    for prog in programs:
        program = compile_p4(prog.source, build)
        sw = Bmv2Switch(ports=2, json_path=program[0])
        try:
            sw.start()
            prog.setup(sw, program)
            rates[prog.name] = max_rate(sw, prog, 500.0, args.max_rate, args.seconds)
        finally:
            sw.close()
    for name, r in rates.items():
        print(f"{name:15s} {r:8.0f} pkt/s")
    esa_rate = rates["esa"]
    print(f"esa to the PS / esa summed:  {rates['esa to the PS'] / esa_rate:.2f}")
    if args.only == "all":
        bare, fwd = rates["bare summation"], rates["l2 forwarding"]
        print(f"bare summation / forwarding: {bare / fwd:.2f}")
        print(f"esa / bare summation:        {esa_rate / bare:.2f}  (goal >= 0.80)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
