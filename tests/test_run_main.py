"""``make run``'s refusals before anything starts (exit status 2, one line),
and the switch command lines its flags give."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner import main as run_main
from runner.devices.bmv2 import Bmv2
from runner.network import TOPOLOGIES


def refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert run_main.main(list(argv)) == 2
    out, err = capsys.readouterr()
    assert out == ""
    return err


def test_a_topology_too_small_for_the_jobs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topo = json.loads((TOPOLOGIES / "single.json").read_text())
    topo["hosts"] = {f"h{i}": topo["hosts"][f"h{i}"] for i in range(1, 6)}
    path = tmp_path / "five.json"
    path.write_text(json.dumps(topo))
    assert refusal(capsys, "--topology", str(path)) == (
        "run: the jobs need 15 hosts (workers and PSes), topology five has 5: "
        "use a larger topology or fewer jobs\n"
    )


def test_an_unknown_topology(capsys: pytest.CaptureFixture[str]) -> None:
    known = ", ".join(sorted(p.stem for p in TOPOLOGIES.glob("*.json")))
    assert "single" in known.split(", ")
    assert refusal(capsys, "--topology", "ring") == (
        f"run: topology ring: no file {TOPOLOGIES}/ring.json (known topologies: {known})\n"
    )


def test_trace_needs_bmv2(capsys: pytest.CaptureFixture[str]) -> None:
    assert refusal(capsys, "--switch", "model", "--trace") == (
        "run: --trace: the reference switch logs no packet trace; --switch bmv2\n"
    )


def test_bmv2_command_with_captures_and_trace(tmp_path: Path) -> None:
    sw = Bmv2({1: "s1-eth1", 2: "s1-eth2"}, "127.0.0.1:9559", tmp_path / "s1.log", tmp_path,
              pcap_dir=tmp_path / "pcaps", trace=True)  # fmt: skip
    assert sw.command() == [
        "simple_switch_grpc", "--device-id", "0", "-i", "1@s1-eth1", "-i", "2@s1-eth2",
        "--thrift-port", "9090", "--notifications-addr", f"ipc://{tmp_path}/notifications.ipc",
        f"--pcap={tmp_path}/pcaps", "--log-console", "--log-level", "trace", "--no-p4",
        "--", "--grpc-server-addr", "127.0.0.1:9559",
    ]  # fmt: skip
    plain = Bmv2({1: "s1-eth1"}, "127.0.0.1:9559", tmp_path / "s1.log", tmp_path)
    assert "--log-console" not in plain.command()
    assert not any(a.startswith("--pcap") for a in plain.command())
