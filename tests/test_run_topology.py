"""The run's topology files and how a scenario's jobs map onto their hosts."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from controller.world.fabric import Device
from controller.world.topology import Host
from esa import wire
from esa.job import JobSpec, Placement
from runner import network as topo
from runner import scenario as scn
from runner.faults import parse_fault
from runner.network import HostRole, JobHosts
from runner.scenario import LinkShape, RunJob, Scenario


def small(hosts: int = 4) -> dict[str, Any]:
    return {
        "subnet": "10.1.0.0/24",
        "switches": {
            "s1": {"device_id": 0, "p4runtime": "127.0.0.1:9559", "ip": "10.1.0.254",
                   "mac": "02:00:00:00:01:fe"},
        },
        "hosts": {
            f"h{i}": {"switch": "s1", "port": 10 + i, "ip": f"10.1.0.{i}",
                      "mac": f"02:00:00:00:01:{i:02x}"}
            for i in range(1, hosts + 1)
        },
    }  # fmt: skip


def two_racks() -> dict[str, Any]:
    """s1 over t1 (h1, h2) and t2 (h3, h4)."""
    raw = small()
    raw["switches"] |= {
        f"t{r}": {"device_id": r, "p4runtime": f"127.0.0.1:{9559 + r}", "role": "tor",
                  "ip": f"10.1.0.{250 + r}", "mac": f"02:00:00:00:01:{250 + r:02x}"}
        for r in (1, 2)
    }  # fmt: skip
    raw["switches"]["s1"]["role"] = "spine"
    for i, h in enumerate(raw["hosts"].values()):
        h.update(switch=f"t{1 + i // 2}", port=1 + i % 2)
    raw["links"] = [{"switch": f"t{r}", "port": 9, "peer": "s1", "peer_port": r} for r in (1, 2)]
    return raw


def test_the_default_topology_is_a_fabric_of_one_switch_and_sixteen_hosts() -> None:
    t = topo.load(scn.DEFAULT_TOPOLOGY)
    assert topo.path_of("single") == topo.TOPOLOGIES / "single.json"
    assert t.name == "single"
    assert t.switches == (
        Device("s1", 0, "127.0.0.1:9559", None, "10.0.0.254", "02:00:00:00:00:fe"),
    )
    assert (str(t.fabric.subnet), t.prefix_len, t.default_switch) == ("10.0.0.0/24", 24, "s1")
    assert [h.name for h in t.hosts] == [f"h{i}" for i in range(1, 17)]
    assert t.host("h12") == Host("h12", 12, "02:00:00:00:00:0c", "10.0.0.12")
    assert [(a.host.name, a.switch, a.port) for a in t.links] == [
        (f"h{i}", "s1", i) for i in range(1, 17)
    ]
    assert {a.link for a in t.links} == {LinkShape()}
    assert t.trunks == ()


def test_two_tier_is_two_racks_under_a_spine() -> None:
    t = topo.load("two-tier")
    assert [(d.name, d.device_id, d.p4runtime, d.role) for d in t.switches] == [
        ("s1", 0, "127.0.0.1:9559", "spine"),
        ("t1", 1, "127.0.0.1:9560", "tor"),
        ("t2", 2, "127.0.0.1:9561", "tor"),
    ]
    assert t.default_switch == "t1"
    homes = {a.host.name: (a.switch, a.port) for a in t.links}
    assert homes == {
        **{f"h{i}": ("t1", i) for i in range(1, 5)},
        **{f"h{i}": ("t2", i - 4) for i in range(5, 9)},
        **{f"h{i}": ("t1", i - 5) for i in range(11, 15)},
        **{f"h{i}": ("t2", i - 9) for i in range(15, 19)},
        "h9": ("s1", 3),
        "h10": ("s1", 4),
    }
    assert t.trunks == (
        topo.Trunk("t1", 5, "s1", 1, LinkShape()),
        topo.Trunk("t2", 5, "s1", 2, LinkShape()),
    )


def test_every_scenario_names_a_topology_its_jobs_fit() -> None:
    for path in sorted(scn.SCENARIOS.glob("*.json")):
        s = scn.load(path)
        expected = "two-tier" if path.name == "two-tier.json" else "single"
        assert s.topology == expected, path.name
        jobs = topo.assign(s, topo.load(s.topology))
        assert sorted(jobs) == sorted(j.spec.job for j in s.jobs)


def test_link_properties_and_a_file_by_path(tmp_path: Path) -> None:
    raw = two_racks()
    raw["link_properties"] = [
        {"host": "h2", "bw_mbps": 100, "delay_ms": 2, "loss_pct": 1.5},
        {"host": "h3", "bw_mbps": None},
        {"switch": "s1", "peer": "t2", "bw_mbps": 1000, "delay_ms": 1},
    ]
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(raw))
    t = topo.load(str(path))
    assert t.name == "mine"
    assert t.attachment("h2") == topo.Attachment(
        Host("h2", 2, "02:00:00:00:01:02", "10.1.0.2"), "t1", LinkShape(100.0, 2.0, 1.5)
    )
    assert t.attachment("h3").link == LinkShape()
    assert [k.link for k in t.trunks] == [LinkShape(), LinkShape(1000.0, 1.0, 0.0)]
    # the scenario's link (and the flags) set a property on every host's link
    assert t.attachment("h2").link.overridden({"loss_pct": 0.0}) == LinkShape(100.0, 2.0, 0.0)
    assert t.attachment("h1").link.overridden({"bw_mbps": 10.0}) == LinkShape(10.0, 0.0, 0.0)


def _broken(change: Any, base: Callable[[], dict[str, Any]] = small) -> dict[str, Any]:
    raw = copy.deepcopy(base())
    change(raw)
    return raw


def _props(*entries: dict[str, Any]) -> Any:
    return lambda r: r.update(link_properties=list(entries))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        # the fabric's own checks, as the controller makes them
        (_broken(lambda r: r["hosts"]["h2"].update(port=11)),
         "^topology t: port s1:11 holds both host 'h1' and host 'h2'$"),
        (_broken(lambda r: r["hosts"]["h1"].update(switch="s9")),
         "^topology t: host 'h1': unknown switch 's9'$"),
        (_broken(lambda r: r["hosts"]["h1"].update(port=511)), "port 511 is not a switch port"),
        (_broken(lambda r: r["hosts"]["h2"].update(ip="10.1.0.1")), "'h1' and 'h2' share ip"),
        (_broken(lambda r: r["hosts"]["h1"].update(ip="10.2.0.1")), "outside the subnet"),
        (_broken(lambda r: r["hosts"]["h1"].update(mac="02:00")), "'02:00' is not a MAC"),
        (_broken(lambda r: r.update(subnet="10.1.0.0/33")), "is not an IPv4 network"),
        (_broken(lambda r: r.update(colour=1)), r"unknown field\(s\) colour"),
        (_broken(lambda r: r.pop("switches")), "expected \"switches\""),
        (_broken(lambda r: r["links"].append(dict(r["links"][0], port=8, peer_port=8)), two_racks),
         "closes a cycle"),
        # what the run needs besides
        (_broken(lambda r: r.pop("subnet")), "^topology t: give the hosts' subnet$"),
        (_broken(lambda r: r.update(hosts={})), "^topology t: no hosts$"),
        (_broken(lambda r: r["switches"].update(s1={"device_id": 0, "p4runtime": "127.0.0.1:1"})),
         "^topology t: switch s1 needs an ip and a mac"),
        (_broken(lambda r: r["hosts"].update({"host-5": r["hosts"].pop("h4")})),
         "^topology t: name 'host-5' is not letters then digits"),
        # its link properties
        (_broken(_props({"host": "h9", "loss_pct": 1})),
         "link_properties names the unknown host 'h9'"),
        (_broken(_props({"host": "h1"}, {"host": "h1", "loss_pct": 1})),
         "link_properties gives the link of h1 twice"),
        (_broken(_props({"host": "h1", "loss_pct": 100})), "link of h1: .*loss must be"),
        (_broken(_props({"host": "h1", "colour": 1})), "must name a host, or a switch and its"),
        (_broken(_props({"host": "h1", "switch": "s1"})), "must name a host, or a switch"),
        (_broken(_props({"switch": "t1", "peer": "t2"}), two_racks),
         "link_properties: no link joins t1 and t2"),
        (_broken(_props({"switch": "t1", "peer": "s1", "loss_pct": 1}), two_racks),
         "link of t1 and s1: loss is for hosts' links only"),
        (_broken(lambda r: r.update(link_properties={"h1": {}})), "link_properties must be a list"),
    ],
)  # fmt: skip
def test_bad_topologies_are_refused_naming_why(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        topo.parse(raw, "t")


def test_an_unknown_topology_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"no file .*nowhere.json \(known topologies: .*single"):
        topo.load("nowhere")


def _job(job: int, workers: int = 2, hosts: tuple[tuple[str, ...], ...] = ()) -> RunJob:
    """A job of ``workers`` workers; ``hosts``: its worker hosts and PS hosts."""
    return RunJob(JobSpec(job, workers, 32, 1), Placement(*hosts) if hosts else None)


def _roles(jobs: dict[int, JobHosts]) -> dict[int, tuple[list[str], list[str]]]:
    return {j: ([m.name for m in h.workers], [m.name for m in h.ps]) for j, h in jobs.items()}


def test_jobs_take_hosts_in_order_workers_then_ps() -> None:
    t = topo.parse(small(8), "t")
    jobs = topo.assign(Scenario(jobs=(_job(1), _job(2, 3))), t)
    assert _roles(jobs) == {1: (["h1", "h2"], ["h3"]), 2: (["h4", "h5", "h6"], ["h7"])}
    assert jobs[2].workers[2] == HostRole(
        Host("h6", 16, "02:00:00:00:01:06", "10.1.0.6"), "j2w2", 2
    )
    assert jobs[2].ps == (
        HostRole(Host("h7", 17, "02:00:00:00:01:07", "10.1.0.7", wire.UDP_PORT), "j2ps0", 0),
    )
    assert jobs[2].placement == Placement(("h4", "h5", "h6"), ("h7",))
    assert jobs[2].ps_addresses == f"10.1.0.7:{wire.UDP_PORT}"


def test_named_hosts_are_kept_and_the_others_fill_in_around_them() -> None:
    t = topo.parse(small(10), "t")
    named = _job(2, hosts=(("h1", "h5"), ("h8", "h10")))
    jobs = topo.assign(Scenario(jobs=(_job(1), named, _job(3))), t)
    assert _roles(jobs) == {
        1: (["h2", "h3"], ["h4"]),
        2: (["h1", "h5"], ["h8", "h10"]),
        3: (["h6", "h7"], ["h9"]),
    }
    assert [(m.role, m.index) for m in jobs[2].members] == [
        ("j2w0", 0), ("j2w1", 1), ("j2ps0", 0), ("j2ps1", 1)
    ]  # fmt: skip
    assert jobs[2].ps_addresses == f"10.1.0.8:{wire.UDP_PORT},10.1.0.10:{wire.UDP_PORT}"


def test_jobs_are_placed_across_racks_and_complete_at_their_top() -> None:
    """A job inside a rack completes at its ToR, one across racks at the
    spine; the PSes send what they complete to that switch's address."""
    t = topo.parse(two_racks(), "t")
    inside = _job(1, hosts=(("h1", "h2"), ("h3",)))
    jobs = topo.assign(Scenario(jobs=(inside,)), t)
    assert (jobs[1].top, jobs[1].switch_addr) == ("t1", "10.1.0.251")
    across = _job(1, hosts=(("h1", "h3"), ("h2",)))
    jobs = topo.assign(Scenario(jobs=(across,)), t)
    assert (jobs[1].top, jobs[1].switch_addr) == ("s1", "10.1.0.254")
    # in the file's order, a job of three takes both racks
    jobs = topo.assign(Scenario(jobs=(_job(1, 3),)), t)
    assert (_roles(jobs), jobs[1].top) == ({1: (["h1", "h2", "h3"], ["h4"])}, "s1")


