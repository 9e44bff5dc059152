"""Planned entries, reconciliation and persistence (no switch needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.device.entries import (
    Child,
    ChildKey,
    L2Entry,
    PolicyEntry,
    PsRoute,
    Replica,
    ShardKey,
    SwitchEntries,
)
from controller.device.memswitch import MemorySwitch
from controller.device.reconcile import plan_changes, reconcile
from controller.device.switch import Kind
from controller.errors import InvalidRequest, NotFound
from controller.world.fabric import Fabric, one_switch
from controller.world.plan import BROADCAST_MAC, JobPlan, desired, device_entries
from controller.world.state import JobRecord, State, Store
from controller.world.topology import Host, Topology, ip_to_int, mac_to_int
from esa import wire
from esa.job import MAX_PS_SHARDS, Placement, Priority, ps_shard
from esa.jobrow import JobEntry
from esa.spec import BCAST_MGID, MGID_SHARD_STRIDE, PS_MEMBER, Policy, mgid_all, mgid_workers, rid
from esa.target import Op


def hosts(n: int = 4) -> list[Host]:
    return [Host(f"h{i}", i, f"02:00:00:00:00:{i:02x}", f"10.0.0.{i}") for i in range(1, n + 1)]


def test_desired_entries_of_one_job() -> None:
    h = hosts(4)
    job = JobPlan(7, (h[0], h[1], h[2]), (h[3],), priority=9, part_base=0, part_size=1024)
    e = desired(h, [job], PolicyEntry(Policy.ATP, 500))
    assert e.policy == PolicyEntry(Policy.ATP, 500)
    assert e.jobs == {7: JobEntry(3, 0b111, 9, (4,), 15, 0, 1024)}
    assert e.ps_routes == {ShardKey(7, 0, 0): PsRoute(4, 0x020000000004, 0x0A000004, 14)}
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


def test_desired_entries_of_a_job_on_four_ps_hosts() -> None:
    """One route per shard, matching ``seq & 3``; one group per shard, of the
    workers and that shard's PS, so a result makes fan-in + 1 copies."""
    h = hosts(6)
    job = JobPlan(7, (h[0], h[1]), tuple(h[2:6]), priority=9, part_base=0, part_size=8)
    e = desired(h, [job], PolicyEntry())
    assert e.jobs[7].ps_ports == (3, 4, 5, 6)
    assert e.ps_routes == {
        ShardKey(7, s, 3): PsRoute(
            3 + s, 0x020000000003 + s, 0x0A000003 + s, 14 + s * MGID_SHARD_STRIDE
        )
        for s in range(4)
    }
    workers = {(1, rid(7, 0)), (2, rid(7, 1))}
    assert {g: m for g, m in e.groups.items() if g != BCAST_MGID} == {
        15: frozenset(workers),
        **{mgid_all(7, s): frozenset(workers | {(3 + s, rid(7, PS_MEMBER + s))}) for s in range(4)},
    }
    assert {r: e.replicas[r].ip for r in range(rid(7, PS_MEMBER), rid(7, PS_MEMBER + 4))} == {
        rid(7, PS_MEMBER + s): 0x0A000003 + s for s in range(4)
    }
    assert e.count() == 1 + 4 + 6 + 6 + 7  # job, routes, replicas, groups, l2


@given(st.sampled_from([1, 2, 4, 8]), st.integers(0, 2**32 - 1))
def test_exactly_one_route_of_a_job_matches_each_chunk(shards: int, seq: int) -> None:
    h = hosts(10)
    job = JobPlan(3, (h[0], h[1]), tuple(h[2 : 2 + shards]), 1, 0, 8)
    routes = desired(h, [job], PolicyEntry()).ps_routes
    matching = [r for k, r in routes.items() if seq & k.mask == k.value]
    assert [r.port for r in matching] == [job.ps_for(seq).port]
    assert job.ps_for(seq) == job.ps[ps_shard(seq, shards)]


@pytest.mark.parametrize("shards", [0, 3, 5, MAX_PS_SHARDS * 2])
def test_a_plan_has_1_2_4_or_8_ps_hosts(shards: int) -> None:
    h = hosts(1 + shards)
    with pytest.raises(ValueError, match=rf"^job 3: {shards} PS hosts, not a power of two"):
        JobPlan(3, (h[0],), tuple(h[1:]), 1, 0, 8)


