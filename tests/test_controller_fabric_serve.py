"""One controller for every switch of a fabric, against in-memory switches:
each switch gets its own plan and session; a change writes only to the
switches whose plan changed, and a restarted switch is re-synced alone."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from controller.api.admin import serve
from controller.api.messages import AdmitRequest, JobRef, PolicyRequest, ProgressRequest
from controller.api.service import Controller
from controller.device.entries import PolicyEntry
from controller.device.memswitch import MemorySwitch
from controller.errors import FailedPrecondition, NotFound, SwitchError, SwitchUnavailable
from controller.world.fabric import Fabric
from controller.world.plan import device_entries
from controller.world.state import Store
from esa.jobrow import JobEntry
from esa.spec import Drop, Event, Policy, counter_index, mgid_workers
from runner.paths import ROOT
from tests.test_controller_cli import esa_ctl_here
from tests.test_controller_service import Clock, connector

TWO_TIER = ROOT / "tests" / "data" / "two-racks.json"
FABRIC = Fabric.load(TWO_TIER)
POOL = 16
RACK = AdmitRequest(job=1, workers=("h1", "h2"), ps=("h3",), priority=7)
"""inside rack t1: its sums complete at t1."""
CROSS = AdmitRequest(job=2, workers=("h1", "h5", "h6"), ps=("h9",), priority=9)
"""h1 under t1, h5 and h6 under t2: its sums complete at the spine s1."""


@dataclass
class Net:
    sw: dict[str, MemorySwitch]
    ctl: Controller
    db: Path

    def writes(self) -> dict[str, int]:
        """Batches and policy writes each switch has taken."""
        return {n: len(s.batches) + s.policy_writes for n, s in self.sw.items()}

    def planned(self, device: str) -> Any:
        return device_entries(
            self.ctl.state, FABRIC, device, POOL, 0.0, self.sw[device].read_entries()
        )


def controller(db: Path, sw: dict[str, MemorySwitch]) -> Controller:
    connectors = {n: connector(s) for n, s in sw.items()}
    return Controller(Store(db), FABRIC, POOL, connectors, 0.0, Clock())


@pytest.fixture
def net(tmp_path: Path) -> Net:
    sw = {name: MemorySwitch() for name in FABRIC.devices}
    ctl = controller(tmp_path / "state.db", sw)
    ctl.sync()
    ctl.policy(PolicyRequest("static"))  # every job has a partition: the tables show them
    return Net(sw, ctl, tmp_path / "state.db")


def test_each_switch_starts_with_the_hosts_as_it_sees_them(net: Net) -> None:
    for name, s in net.sw.items():
        assert s.read_entries() == net.planned(name)
        assert s.read_entries().jobs == {}
    assert net.sw["t1"].entries.l2[0x020000000005].port == 5
    assert net.sw["s1"].entries.l2[0x020000000005].port == 2


def test_a_job_inside_a_rack_is_written_to_its_tor_alone(net: Net) -> None:
    before = net.writes()
    info = net.ctl.admit(RACK)
    assert net.writes() == {**before, "t1": before["t1"] + 2}  # support, then the job entry
    assert net.sw["t1"].entries.jobs == {1: JobEntry(2, 0b11, 7, (3,), mgid_workers(1), 0, POOL)}
    assert (net.sw["s1"].entries.jobs, net.sw["t2"].entries.jobs) == ({}, {})
    assert (info.top, list(info.switches), info.partition) == ("t1", ["t1"], (0, POOL))
    for name, s in net.sw.items():
        assert s.read_entries() == net.planned(name)
    before = net.writes()
    net.ctl.remove(JobRef(job=1))
    assert net.writes() == {**before, "t1": before["t1"] + 2}


def test_a_job_inside_a_rack_with_its_ps_on_the_spine_is_written_there_as_a_transit(
    net: Net,
) -> None:
    before = net.writes()
    info = net.ctl.admit(AdmitRequest(job=3, workers=("h1", "h2"), ps=("h9",), priority=7))
    assert net.writes() == {**before, "s1": before["s1"] + 2, "t1": before["t1"] + 2}
    assert net.sw["s1"].entries.jobs == {
        3: JobEntry(0, 0, 7, (3,), mgid_workers(3), 0, 0, up_port=1)
    }
    assert net.sw["t1"].entries.jobs == {3: JobEntry(2, 0b11, 7, (5,), mgid_workers(3), 0, POOL)}
    assert (info.top, {n: p.fan_in for n, p in info.switches.items()}) == (
        "t1",
        {"s1": 0, "t1": 2},
    )
    assert net.sw["t2"].entries.jobs == {}
    for name, s in net.sw.items():
        assert s.read_entries() == net.planned(name)


def test_a_job_across_racks_is_written_where_it_has_a_role(net: Net) -> None:
    info = net.ctl.admit(CROSS)
    jobs = {n: s.entries.jobs[2] for n, s in net.sw.items()}
    assert {n: (e.fan_in, e.worker_mask, e.ps_ports) for n, e in jobs.items()} == {
        "s1": (2, 0b111, (3,)),
        "t1": (1, 0b001, (5,)),
        "t2": (2, 0b110, (5,)),
    }
    assert info.top == "s1"
    assert {n: p.fan_in for n, p in info.switches.items()} == {"s1": 2, "t1": 1, "t2": 2}
    for name, s in net.sw.items():
        assert s.read_entries() == net.planned(name)


def test_a_restarted_switch_is_resynced_alone(net: Net) -> None:
    net.ctl.policy(PolicyRequest(policy="atp"))
    net.ctl.admit(RACK)
    net.ctl.admit(CROSS)
    held = {n: s.read_entries() for n, s in net.sw.items()}
    before = net.writes()
    net.sw["t2"].restart()
    net.sw["t2"].closed = True
    assert net.ctl.disconnected() == ["t2"]
    assert net.ctl.sync("t2") == held["t2"].count() + 1  # and the policy
    assert net.writes() == {**before, "t2": before["t2"] + 3}  # policy, support, jobs
    assert {n: s.read_entries() for n, s in net.sw.items()} == held
    assert net.ctl.sync() == 0


def test_a_restarted_switch_gets_the_priorities_the_others_hold(net: Net) -> None:
    """Two auto jobs on every switch swap places only beyond the swap margin:
    after job 2 reports a little less left than job 4, both keep their
    order.  A switch that restarts empty is given that same order, not the
    one ranking from nothing would give (job 2 first)."""
    net.ctl.admit(AdmitRequest(job=2, workers=("h1", "h5"), ps=("h9",), size=1_000_000))
    net.ctl.admit(AdmitRequest(job=4, workers=("h2", "h6"), ps=("h10",), size=900_000))
    net.ctl.progress(ProgressRequest(job=2, remaining=850_000))

    def prios(name: str) -> dict[int, int]:
        return {j: e.priority for j, e in net.sw[name].read_entries().jobs.items()}

    assert prios("t1") == prios("t2") == prios("s1")
    assert prios("s1")[4] > prios("s1")[2]
    held = prios("s1")
    net.sw["t2"].restart()
    net.sw["t2"].closed = True
    net.ctl.sync("t2")
    assert prios("t2") == held


def test_a_switch_down_fails_only_the_changes_it_takes_part_in(net: Net) -> None:
    net.sw["t2"].up = False
    before = net.writes()
    for change in (lambda: net.ctl.admit(CROSS), lambda: net.ctl.policy(PolicyRequest("atp"))):
        with pytest.raises(SwitchUnavailable, match=r"^switch unreachable at memory$"):
            change()
        assert net.writes() == before
    assert (Store(net.db).jobs(), Store(net.db).policy()) == (
        {},
        PolicyEntry(Policy.STATIC, squat_us=0),
    )
    net.ctl.admit(RACK)
    assert net.writes() == {**before, "t1": before["t1"] + 2}
    net.sw["t2"].up = True
    assert net.ctl.sync("t2") == 0, "the rack's job changed nothing t2 holds"


def test_a_refused_write_puts_back_the_switches_being_changed(net: Net) -> None:
    held = {n: s.read_entries() for n, s in net.sw.items()}
    net.sw["t2"].entries.jobs[2] = JobEntry(1, 1, 0, (5,), 5, 0, 0)  # drift the controller missed
    with pytest.raises(SwitchError, match=r"^switch refused the request: jobs 2: already exists$"):
        net.ctl.admit(CROSS)
    assert {n: s.read_entries() for n, s in net.sw.items()} == held
    assert Store(net.db).jobs() == {}


def test_counters_and_slots_per_switch_and_summed(net: Net) -> None:
    net.ctl.admit(RACK)
    net.ctl.admit(CROSS)
    net.sw["t1"].job_events[counter_index(2, Event.AGGREGATED)] = 1
    net.sw["t2"].job_events[counter_index(2, Event.AGGREGATED)] = 2
    net.sw["s1"].job_events[counter_index(2, Event.COMPLETED)] = 1
    net.sw["t2"].drops[Drop.UNKNOWN_JOB] = 4
    stats = net.ctl.stats()
    assert {n: {j: {e: c for e, c in v.items() if c} for j, v in s.jobs.items()}
            for n, s in stats.switches.items()} == {
        "s1": {2: {"completed": 1}},
        "t1": {1: {}, 2: {"aggregated": 1}},
        "t2": {2: {"aggregated": 2}},
    }  # fmt: skip
    assert {j: {e: c for e, c in v.items() if c} for j, v in stats.jobs.items()} == {
        1: {},
        2: {"aggregated": 3, "completed": 1},
    }
    assert (stats.drops["unknown_job"], stats.switches["t2"].drops["unknown_job"]) == (4, 4)
    only = net.ctl.stats("t2")
    assert (list(only.switches), only.jobs[2]["aggregated"]) == (["t2"], 2)
    with pytest.raises(NotFound, match=r"^unknown device 't3' \(devices: s1, t1, t2\)$"):
        net.ctl.stats("t3")
    with pytest.raises(
        FailedPrecondition,
        match=r"^switch s1 serves no register reads over P4Runtime \(BMv2 serves none\): "
        r"the slots view of s1 needs `serve --thrift-cli s1=CMD`$",
    ):
        net.ctl.slots()
    net.ctl.thrift_cli = {
        n: [
            sys.executable,
            "-c",
            f"print('RuntimeCmd: EsaIngress.pool.slot_owner= 0, {j << 32}, {j << 32}')",
        ]
        for n, j in (("s1", 2), ("t1", 1), ("t2", 2))
    }
    slots = net.ctl.slots()
    assert (slots.pool_size, slots.used, slots.by_job) == (9, 6, {1: 2, 2: 4})
    assert {n: s.by_job for n, s in slots.switches.items()} == {
        "s1": {2: 2},
        "t1": {1: 2},
        "t2": {2: 2},
    }


def test_a_restarted_controller_takes_the_fabric_from_its_state_file(net: Net) -> None:
    net.ctl.admit(CROSS)
    assert Store(net.db).fabric() == FABRIC
    again = controller(net.db, net.sw)
    before = net.writes()
    assert again.sync() == 0
    assert net.writes() == before
    assert again.jobs() == net.ctl.jobs()


@pytest.fixture
def admin(net: Net, tmp_path: Path) -> Iterator[str]:
    addr = f"unix:{tmp_path}/admin.sock"
    server = serve(net.ctl, addr)
    yield addr
    server.stop(None)


def cli(capsys: pytest.CaptureFixture[str], admin: str, *argv: str) -> tuple[int, str, str]:
    return esa_ctl_here(capsys, ["--admin", admin, *argv])


def test_the_cli_shows_a_row_per_switch_and_their_sums(
    net: Net, admin: str, capsys: pytest.CaptureFixture[str]
) -> None:
    net.ctl.admit(RACK)
    code, out, _ = cli(capsys, admin, "admit", "2", "--workers", "h1,h5,h6", "--ps", "h9",
                       "--priority", "9")  # fmt: skip
    assert (code, out.splitlines()) == (0, [
        "JOB  SWITCH  PRIO  MODE    FAN-IN  PARTITION  PS  WORKERS",
        "2    s1*     9     static  2       0+16       h9  h1,h5,h6",
        "2    t1      9     static  1       8+8        h9  h1,h5,h6",
        "2    t2      9     static  2       0+16       h9  h1,h5,h6",
    ])  # fmt: skip
    assert cli(capsys, admin, "jobs", "--device", "t1")[1].splitlines() == [
        "JOB  SWITCH  PRIO  MODE    FAN-IN  PARTITION  PS  WORKERS",
        "1    t1*     7     static  2       0+8        h3  h1,h2",
        "2    t1      9     static  1       8+8        h9  h1,h5,h6",
    ]
    assert [json.loads(cli(capsys, admin, "jobs", "--json", "--device", d)[1]).__len__()
            for d in ("s1", "t1", "t2")] == [1, 2, 1]  # fmt: skip
    status = cli(capsys, admin, "status")[1].splitlines()
    assert status[:6] == [
        "switches:",
        "  NAME  DEVICE  ADDRESS         CONNECTED  JOBS  ENTRIES",
        "  s1    0       127.0.0.1:9559  yes        1     19",
        "  t1    1       127.0.0.1:9560  yes        2     24",
        "  t2    2       127.0.0.1:9561  yes        1     18",
        "  all                                      2     61",
    ]
    assert status[-1] == "hosts:    " + ", ".join(
        f"{h} ({FABRIC.homes[h]})" for h in sorted(FABRIC.hosts)
    )
    status = cli(capsys, admin, "status", "--device", "t2")[1].splitlines()
    assert [status[0], *status[3:5], status[-1]] == [
        "switch:   127.0.0.1:9561 (connected)",
        "jobs:     1",
        "entries:  18",
        "hosts:    h5, h6, h7, h8",
    ]
    net.sw["t1"].job_events[counter_index(2, Event.AGGREGATED)] = 1
    net.sw["t2"].job_events[counter_index(2, Event.AGGREGATED)] = 2
    rows = [r.split()[:3] for r in cli(capsys, admin, "stats", "--job", "2")[1].splitlines()]
    assert rows == [
        ["JOB", "SWITCH", "AGGREGATED"],
        ["2", "s1", "0"],
        ["2", "t1", "1"],
        ["2", "t2", "2"],
        ["2", "all", "3"],
        ["drops", "s1", "unknown_job=0,"],
        ["drops", "t1", "unknown_job=0,"],
        ["drops", "t2", "unknown_job=0,"],
        ["drops", "all", "unknown_job=0,"],
    ]
    rows = [r.split()[:2] for r in cli(capsys, admin, "stats", "--device", "t2")[1].splitlines()]
    assert rows == [["JOB", "AGGREGATED"], ["2", "2"], ["drops:", "unknown_job=0,"]]
    for argv in (["jobs"], ["status"], ["stats"], ["slots"]):
        assert cli(capsys, admin, *argv, "--device", "t3") == (
            1,
            "",
            "esa-ctl: error: unknown device 't3' (devices: s1, t1, t2)\n",
        )
    net.ctl.thrift_cli = {
        n: [
            sys.executable,
            "-c",
            f"print('RuntimeCmd: EsaIngress.pool.slot_owner= 0, {j << 32}, 0, {j << 32}')",
        ]
        for n, j in (("s1", 2), ("t1", 1), ("t2", 2))
    }
    assert cli(capsys, admin, "slots")[1].splitlines() == [
        "s1   2 of 4 slots held (job 2: 2)",
        "t1   2 of 4 slots held (job 1: 2)",
        "t2   2 of 4 slots held (job 2: 2)",
        "all  6 of 12 slots held (job 1: 2, job 2: 4)",
    ]
    assert cli(capsys, admin, "slots", "--device", "t1")[1] == "2 of 4 slots held (job 1: 2)\n"
