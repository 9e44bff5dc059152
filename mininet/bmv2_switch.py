"""A Mininet switch that runs BMv2's simple_switch_grpc.

The switch starts with no program (``--no-p4``); the controller pushes the
pipeline over P4Runtime.  Port numbers are Mininet's (1, 2, ...), so a
host's link to the switch is port ``i`` when it was added ``i``-th.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from mininet.node import Switch


class Bmv2Switch(Switch):  # type: ignore[misc]
    def __init__(
        self,
        name: str,
        grpc_addr: str = "127.0.0.1:9559",
        thrift_port: int = 9090,
        log_dir: str = ".",
        work_dir: str = ".",
        **params: Any,
    ) -> None:
        super().__init__(name, **params)
        self.grpc_addr = grpc_addr
        self.thrift_port = thrift_port
        self.log_file = Path(log_dir) / f"{name}.log"
        self.notifications = f"ipc://{Path(work_dir).resolve()}/{name}-notifications.ipc"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, controllers: list[Any]) -> None:
        cmd = ["simple_switch_grpc", "--device-id", "0", "--thrift-port", str(self.thrift_port)]
        # BMv2's default notifications socket is a shared file in /tmp
        cmd += ["--notifications-addr", self.notifications]
        for port, intf in self.intfs.items():
            if intf.name != "lo":
                cmd += ["-i", f"{port}@{intf.name}"]
        cmd += ["--no-p4", "--", "--grpc-server-addr", self.grpc_addr]
        with open(self.log_file, "wb") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        host, port = self.grpc_addr.rsplit(":", 1)
        deadline = time.monotonic() + 20
        while subprocess.run(
            ["bash", "-c", f"exec 3<>/dev/tcp/{host}/{port}"], capture_output=True, check=False
        ).returncode:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"simple_switch_grpc did not start; see {self.log_file}")
            time.sleep(0.1)

    def stop(self, deleteIntfs: bool = True) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None
        super().stop(deleteIntfs)
