"""A BMv2 switch whose ports are veth pairs in a private network namespace.

Port ``i`` (1..n) of the switch is veth ``s<i>``; its peer ``h<i>`` is where a
test or benchmark sends and receives frames through raw sockets.  P4Runtime
is served on a unix socket, so a client outside the namespace reaches it.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
from pathlib import Path

from runner.devices.bmv2 import Bmv2
from runner.devices.netns import Namespace, drain


class Bmv2Switch:
    """A ``Bmv2`` with ``ports`` veth ports, and raw sockets on their peers."""

    def __init__(self, ports: int, json_path: Path | None = None, device_id: int = 0) -> None:
        self.ports = ports
        self.device_id = device_id
        self.workdir = Path(tempfile.mkdtemp(prefix="esa-bmv2-"))
        self.ns = Namespace("sw")
        for i in range(1, ports + 1):
            self.ns.add_veth(f"h{i}", f"s{i}")
        self.bmv2 = Bmv2(
            {i: f"s{i}" for i in range(1, ports + 1)},
            f"unix:{self.workdir / 'p4rt.sock'}",
            self.workdir / "switch.log",
            self.workdir,
            json_path=json_path,
            device_id=device_id,
            netns=self.ns.name,
        )
        self._socks: dict[int, socket.socket] = {}

    @property
    def grpc_addr(self) -> str:
        return self.bmv2.grpc_addr

    def start(self) -> None:
        self.bmv2.start()

    def stop(self) -> None:
        self.bmv2.stop()

    def restart(self) -> None:
        self.bmv2.restart()

    def close(self) -> None:
        self.bmv2.stop()
        for s in self._socks.values():
            s.close()
        self._socks.clear()
        self.ns.delete()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def sock(self, port: int) -> socket.socket:
        if port not in self._socks:
            self._socks[port] = self.ns.raw_socket(f"h{port}")
        return self._socks[port]

    def send(self, port: int, frame: bytes) -> None:
        self.sock(port).send(frame)

    def recv(self, port: int, timeout: float = 0.5, want: int | None = None) -> list[bytes]:
        return drain(self.sock(port), timeout, want)

    def flush(self) -> None:
        """Discard frames waiting on every port."""
        for p in range(1, self.ports + 1):
            drain(self.sock(p), 0.05)

    def cli(self, commands: str) -> str:
        """Run Thrift runtime commands (one per line) inside the namespace."""
        return self.bmv2.cli(commands)
