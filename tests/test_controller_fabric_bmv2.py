"""One controller for the three BMv2 switches of tests/data/two-racks.json
(testbed/bmv2_fabric.py): a session, pipeline and plan per switch; a job
inside a rack is written to its ToR alone, and a restarted ToR is re-synced
alone.  Each switch's P4Runtime requests go to a log of its own, whose Write
requests are counted."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from controller.api.messages import AdmitRequest
from controller.api.service import Controller
from controller.device.entries import SwitchEntries
from controller.device.p4rt import Session
from controller.device.switch import P4RuntimeSwitch, Switch
from controller.world.fabric import Device, Fabric
from controller.world.state import Store
from esa.jobrow import JobEntry
from esa.spec import mgid_workers
from esa.toolchain import compile_p4
from runner.paths import ROOT
from testbed.bmv2_fabric import Bmv2Fabric
from tests.wait import until

pytestmark = pytest.mark.bmv2

TWO_TIER = ROOT / "tests" / "data" / "two-racks.json"
POOL = 16
WRITE = "/p4.v1.P4Runtime/Write"
Program = tuple[Path, Path]


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Program:
    return compile_p4(ROOT / "p4src" / "esa.p4", tmp_path_factory.mktemp("p4"), pool=POOL)


def connector(device: Device, program: Program, log: Path) -> Callable[[], Switch]:
    def connect() -> Switch:
        sw = P4RuntimeSwitch(Session(device.p4runtime, device.device_id, (0, 1), True, log))
        sw.ensure_pipeline(*program)
        return sw

    return connect


def fabric_controller(rig: Bmv2Fabric, program: Program, tmp: Path, pool: int) -> Controller:
    """A controller of every switch of ``rig``, each logging its P4Runtime
    requests to ``tmp/<switch>.log``."""
    connectors = {n: connector(d, program, tmp / f"{n}.log") for n, d in rig.fabric.devices.items()}
    return Controller(Store(tmp / "state.db"), rig.fabric, pool, connectors, 0.0)


class Net:
    def __init__(self, rig: Bmv2Fabric, program: Program, tmp: Path) -> None:
        self.rig = rig
        self.logs = {name: tmp / f"{name}.log" for name in rig.fabric.devices}
        self.ctl = fabric_controller(rig, program, tmp, POOL)

    def writes(self) -> dict[str, int]:
        """Write requests sent to each switch so far."""
        return {n: log.read_text().count(WRITE) for n, log in self.logs.items()}

    def held(self) -> dict[str, SwitchEntries]:
        """What each switch holds, read back over its session."""
        out = {}
        for name, session in self.ctl.sessions.items():
            assert session.switch is not None
            out[name] = session.switch.read_entries()
        return out


@pytest.fixture
def net(program: Program, tmp_path: Path) -> Iterator[Net]:
    with Bmv2Fabric(Fabric.load(TWO_TIER)) as rig:
        rig.start()
        n = Net(rig, program, tmp_path)
        n.ctl.sync()
        yield n
        for session in n.ctl.sessions.values():
            session.drop()


def test_every_switch_holds_its_plan(net: Net) -> None:
    held = net.held()
    assert held == {n: s.applied for n, s in net.ctl.sessions.items()}
    assert {n: e.jobs for n, e in held.items()} == {"s1": {}, "t1": {}, "t2": {}}
    assert (held["t1"].l2[0x020000000005].port, held["s1"].l2[0x020000000005].port) == (5, 2)


def test_a_job_inside_a_rack_is_written_to_its_tor_alone(net: Net) -> None:
    before, held = net.writes(), net.held()
    net.ctl.admit(AdmitRequest(job=1, workers=("h1", "h2"), ps=("h3",), priority=7))
    # the counters' reset, the support entries, the job entry
    assert net.writes() == {**before, "t1": before["t1"] + 3}
    after = net.held()
    # ESA with the equal split (the default): the job's home is t1's whole pool
    assert after["t1"].jobs == {1: JobEntry(2, 0b11, 7, (3,), mgid_workers(1), 0, POOL)}
    assert after["t1"] == net.ctl.sessions["t1"].applied
    assert (after["s1"], after["t2"]) == (held["s1"], held["t2"])


def test_a_restarted_tor_is_resynced_alone(net: Net) -> None:
    net.ctl.admit(AdmitRequest(job=1, workers=("h1", "h2"), ps=("h3",), priority=7))
    net.ctl.admit(AdmitRequest(job=2, workers=("h4", "h5"), ps=("h9",), size=1 << 20))
    held, before = net.held(), net.writes()
    net.rig.restart("t1", crash=True)
    until(lambda: not net.ctl.sessions["t1"].connected, "the controller sees t1 go")
    assert net.ctl.disconnected() == ["t1"]
    assert net.ctl.sync("t1") == held["t1"].count()
    assert net.held() == held
    assert {n: w for n, w in net.writes().items() if n != "t1"} == {
        "s1": before["s1"],
        "t2": before["t2"],
    }
    assert net.ctl.sync() == 0
