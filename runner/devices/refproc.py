"""One reference switch process (``python -m refswitch.main``), started
and stopped as ``runner.devices.bmv2.Bmv2`` starts and stops BMv2 (both are a
``runner.devices.process.SwitchProcess``), so a test bed can run either switch on
the same ports."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from runner.devices.process import SwitchProcess
from runner.paths import ROOT


class RefSwitch(SwitchProcess):
    """A reference switch with ``ports`` (switch port -> interface) and a
    slot pool of ``pool`` slots.

    ``netns``: the named network namespace it runs in (None: the caller's).
    ``p4info``: a P4Info to start with; None starts it empty, as BMv2's
    ``--no-p4``.  Its output is appended to ``log``.
    """

    what = "the reference switch"

    def __init__(
        self,
        ports: Mapping[int, str],
        grpc_addr: str,
        log: Path,
        pool: int,
        p4info: Path | None = None,
        device_id: int = 0,
        netns: str | None = None,
    ) -> None:
        super().__init__(grpc_addr, log, netns, cwd=ROOT)
        self.ports = dict(ports)
        self.pool = pool
        self.p4info = p4info
        self.device_id = device_id

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "refswitch.main", "--device-id", str(self.device_id)]
        cmd += [f"--iface={port}@{intf}" for port, intf in sorted(self.ports.items())]
        cmd += ["--grpc", self.grpc_addr, "--pool", str(self.pool)]
        return cmd + (["--p4info", str(self.p4info)] if self.p4info else [])
