"""Per-port captures of a switch that writes none itself (the reference switch).

BMv2 writes ``<interface>_in.pcap`` (frames the port received) and
``<interface>_out.pcap`` (frames it sent) with ``--pcap``; for the reference
switch one tcpdump per port and direction writes the same files, from the
switch's side of each link.  tcpdump runs as root (``-Z root``) so it can
write where the run's results go, and flushes each frame (``-U``), so the
files are whole whenever the run stops.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

START_TIMEOUT_S = 10.0


def pcap_name(iface: str, direction: str) -> str:
    """BMv2's name for a port's capture: ``s1-eth1_in.pcap``."""
    return f"{iface}_{direction}.pcap"


class Capture:
    def __init__(self, ifaces: list[str], out: Path, log: Path) -> None:
        if shutil.which("tcpdump") is None:
            raise RuntimeError("--pcap on the reference switch needs tcpdump (make setup)")
        out.mkdir(parents=True, exist_ok=True)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.files: list[Path] = []
        with open(log, "ab") as err:
            for iface in ifaces:
                for direction in ("in", "out"):
                    path = out / pcap_name(iface, direction)
                    cmd = ["tcpdump", "-i", iface, "-Q", direction, "-U", "-Z", "root",
                           "-s", "0", "-w", str(path)]  # fmt: skip
                    self.procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err))
                    self.files.append(path)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not all(f.exists() for f in self.files):
            if any(p.poll() is not None for p in self.procs) or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"tcpdump did not start; see {log}")
            time.sleep(0.05)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []
