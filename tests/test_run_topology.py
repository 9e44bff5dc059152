"""The run's topology files and how a scenario's jobs map onto their hosts."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from controller.topology import Host
from esa import wire
from testbed.run import scenario as scn
from testbed.run import topology as topo
from testbed.run.scenario import JobSpec, Link, Scenario
from testbed.run.topology import Member


def small(hosts: int = 4) -> dict[str, Any]:
    return {
        "subnet": "10.1.0.0/24",
        "switch": {"name": "s1", "ip": "10.1.0.254", "mac": "02:00:00:00:01:fe"},
        "hosts": [
            {"name": f"h{i}", "ip": f"10.1.0.{i}", "mac": f"02:00:00:00:01:{i:02x}"}
            for i in range(1, hosts + 1)
        ],
        "links": [{"host": f"h{i}", "port": 10 + i} for i in range(1, hosts + 1)],
    }


def test_the_default_topology_is_a_file_of_sixteen_hosts() -> None:
    t = topo.load(scn.DEFAULT_TOPOLOGY)
    assert topo.path_of("single") == topo.TOPOLOGIES / "single.json"
    assert (t.name, t.switch) == ("single", topo.Node("s1", "10.0.0.254", "02:00:00:00:00:fe"))
    assert str(t.subnet) == "10.0.0.0/24"
    assert [h.name for h in t.hosts] == [f"h{i}" for i in range(1, 17)]
    assert t.host("h12") == Host("h12", 12, "02:00:00:00:00:0c", "10.0.0.12")
    assert [(a.host.name, a.port) for a in t.links] == [(f"h{i}", i) for i in range(1, 17)]
    assert {a.link for a in t.links} == {Link()}


def test_every_scenario_names_a_topology_its_jobs_fit() -> None:
    for path in sorted(scn.SCENARIOS.glob("*.json")):
        assert '"topology": "single"' in path.read_text(), path.name
        s = scn.load(path)
        jobs = topo.assign(s, topo.load(s.topology))
        assert sorted(jobs) == sorted(j.job for j in s.jobs)


def test_link_properties_and_a_file_by_path(tmp_path: Path) -> None:
    raw = small()
    raw["links"][1].update(bw_mbps=100, delay_ms=2, loss_pct=1.5)
    raw["links"][2].update(bw_mbps=None)
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(raw))
    t = topo.load(str(path))
    assert t.name == "mine"
    assert t.attachment("h2") == topo.Attachment(
        Host("h2", 12, "02:00:00:00:01:02", "10.1.0.2"), Link(100.0, 2.0, 1.5)
    )
    assert t.attachment("h3").link == Link()
    # the scenario's link (and the flags) set a property on every link
    assert t.attachment("h2").link.overridden({"loss_pct": 0.0}) == Link(100.0, 2.0, 0.0)
    assert t.attachment("h1").link.overridden({"bw_mbps": 10.0}) == Link(10.0, 0.0, 0.0)


def _broken(change: Any) -> dict[str, Any]:
    raw = copy.deepcopy(small())
    change(raw)
    return raw


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (_broken(lambda r: r["links"][1].update(port=11)), "duplicate port 11: h1 and h2"),
        (_broken(lambda r: r["links"].append({"host": "h9", "port": 40})), "unknown host 'h9'"),
        (_broken(lambda r: r["links"].pop()), r"no link for host\(s\) h4"),
        (_broken(lambda r: r["links"].append({"host": "h1", "port": 40})), "h1 has two links"),
        (_broken(lambda r: r["links"][0].update(port=511)), "port 511 is not a switch port"),
        (_broken(lambda r: r["links"][0].update(port=0)), "port 0 is not a switch port"),
        (_broken(lambda r: r["links"][0].update(colour=1)), "link of h1 has unknown field"),
        (_broken(lambda r: r["links"][0].update(loss_pct=100)), "link of h1: .*loss must be"),
        (_broken(lambda r: r["links"][0].pop("port")), "must name its host and switch port"),
        (_broken(lambda r: r["hosts"][1].update(ip="10.1.0.1")), "h1 and h2 share the ip"),
        (_broken(lambda r: r["hosts"][1].update(mac="02:00:00:00:01:fe")), "s1 and h2 share"),
        (_broken(lambda r: r["hosts"][1].update(name="h1")), "h1 and h1 share the name"),
        (_broken(lambda r: r["hosts"][0].update(ip="10.2.0.1")), "outside the subnet"),
        (_broken(lambda r: r["hosts"][0].update(ip="10.1.0")), "'10.1.0' is not an IPv4"),
        (_broken(lambda r: r["hosts"][0].update(mac="02:00")), "'02:00' is not a MAC"),
        (_broken(lambda r: r["hosts"][0].update(name="host-1")), "'host-1' is not letters"),
        (_broken(lambda r: r["hosts"][0].update(port=3)), "exactly name, ip and mac"),
        (_broken(lambda r: r.update(hosts=[])), "hosts must be a non-empty list"),
        (_broken(lambda r: r.update(subnet="10.1.0.0/33")), "is not an IPv4 network"),
        (_broken(lambda r: r.pop("switch")), r"missing field\(s\) switch"),
        (_broken(lambda r: r.update(switches={})), r"unknown field\(s\) switches"),
    ],
)
def test_bad_topologies_are_refused_naming_why(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        topo.parse(raw, "t")


def test_an_unknown_topology_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"no file .*nowhere.json \(known topologies: .*single"):
        topo.load("nowhere")


def _scenario(*jobs: JobSpec) -> Scenario:
    return Scenario(jobs=jobs)


def _roles(jobs: dict[int, tuple[list[Member], Member]]) -> dict[int, tuple[list[str], str]]:
    return {j: ([m.name for m in w], ps.name) for j, (w, ps) in jobs.items()}


def test_jobs_take_hosts_in_order_workers_then_ps() -> None:
    t = topo.parse(small(8), "t")
    jobs = topo.assign(_scenario(JobSpec(1, 2, 32, 1), JobSpec(2, 3, 32, 1)), t)
    assert _roles(jobs) == {1: (["h1", "h2"], "h3"), 2: (["h4", "h5", "h6"], "h7")}
    workers, ps = jobs[2]
    assert workers[2] == Member(Host("h6", 16, "02:00:00:00:01:06", "10.1.0.6"), "j2w2", 2)
    assert ps == Member(Host("h7", 17, "02:00:00:00:01:07", "10.1.0.7", wire.UDP_PORT), "ps2", -1)


def test_named_hosts_are_kept_and_the_others_fill_in_around_them() -> None:
    t = topo.parse(small(9), "t")
    named = JobSpec(2, 2, 32, 1, worker_hosts=("h1", "h5"), ps_host="h8")
    jobs = topo.assign(_scenario(JobSpec(1, 2, 32, 1), named, JobSpec(3, 2, 32, 1)), t)
    assert _roles(jobs) == {
        1: (["h2", "h3"], "h4"),
        2: (["h1", "h5"], "h8"),
        3: (["h6", "h7"], "h9"),
    }


@pytest.mark.parametrize(
    ("jobs", "message"),
    [
        (
            (JobSpec(1, 2, 32, 1), JobSpec(2, 2, 32, 1)),
            "the jobs need 6 hosts .*topology t has 4",
        ),
        ((JobSpec(1, 2, 32, 1, ps_host="h9"),), "job 1: unknown host 'h9': topology t has h1"),
        (
            (JobSpec(1, 2, 32, 1, ps_host="h2"), JobSpec(2, 2, 32, 1, worker_hosts=("h2", "h3"))),
            "job 2: host h2 is already given to job 1",
        ),
        ((JobSpec(1, 2, 32, 1, worker_hosts=("h1", "h1")),), "host h1 is already given to job 1"),
    ],
)
def test_assignments_that_can_not_be_made_are_refused(
    jobs: tuple[JobSpec, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        topo.assign(_scenario(*jobs), topo.parse(small(4), "t"))


def test_job_host_fields_are_checked() -> None:
    base = {"job": 1, "workers": 2, "values": 1, "iterations": 1}
    j = scn.parse_job({**base, "worker_hosts": ["h4", "h2"], "ps_host": "h1"})
    assert (j.worker_hosts, j.ps_host) == (("h4", "h2"), "h1")
    with pytest.raises(ValueError, match="job 1: 1 worker_hosts for 2 workers"):
        scn.parse_job({**base, "worker_hosts": ["h4"]})
    with pytest.raises(ValueError, match="worker_hosts must be a list of host names"):
        scn.parse_job({**base, "worker_hosts": "h4 h2"})
    with pytest.raises(ValueError, match="ps_host must be a host name"):
        scn.parse_job({**base, "ps_host": 3})
