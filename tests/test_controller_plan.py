"""Planned entries, reconciliation and persistence (no switch needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.entries import JobEntry, L2Entry, PolicyEntry, PsRoute, Replica, SwitchEntries
from controller.errors import InvalidRequest, NotFound
from controller.memswitch import MemorySwitch
from controller.plan import BROADCAST_MAC, JobPlan, desired
from controller.reconcile import plan_changes, reconcile
from controller.state import JobRecord, Store
from controller.switch import Kind, Op
from controller.topology import Host, Topology
from esa import wire
from esa.job import PrioritySpec
from esa.spec import BCAST_MGID, Policy, rid


def hosts(n: int = 4) -> list[Host]:
    return [Host(f"h{i}", i, f"02:00:00:00:00:{i:02x}", f"10.0.0.{i}") for i in range(1, n + 1)]


def test_desired_entries_of_one_job() -> None:
    h = hosts(4)
    job = JobPlan(7, (h[0], h[1], h[2]), h[3], prio=9, part_base=0, part_size=1024)
    e = desired(h, [job], PolicyEntry(Policy.ATP, 500))
    assert e.policy == PolicyEntry(Policy.ATP, 500)
    assert e.jobs == {7: JobEntry(3, 0b111, 9, 4, 14, 15, 0, 1024)}
    assert e.ps_routes == {7: PsRoute(4, 0x020000000004, 0x0A000004)}
    assert e.l2[BROADCAST_MAC] == L2Entry(mgid=BCAST_MGID)
    assert e.l2[0x020000000002] == L2Entry(port=2)
    assert e.groups == {
        BCAST_MGID: frozenset({(1, 0), (2, 0), (3, 0), (4, 0)}),
        14: frozenset({(1, 449), (2, 450), (3, 451), (4, 481)}),
        15: frozenset({(1, 449), (2, 450), (3, 451)}),
    }
    assert rid(7, 0) == 449 and rid(7, wire.MAX_WORKERS) == 481
    assert e.replicas[450] == Replica(0x020000000002, 0x0A000002, wire.UDP_PORT)
    assert e.count() == 1 + 5 + 1 + 4 + 3


def test_reconcile_orders_support_before_jobs() -> None:
    h = hosts(3)
    want = desired(h, [JobPlan(1, (h[0], h[1]), h[2], 0, 0, 8)], PolicyEntry())
    phases = plan_changes(want, SwitchEntries())
    assert [sorted({c.kind for c in p}, key=lambda k: k.value) for p in phases] == [
        [Kind.GROUPS, Kind.L2, Kind.PS_ROUTES, Kind.REPLICAS],
        [Kind.JOBS],
    ]
    removal = plan_changes(desired(h, [], PolicyEntry()), want)
    assert [{(c.kind, c.op) for c in p} for p in removal] == [
        {(Kind.JOBS, Op.DELETE)},
        {(Kind.GROUPS, Op.DELETE), (Kind.PS_ROUTES, Op.DELETE), (Kind.REPLICAS, Op.DELETE)},
    ]


def test_reconcile_deletes_extras_adds_missing_fixes_changed() -> None:
    h = hosts(3)
    want = desired(h, [JobPlan(1, (h[0], h[1]), h[2], 5, 0, 8)], PolicyEntry())
    sw = MemorySwitch()
    reconcile(sw, want, SwitchEntries())
    sw.entries.jobs[1] = JobEntry(2, 3, 200, 3, 2, 3, 0, 8)
    sw.entries.jobs[9] = JobEntry(2, 3, 0, 3, 18, 19, 0, 0)
    del sw.entries.replicas[rid(1, 0)]
    sw.entries.groups[99] = frozenset({(1, 5)})
    assert reconcile(sw, want, sw.read_entries()) == 4
    assert sw.read_entries() == want
    assert reconcile(sw, want, sw.read_entries()) == 0


def test_store_round_trip(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    s = Store(db)
    rec = JobRecord(3, ("h1", "h2"), "h3", PrioritySpec.auto(1 << 30), 123.5)
    s.put_job(rec)
    s.put_job(JobRecord(4, ("h1", "h2"), "h3", PrioritySpec.static(9), 124.0))
    s.set_policy(PolicyEntry(Policy.STATIC, 777))
    s.set_hosts({h.name: h for h in hosts(2)})
    s.set_pool_size(64)
    s.delete_job(4)
    s.close()
    s = Store(db)
    assert s.jobs() == {3: rec}
    assert s.policy() == PolicyEntry(Policy.STATIC, 777)
    assert s.hosts() == {h.name: h for h in hosts(2)}
    assert s.pool_size() == 64


def test_store_defaults(tmp_path: Path) -> None:
    s = Store(tmp_path / "new.db")
    assert s.jobs() == {}
    assert s.policy() == PolicyEntry(Policy.ESA, 20_000)
    assert s.pool_size() is None


def test_topology_load_and_resolve(tmp_path: Path) -> None:
    path = tmp_path / "topo.json"
    path.write_text(
        '{"pool_size": 64, "hosts": {"a": {"port": 1, "mac": "02:00:00:00:00:AA",'
        ' "ip": "10.0.0.1"}, "b": {"port": 2, "mac": "02:00:00:00:00:bb", "ip": "10.0.0.2",'
        ' "udp_port": 4000}}}'
    )
    topo = Topology.load(path)
    assert topo.pool_size == 64
    assert topo.resolve("a") == Host("a", 1, "02:00:00:00:00:aa", "10.0.0.1", wire.UDP_PORT)
    assert topo.resolve("10.0.0.2").name == "b"
    assert topo.resolve("02:00:00:00:00:AA").name == "a"
    assert topo.resolve("port:2").udp_port == 4000
    with pytest.raises(NotFound, match=r"^unknown port 9: no host of the topology is on it$"):
        topo.resolve("port:9")
    with pytest.raises(NotFound, match=r"^unknown host 'c': not in the topology \(known hosts"):
        topo.resolve("c")


@pytest.mark.parametrize(
    "hosts_json,message",
    [
        ('{"x": {"port": 600, "mac": "02:00:00:00:00:01", "ip": "10.0.0.1"}}', "port 600"),
        ('{"x": {"port": 1, "mac": "nope", "ip": "10.0.0.1"}}', "'nope' is not a MAC"),
        ('{"x": {"port": 1, "mac": "02:00:00:00:00:01", "ip": "1.2.3"}}', "not an IPv4"),
        ('{"x": {"port": 1, "mac": "02:00:00:00:00:01"}}', "missing field 'ip'"),
        (
            '{"x": {"port": 1, "mac": "02:00:00:00:00:01", "ip": "10.0.0.1"},'
            ' "y": {"port": 2, "mac": "02:00:00:00:00:01", "ip": "10.0.0.2"}}',
            "share mac",
        ),
    ],
)
def test_topology_rejects_bad_hosts(hosts_json: str, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        Topology.from_json({"hosts": json.loads(hosts_json)})
