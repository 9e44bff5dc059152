"""BMv2 switches wired as a fabric (``controller.world.fabric``), in one private
network namespace.

Port ``p`` of the ``i``-th switch of the fabric (1-based, in the file's
order) is veth ``s<i>-<p>``.  A link of the fabric is a veth pair of two
such ends; a host's port is a pair whose other end, ``h<i>-<p>``, is where a
test sends and receives the host's frames by raw socket.  Each switch serves
P4Runtime on a unix socket of its own, so a client outside the namespace
reaches it, and Thrift on ``THRIFT_PORT + i - 1`` inside it.  Closing the rig
stops every switch and deletes the namespace, which takes every veth with it.
"""

from __future__ import annotations

import dataclasses
import shutil
import socket
import tempfile
from pathlib import Path
from types import TracebackType

from controller.world.fabric import Fabric
from runner.devices.bmv2 import THRIFT_PORT, Bmv2
from runner.devices.netns import Namespace, drain


class Bmv2Fabric:
    """A ``Bmv2`` per switch of ``fabric``, started empty for a controller to
    push the pipeline (or with ``json_path`` loaded)."""

    def __init__(self, fabric: Fabric, json_path: Path | None = None) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="esa-fabric-"))
        self.ns = Namespace("fab")
        self.switches: dict[str, Bmv2] = {}
        self._socks: dict[str, socket.socket] = {}
        self._index = {name: i for i, name in enumerate(fabric.devices, start=1)}
        ports: dict[str, list[int]] = {name: [] for name in fabric.devices}
        self._host_ends: dict[str, str] = {}
        try:
            for link in fabric.links:
                ports[link.switch].append(link.port)
                ports[link.peer].append(link.peer_port)
                self.ns.add_veth(
                    self._end(link.switch, link.port), self._end(link.peer, link.peer_port)
                )
            for name, h in fabric.hosts.items():
                home = fabric.home(name)
                ports[home].append(h.port)
                self._host_ends[name] = f"h{self._index[home]}-{h.port}"
                self.ns.add_veth(self._host_ends[name], self._end(home, h.port))
        except Exception:
            self.close()
            raise
        for name, device in fabric.devices.items():
            workdir = self.workdir / f"s{self._index[name]}"
            workdir.mkdir()
            self.switches[name] = Bmv2(
                {p: self._end(name, p) for p in ports[name]},
                f"unix:{workdir / 'p4rt.sock'}",
                workdir / "switch.log",
                workdir,
                json_path=json_path,
                device_id=device.device_id,
                thrift_port=THRIFT_PORT + self._index[name] - 1,
                netns=self.ns.name,
            )
        self.fabric = dataclasses.replace(
            fabric,
            devices={
                n: dataclasses.replace(d, p4runtime=self.switches[n].grpc_addr)
                for n, d in fabric.devices.items()
            },
        )
        """the fabric with each switch's P4Runtime address the rig's socket."""

    def _end(self, switch: str, port: int) -> str:
        return f"s{self._index[switch]}-{port}"

    def __enter__(self) -> Bmv2Fabric:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self, switch: str | None = None) -> None:
        """Start one switch, or every one not running."""
        for name in [switch] if switch else self.switches:
            if not self.switches[name].running:
                self.switches[name].start()

    def stop(self, switch: str, crash: bool = False) -> None:
        self.switches[switch].stop(crash)

    def restart(self, switch: str, crash: bool = False) -> None:
        """Stop and start one switch: it comes back without a pipeline (unless
        ``json_path`` was given) and without entries."""
        self.switches[switch].restart(crash)

    def close(self) -> None:
        for bmv2 in self.switches.values():
            bmv2.stop()
        for s in self._socks.values():
            s.close()
        self._socks.clear()
        self.ns.delete()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _sock(self, dev: str) -> socket.socket:
        if dev not in self._socks:
            self._socks[dev] = self.ns.raw_socket(dev)
        return self._socks[dev]

    def send(self, host: str, frame: bytes) -> None:
        """Send ``frame`` as ``host`` does, into its switch port."""
        self._sock(self._host_ends[host]).send(frame)

    def recv(self, host: str, timeout: float = 0.5, want: int | None = None) -> list[bytes]:
        """Frames the fabric delivered to ``host``."""
        return drain(self._sock(self._host_ends[host]), timeout, want)

    def inject(self, switch: str, port: int, frame: bytes) -> None:
        """Send ``frame`` into ``switch``'s port as the switch or host at the
        other end of its link would (the other switch does not take it:
        BMv2 reads only what comes in on its ports)."""
        peer = self.fabric.peer(switch, port)
        end = self._end(*peer) if peer else f"h{self._index[switch]}-{port}"
        self._sock(end).send(frame)

    def arrived(
        self, switch: str, port: int, timeout: float = 0.5, want: int | None = None
    ) -> list[bytes]:
        """Frames that came in on ``switch``'s port from its link or host
        (not those the switch sent out of it)."""
        return drain(self._sock(self._end(switch, port)), timeout, want)

    def flush(self) -> None:
        """Open every socket now (a frame sent before its socket opened is
        missed) and discard what waits on them."""
        for dev in self._host_ends.values():
            drain(self._sock(dev), 0.02)
        for name, bmv2 in self.switches.items():
            for port in bmv2.ports:
                drain(self._sock(self._end(name, port)), 0.02)

    def cli(self, switch: str, commands: str) -> str:
        """Thrift runtime commands (one per line) for one switch."""
        return self.switches[switch].cli(commands)
