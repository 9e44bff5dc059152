"""The reference switch on 127.0.0.1: its P4Runtime server and its pipeline
(``refswitch.server``, ``refswitch.frames``) behind one UDP socket
instead of raw interfaces, as a process a test bed can kill and start again.

    python -m testbed.loopref --socket-fd 5 --port 1@127.0.0.1:40001 \\
        --port 2@127.0.0.1:40002 --grpc unix:/tmp/x/p4rt.sock --pool 64

Hosts send their ESA datagrams to the switch's socket (``--socket-fd``, a
bound UDP socket the launcher holds and passes on, so that a restarted
switch is found where the last one was); each ``--port N@HOST:PORT`` says
that switch port ``N`` is the host whose socket is ``HOST:PORT``.  A
datagram from such a socket enters the pipeline on port ``N`` as the frame
that host would have sent (Ethernet, IPv4, UDP to ``wire.UDP_PORT``, the
datagram); a frame the pipeline sends out of port ``N`` is delivered to
that socket without its headers.  Datagrams from other sockets, and frames
for ports no host is on, are dropped.

The control plane is the reference switch's own: it starts with no program
(``esa-ctl serve --no-p4json`` pushes one), serves the P4Runtime subset the
controller uses on ``--grpc`` and reads of the slot registers.  It prints
the address it serves P4Runtime on, and stops with status 0 on SIGINT or
SIGTERM.  Only the frames' way in and out differs from ``esa-refswitch``:
the parsing, the tables, the rules (``esa.model``) and the rewrites are the
same code.
"""

from __future__ import annotations

import argparse
import logging
import os
import select
import signal
import socket
import struct
import sys
import time
from collections.abc import Iterator, Mapping, Sequence

from esa import wire
from esa.arguments import DEVICE_ID, POOL_SIZE, Parser
from refswitch.frames import ESA_AT
from refswitch.main import DROP_PORT, parse_grpc
from refswitch.server import ServedDevice, serve

log = logging.getLogger("loopref")

Addr = tuple[str, int]
BURST = 64
"""Datagrams taken before the stop pipe is looked at again."""
IPV4 = struct.Struct("!BBHHHBBH4s4s")
UDP = struct.Struct("!HHHH")


def ingress_frame(src: Addr, datagram: bytes) -> bytes:
    """The frame a host on socket ``src`` sends to the switch: Ethernet and
    IPv4 from its loopback address, UDP from its port to the ESA port."""
    udp_len = UDP.size + len(datagram)
    ip = IPV4.pack(0x45, 0, IPV4.size + udp_len, 0, 0x4000, 64, 17, 0,
                   socket.inet_aton(src[0]), socket.inet_aton("127.0.0.1"))  # fmt: skip
    eth = b"\x02\x00\x00\x00\x00\xfe" + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00"
    return eth + ip + UDP.pack(src[1], wire.UDP_PORT, udp_len, 0) + datagram


def host_datagrams(
    sock: socket.socket, port_of: Mapping[Addr, int]
) -> Iterator[tuple[int | None, Addr, bytes]]:
    """Up to ``BURST`` datagrams waiting on the switch's socket, each with
    the port of the host socket that sent it (None: no host's)."""
    for _ in range(BURST):
        try:
            data, src = sock.recvfrom(65535)
        except (BlockingIOError, ConnectionRefusedError):
            return
        yield port_of.get((str(src[0]), int(src[1]))), src, data


