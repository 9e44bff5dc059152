"""Three BMv2 switches wired as tests/data/two-racks.json
(testbed/bmv2_fabric.py), each programmed through the controller's switch
API with the L2 entries of the hosts as that switch sees them
(``Fabric.hosts_as_seen_by``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from controller.device.entries import L2Entry, SwitchEntries
from controller.device.switch import Change, Kind, P4RuntimeSwitch
from controller.world.fabric import Fabric
from controller.world.topology import mac_to_int
from esa.target import Op
from esa.toolchain import compile_p4
from runner.paths import ROOT
from testbed.bmv2_fabric import Bmv2Fabric
from tests.wait import LIMIT_S

pytestmark = pytest.mark.bmv2

TWO_TIER = ROOT / "tests" / "data" / "two-racks.json"
POOL = 16
Program = tuple[Path, Path]


def l2_entries(fabric: Fabric, switch: str) -> SwitchEntries:
    out = SwitchEntries()
    for h in fabric.hosts_as_seen_by(switch):
        out.l2[mac_to_int(h.mac)] = L2Entry(port=h.port)
    return out


def program_switch(rig: Bmv2Fabric, switch: str, program: Program) -> P4RuntimeSwitch:
    """Push the pipeline and the switch's L2 entries, and nothing else."""
    device = rig.fabric.devices[switch]
    sw = P4RuntimeSwitch.connect(device.p4runtime, device.device_id)
    sw.push_pipeline(*program)
    entries = l2_entries(rig.fabric, switch)
    sw.apply([Change(Kind.L2, Op.INSERT, mac, e) for mac, e in entries.l2.items()])
    return sw


class Net:
    def __init__(self, rig: Bmv2Fabric, program: Program) -> None:
        self.rig = rig
        self.program = program
        self.sessions = {name: program_switch(rig, name, program) for name in rig.switches}

    def heard(self, hosts: list[str]) -> dict[str, list[bytes]]:
        """The frames that reached any of ``hosts``, by host (a failure names them)."""
        return {h: got for h in hosts if (got := self.rig.recv(h, timeout=0.05))}


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    program = compile_p4(ROOT / "p4src" / "esa.p4", tmp_path_factory.mktemp("p4"), pool=POOL)
    with Bmv2Fabric(Fabric.load(TWO_TIER)) as rig:
        rig.start()
        rig.flush()
        n = Net(rig, program)
        yield n
        for sw in n.sessions.values():
            sw.close()


def frame(fabric: Fabric, src: str, dst: str, tag: bytes) -> bytes:
    """A plain UDP frame (not ESA's port), which the switches forward by L2."""
    s, d = fabric.hosts[src], fabric.hosts[dst]
    pkt = Ether(src=s.mac, dst=d.mac) / IP(src=s.ip, dst=d.ip) / UDP(sport=4000, dport=9)
    return bytes(pkt / (tag * 8))


def others(*hosts: str) -> list[str]:
    return [f"h{i}" for i in range(1, 11) if f"h{i}" not in hosts]


def test_each_switch_holds_the_hosts_as_it_sees_them(net: Net) -> None:
    for name, sw in net.sessions.items():
        assert sw.read_entries().l2 == l2_entries(net.rig.fabric, name).l2
    assert net.sessions["t1"].read_entries().l2[0x020000000005] == L2Entry(port=5)
    assert net.sessions["s1"].read_entries().l2[0x020000000005] == L2Entry(port=2)


def test_a_frame_from_rack_1_reaches_rack_2_through_the_spine(net: Net) -> None:
    rig = net.rig
    rig.flush()
    sent = frame(rig.fabric, "h1", "h6", b"cross")
    rig.send("h1", sent)
    assert rig.recv("h6", timeout=LIMIT_S, want=1) == [sent]
    assert rig.arrived("s1", 1) == [sent]
    assert rig.arrived("t2", 5) == [sent]
    assert not net.heard(others("h1", "h6"))


def test_a_frame_inside_a_rack_never_reaches_the_spine(net: Net) -> None:
    rig = net.rig
    rig.flush()
    sent = frame(rig.fabric, "h2", "h4", b"local")
    rig.send("h2", sent)
    assert rig.recv("h4", timeout=LIMIT_S, want=1) == [sent]
    assert [rig.arrived("s1", port) for port in (1, 2, 3, 4)] == [[], [], [], []]
    assert rig.arrived("t2", 5) == []
    assert not net.heard(others("h2", "h4"))


def test_a_restarted_tor_is_pushed_again_alone(net: Net) -> None:
    rig = net.rig
    rig.flush()
    held = {name: net.sessions[name].read_entries() for name in ("s1", "t1")}
    rig.restart("t2")
    there, back = frame(rig.fabric, "h3", "h7", b"there"), frame(rig.fabric, "h7", "h3", b"back")
    rig.send("h3", there)
    assert rig.arrived("t2", 5, timeout=LIMIT_S, want=1) == [there]
    rig.send("h7", back)
    assert rig.arrived("t2", 3, timeout=LIMIT_S, want=1) == [back]
    assert not net.heard(others())

    net.sessions["t2"].close()
    net.sessions["t2"] = program_switch(rig, "t2", net.program)
    rig.flush()  # what t2 took in before it had a pipeline is none of this test's business
    rig.send("h3", there)
    assert rig.recv("h7", timeout=LIMIT_S, want=1) == [there]
    rig.send("h7", back)
    assert rig.recv("h3", timeout=LIMIT_S, want=1) == [back]
    assert not net.heard(others())
    for name in ("s1", "t1"):
        assert net.sessions[name].alive
        assert net.sessions[name].read_entries() == held[name]
