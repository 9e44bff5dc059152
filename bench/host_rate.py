"""Host agent packet rate over a veth pair, against Scapy's ``sendp``.

Creates a network namespace and a veth pair (needs root), runs a reflector
in the namespace that answers every CONTRIB with a RESULT of the same sum
(a fan-in-1 job: the switch's answer without the switch), and measures:

- fast path: ``hosts.worker.agent.Worker.allreduce`` (codec + UDP sockets),
  datagrams sent plus received per second;
- Scapy: ``sendp`` of ESA packets built with ``hosts.net.scapy_layer``, per second.

Everything it creates is named after its process id and removed on exit.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Sequence

import numpy as np

from esa import wire
from esa.wire import PacketType
from hosts.net import quant
from hosts.net.transport import UdpTransport
from hosts.worker.agent import Worker
from runner.devices.netns import Namespace, missing_root, run
from runner.paths import ROOT

HOST_IP, NS_IP = "10.213.77.1", "10.213.77.2"


def reflect(bind_ip: str, seconds: float) -> None:
    """Answer each datagram with itself retyped as RESULT, for ``seconds``."""
    t = UdpTransport((bind_ip, wire.UDP_PORT))
    buf = bytearray(wire.PAYLOAD_BYTES + 1)
    ptype_at = wire.field_offsets()["ptype"][0]
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        got = t.recv_into(buf)
        if got is None:
            t.wait(0.05)
            continue
        n, src = got
        buf[ptype_at] = PacketType.RESULT
        t.send(memoryview(buf)[:n], src)


def fast_path(seconds: float) -> tuple[float, float]:
    """(sent+received)/s and sent/s of a worker against the reflector."""
    transport = UdpTransport((HOST_IP, 0))
    worker = Worker(1, 0, 1, ((NS_IP, wire.UDP_PORT),), transport, window=256, rto=0.2)
    x = np.random.default_rng(0).uniform(-1, 1, 20_000 * wire.K).astype(np.float32)
    want = quant.dequantise(quant.quantise(x, 1.0, worker.scale).values, worker.scale).ravel()
    worker.allreduce(x[: wire.K * 100])
    c0 = worker.counters.sent + worker.counters.delivered
    sent0 = worker.counters.sent
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        if not np.array_equal(worker.allreduce(x), want):
            raise SystemExit("fast path: wrong result")
    dt = time.monotonic() - t0
    c = worker.counters
    transport.close()
    return (c.sent + c.delivered - c0) / dt, (c.sent - sent0) / dt


def scapy_rates(iface: str, dst_mac: str, seconds: float) -> tuple[float, float]:
    """Packets/s of ``sendp`` (a packet socket per call, as scripts use it)
    and of one reused Scapy L2 socket (Scapy's best case)."""
    from scapy.config import conf
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Packet
    from scapy.sendrecv import sendp

    from hosts.net.scapy_layer import ESA

    values = list(range(wire.K))

    def build(seq: int) -> Packet:
        return (
            Ether(dst=dst_mac)
            / IP(src=HOST_IP, dst=NS_IP)
            / UDP(sport=wire.UDP_PORT, dport=wire.UDP_PORT)
            / ESA(ptype=PacketType.CONTRIB, job=1, seq=seq, bitmap=1, count=1, values=values)
        )

    n, t0 = 0, time.monotonic()
    while time.monotonic() - t0 < seconds:
        sendp(build(n), iface=iface, verbose=False)
        n += 1
    per_call = n / (time.monotonic() - t0)
    sock = conf.L2socket(iface=iface)
    n, t0 = 0, time.monotonic()
    while time.monotonic() - t0 < seconds / 2:
        sock.send(build(n))
        n += 1
    reused = n / (time.monotonic() - t0)
    sock.close()
    return per_call, reused


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=8.0, help="fast-path measuring time")
    p.add_argument("--scapy-seconds", type=float, default=5.0)
    p.add_argument("--reflect", metavar="IP", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.reflect:
        reflect(args.reflect, args.seconds)
        return 0
    why = missing_root()
    if why is not None:
        print(f"host_rate: {why} (it creates a netns and a veth pair)")
        return 2
    tag = str(os.getpid())
    veth_host, veth_ns = f"ehr{tag}h", f"ehr{tag}n"
    ns = Namespace("hr")
    reflector: subprocess.Popen[bytes] | None = None
    try:
        ns.add_uplink(veth_host, veth_ns)
        run("ip", "addr", "add", f"{HOST_IP}/30", "dev", veth_host)
        run("ip", "link", "set", veth_host, "up")
        ns.exec("ip", "addr", "add", f"{NS_IP}/30", "dev", veth_ns)
        ns.exec("ip", "link", "set", veth_ns, "up")
        ns_mac = ns.exec("cat", f"/sys/class/net/{veth_ns}/address").strip()
        run_for = args.seconds + 10
        reflector = subprocess.Popen(
            ["ip", "netns", "exec", ns.name, sys.executable, "-m", "bench.host_rate",
             "--reflect", NS_IP, "--seconds", str(run_for)],
            cwd=ROOT,
        )  # fmt: skip
        time.sleep(1.0)
        both, sent = fast_path(args.seconds)
        scapy, scapy_reused = scapy_rates(veth_host, ns_mac, args.scapy_seconds)
    finally:
        if reflector is not None:
            reflector.terminate()
            reflector.wait()
        ns.delete()
    print(f"fast path: {both:,.0f} pkt/s (send+receive; {sent:,.0f} sent/s)")
    print(f"scapy sendp: {scapy:,.0f} pkt/s (one reused L2 socket: {scapy_reused:,.0f} pkt/s)")
    print(f"ratio: {both / scapy:.1f} (send only: {sent / scapy:.1f}; ", end="")
    print(f"vs reused socket: {both / scapy_reused:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