class UdpDataPath:
    """One UDP socket for every port: ``ports`` maps a switch port to the
    host socket on it."""

    def __init__(self, device: ServedDevice, sock: socket.socket, ports: dict[int, Addr]) -> None:
        self.device = device
        self.sock = sock
        self.sock.setblocking(False)
        self.ports = dict(ports)
        self.port_of = {addr: port for port, addr in ports.items()}
        self._wake_r, self._wake_w = os.pipe()
        self.start_ns = time.monotonic_ns()
        self.frames_in = self.frames_out = self.strangers = self.send_errors = 0

    def stop(self) -> None:
        """Make ``run`` return (from any thread or a signal handler)."""
        os.write(self._wake_w, b"x")

    def close(self) -> None:
        os.close(self._wake_r)
        os.close(self._wake_w)

    def run(self) -> None:
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while True:
            for fd, _ in poller.poll():
                if fd == self._wake_r:
                    return
                self._drain()

    def _drain(self) -> None:
        for port, src, data in host_datagrams(self.sock, self.port_of):
            if port is None:
                self.strangers += 1
                continue
            self.frames_in += 1
            pipeline = self.device.pipeline
            if pipeline is None:
                continue
            now_us = (time.monotonic_ns() - self.start_ns) // 1000
            for out_port, frame in pipeline.process(port, ingress_frame(src, data), now_us):
                to = self.ports.get(out_port)
                if to is None or len(frame) < ESA_AT:
                    continue
                try:
                    self.sock.sendto(frame[ESA_AT:], to)
                    self.frames_out += 1
                except OSError:  # a full socket buffer drops, as a full port does
                    self.send_errors += 1


def parse_port(text: str) -> tuple[int, Addr]:
    port, sep, addr = text.partition("@")
    host, colon, udp = addr.rpartition(":")
    ok = sep and colon and port.isdigit() and udp.isdigit() and 0 < int(port) < DROP_PORT
    if not ok or not 0 < int(udp) < 65536:
        raise argparse.ArgumentTypeError(
            f"expected PORT@HOST:UDPPORT with PORT 1..{DROP_PORT - 1}, got {text!r}"
        )
    try:
        socket.inet_aton(host)
    except OSError:
        raise argparse.ArgumentTypeError(f"{host!r} is no IPv4 address") from None
    return int(port), (host, int(udp))


def parser() -> argparse.ArgumentParser:
    ap = Parser(prog="python -m testbed.loopref", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--socket-fd", type=int, required=True, metavar="FD",
        help="the switch's bound UDP socket, inherited",
    )  # fmt: skip
    ap.add_argument(
        "--port", action="append", type=parse_port, required=True, metavar="N@HOST:PORT",
        help="switch port N is the host socket HOST:PORT (repeat per port)",
    )  # fmt: skip
    ap.add_argument("--grpc", type=parse_grpc, required=True, metavar="ADDR")
    ap.add_argument("--device-id", type=DEVICE_ID, default=0, metavar="N")
    ap.add_argument("--pool", type=POOL_SIZE, required=True, metavar="N")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    ports = dict(args.port)
    if len(ports) != len(args.port) or len(set(ports.values())) != len(ports):
        ap.error("a port or host socket is given twice")
    try:
        sock = socket.socket(fileno=args.socket_fd)
    except OSError as e:
        ap.error(f"--socket-fd {args.socket_fd}: {e.strerror}")
    if (sock.family, sock.type) != (socket.AF_INET, socket.SOCK_DGRAM):
        ap.error(f"--socket-fd {args.socket_fd} is no IPv4 UDP socket")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s loopref %(message)s")
    device = ServedDevice(args.device_id, args.pool)
    datapath = UdpDataPath(device, sock, ports)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: datapath.stop())
    try:
        server, bound = serve(device, args.grpc)
    except (OSError, RuntimeError) as e:
        datapath.close()
        print(f"loopref: error: P4Runtime on {args.grpc}: {e}", file=sys.stderr)
        return 1
    host, port = sock.getsockname()
    log.info("%d ports on %s:%d, pool %d, P4Runtime on %s", len(ports), host, port,
             args.pool, bound)  # fmt: skip
    print(bound, flush=True)
    try:
        datapath.run()
    finally:
        server.stop(grace=1).wait()
        datapath.close()
        log.info(
            "stopped: %d datagrams in, %d out, %d from strangers, %d not sent",
            datapath.frames_in, datapath.frames_out, datapath.strangers, datapath.send_errors,
        )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
