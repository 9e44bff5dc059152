"""The soak's bridge to BMv2's ports (``bench.soak_bridge``), without BMv2:
a raw socket on the switch side of each veth stands where BMv2 would.  A
host's datagram leaves on its port's veth as ``testbed.loopref``'s
ingress frame; a frame into a port's veth reaches that port's host as its
datagram; a datagram from a socket on no port goes nowhere (sent first,
it would be the first frame on some port)."""

from __future__ import annotations

import socket
import threading

import pytest

from bench.soak_bridge import Bridge, host_side, switch_side
from refswitch.frames import ESA_AT
from runner.devices.netns import Namespace, drain, entered
from testbed.loopref import ingress_frame

pytestmark = pytest.mark.netns
PORTS = (1, 2)


def test_the_bridge_carries_each_port_both_ways_and_nothing_else() -> None:
    ns = Namespace("br")
    try:
        for port in PORTS:
            ns.add_veth(host_side(port), switch_side(port))
        with entered(ns.name):
            sw = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sw.bind(("127.0.0.1", 0))
            hosts = {p: socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for p in PORTS}
            stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            for h in (*hosts.values(), stranger):
                h.bind(("127.0.0.1", 0))
                h.settimeout(5.0)
            bridge = Bridge(sw, {p: h.getsockname() for p, h in hosts.items()})
        wires = {p: ns.raw_socket(switch_side(p)) for p in PORTS}
        runner = threading.Thread(target=bridge.run)
        runner.start()
        try:
            stranger.sendto(b"x" * 40, sw.getsockname())  # before any host's: first if sent
            for p in PORTS:
                datagram = bytes([p]) * 40
                hosts[p].sendto(datagram, sw.getsockname())
                frame = ingress_frame(hosts[p].getsockname(), datagram)
                assert drain(wires[p], 5.0, want=1) == [frame]
                back = b"\x00" * ESA_AT + bytes([p + 10]) * 40
                wires[p].send(back)
                assert hosts[p].recv(100) == back[ESA_AT:]
        finally:
            bridge.stop()
            runner.join()
            bridge.close()
            for s in (sw, stranger, *hosts.values(), *wires.values()):
                s.close()
    finally:
        ns.delete()