def test_device_entries_places_each_shard_on_its_named_host() -> None:
    fabric = one_switch(Topology({x.name: x for x in hosts(6)}))
    rec = JobRecord(5, Placement(("h1", "h2"), ("h6", "h3")), Priority.static(4), 1.0)
    e = device_entries(State({5: rec}, PolicyEntry(), 0), fabric, "s1", 16, 0.0, SwitchEntries())
    assert e.jobs[5] == JobEntry(2, 0b11, 4, (6, 3), 11, 0, 16)  # its home: the whole pool
    assert {k: r.port for k, r in e.ps_routes.items()} == {
        ShardKey(5, 0, 1): 6,
        ShardKey(5, 1, 1): 3,
    }


def test_reconcile_orders_support_before_jobs() -> None:
    h = hosts(3)
    want = desired(h, [JobPlan(1, (h[0], h[1]), (h[2],), 0, 0, 8)], PolicyEntry())
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
    want = desired(h, [JobPlan(1, (h[0], h[1]), (h[2],), 5, 0, 8)], PolicyEntry())
    sw = MemorySwitch()
    reconcile(sw, want, SwitchEntries())
    sw.entries.jobs[1] = JobEntry(2, 3, 200, (3,), 3, 0, 8)
    sw.entries.jobs[9] = JobEntry(2, 3, 0, (3,), 19, 0, 0)
    del sw.entries.replicas[rid(1, 0)]
    sw.entries.groups[99] = frozenset({(1, 5)})
    assert reconcile(sw, want, sw.read_entries()) == 4
    assert sw.read_entries() == want
    assert reconcile(sw, want, sw.read_entries()) == 0


