"""The reference switch's ports and the loop that moves frames through them:
one AF_PACKET socket per port (the port in promiscuous mode, frames it sends
itself ignored), read and written by one thread, each frame through the
device's ``refswitch.frames.Pipeline``.  One thread because the model's
rules are sequential, and it keeps every port's output in arrival order.
The clock is microseconds since the switch started, as BMv2's
``ingress_global_timestamp``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import struct
import time

from refswitch.server import ServedDevice

log = logging.getLogger("refswitch")

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_IGNORE_OUTGOING = 23
PACKET_OUTGOING = 4
RCVBUF = 4 << 20
BURST = 64
"""Frames taken from one port before the others get a turn."""


def open_port(iface: str) -> socket.socket:
    """A raw socket on ``iface``: every frame that arrives there, none it sends."""
    # protocol 0 until bound: an ETH_P_ALL socket would queue every
    # interface's frames until bind() narrows it to one
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        sock.bind((iface, ETH_P_ALL))
        mreq = struct.pack("iHH8s", socket.if_nametoindex(iface), PACKET_MR_PROMISC, 0, b"")
        sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
    except OSError:
        sock.close()
        raise
    with contextlib.suppress(OSError):  # Linux < 4.20: DataPath skips them by type
        sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    sock.setblocking(False)
    return sock


class DataPath:
    """The ports and the loop that moves frames through ``device.pipeline``."""

    def __init__(self, device: ServedDevice, ifaces: dict[int, str]) -> None:
        self.device = device
        self.ports: dict[int, socket.socket] = {}
        self._wake_r, self._wake_w = os.pipe()
        for port, iface in ifaces.items():
            try:
                self.ports[port] = open_port(iface)
            except OSError as e:
                self.close()
                raise OSError(e.errno, f"port {port}@{iface}: {e.strerror}") from None
        self.start_ns = time.monotonic_ns()
        self.frames_in = self.frames_out = self.send_errors = 0

    def stop(self) -> None:
        """Make ``run`` return (from any thread or a signal handler)."""
        os.write(self._wake_w, b"x")

    def close(self) -> None:
        for sock in self.ports.values():
            sock.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def run(self) -> None:
        poller = select.poll()
        by_fd = {sock.fileno(): (port, sock) for port, sock in self.ports.items()}
        for fd in by_fd:
            poller.register(fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while True:
            for fd, _ in poller.poll():
                if fd == self._wake_r:
                    return
                self._drain(*by_fd[fd])

    def _drain(self, port: int, sock: socket.socket) -> None:
        for _ in range(BURST):
            try:
                frame, addr = sock.recvfrom(65535)
            except BlockingIOError:
                return
            except OSError as e:  # the link went down or away: the switch runs on
                log.warning("port %d: %s", port, e.strerror)
                return
            if addr[2] == PACKET_OUTGOING:
                continue
            self.frames_in += 1
            pipeline = self.device.pipeline
            if pipeline is None:
                continue
            now_us = (time.monotonic_ns() - self.start_ns) // 1000
            for out_port, out in pipeline.process(port, frame, now_us):
                egress = self.ports.get(out_port)
                if egress is None:
                    continue
                try:
                    egress.send(out)
                    self.frames_out += 1
                except OSError:  # a full or downed port drops, as a switch does
                    self.send_errors += 1
