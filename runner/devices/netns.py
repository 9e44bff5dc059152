"""Private network namespaces and veth links for tests and benchmarks.

Everything a test creates is named after its process id and removed by name
on exit; nothing outside the namespace is touched.  Sockets are opened inside
a namespace by switching only the calling thread into it (setns) while the
socket is created; the socket stays bound to that namespace afterwards.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator

CLONE_NEWNET = 0x40000000
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4

_libc = ctypes.CDLL(None, use_errno=True)


def missing_root() -> str | None:
    """Why namespaces can't be made here, or None."""
    if os.geteuid() != 0:
        return "needs root for network namespaces"
    if shutil.which("ip") is None:
        return "needs 'ip' (iproute2)"
    return None


def run(*cmd: str) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {res.stderr.strip()}")
    return res.stdout


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def entered(name: str) -> Iterator[None]:
    """Run the body with this thread inside namespace ``name``."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(own)
    finally:
        os.close(own)
        os.close(target)


class Namespace:
    """A network namespace with veth pairs ``h<i>`` <-> ``s<i>`` inside it."""

    _serial = 0

    def __init__(self, tag: str = "t") -> None:
        Namespace._serial += 1
        self.name = f"esa-{tag}{os.getpid()}-{Namespace._serial}"
        run("ip", "netns", "add", self.name)
        self.exec("sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
        self.exec("sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1")
        self.exec("ip", "link", "set", "lo", "up")

    def exec(self, *cmd: str) -> str:
        return run("ip", "netns", "exec", self.name, *cmd)

    def popen(self, cmd: list[str], log: str) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            return subprocess.Popen(
                ["ip", "netns", "exec", self.name, *cmd],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def add_veth(self, host: str, switch: str, mtu: int = 1500) -> None:
        self.exec("ip", "link", "add", host, "type", "veth", "peer", "name", switch)
        for dev in (host, switch):
            self.exec("ip", "link", "set", dev, "mtu", str(mtu), "up")
            # checksum offload would leave UDP checksums unfilled on the wire
            with contextlib.suppress(RuntimeError):
                self.exec("ethtool", "-K", dev, "tx", "off", "rx", "off")

    def add_uplink(self, outside: str, inside: str) -> None:
        """A veth pair from the caller's namespace (``outside``) into this one
        (``inside``); deleting the namespace deletes both ends."""
        run("ip", "link", "add", outside, "type", "veth", "peer", inside, "netns", self.name)

    def raw_socket(self, dev: str) -> socket.socket:
        with entered(self.name):
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            s.bind((dev, 0))
        s.setblocking(False)
        return s

    def delete(self) -> None:
        subprocess.run(["ip", "netns", "delete", self.name], capture_output=True, check=False)


def drain(sock: socket.socket, timeout: float, want: int | None = None) -> list[bytes]:
    """Frames arriving on ``sock`` (not those sent from it) until ``timeout``
    passes, or until ``want`` frames have arrived."""
    frames: list[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (want is None or len(frames) < want):
        try:
            data, addr = sock.recvfrom(65535)
        except BlockingIOError:
            time.sleep(0.002)
            continue
        if addr[2] != PACKET_OUTGOING:
            frames.append(data)
    return frames
