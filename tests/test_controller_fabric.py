"""The fabric of several switches (controller/world/fabric.py): the file, its
checks, next hops and each switch's role in a job (no switch needed)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.errors import InvalidRequest, NotFound
from controller.world.fabric import DEFAULT_DEVICE, Device, Fabric, JobRole, Link, one_switch
from controller.world.topology import Host, Topology
from esa import wire

ROOT = Path(__file__).resolve().parent.parent
TWO_TIER = ROOT / "tests" / "data" / "two-racks.json"
RAW: dict[str, Any] = json.loads(TWO_TIER.read_text())
FABRIC = Fabric.load(TWO_TIER)


def test_the_two_tier_file() -> None:
    f = FABRIC
    assert list(f.devices) == ["s1", "t1", "t2"]
    assert f.devices["t2"] == Device(
        "t2", 2, "127.0.0.1:9561", "tor", "10.0.0.252", "02:00:00:00:00:fc"
    )
    assert f.root == "s1"
    assert f.links == (Link("t1", 5, "s1", 1), Link("t2", 5, "s1", 2))
    assert f.pool_size is None and str(f.subnet) == "10.0.0.0/24"
    assert [f.home(f"h{i}") for i in range(1, 11)] == ["t1"] * 4 + ["t2"] * 4 + ["s1"] * 2
    assert f.hosts["h10"] == Host("h10", 4, "02:00:00:00:00:0a", "10.0.0.10", wire.UDP_PORT)
    assert (f.uplink("s1"), f.uplink("t1"), f.uplink("t2")) == (None, 5, 5)
    assert (f.peer("t1", 5), f.peer("s1", 2), f.peer("t1", 1)) == (("s1", 1), ("t2", 5), None)
    assert Fabric.from_json(f.to_json()) == f
    hosts = {n: h | {"udp_port": wire.UDP_PORT} for n, h in RAW["hosts"].items()}
    assert f.to_json() == RAW | {"hosts": hosts}


def test_next_hops_of_the_two_tier_file() -> None:
    seen = {s: [h.port for h in FABRIC.hosts_as_seen_by(s)] for s in FABRIC.devices}
    assert seen == {
        "s1": [1, 1, 1, 1, 2, 2, 2, 2, 3, 4],
        "t1": [1, 2, 3, 4, 5, 5, 5, 5, 5, 5],
        "t2": [5, 5, 5, 5, 1, 2, 3, 4, 5, 5],
    }
    t2 = FABRIC.topology_of("t2")
    assert t2.hosts["h7"] == Host("h7", 3, "02:00:00:00:00:07", "10.0.0.7")
    assert t2.hosts["h9"] == Host("h9", 5, "02:00:00:00:00:09", "10.0.0.9")
    assert FABRIC.port_toward("s1", "h6") == 2 and FABRIC.port_toward("t1", "h4") == 4


def test_a_job_across_racks_completes_at_the_spine() -> None:
    roles = FABRIC.job_roles(["h1", "h5", "h2", "h8", "h6"], ["h9", "h10"])
    assert roles == {
        "s1": JobRole(local={}, children={1: 0b00101, 2: 0b11010}, up_port=None),
        "t1": JobRole(local={1: 0b00001, 2: 0b00100}, children={}, up_port=5),
        "t2": JobRole(local={1: 0b00010, 4: 0b01000, 2: 0b10000}, children={}, up_port=5),
    }
    s1, t2 = roles["s1"], roles["t2"]
    assert (s1.fan_in, s1.worker_mask, s1.completes) == (2, 0b11111, True)
    assert (t2.fan_in, t2.worker_mask, t2.completes, t2.local_ports) == (
        3,
        0b11010,
        False,
        (1, 2, 4),
    )


def test_a_job_inside_a_rack_sums_at_its_tor_alone() -> None:
    """The switches on the way to a PS outside the rack are its transits."""
    tor = JobRole(local={4: 1, 3: 2}, children={}, up_port=None)
    assert FABRIC.job_roles(["h8", "h7"], ["h5"]) == {"t2": tor}
    assert FABRIC.job_roles(["h8", "h7"], ["h9"]) == {
        "s1": JobRole(local={}, children={}, up_port=2),
        "t2": tor,
    }
    roles = FABRIC.job_roles(["h8", "h7"], ["h1", "h10"])
    assert roles == {
        "s1": JobRole(local={}, children={}, up_port=2),
        "t1": JobRole(local={}, children={}, up_port=5),
        "t2": tor,
    }
    assert [(r.transit, r.fan_in, r.worker_mask) for r in roles.values()] == [
        (True, 0, 0),
        (True, 0, 0),
        (False, 2, 0b11),
    ]


def test_a_ps_in_a_rack_without_workers_makes_its_tor_a_transit() -> None:
    roles = FABRIC.job_roles(["h1", "h5"], ["h3", "h7"])
    assert roles == {
        "s1": JobRole(local={}, children={1: 1, 2: 2}, up_port=None),
        "t1": JobRole(local={1: 1}, children={}, up_port=5),
        "t2": JobRole(local={1: 2}, children={}, up_port=5),
    }


def test_workers_on_the_spine_and_in_a_rack() -> None:
    roles = FABRIC.job_roles(["h9", "h3"], ["h10"])
    assert roles == {
        "s1": JobRole(local={3: 1}, children={1: 2}, up_port=None),
        "t1": JobRole(local={3: 2}, children={}, up_port=5),
    }


@pytest.mark.parametrize(
    ("workers", "ps", "error", "message"),
    [
        ([], ["h9"], InvalidRequest, "a job has 1..32 workers, not 0"),
        (["h1"], ["h9", "h10", "h8"], InvalidRequest, "a job has 1, 2, 4 .. 8 PS hosts, not 3"),
        (["h1", "h11"], ["h9"], NotFound, "fabric: unknown host 'h11' (known hosts: h1, h2, "),
        (["h1", "h1"], ["h9"], InvalidRequest, "a worker host is given twice: h1, h1"),
        (["h1"], ["h9", "h9"], InvalidRequest, "a PS host is given twice: h9, h9"),
        (["h1", "h9"], ["h9"], InvalidRequest, "host(s) h9 given as both worker and PS"),
    ],
)
def test_a_job_is_checked(
    workers: list[str], ps: list[str], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as e:
        FABRIC.job_roles(workers, ps)
    assert str(e.value).startswith(message)


def test_more_workers_than_bits_are_refused() -> None:
    hosts = {f"h{i}": _host("s1", i, i) for i in range(1, 35)}
    f = Fabric.from_json(
        {"switches": {"s1": {"device_id": 0, "p4runtime": "unix:/x"}}, "hosts": hosts}
    )
    with pytest.raises(InvalidRequest, match=r"^a job has 1\.\.32 workers, not 33$"):
        f.job_roles([f"h{i}" for i in range(1, 34)], ["h34"])


def test_unknown_switch_and_host_are_not_found() -> None:
    with pytest.raises(
        NotFound, match=r"^fabric: unknown switch 's9' \(known switches: s1, t1, t2\)$"
    ):
        FABRIC.port_toward("s9", "h1")
    with pytest.raises(NotFound, match=r"^fabric: unknown host 'x'"):
        FABRIC.port_toward("s1", "x")
    with pytest.raises(NotFound, match="unknown switch"):
        FABRIC.uplink("s9")


def test_a_one_switch_topology_is_a_fabric_of_one_switch(tmp_path: Path) -> None:
    raw = {
        "pool_size": 64,
        "hosts": {
            "h1": {"port": 1, "mac": "02:00:00:00:00:01", "ip": "10.0.0.1"},
            "h2": {"port": 7, "mac": "02:00:00:00:00:02", "ip": "10.0.0.2", "udp_port": 50002},
        },
    }
    path = tmp_path / "topo.json"
    path.write_text(json.dumps(raw))
    f = Fabric.load(path)
    topo = Topology.from_json(raw)
    assert f == one_switch(topo)
    assert f.devices == {"s1": DEFAULT_DEVICE} and f.links == () and f.pool_size == 64
    assert f.topology_of("s1") == topo
    assert f.hosts_as_seen_by("s1") == list(topo.hosts.values())
    mine = Fabric.load(path, Device("tor7", 7, "unix:/run/tor7.sock"))
    assert mine.devices == {"tor7": Device("tor7", 7, "unix:/run/tor7.sock")}
    assert mine.home("h2") == "tor7"


def test_one_switch_roles() -> None:
    topo = Topology(
        {f"h{i}": Host(f"h{i}", i, f"02:00:00:00:00:0{i}", f"10.0.0.{i}") for i in (1, 2, 3)}
    )
    f = one_switch(topo)
    assert f.job_roles(["h3", "h1"], ["h2"]) == {
        "s1": JobRole(local={3: 1, 1: 2}, children={}, up_port=None)
    }


def test_a_one_switch_topology_with_a_host_on_port_0_is_refused() -> None:
    topo = Topology({"h0": Host("h0", 0, "02:00:00:00:00:01", "10.0.0.1")})
    with pytest.raises(
        InvalidRequest, match=r"^fabric: host 'h0': port 0 is not a switch port \(1\.\.510\)$"
    ):
        one_switch(topo)


def _host(switch: str, port: int, i: int) -> dict[str, Any]:
    return {"switch": switch, "port": port, "mac": f"02:00:00:00:01:{i:02x}", "ip": f"10.1.0.{i}"}


def _broken(change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    raw = copy.deepcopy(RAW)
    change(raw)
    return raw


def _relink(raw: dict[str, Any], i: int, **fields: Any) -> None:
    raw["links"][i].update(fields)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([], "expected an object with switches, hosts and links"),
        (_broken(lambda r: r.update(extra=1)), "unknown field(s) extra"),
        (
            _broken(lambda r: r.pop("switches")),
            'expected "switches": {name: {device_id, p4runtime, ...}}',
        ),
        (
            _broken(lambda r: r.update(hosts=[])),
            'expected "hosts": {name: {switch, port, mac, ip}}',
        ),
        (
            _broken(lambda r: r.update(links={})),
            'expected "links": [{switch, port, peer, peer_port}, ...]',
        ),
        (_broken(lambda r: r.update(switches={}, hosts={}, links=[])), "no switches"),
        (_broken(lambda r: r.update(description=3)), "description must be a string"),
        (_broken(lambda r: r.update(pool_size=0)), "pool_size 0 must be a positive integer"),
        (_broken(lambda r: r.update(pool_size=True)), "pool_size True must be a positive integer"),
        (
            _broken(lambda r: r.update(subnet="10.0.0.0/33")),
            "subnet '10.0.0.0/33' is not an IPv4 network",
        ),
        (
            _broken(lambda r: r["hosts"]["h10"].update(ip="10.0.1.10")),
            "h10's address 10.0.1.10 is outside the subnet 10.0.0.0/24",
        ),
        (
            _broken(lambda r: r.update(subnet="10.0.0.0/25")),
            "s1's address 10.0.0.254 is outside the subnet 10.0.0.0/25",
        ),
        (
            _broken(lambda r: r["switches"].update({"s 2": r["switches"]["s1"]})),
            "switch name 's 2' is not 1..64 letters, digits, '_', '.', '-'",
        ),
        (
            _broken(lambda r: r["switches"]["t1"].pop("p4runtime")),
            "switch t1: expected an object with device_id and p4runtime",
        ),
        (_broken(lambda r: r["switches"]["t1"].update(bw=1)), "switch t1: unknown field(s) bw"),
        (
            _broken(lambda r: r["switches"]["t1"].update(device_id="1")),
            "switch t1: device_id '1' is not an integer",
        ),
        (
            _broken(lambda r: r["switches"]["t1"].update(device_id=False)),
            "switch t1: device_id False is not an integer",
        ),
        (
            _broken(lambda r: r["switches"]["t1"].update(device_id=2**64)),
            "switch t1: device_id 18446744073709551616 is out of range (0..2^64-1)",
        ),
        (
            _broken(lambda r: r["switches"]["t1"].update(device_id=2)),
            "'t1' and 't2' share device id 2",
        ),
        (
            _broken(lambda r: r["switches"]["t1"].update(role="leaf")),
            "switch t1: role 'leaf' is not one of spine, tor",
        ),
        (
            _broken(lambda r: r["switches"]["t1"].update(role="spine")),
            "switches s1, t1 are all spines (one at most: the root)",
        ),
        (
            _broken(lambda r: r["switches"]["t1"].pop("mac")),
            "switch t1: give both ip and mac, or neither",
        ),
        (
            _broken(lambda r: r["switches"]["t1"].update(ip="10.0.0")),
            "switch t1: '10.0.0' is not an IPv4 address",
        ),
        (
            _broken(lambda r: r["switches"]["t1"].update(mac="02:00")),
            "switch t1: '02:00' is not a MAC address",
        ),
        (
            _broken(lambda r: r["switches"]["t1"].update(ip="10.0.0.1")),
            "'t1' and 'h1' share ip 10.0.0.1",
        ),
        (
            _broken(lambda r: r["switches"]["t1"].update(p4runtime="127.0.0.1:9559")),
            "'s1' and 't1' share P4Runtime address 127.0.0.1:9559",
        ),
        (
            _broken(lambda r: r["switches"]["t1"].update(p4runtime="localhost")),
            "switch t1: p4runtime 'localhost' is not HOST:PORT or unix:PATH",
        ),
        (
            _broken(lambda r: r["switches"]["t1"].update(p4runtime=":9559")),
            "switch t1: p4runtime ':9559' is not HOST:PORT or unix:PATH",
        ),
        (
            _broken(lambda r: r["switches"]["t1"].update(p4runtime="h:65536")),
            "switch t1: p4runtime 'h:65536' is not HOST:PORT or unix:PATH",
        ),
        (
            _broken(lambda r: r["switches"]["t1"].update(p4runtime="unix:")),
            "switch t1: p4runtime 'unix:' is not HOST:PORT or unix:PATH",
        ),
        (
            _broken(lambda r: r["switches"]["t1"].update(p4runtime=9560)),
            "switch t1: p4runtime 9560 is not HOST:PORT or unix:PATH",
        ),
        (
            _broken(lambda r: r["hosts"].update(t1=r["hosts"].pop("h4"))),
            "'t1' names both a switch and a host",
        ),
        (
            _broken(lambda r: r["hosts"]["h2"].pop("switch")),
            "host 'h2': expected an object with switch (a name), port, mac, ip",
        ),
        (_broken(lambda r: r["hosts"]["h2"].update(switch="t3")), "host 'h2': unknown switch 't3'"),
        (
            _broken(lambda r: r["hosts"]["h2"].update(port=511)),
            "host 'h2': port 511 is not a switch port (1..510)",
        ),
        (
            _broken(lambda r: r["hosts"]["h2"].update(port=0)),
            "host 'h2': port 0 is not a switch port (1..510)",
        ),
        (
            _broken(lambda r: r["hosts"]["h2"].update(port=True)),
            "host 'h2': port True is not a switch port (1..510)",
        ),
        (_broken(lambda r: r["hosts"]["h2"].pop("port")), "host 'h2': missing field 'port'"),
        (
            _broken(lambda r: r["hosts"]["h2"].update(ip="10.0.0.1")),
            "'h1' and 'h2' share ip 10.0.0.1",
        ),
        (
            _broken(lambda r: r["hosts"]["h2"].update(mac="02:00:00:00:00:01")),
            "'h1' and 'h2' share mac 02:00:00:00:00:01",
        ),
        (_broken(lambda r: r["hosts"]["h2"].update(vlan=3)), "host 'h2': unknown field(s) vlan"),
        (
            _broken(lambda r: r["hosts"]["h2"].update(port=1)),
            "port t1:1 holds both host 'h1' and host 'h2'",
        ),
        (
            _broken(lambda r: r["hosts"]["h2"].update(port=5)),
            "port t1:5 holds both host 'h2' and the link to s1:1",
        ),
        (
            _broken(lambda r: _relink(r, 1, peer_port=1)),
            "port s1:1 holds both the link to t1:5 and the link to t2:5",
        ),
        (_broken(lambda r: _relink(r, 1, peer="t3")), "a link names the unknown switch 't3'"),
        (
            _broken(lambda r: _relink(r, 1, peer="t2", peer_port=6)),
            "link t2:5 - t2:6 joins a switch to itself",
        ),
        (
            _broken(lambda r: _relink(r, 1, port=0)),
            "link of t2 and s1: port 0 is not a switch port (1..510)",
        ),
        (
            _broken(lambda r: _relink(r, 1, bw=10)),
            "links[1]: expected exactly switch, port, peer, peer_port",
        ),
        (
            _broken(lambda r: _relink(r, 1, peer=2)),
            "links[1]: peer 2 is not a switch name",
        ),
        (
            _broken(lambda r: r["links"].pop()),
            "switch t2 is not linked to s1 (the switches must form a tree)",
        ),
        (
            _broken(
                lambda r: r["links"].append(
                    {"switch": "t1", "port": 6, "peer": "t2", "peer_port": 6}
                )
            ),
            "link t1:6 - t2:6 closes a cycle (the switches must form a tree)",
        ),
        (
            _broken(
                lambda r: r["links"].append(
                    {"switch": "t1", "port": 6, "peer": "s1", "peer_port": 6}
                )
            ),
            "link t1:6 - s1:6 closes a cycle (the switches must form a tree)",
        ),
    ],
)
def test_a_broken_fabric_is_refused_in_one_line(raw: Any, message: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        Fabric.from_json(raw)
    assert str(e.value) == f"fabric: {message}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"switches": {}, "switches": {}}', "is not valid JSON: key 'switches' given twice"),
        ('{"hosts": {"h1": {"port": 1}, "h1": {}}}', "is not valid JSON: key 'h1' given twice"),
        ("{", "is not valid JSON: Expecting property name"),
    ],
)
def test_a_file_that_is_not_json_is_refused(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "f.json"
    path.write_text(text)
    with pytest.raises(InvalidRequest) as e:
        Fabric.load(path)
    assert str(e.value).startswith(f"fabric: {path} {message}")


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest) as e:
        Fabric.load(tmp_path / "none.json")
    assert (
        str(e.value) == f"fabric: cannot read {tmp_path / 'none.json'}: No such file or directory"
    )


# -- random trees --


@st.composite
def trees(draw: st.DrawFn) -> dict[str, Any]:
    """A fabric file: switches s0..sn-1 in a random tree, listed in a random
    order, a spine named or not; hosts on random switches and ports."""
    n = draw(st.integers(1, 7))
    parents = [draw(st.integers(0, i - 1)) for i in range(1, n)]
    homes = draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=12))
    need = [parents.count(i) + (i > 0) + homes.count(i) for i in range(n)]
    ports = [draw(st.lists(st.integers(1, 510), min_size=k, max_size=k, unique=True)) for k in need]
    links = []
    for child, parent in enumerate(parents, start=1):
        links.append(
            {
                "switch": f"s{child}",
                "port": ports[child].pop(),
                "peer": f"s{parent}",
                "peer_port": ports[parent].pop(),
            }
        )
    hosts = {f"h{i}": _host(f"s{s}", ports[s].pop(), i) for i, s in enumerate(homes)}
    order = draw(st.permutations(range(n)))
    spine = draw(st.none() | st.integers(0, n - 1))
    switches = {
        f"s{i}": {"device_id": i, "p4runtime": f"unix:/tmp/s{i}.sock"}
        | ({"role": "spine"} if i == spine else {})
        for i in order
    }
    return {"switches": switches, "hosts": hosts, "links": draw(st.permutations(links))}


@st.composite
def jobs(draw: st.DrawFn) -> tuple[Fabric, list[str], list[str]]:
    f = Fabric.from_json(draw(trees()))
    names = list(f.hosts)
    workers = draw(
        st.lists(st.sampled_from(names), min_size=1, max_size=len(names) - 1, unique=True)
    )
    rest = [h for h in names if h not in workers]
    shards = draw(st.sampled_from([k for k in (1, 2, 4) if k <= len(rest)]))
    ps = draw(st.lists(st.sampled_from(rest), min_size=shards, max_size=shards, unique=True))
    return f, workers, ps


def _hops(f: Fabric) -> dict[str, int]:
    """Each switch's distance from the root, by breadth-first search over the links."""
    dist = {f.root: 0}
    while len(dist) < len(f.devices):
        for link in f.links:
            for a, b in ((link.switch, link.peer), (link.peer, link.switch)):
                if a in dist and b not in dist:
                    dist[b] = dist[a] + 1
    return dist


