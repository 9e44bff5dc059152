"""The controller's P4Runtime request log (``esa-ctl serve --p4rt-log``),
against the reference switch in this process."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from controller.device.p4rt import Session
from controller.device.switch import P4RuntimeSwitch
from controller.errors import SwitchError
from esa.target import device_config
from refswitch.server import ServedDevice, serve
from runner.switches import COMMITTED_P4INFO
from tests.test_controller_cli import esa_ctl_here, serve_argv, serve_inputs, tree

POOL = 8
STAMP = r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\] "


@pytest.fixture
def switch_addr(tmp_path: Path) -> Iterator[str]:
    addr = f"unix:{tmp_path}/p4rt.sock"
    server, bound = serve(ServedDevice(0, POOL), addr)
    assert bound == addr
    yield addr
    server.stop(None)


def test_every_request_is_logged_with_its_refusal(tmp_path: Path, switch_addr: str) -> None:
    log = tmp_path / "s1-p4runtime-requests.txt"
    config = tmp_path / "model.json"
    config.write_bytes(device_config(POOL))
    sw = P4RuntimeSwitch(Session(switch_addr, 0, (0, 7), True, log))
    sw.push_pipeline(config, COMMITTED_P4INFO)
    sw.create_group(5, [(1, 2)])
    with pytest.raises(SwitchError, match="Multicast group already exists"):
        sw.create_group(5, [(1, 3)])
    assert sw.read_entries().groups == {5: frozenset({(1, 2)})}
    sw.close()

    text = log.read_text()
    calls = re.findall(STAMP + r"/p4\.v1\.P4Runtime/(\w+)$", text, re.MULTILINE)
    assert calls[:4] == [
        "GetForwardingPipelineConfig",
        "SetForwardingPipelineConfig",
        "Write",
        "Write",
    ]
    assert set(calls[4:]) == {"Read"}
    entries = text.split("---\n")
    assert entries[1] == ""  # the first Get asks for everything: all fields at their defaults
    assert entries[2].startswith(
        "=> refused: FAILED_PRECONDITION: No forwarding pipeline config set for this device\n"
    )
    pipeline = entries[3]
    info = text_format.Parse(COMMITTED_P4INFO.read_text(), p4info_pb2.P4Info())
    assert pipeline.startswith(
        f"# p4info: {len(info.tables)} tables, {len(info.actions)} actions, "
        f"{len(info.counters)} counters, {len(info.registers)} registers; p4_device_config: "
        f"{len(device_config(POOL))} bytes (not shown)\n"
    )
    assert "election_id {\n  low: 7\n}\naction: VERIFY_AND_COMMIT\n" in pipeline
    assert "p4_device_config" not in pipeline.split("\n", 1)[1]

    def group(instance: int) -> str:
        return (
            "election_id {\n  low: 7\n}\nupdates {\n  type: INSERT\n  entity {\n"
            "    packet_replication_engine_entry {\n      multicast_group_entry {\n"
            "        multicast_group_id: 5\n        replicas {\n          egress_port: 1\n"
            f"          instance: {instance}\n        }}\n      }}\n    }}\n  }}\n}}\n"
        )

    assert (entries[5], entries[7]) == (group(2), group(3))
    assert entries[8].startswith("=> refused: UNKNOWN: Multicast group already exists\n")


def test_serve_refuses_a_log_in_no_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    serve_inputs(tmp_path)
    before = tree(tmp_path)
    argv = serve_argv(tmp_path, p4rt_log=str(tmp_path / "no" / "log.txt"))
    assert esa_ctl_here(capsys, argv) == (
        1,
        "",
        f"esa-ctl: error: P4Runtime request log {tmp_path}/no/log.txt: no directory\n",
    )
    assert tree(tmp_path) == before