def test_the_two_tier_scenario_has_a_job_in_a_rack_and_one_across_them() -> None:
    s = scn.load(scn.SCENARIOS / "two-tier.json")
    jobs = topo.assign(s, topo.load(s.topology))
    assert {j: (_roles(jobs)[j], h.top, h.switch_addr) for j, h in jobs.items()} == {
        1: ((["h1", "h2"], ["h9"]), "t1", "10.0.0.251"),
        2: ((["h4", "h5"], ["h10", "h8"]), "s1", "10.0.0.254"),
    }


def test_a_fault_names_a_switch_of_the_topology() -> None:
    s = Scenario(jobs=(_job(1),), faults=(parse_fault("bmv2-restart=t2@1"),))
    topo.check_faults(s, topo.parse(two_racks(), "t"))
    with pytest.raises(ValueError, match=r"^fault bmv2-restart=t2@1: topology t has no switch "
                                         r"t2 \(it has s1\)$"):  # fmt: skip
        topo.check_faults(s, topo.parse(small(), "t"))


def test_a_placed_scenario_names_every_jobs_hosts() -> None:
    named = _job(2, hosts=(("h1", "h5"), ("h8", "h10")))
    s = Scenario(jobs=(_job(1), named))
    assert topo.placed(s, topo.parse(small(10), "t")).jobs == (
        _job(1, hosts=(("h2", "h3"), ("h4",))),
        named,
    )