def _up(f: Fabric, switch: str) -> str:
    up = f.uplink(switch)
    assert up is not None
    peer = f.peer(switch, up)
    assert peer is not None
    return peer[0]


def _to_root(f: Fabric, switch: str) -> list[str]:
    path = [switch]
    while path[-1] != f.root:
        path.append(_up(f, path[-1]))
    return path


@given(trees())
def test_every_next_hop_leads_to_its_host(raw: dict[str, Any]) -> None:
    f = Fabric.from_json(raw)
    for switch in f.devices:
        seen = f.hosts_as_seen_by(switch)
        assert [h.name for h in seen] == list(f.hosts)
        for h in seen:
            assert h.port == f.port_toward(switch, h.name)
            assert (h.mac, h.ip, h.udp_port) == (
                f.hosts[h.name].mac,
                f.hosts[h.name].ip,
                f.hosts[h.name].udp_port,
            )
            here, visited = switch, {switch}
            while here != f.home(h.name):
                peer = f.peer(here, f.port_toward(here, h.name))
                assert peer is not None and peer[0] not in visited
                here = peer[0]
                visited.add(here)
            assert f.port_toward(here, h.name) == f.hosts[h.name].port
    assert Fabric.from_json(f.to_json()) == f


@given(trees())
def test_the_root_is_the_spine_or_the_first_switch(raw: dict[str, Any]) -> None:
    f = Fabric.from_json(raw)
    spines = [n for n, s in raw["switches"].items() if s.get("role") == "spine"]
    assert f.root == (spines[0] if spines else next(iter(raw["switches"])))
    dist = _hops(f)
    assert f.uplink(f.root) is None
    for switch in f.devices:
        if switch != f.root:
            assert dist[_up(f, switch)] == dist[switch] - 1


