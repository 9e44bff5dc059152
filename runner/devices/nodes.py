"""Mininet switches that run BMv2 (``runner.devices.bmv2.Bmv2``) or the reference
switch (``runner.devices.refproc.RefSwitch``) on their ports.

Either starts with no program (BMv2's ``--no-p4``); the controller pushes
the pipeline over P4Runtime.  Port numbers are those the links were added
with (``addLink(..., port2=N)``), and the switch's interfaces are
``<name>-eth<N>``.  The switch runs in the network namespace Mininet itself
runs in (the run's private world), so its P4Runtime (and BMv2's Thrift)
ports are on that 127.0.0.1: several switches of one network each take
their own ports and device id.  Its output goes to ``<log_dir>/<name>.log``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mininet.node import Switch

from runner.devices.bmv2 import THRIFT_PORT, Bmv2
from runner.devices.refproc import RefSwitch


def _ports(switch: Switch) -> dict[int, str]:
    return {port: intf.name for port, intf in switch.intfs.items() if intf.name != "lo"}


class Bmv2MininetSwitch(Switch):  # type: ignore[misc]
    """``pcap_dir``: BMv2 writes ``<name>-eth<N>_{in,out}.pcap`` there;
    ``trace``: it logs each packet's way through the pipeline."""

    def __init__(
        self,
        name: str,
        grpc_addr: str = "127.0.0.1:9559",
        device_id: int = 0,
        thrift_port: int = THRIFT_PORT,
        log_dir: str = ".",
        work_dir: str = ".",
        pcap_dir: str | None = None,
        trace: bool = False,
        **params: Any,
    ) -> None:
        super().__init__(name, **params)
        self.grpc_addr = grpc_addr
        self.device_id = device_id
        self.thrift_port = thrift_port
        self.log_file = Path(log_dir) / f"{name}.log"
        self.work_dir = Path(work_dir)
        self.pcap_dir = Path(pcap_dir) if pcap_dir else None
        self.trace = trace
        self.bmv2: Bmv2 | None = None

    def start(self, controllers: list[Any]) -> None:
        self.bmv2 = Bmv2(
            _ports(self),
            self.grpc_addr,
            self.log_file,
            self.work_dir,
            device_id=self.device_id,
            thrift_port=self.thrift_port,
            pcap_dir=self.pcap_dir,
            trace=self.trace,
        )
        self.bmv2.start()

    def restart(self, crash: bool = False) -> None:
        assert self.bmv2 is not None
        self.bmv2.restart(crash)

    def cli_command(self) -> list[str]:
        """BMv2's runtime CLI (Thrift) for this switch: register reads."""
        assert self.bmv2 is not None
        return self.bmv2.cli_command()

    def halt(self) -> None:
        """Stop the switch process, leaving the interfaces to Mininet."""
        if self.bmv2 is not None:
            self.bmv2.stop()
        self.bmv2 = None

    def stop(self, deleteIntfs: bool = True) -> None:
        self.halt()
        super().stop(deleteIntfs)


class RefMininetSwitch(Switch):  # type: ignore[misc]
    """The reference switch with a pool of ``pool`` slots (it has no Thrift:
    its registers are read over P4Runtime; it writes no captures itself)."""

    def __init__(
        self,
        name: str,
        pool: int,
        grpc_addr: str = "127.0.0.1:9559",
        device_id: int = 0,
        log_dir: str = ".",
        **params: Any,
    ) -> None:
        super().__init__(name, **params)
        self.pool = pool
        self.grpc_addr = grpc_addr
        self.device_id = device_id
        self.log_file = Path(log_dir) / f"{name}.log"
        self.ref: RefSwitch | None = None

    def start(self, controllers: list[Any]) -> None:
        self.ref = RefSwitch(
            _ports(self), self.grpc_addr, self.log_file, self.pool, device_id=self.device_id
        )
        self.ref.start()

    def restart(self, crash: bool = False) -> None:
        assert self.ref is not None
        self.ref.restart(crash)

    def halt(self) -> None:
        """Stop the switch process, leaving the interfaces to Mininet."""
        if self.ref is not None:
            self.ref.stop()
        self.ref = None

    def stop(self, deleteIntfs: bool = True) -> None:
        self.halt()
        super().stop(deleteIntfs)
