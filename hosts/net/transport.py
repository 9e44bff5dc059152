"""Datagram transports: plain non-blocking UDP sockets, no Scapy.

Workers and the PS take any object with this shape, so tests can swap in
``testbed.simnet`` (a simulated switch and lossy links) for real sockets.
"""

from __future__ import annotations

import errno
import select
import socket
from collections.abc import Sequence
from typing import Protocol

Addr = tuple[str, int]
Bytes = bytes | bytearray | memoryview

SEND_ERRORS = frozenset(
    (errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EPERM, errno.ENOBUFS)
)
"""Errors a send may meet that lose one datagram, as loss would: counted in
``send_errors``, never raised (a PS must not die answering a datagram)."""


class Transport(Protocol):
    def send(self, data: Bytes, addr: Addr) -> None: ...

    def recv_into(self, buf: bytearray) -> tuple[int, Addr] | None:
        """One datagram into ``buf``, or None when none is waiting."""
        ...

    def wait(self, timeout: float) -> None:
        """Block until a datagram may be waiting or ``timeout`` seconds pass."""
        ...


class UdpTransport:
    """A UDP socket bound to ``bind``, or ``bind`` itself when it is a bound
    UDP socket (one a launcher bound and passed on, so that nobody has to
    guess a free port); sends never block for long, receives never block."""

    def __init__(
        self, bind: Addr | socket.socket, rcvbuf: int = 4 << 20, sndbuf: int = 4 << 20
    ) -> None:
        if isinstance(bind, socket.socket):
            self.sock = bind
        else:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            if (self.sock.family, self.sock.type) != (socket.AF_INET, socket.SOCK_DGRAM):
                raise OSError(errno.EPROTOTYPE, "not an IPv4 UDP socket")
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
            if not isinstance(bind, socket.socket):
                self.sock.bind(bind)
        except OSError:
            self.sock.close()
            raise
        self.sock.setblocking(False)
        self.send_errors = 0

    @property
    def addr(self) -> Addr:
        host, port = self.sock.getsockname()
        return str(host), int(port)

    def send(self, data: Bytes, addr: Addr) -> None:
        for _ in range(2):
            try:
                self.sock.sendto(data, addr)
                return
            except BlockingIOError:
                select.select([], [self.sock], [], 0.01)
            except OSError as e:
                if e.errno not in SEND_ERRORS:
                    raise
                break
        self.send_errors += 1

    def recv_into(self, buf: bytearray) -> tuple[int, Addr] | None:
        try:
            n, addr = self.sock.recvfrom_into(buf)
        except (BlockingIOError, ConnectionRefusedError):
            return None
        return n, (str(addr[0]), int(addr[1]))

    def wait(self, timeout: float) -> None:
        select.select([self.sock], [], [], max(0.0, timeout))

    def close(self) -> None:
        self.sock.close()


def wait_any(transports: Sequence[Transport], timeout: float) -> None:
    """Block until one of ``transports`` may hold a datagram or ``timeout`` passes.

    Sockets are waited on together (a worker's data and control sockets);
    other transports are given an equal share of ``timeout`` in turn.
    """
    socks = [t.sock for t in transports if isinstance(t, UdpTransport)]
    if len(socks) == len(transports) > 1:
        select.select(socks, [], [], max(0.0, timeout))
        return
    for t in transports:
        t.wait(timeout / len(transports))