@given(jobs())
def test_roles_partition_the_workers_up_to_their_top(
    job: tuple[Fabric, list[str], list[str]],
) -> None:
    f, workers, ps = job
    roles = {s: r for s, r in f.job_roles(workers, ps).items() if not r.transit}
    full = (1 << len(workers)) - 1
    paths = [_to_root(f, f.home(w)) for w in workers]
    top = _top(f, paths)
    assert set(roles) == {s for p in paths for s in p[: p.index(top) + 1]}
    assert [s for s, r in roles.items() if r.completes] == [top]
    assert roles[top].worker_mask == full
    for switch, role in roles.items():
        parts = [*role.local.values(), *role.children.values()]
        assert role.fan_in == len(role.local) + len(role.children) == len(parts)
        union = 0
        for bits in parts:
            assert bits and not union & bits
            union |= bits
        assert union == role.worker_mask
        below = [i for i, p in enumerate(paths) if switch in p]
        assert role.worker_mask == sum(1 << i for i in below)
        assert role.local == {
            f.hosts[w].port: 1 << i for i, w in enumerate(workers) if f.home(w) == switch
        }
        assert role.up_port == (None if switch == top else f.uplink(switch))
        for port, bits in role.children.items():
            peer = f.peer(switch, port)
            assert peer is not None and _up(f, peer[0]) == switch
            assert roles[peer[0]].worker_mask == bits
            assert roles[peer[0]].up_port == peer[1]


