"""One BMv2 process (simple_switch_grpc): start, stop, crash, restart, Thrift CLI.

Tests, benchmarks and the Mininet run all start BMv2 through ``Bmv2``; they
differ only in where its ports are (veths in a test's namespace, or the
links of a Mininet topology) and where P4Runtime is served (a unix socket a
client outside the namespace can reach, or TCP inside the run's world).
BMv2's Thrift server, which the runtime CLI and register reads need,
listens on 127.0.0.1 of the switch's network namespace.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from esa.toolchain import missing_binaries
from runner.devices.netns import missing_root
from runner.devices.process import SwitchProcess

THRIFT_PORT = 9090


def missing_bmv2() -> str | None:
    """Why a BMv2 test can't run here, or None."""
    return (
        missing_binaries("p4c-bm2-ss", "simple_switch_grpc", "simple_switch_CLI") or missing_root()
    )


class Bmv2(SwitchProcess):
    """A simple_switch_grpc process with ``ports`` (switch port -> interface).

    ``netns``: the named network namespace it runs in (None: the caller's).
    ``json_path``: a program to load at start; None starts it empty
    (``--no-p4``) for a controller to push the pipeline.  Its output is
    appended to ``log``, so a restart keeps what the crash left there.
    ``pcap_dir``: where BMv2 writes ``<interface>_in.pcap`` and
    ``<interface>_out.pcap`` for each port (None: no captures).  ``trace``:
    BMv2 logs every packet's way through the pipeline to ``log`` (slow).
    """

    what = "simple_switch_grpc"

    def __init__(
        self,
        ports: Mapping[int, str],
        grpc_addr: str,
        log: Path,
        workdir: Path,
        json_path: Path | None = None,
        device_id: int = 0,
        thrift_port: int = THRIFT_PORT,
        netns: str | None = None,
        pcap_dir: Path | None = None,
        trace: bool = False,
    ) -> None:
        super().__init__(grpc_addr, log, netns)
        self.ports = dict(ports)
        self.workdir = workdir
        self.json_path = json_path
        self.device_id = device_id
        self.thrift_port = thrift_port
        self.pcap_dir = pcap_dir
        self.trace = trace

    def command(self) -> list[str]:
        cmd = ["simple_switch_grpc", "--device-id", str(self.device_id)]
        for port, intf in sorted(self.ports.items()):
            cmd += ["-i", f"{port}@{intf}"]
        cmd += ["--thrift-port", str(self.thrift_port)]
        # BMv2's default notifications socket is one shared file in /tmp
        cmd += ["--notifications-addr", f"ipc://{self.workdir.resolve()}/notifications.ipc"]
        if self.pcap_dir is not None:
            cmd.append(f"--pcap={self.pcap_dir.resolve()}")
        if self.trace:
            cmd += ["--log-console", "--log-level", "trace"]
        cmd += [str(self.json_path)] if self.json_path else ["--no-p4"]
        return [*cmd, "--", "--grpc-server-addr", self.grpc_addr]

    def addresses(self) -> list[str]:
        """P4Runtime and Thrift, which the runtime CLI and register reads need."""
        return [self.grpc_addr, f"127.0.0.1:{self.thrift_port}"]

    def cli_command(self) -> list[str]:
        """The command line of BMv2's runtime CLI for this switch."""
        return self.in_ns(["simple_switch_CLI", "--thrift-port", str(self.thrift_port)])

    def cli(self, commands: str) -> str:
        """Run Thrift runtime commands (one per line); raises on any error."""
        res = subprocess.run(
            self.cli_command(),
            input=commands,
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
        if res.returncode != 0 or "Error" in res.stdout:
            raise RuntimeError(f"simple_switch_CLI failed:\n{commands}\n{res.stdout}{res.stderr}")
        return res.stdout