@pytest.mark.parametrize(
    ("jobs", "message"),
    [
        ((_job(1), _job(2)), r"the jobs need 6 hosts \(workers and PSes\), topology t has 4"),
        ((_job(1, hosts=(("h1", "h2"), ("h3", "h4"))), _job(2)),
         r"the jobs need 7 hosts \(workers and PSes\), topology t has 4"),
        ((_job(1, hosts=(("h1", "h2"), ("h9",))),), "job 1: unknown host 'h9': topology t has h1"),
        ((_job(1, hosts=(("h1", "h3"), ("h2",))), _job(2, hosts=(("h2", "h4"), ("h1",)))),
         "job 2: host h2 is already given to job 1"),
    ],
)  # fmt: skip
def test_assignments_that_can_not_be_made_are_refused(
    jobs: tuple[RunJob, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        topo.assign(Scenario(jobs=jobs), topo.parse(small(4), "t"))


def test_job_host_fields_are_checked() -> None:
    base = {"job": 1, "workers": 2, "values": 1, "iterations": 1}
    j = scn.parse_job({**base, "worker_hosts": ["h4", "h2"], "ps_hosts": ["h1", "h7"]})
    assert j.placement == Placement(("h4", "h2"), ("h1", "h7"))
    assert scn.parse_job(base).placement is None


@pytest.mark.parametrize(
    ("hosts", "message"),
    [
        ({"worker_hosts": ["h4", "h2"]}, "job 1: name both worker_hosts and ps_hosts, or neither"),
        ({"ps_hosts": ["h4"]}, "job 1: name both worker_hosts and ps_hosts, or neither"),
        ({"worker_hosts": ["h4"], "ps_hosts": ["h1"]}, "job 1: 1 worker_hosts for 2 workers"),
        ({"worker_hosts": "h4 h2", "ps_hosts": ["h1"]},
         "job 1: worker_hosts must be a list of host names"),
        ({"worker_hosts": ["h4", "h2"], "ps_hosts": "h1"},
         "job 1: ps_hosts must be a list of host names"),
        ({"worker_hosts": ["h4", "h2"], "ps_hosts": [3]},
         "job 1: ps_hosts must be a list of host names"),
        ({"worker_hosts": ["h4", "h2"], "ps_hosts": []},
         r"job 1: a job has 1, 2, 4 or 8 PS hosts \(a power of two up to 8\), got 0"),
        ({"worker_hosts": ["h4", "h2"], "ps_hosts": ["h1", "h3", "h5"]},
         r"job 1: a job has 1, 2, 4 or 8 PS hosts \(a power of two up to 8\), got 3"),
        ({"worker_hosts": ["h4", "h2"], "ps_hosts": ["h1", "h2"]},
         "job 1: host\\(s\\) named twice in one job: h2"),
        ({"ps_host": "h1"}, r"job entry has unknown field\(s\): ps_host"),
    ],
)  # fmt: skip
def test_bad_job_hosts_are_refused(hosts: dict[str, Any], message: str) -> None:
    base = {"job": 1, "workers": 2, "values": 1, "iterations": 1}
    with pytest.raises(ValueError, match=f"^scenario: {message}$"):
        scn.parse_job({**base, **hosts})