def test_store_round_trip(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    s = Store(db)
    rec = JobRecord(3, Placement(("h1", "h2"), ("h3", "h4")), Priority.auto(1 << 30), 123.5)
    s.put_job(rec)
    s.put_job(JobRecord(4, Placement(("h1", "h2"), ("h3",)), Priority.static(9), 124.0))
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


TWO_TIER = Fabric.load(Path(__file__).resolve().parent / "data" / "two-racks.json")
"""t1: h1-h4 on ports 1-4, t2: h5-h8 on ports 1-4, each up by port 5 to
spine s1's port 1 and 2; h9 and h10 on s1's ports 3 and 4."""
SEEN = {
    "s1": {**{f"h{i}": 1 for i in range(1, 5)}, **{f"h{i}": 2 for i in range(5, 9)}, "h9": 3,
           "h10": 4},
    "t1": {**{f"h{i}": i for i in range(1, 5)}, **{f"h{i}": 5 for i in range(5, 11)}},
    "t2": {**{f"h{i}": 5 for i in (1, 2, 3, 4, 9, 10)}, **{f"h{i}": i - 4 for i in range(5, 9)}},
}  # fmt: skip


def fabric_plan(
    device: str, *recs: JobRecord, pool: int = 16, policy: Policy = Policy.ESA, part_size: int = 0
) -> SwitchEntries:
    """ESA with the equal split by default: each summing job's home is its share."""
    state = State({r.job: r for r in recs}, PolicyEntry(policy), part_size)
    return device_entries(state, TWO_TIER, device, pool, 0.0, SwitchEntries())


def l2_only(device: str) -> SwitchEntries:
    """Every host on the port ``device`` reaches it through, and the flood group."""
    ports = SEEN[device]
    return SwitchEntries(
        l2={
            **{mac_to_int(TWO_TIER.hosts[h].mac): L2Entry(port=p) for h, p in ports.items()},
            BROADCAST_MAC: L2Entry(mgid=BCAST_MGID),
        },
        groups={BCAST_MGID: frozenset((p, 0) for p in set(ports.values()))},
    )


def device_ip(device: str) -> int:
    return ip_to_int(str(TWO_TIER.devices[device].ip))


def replica(host: str, top: str | None = None) -> Replica:
    """``host``'s replica; a PS's with the address of its job's ``top``."""
    h = TWO_TIER.hosts[host]
    at = None if top is None else device_ip(top)
    return Replica(mac_to_int(h.mac), ip_to_int(h.ip), h.udp_port, at)


RACK = JobRecord(1, Placement(("h1", "h2"), ("h3",)), Priority.static(7), 1.0)
CROSS = JobRecord(2, Placement(("h1", "h5", "h6"), ("h9",)), Priority.static(9), 2.0)


def test_a_job_inside_one_rack_has_entries_on_its_tor_alone() -> None:
    workers = frozenset({(1, rid(1, 0)), (2, rid(1, 1))})
    want = l2_only("t1")
    want.jobs[1] = JobEntry(2, 0b11, 7, (3,), mgid_workers(1), 0, 16)
    want.ps_routes[ShardKey(1, 0, 0)] = PsRoute(
        3, 0x020000000003, 0x0A000003, mgid_all(1), device_ip("t1")
    )
    want.groups |= {mgid_workers(1): workers, mgid_all(1): workers | {(3, rid(1, PS_MEMBER))}}
    want.replicas = {rid(1, 0): replica("h1"), rid(1, 1): replica("h2"),
                     rid(1, PS_MEMBER): replica("h3", "t1")}  # fmt: skip
    assert fabric_plan("t1", RACK) == want
    assert fabric_plan("s1", RACK) == l2_only("s1")
    assert fabric_plan("t2", RACK) == l2_only("t2")


def test_a_job_across_racks_has_its_local_part_on_each_tor_and_completes_at_the_spine() -> None:
    """Worker bits: h1 0b001 (t1), h5 0b010 and h6 0b100 (t2); PS h9 on the
    spine.  Each ToR sums its workers and sends the sum up its port 5; the
    spine sums its children's (t1: 0b001 on port 1, t2: 0b110 on port 2),
    one contribution each, and completes.  A result goes
    from the spine to each child unaddressed (rid 0) and to h9; each ToR
    addresses its copies to its own workers.  A PS result spreads over the
    tree: down to children and workers, up to the spine."""
    ps_rid = rid(2, PS_MEMBER)
    locals_ = {"t1": {(1, rid(2, 0))}, "t2": {(1, rid(2, 1)), (2, rid(2, 2))}, "s1": set()}
    children = {"t1": {}, "t2": {}, "s1": {1: 0b001, 2: 0b110}}
    for device, fan_in, mask, up in (("t1", 1, 0b001, 5), ("t2", 2, 0b110, 5), ("s1", 2, 0b111, 0)):
        seen = SEEN[device]
        e = fabric_plan(device, CROSS)
        assert e.jobs == {
            2: JobEntry(fan_in, mask, 9, (seen["h9"],), mgid_workers(2), 0, 16, up_port=up)
        }
        assert e.children == {ChildKey(2, p): Child(b) for p, b in children[device].items()}
        assert e.ps_routes == {
            ShardKey(2, 0, 0): PsRoute(
                seen["h9"], 0x020000000009, 0x0A000009, mgid_all(2), device_ip("s1")
            )
        }
        down = frozenset(locals_[device] | {(p, 0) for p in children[device]})
        ps_member = {(3, ps_rid)} if device == "s1" else set()
        assert e.groups == l2_only(device).groups | {
            mgid_workers(2): down | ({(up, 0)} if up else set()),
            mgid_all(2): down | ps_member,
        }
        named = {rid(2, 0): "h1", rid(2, 1): "h5", rid(2, 2): "h6", ps_rid: "h9"}
        tops = {ps_rid: "s1"}
        assert e.replicas == {
            r: replica(named[r], tops.get(r)) for _, r in locals_[device] | ps_member
        }
        assert e.l2 == l2_only(device).l2


RACK_SPINE_PS = JobRecord(3, Placement(("h1", "h2"), ("h9",)), Priority.static(7), 3.0)
"""inside rack t1, its PS on the spine: the spine is its transit."""


def test_a_job_inside_a_rack_with_its_ps_on_the_spine_has_a_transit_there() -> None:
    """t1 completes the job and sends the PS's copy up its port 5 (the PS is
    not behind a child, and the top has no up port); the spine's transit
    row takes no contribution, routes PS-bound packets to h9 on port 3 and
    spreads PS results and pulls toward t1 (its port 1) only."""
    workers = frozenset({(1, rid(3, 0)), (2, rid(3, 1))})
    tor = l2_only("t1")
    tor.jobs[3] = JobEntry(2, 0b11, 7, (5,), mgid_workers(3), 0, 16)
    tor.ps_routes[ShardKey(3, 0, 0)] = PsRoute(
        5, 0x020000000009, 0x0A000009, mgid_all(3), device_ip("t1")
    )
    tor.groups |= {mgid_workers(3): workers, mgid_all(3): workers | {(5, rid(3, PS_MEMBER))}}
    tor.replicas = {rid(3, 0): replica("h1"), rid(3, 1): replica("h2"),
                    rid(3, PS_MEMBER): replica("h9", "t1")}  # fmt: skip
    assert fabric_plan("t1", RACK_SPINE_PS) == tor
    spine = l2_only("s1")
    spine.jobs[3] = JobEntry(0, 0, 7, (3,), mgid_workers(3), 0, 0, up_port=1)
    spine.ps_routes[ShardKey(3, 0, 0)] = PsRoute(
        3, 0x020000000009, 0x0A000009, mgid_all(3), device_ip("t1")
    )
    spine.groups[mgid_workers(3)] = frozenset({(1, 0)})
    assert fabric_plan("s1", RACK_SPINE_PS) == spine
    assert fabric_plan("t2", RACK_SPINE_PS) == l2_only("t2")


RACK_PS_ACROSS = JobRecord(4, Placement(("h1", "h5"), ("h2",)), Priority.static(7), 4.0)
"""across both racks, its PS in rack t1: the job completes at the spine."""


def test_the_ps_copy_takes_the_address_of_the_switch_where_the_job_completes() -> None:
    """The spine completes the job and sends t1 its copy unaddressed; t1
    (D1) addresses the PS's copy from the spine's address, the one the PS
    sends to and takes switch sums from (``esa-ps --switch-addr``), not
    from its own; the workers' copies keep their source."""
    ps_rid = rid(4, PS_MEMBER)
    tor = fabric_plan("t1", RACK_PS_ACROSS)
    assert tor.replicas == {rid(4, 0): replica("h1"), ps_rid: replica("h2", "s1")}
    assert (2, ps_rid) in tor.groups[mgid_all(4)]
    assert fabric_plan("t2", RACK_PS_ACROSS).replicas == {rid(4, 1): replica("h5")}
    assert fabric_plan("s1", RACK_PS_ACROSS).replicas == {}


def test_a_transit_takes_no_share_of_the_pool() -> None:
    parts = {
        device: {
            j: (e.part_base, e.part_size)
            for j, e in fabric_plan(device, RACK_SPINE_PS, CROSS, policy=Policy.STATIC).jobs.items()
        }
        for device in TWO_TIER.devices
    }
    assert parts == {"s1": {2: (0, 16), 3: (0, 0)}, "t1": {2: (0, 8), 3: (8, 8)},
                     "t2": {2: (0, 16)}}  # fmt: skip


def parts_by_device(policy: Policy, part_size: int) -> dict[str, dict[int, tuple[int, int]]]:
    return {
        device: {
            j: (e.part_base, e.part_size)
            for j, e in fabric_plan(
                device, RACK, CROSS, policy=policy, part_size=part_size
            ).jobs.items()
        }
        for device in TWO_TIER.devices
    }


def test_each_switch_cuts_its_own_pool_among_the_jobs_it_serves() -> None:
    want = {"s1": {2: (0, 16)}, "t1": {1: (0, 8), 2: (8, 8)}, "t2": {2: (0, 16)}}
    assert parts_by_device(Policy.STATIC, 0) == want
    assert parts_by_device(Policy.ATP, 0) == want


def test_esa_hands_out_homes_by_priority() -> None:
    """RACK (priority 7) was admitted first, CROSS (9) ranks higher: under
    ESA the least home of 12 leaves t1 room for one home of 3/4 of that or
    more, which goes to CROSS; under STATIC t1's one fixed partition of 12
    goes to RACK.  With a least home of 10 t1 has room for both.  s1 and
    t2, one job each, give it the whole pool."""
    assert parts_by_device(Policy.ESA, 12) == {
        "s1": {2: (0, 16)}, "t1": {1: (0, 0), 2: (0, 16)}, "t2": {2: (0, 16)}
    }  # fmt: skip
    assert parts_by_device(Policy.ESA, 10)["t1"] == {1: (0, 8), 2: (8, 8)}
    assert parts_by_device(Policy.STATIC, 12)["t1"] == {1: (0, 12), 2: (0, 0)}
    assert parts_by_device(Policy.ESA, 0) == parts_by_device(Policy.STATIC, 0)


@given(st.lists(st.sampled_from([f"h{i}" for i in range(1, 11)]), min_size=2, max_size=6,
                unique=True))  # fmt: skip
def test_a_switch_has_a_job_entry_where_it_has_a_role(hosts_: list[str]) -> None:
    *workers, ps = hosts_
    rec = JobRecord(3, Placement(tuple(workers), (ps,)), Priority.static(1), 0.0)
    roles = TWO_TIER.job_roles(workers, [ps])
    for device in TWO_TIER.devices:
        e = fabric_plan(device, rec)
        assert set(e.jobs) == ({3} if device in roles else set())
        assert e.l2 == l2_only(device).l2
        if device in roles:
            assert (e.jobs[3].fan_in, e.jobs[3].worker_mask, e.jobs[3].up_port) == (
                roles[device].fan_in,
                roles[device].worker_mask,
                roles[device].up_port or 0,
            )
            assert e.children == {
                ChildKey(3, port): Child(bits) for port, bits in roles[device].children.items()
            }
            assert set(e.ps_routes) == {ShardKey(3, 0, 0)}
            if roles[device].transit:
                up = roles[device].up_port
                assert e.groups == l2_only(device).groups | {mgid_workers(3): {(up, 0)}}
                assert (e.replicas, e.jobs[3].part_size) == ({}, 0)
    top = [d for d, r in roles.items() if r.completes]
    assert len(top) == 1
    assert roles[top[0]].worker_mask == 2 ** len(workers) - 1