def _top(f: Fabric, paths: list[list[str]]) -> str:
    """The deepest switch on every one of ``paths`` up to the root."""
    dist = _hops(f)
    return max(set(paths[0]).intersection(*paths), key=lambda s: dist[s])


def _between(f: Fabric, a: str, b: str) -> list[str]:
    """The switches from ``a`` to ``b``, both included, through their lowest common ancestor."""
    up_a, up_b = _to_root(f, a), _to_root(f, b)
    meet = _top(f, [up_a, up_b])
    return up_a[: up_a.index(meet) + 1] + up_b[: up_b.index(meet)][::-1]


@given(jobs())
def test_every_switch_between_the_top_and_a_ps_has_a_role(
    job: tuple[Fabric, list[str], list[str]],
) -> None:
    f, workers, ps = job
    roles = f.job_roles(workers, ps)
    paths = [_to_root(f, f.home(w)) for w in workers]
    top = _top(f, paths)
    tree = {s for p in paths for s in p[: p.index(top) + 1]}
    ways = {h: _between(f, top, f.home(h)) for h in ps}
    assert set(roles) == tree.union(*ways.values())
    assert list(roles) == [s for s in f.devices if s in roles]
    for switch, role in roles.items():
        assert role.transit == (switch not in tree)
        if role.transit:
            assert (role.local, role.children, role.fan_in, role.worker_mask) == ({}, {}, 0, 0)
            assert role.up_port is not None
            way = next(w for w in ways.values() if switch in w)
            peer = f.peer(switch, role.up_port)
            assert peer is not None and peer[0] == way[way.index(switch) - 1]


@given(jobs(), st.data())
def test_the_ps_hosts_change_no_role_of_the_workers_tree(
    job: tuple[Fabric, list[str], list[str]], data: st.DataObject
) -> None:
    f, workers, ps = job
    other = data.draw(st.sampled_from([h for h in f.hosts if h not in workers]))
    tree = {s: r for s, r in f.job_roles(workers, ps).items() if not r.transit}
    again = {s: r for s, r in f.job_roles(workers, [other]).items() if not r.transit}
    assert tree == again
