"""A BMv2 switch (simple_switch_grpc) in a private network namespace.

Port ``i`` (1..n) of the switch is veth ``s<i>``; its peer ``h<i>`` is where a
test sends and receives frames.  P4Runtime is served on a unix socket (so a
client outside the namespace reaches it) and BMv2's Thrift server listens
only inside the namespace, where ``cli`` runs ``simple_switch_CLI``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from esa.toolchain import missing_binaries
from tests.netns import Namespace, drain, missing_root

ROOT = Path(__file__).resolve().parent.parent
THRIFT_PORT = 9090


def missing_bmv2() -> str | None:
    """Why a BMv2 test can't run here, or None."""
    return (
        missing_binaries("p4c-bm2-ss", "simple_switch_grpc", "simple_switch_CLI") or missing_root()
    )


class Bmv2Switch:
    """One simple_switch_grpc process with ``ports`` veth ports."""

    def __init__(self, ports: int, json_path: Path | None = None, device_id: int = 0) -> None:
        self.ports = ports
        self.json_path = json_path
        self.device_id = device_id
        self.workdir = Path(tempfile.mkdtemp(prefix="esa-bmv2-"))
        self.grpc_socket = self.workdir / "p4rt.sock"
        self.log = self.workdir / "switch.log"
        self.ns = Namespace("sw")
        for i in range(1, ports + 1):
            self.ns.add_veth(f"h{i}", f"s{i}")
        self.proc: subprocess.Popen[bytes] | None = None
        self._socks: dict[int, socket.socket] = {}

    @property
    def grpc_addr(self) -> str:
        return f"unix:{self.grpc_socket}"

    def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.grpc_socket.unlink()
        cmd = ["simple_switch_grpc", "--device-id", str(self.device_id)]
        for i in range(1, self.ports + 1):
            cmd += ["-i", f"{i}@s{i}"]
        # the notifications socket lives in the file system, not the namespace
        cmd += ["--thrift-port", str(THRIFT_PORT)]
        cmd += ["--notifications-addr", f"ipc://{self.workdir}/notifications.ipc"]
        cmd += [str(self.json_path)] if self.json_path else ["--no-p4"]
        cmd += ["--", "--grpc-server-addr", self.grpc_addr]
        self.proc = self.ns.popen(cmd, str(self.log))
        deadline = time.monotonic() + 20
        while not (self.grpc_socket.exists() and self._thrift_up()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"simple_switch_grpc did not start:\n{self.log.read_text()}")
            time.sleep(0.1)

    def _thrift_up(self) -> bool:
        try:
            self.ns.exec("bash", "-c", f"exec 3<>/dev/tcp/127.0.0.1/{THRIFT_PORT}")
        except RuntimeError:
            return False
        return True

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
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
        res = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                self.ns.name,
                "simple_switch_CLI",
                "--thrift-port",
                str(THRIFT_PORT),
            ],
            input=commands,
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
        if res.returncode != 0 or "Error" in res.stdout:
            raise RuntimeError(f"simple_switch_CLI failed:\n{commands}\n{res.stdout}{res.stderr}")
        return res.stdout
