"""BMv2's ports for the soak's hosts (``bench.soak --switch bmv2``): the
hosts keep their UDP sockets on 127.0.0.1 of the soak's namespace, BMv2's
port ``N`` is veth ``sN``, and this process carries each host's datagrams
between the two, as ``testbed.loopref`` does for the reference switch.

    python -m bench.soak_bridge --socket-fd 5 --port 1@127.0.0.1:40001 \\
        --port 2@127.0.0.1:40002

A datagram to the switch's socket (``--socket-fd``, which the soak holds)
from the host socket on port ``N`` goes out of veth ``hN`` (the peer of
BMv2's ``sN``) as the frame that host would send (``testbed.loopref``'s
``ingress_frame``); a frame BMv2 sends out of ``sN`` is delivered to that
host's socket without its headers.  The bridge outlives BMv2: BMv2 killed
and started again finds its veths where they were.  It prints ``ready``
once its raw sockets are open, and stops with status 0 on SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import socket
import sys
from collections.abc import Sequence

from refswitch.frames import ESA_AT
from runner.devices.netns import ETH_P_ALL, PACKET_OUTGOING
from testbed.loopref import BURST, Addr, host_datagrams, ingress_frame, parse_port


def host_side(port: int) -> str:
    """The veth whose peer is BMv2's port ``port``."""
    return f"h{port}"


def switch_side(port: int) -> str:
    """BMv2's interface for port ``port``."""
    return f"s{port}"


class Bridge:
    """The switch's UDP socket and a raw socket on each port's veth."""

    def __init__(self, sock: socket.socket, ports: dict[int, Addr]) -> None:
        self.sock = sock
        self.sock.setblocking(False)
        self.ports = dict(ports)
        self.port_of = {addr: port for port, addr in ports.items()}
        self.raw: dict[int, socket.socket] = {}
        for port in ports:
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            s.bind((host_side(port), 0))
            s.setblocking(False)
            self.raw[port] = s
        self.port_at = {s.fileno(): port for port, s in self.raw.items()}
        self._wake_r, self._wake_w = os.pipe()

    def stop(self) -> None:
        os.write(self._wake_w, b"x")

    def close(self) -> None:
        for s in self.raw.values():
            s.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def run(self) -> None:
        poller = select.poll()
        for fd in (self.sock.fileno(), self._wake_r, *self.port_at):
            poller.register(fd, select.POLLIN)
        while True:
            for fd, _ in poller.poll():
                if fd == self._wake_r:
                    return
                if fd == self.sock.fileno():
                    self._to_switch()
                else:
                    self._to_host(self.port_at[fd])

    def _to_switch(self) -> None:
        for port, src, data in host_datagrams(self.sock, self.port_of):
            if port is None:
                continue
            try:
                self.raw[port].send(ingress_frame(src, data))
            except OSError:  # a full veth queue drops, as a full port does
                continue

    def _to_host(self, port: int) -> None:
        raw = self.raw[port]
        for _ in range(BURST):
            try:
                frame, addr = raw.recvfrom(65535)
            except BlockingIOError:
                return
            if addr[2] == PACKET_OUTGOING or len(frame) < ESA_AT:
                continue
            try:
                self.sock.sendto(frame[ESA_AT:], self.ports[port])
            except OSError:
                continue


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.soak_bridge", description=__doc__)
    ap.add_argument("--socket-fd", type=int, required=True, metavar="FD")
    ap.add_argument("--port", action="append", type=parse_port, required=True)
    args = ap.parse_args(argv)
    bridge = Bridge(socket.socket(fileno=args.socket_fd), dict(args.port))
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: bridge.stop())
    print("ready", flush=True)
    try:
        bridge.run()
    finally:
        bridge.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
