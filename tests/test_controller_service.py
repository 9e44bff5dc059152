"""The controller through its admin API, against an in-memory switch.

Every refused request must leave the switch and the state file exactly as
they were; accepted ones must leave exactly the planned entries.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from controller.api.admin import AdminClient, AdminError, serve
from controller.api.messages import PolicyRequest, Slots, SwitchSlots
from controller.api.service import Controller
from controller.device.entries import ChildKey, PolicyEntry, ShardKey, SwitchEntries
from controller.device.memswitch import MemorySwitch
from controller.device.switch import Switch
from controller.errors import InvalidRequest, SwitchUnavailable
from controller.world.fabric import one_switch
from controller.world.partition import Layout
from controller.world.priority import AUTO_TOP
from controller.world.state import SCHEMA, JobRecord, Store
from controller.world.topology import Host, Topology
from esa.job import Placement, Priority
from esa.p4names import SLOT_OWNER
from esa.spec import (
    DEFAULT_SQUAT_US,
    EVENTS_PER_JOB,
    Drop,
    Event,
    Policy,
    counter_index,
    mgid_all,
    owner_key,
    rid,
)

POOL = 64


def topology(n: int = 40) -> Topology:
    return Topology(
        {
            f"h{i}": Host(f"h{i}", i, f"02:00:00:00:00:{i:02x}", f"10.0.0.{i}")
            for i in range(1, n + 1)
        },
        POOL,
    )


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Rig:
    sw: MemorySwitch
    ctl: Controller
    client: AdminClient
    db: Path
    clock: Clock

    def call(self, method: str, **req: Any) -> Any:
        """One RPC with a JSON request; its JSON reply."""
        return self.client._call(method, req)

    def snapshot(self) -> tuple[SwitchEntries, dict[int, Any], int]:
        return self.sw.read_entries(), Store(self.db).jobs(), len(self.sw.batches)


def connector(sw: MemorySwitch) -> Any:
    def connect() -> Switch:
        if not sw.up:
            raise SwitchUnavailable("switch unreachable at memory")
        sw.closed = False
        return sw

    return connect


def make_controller(db: Path, sw: MemorySwitch, clock: Clock) -> Controller:
    return Controller(
        Store(db), one_switch(topology()), POOL, {"s1": connector(sw)}, aging_period_s=10.0,
        clock=clock,
    )  # fmt: skip


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    sw, clock, db = MemorySwitch(), Clock(), tmp_path / "state.db"
    ctl = make_controller(db, sw, clock)
    ctl.sync()
    addr = f"unix:{tmp_path}/admin.sock"
    server = serve(ctl, addr)
    client = AdminClient(addr)
    yield Rig(sw, ctl, client, db, clock)
    client.close()
    server.stop(None)


def refused(rig: Rig, code: grpc.StatusCode, message: str, method: str, **req: Any) -> None:
    """The request fails with exactly this code and message and changes nothing."""
    before = rig.snapshot()
    with pytest.raises(AdminError) as err:
        rig.call(method, **req)
    assert (err.value.code, str(err.value)) == (code, message)
    assert rig.snapshot() == before


def test_admit_installs_job_and_lists_it(rig: Rig) -> None:
    job = rig.call("Admit", job=1, workers=["h1", "10.0.0.2", "port:3"], ps=["h4"], priority=10)
    assert job == {
        "job": 1,
        "workers": ["h1", "h2", "h3"],
        "ps": ["h4"],
        "mode": "static",
        "priority": 10,
        "static_priority": 10,
        "remaining": None,
        "admitted_at": 1000.0,
        "partition": [0, 64],
        "mgid_all": [2],
        "mgid_workers": 3,
        "top": "s1",
        "switches": {"s1": {"fan_in": 3, "worker_mask": 0b111, "partition": [0, 64]}},
    }
    assert rig.call("Jobs") == {"jobs": [job]}
    e = rig.sw.entries
    assert (e.jobs[1].fan_in, e.jobs[1].worker_mask, e.jobs[1].ps_ports) == (3, 0b111, (4,))
    assert e.groups[mgid_all(1)] == frozenset(
        {(1, rid(1, 0)), (2, rid(1, 1)), (3, rid(1, 2)), (4, rid(1, 32))}
    )
    assert Store(rig.db).jobs()[1].placement == Placement(("h1", "h2", "h3"), ("h4",))


def test_admit_on_several_ps_hosts(rig: Rig) -> None:
    """Chunk ``seq`` of a job on four PS hosts belongs to ``ps[seq % 4]``: one
    PS route and one group of the workers and that PS per shard."""
    job = rig.call(
        "Admit", job=3, workers=["h1", "h2"], ps=["h5", "10.0.0.6", "port:7", "h8"], size=10
    )
    assert (job["ps"], job["mgid_all"]) == (
        ["h5", "h6", "h7", "h8"],
        [mgid_all(3, s) for s in range(4)],
    )
    e = rig.sw.entries
    assert e.jobs[3].ps_ports == (5, 6, 7, 8)
    assert {k: r.port for k, r in e.ps_routes.items()} == {
        ShardKey(3, s, 3): 5 + s for s in range(4)
    }
    for s in range(4):
        assert e.groups[mgid_all(3, s)] == frozenset(
            {(1, rid(3, 0)), (2, rid(3, 1)), (5 + s, rid(3, 32 + s))}
        )
    assert Store(rig.db).jobs()[3].placement.ps == ("h5", "h6", "h7", "h8")
    assert rig.call("Remove", job=3) == {"job": 3, "removed": True}
    assert (rig.sw.entries.jobs, rig.sw.entries.ps_routes) == ({}, {})


@pytest.mark.parametrize("n", range(10))
def test_a_job_has_1_2_4_or_8_ps_hosts(rig: Rig, n: int) -> None:
    ps = [f"h{i}" for i in range(3, 3 + n)]
    if n not in (1, 2, 4, 8):
        message = f"job 1 has {n} PS hosts; a job has 1, 2, 4 or 8 PS hosts"
        refused(rig, grpc.StatusCode.INVALID_ARGUMENT, message, "Admit", job=1,
                workers=["h1", "h2"], ps=ps, priority=1)  # fmt: skip
        return
    assert rig.call("Admit", job=1, workers=["h1", "h2"], ps=ps, priority=1)["ps"] == ps
    routes = rig.sw.entries.ps_routes
    assert {k: r.port for k, r in routes.items()} == {
        ShardKey(1, s, n - 1): 3 + s for s in range(n)
    }


def test_duplicate_job_refused(rig: Rig) -> None:
    rig.call("Admit", job=1, workers=["h1", "h2"], ps=["h3"], priority=1)
    refused(
        rig,
        grpc.StatusCode.ALREADY_EXISTS,
        "job 1 already exists: remove it first",
        "Admit",
        job=1,
        workers=["h4", "h5"],
        ps=["h6"],
        priority=1,
    )


@pytest.mark.parametrize(
    "req,code,message",
    [
        (
            {"job": 2, "workers": [f"h{i}" for i in range(1, 34)], "ps": ["h40"], "priority": 1},
            grpc.StatusCode.INVALID_ARGUMENT,
            "job 2 has 33 workers; at most 32 (one bit each in the worker bitmap)",
        ),
        (
            {"job": 2, "workers": ["h1"], "ps": ["h2"], "priority": 1},
            grpc.StatusCode.INVALID_ARGUMENT,
            "job 2 has 1 worker(s); at least 2 are needed: a one-worker job has nothing to "
            "aggregate, run it without the switch",
        ),
        (
            {"job": 2, "workers": ["h1", "nohost"], "ps": ["h3"], "priority": 1},
            grpc.StatusCode.NOT_FOUND,
            "unknown host 'nohost': not in the topology (known hosts: "
            + ", ".join(sorted(f"h{i}" for i in range(1, 41)))
            + ")",
        ),
        (
            {"job": 2, "workers": ["h1", "h2"], "ps": ["port:99"], "priority": 1},
            grpc.StatusCode.NOT_FOUND,
            "unknown port 99: no host of the topology is on it",
        ),
        (
            {"job": 2, "workers": ["h1", "h2"], "ps": ["h3"], "priority": 256},
            grpc.StatusCode.INVALID_ARGUMENT,
            "priority 256 is out of range (0..255)",
        ),
        (
            {"job": 2, "workers": ["h1", "h2"], "ps": ["h3"], "priority": -1},
            grpc.StatusCode.INVALID_ARGUMENT,
            "priority -1 is out of range (0..255)",
        ),
        (
            {"job": 2, "workers": ["h1", "h2"], "ps": ["h3"]},
            grpc.StatusCode.INVALID_ARGUMENT,
            "give either a priority (static) or a size hint in bytes (auto)",
        ),
        (
            {"job": 2, "workers": ["h1", "h2"], "ps": ["h3"], "priority": 1, "size": 5},
            grpc.StatusCode.INVALID_ARGUMENT,
            "give either a priority (static) or a size hint in bytes (auto)",
        ),
        (
            {"job": 0, "workers": ["h1", "h2"], "ps": ["h3"], "priority": 1},
            grpc.StatusCode.INVALID_ARGUMENT,
            "job id 0 is out of range (1..255)",
        ),
        (
            {"job": 256, "workers": ["h1", "h2"], "ps": ["h3"], "priority": 1},
            grpc.StatusCode.INVALID_ARGUMENT,
            "job id 256 is out of range (1..255)",
        ),
        (
            {"job": 2, "workers": ["h1", "h1"], "ps": ["h3"], "priority": 1},
            grpc.StatusCode.INVALID_ARGUMENT,
            "job 2: worker(s) listed twice: h1",
        ),
        (
            {"job": 2, "workers": ["h1", "h2"], "ps": ["h2"], "priority": 1},
            grpc.StatusCode.INVALID_ARGUMENT,
            "job 2: h2 cannot be both worker and PS",
        ),
        (
            {
                "job": 2,
                "workers": ["h1", "h2"],
                "ps": ["h3", "h4", "10.0.0.1", "port:2"],
                "priority": 1,
            },
            grpc.StatusCode.INVALID_ARGUMENT,
            "job 2: h1, h2 cannot be both worker and PS",
        ),
        (
            {"job": 2, "workers": ["h1", "h2"], "ps": ["h3", "10.0.0.3"], "priority": 1},
            grpc.StatusCode.INVALID_ARGUMENT,
            "job 2: PS host(s) listed twice: h3",
        ),
        (
            {"job": 2, "workers": ["h1", "h2"], "ps": [], "priority": 1},
            grpc.StatusCode.INVALID_ARGUMENT,
            "job 2 has 0 PS hosts; a job has 1, 2, 4 or 8 PS hosts",
        ),
        (
            {"job": 2, "workers": ["h1", "h2"], "ps": ["h3", "h4", "h5"], "priority": 1},
            grpc.StatusCode.INVALID_ARGUMENT,
            "job 2 has 3 PS hosts; a job has 1, 2, 4 or 8 PS hosts",
        ),
        (
            {
                "job": 2,
                "workers": ["h1", "h2"],
                "ps": [f"h{i}" for i in range(3, 19)],
                "priority": 1,
            },
            grpc.StatusCode.INVALID_ARGUMENT,
            "job 2 has 16 PS hosts; a job has 1, 2, 4 or 8 PS hosts",
        ),
        (
            {"job": 2, "workers": ["h1", "h2"], "ps": ["h3", "nohost"], "priority": 1},
            grpc.StatusCode.NOT_FOUND,
            "unknown host 'nohost': not in the topology (known hosts: "
            + ", ".join(sorted(f"h{i}" for i in range(1, 41)))
            + ")",
        ),
    ],
)
def test_bad_admit_refused(
    rig: Rig, req: dict[str, Any], code: grpc.StatusCode, message: str
) -> None:
    rig.call("Admit", job=1, workers=["h1", "h2"], ps=["h3"], priority=1)
    refused(rig, code, message, "Admit", **req)


def test_unknown_job_refused(rig: Rig) -> None:
    refused(rig, grpc.StatusCode.NOT_FOUND, "unknown job 5", "Remove", job=5)
    refused(rig, grpc.StatusCode.NOT_FOUND, "unknown job 5", "Prio", job=5, priority=3)
    refused(rig, grpc.StatusCode.NOT_FOUND, "unknown job 5", "Progress", job=5, remaining=3)


def test_unknown_policy_and_bad_stale_refused(rig: Rig) -> None:
    refused(
        rig,
        grpc.StatusCode.INVALID_ARGUMENT,
        "unknown policy 'fifo' (expected esa|atp|static)",
        "Policy",
        policy="fifo",
    )
    refused(
        rig,
        grpc.StatusCode.INVALID_ARGUMENT,
        "stale timeout 0 is out of range (1..2^48-1)",
        "Policy",
        policy="atp",
        stale_us=0,
    )


def test_switch_unreachable_changes_nothing(rig: Rig) -> None:
    rig.call("Admit", job=1, workers=["h1", "h2"], ps=["h3"], priority=1)
    rig.sw.up = False
    before = Store(rig.db).jobs(), Store(rig.db).policy()
    requests: list[tuple[str, dict[str, Any]]] = [
        ("Admit", {"job": 2, "workers": ["h4", "h5"], "ps": ["h6"], "priority": 1}),
        ("Remove", {"job": 1}),
        ("Prio", {"job": 1, "priority": 9}),
        ("Policy", {"policy": "atp"}),
        ("Stats", {}),
    ]
    for method, req in requests:
        with pytest.raises(AdminError) as err:
            rig.call(method, **req)
        assert (err.value.code, str(err.value)) == (
            grpc.StatusCode.UNAVAILABLE,
            "switch unreachable at memory",
        )
    assert (Store(rig.db).jobs(), Store(rig.db).policy()) == before
    assert [s["connected"] for s in rig.call("Status")["switches"]] == [False]


def test_remove_frees_entries_and_repartitions(rig: Rig) -> None:
    rig.call("Policy", policy="static")
    empty = rig.sw.read_entries()
    rig.call("Admit", job=1, workers=["h1", "h2"], ps=["h3"], priority=1)
    with_one = rig.sw.read_entries()
    rig.call("Admit", job=2, workers=["h4", "h5"], ps=["h6"], priority=1)
    assert [rig.sw.entries.jobs[j].part_base for j in (1, 2)] == [0, 32]
    assert [rig.sw.entries.jobs[j].part_size for j in (1, 2)] == [32, 32]
    assert rig.call("Remove", job=2) == {"job": 2, "removed": True}
    assert rig.sw.read_entries() == with_one
    rig.call("Remove", job=1)
    assert rig.sw.read_entries() == empty
    assert rig.call("Jobs") == {"jobs": []}
    assert Store(rig.db).jobs() == {}


def test_reprioritise_rewrites_only_the_job_entry(rig: Rig) -> None:
    rig.call("Admit", job=1, workers=["h1", "h2"], ps=["h3"], priority=1)
    n = len(rig.sw.batches)
    assert rig.call("Prio", job=1, priority=200)["priority"] == 200
    assert rig.sw.entries.jobs[1].priority == 200
    assert [[(c.kind.value, c.op.value, c.key) for c in b] for b in rig.sw.batches[n:]] == [
        [("jobs", "modify", 1)]
    ]
    assert rig.call("Prio", job=1, size=0)["priority"] == AUTO_TOP
    assert Store(rig.db).jobs()[1].priority == Priority.auto(0)


def test_auto_priorities_are_ranks_pushed_on_every_change(rig: Rig) -> None:
    """Auto jobs never share a level; admitting, removing, re-prioritising or a
    progress report of one job rewrites every other job whose rank moved."""

    def prios() -> dict[int, int]:
        return {j: e.priority for j, e in rig.sw.entries.jobs.items()}

    def rewritten(since: int) -> set[int | ShardKey | ChildKey]:
        return {
            c.key
            for b in rig.sw.batches[since:]
            for c in b
            if (c.kind.value, c.op.value) == ("jobs", "modify")
        }

    rig.call("Admit", job=1, workers=["h1", "h2"], ps=["h3"], size=2**30)
    rig.call("Admit", job=2, workers=["h4", "h5"], ps=["h6"], priority=3)
    assert prios() == {1: AUTO_TOP, 2: 3}
    rig.clock.now += 1.0  # 1 s < 10 s * log2(2**30 / 2**20): the smaller newcomer overtakes
    rig.call("Admit", job=3, workers=["h7", "h8"], ps=["h9"], size=2**20)
    assert prios() == {1: AUTO_TOP - 1, 2: 3, 3: AUTO_TOP}
    n = len(rig.sw.batches)
    assert rig.call("Progress", job=1, remaining=2**10)["priority"] == AUTO_TOP
    assert prios() == {1: AUTO_TOP, 2: 3, 3: AUTO_TOP - 1}
    assert rewritten(n) == {1, 3}, "a change of rank moves no home: 2 keeps its entry"
    assert {j["job"]: j["priority"] for j in rig.call("Jobs")["jobs"]} == prios()
    rig.call("Remove", job=1)
    assert prios() == {2: 3, 3: AUTO_TOP}
    rig.call("Admit", job=4, workers=["h10", "h11"], ps=["h12"], size=0)
    assert prios() == {2: 3, 3: AUTO_TOP - 1, 4: AUTO_TOP}
    n = len(rig.sw.batches)
    rig.call("Prio", job=4, priority=250)
    assert prios() == {2: 3, 3: AUTO_TOP, 4: 250}
    assert rewritten(n) == {3, 4}
    rig.clock.now += 1e6
    assert rig.ctl.sync() == 0, "ranks do not move with the clock alone"
    refused(
        rig,
        grpc.StatusCode.FAILED_PRECONDITION,
        "job 2 has a static priority; progress applies to auto jobs",
        "Progress",
        job=2,
        remaining=1,
    )


def test_policy_switch(rig: Rig) -> None:
    assert rig.call("Policy", policy="static", stale_us=5000) == {
        "policy": "static",
        "stale_us": 5000,
        "squat_us": 0,
        "part_size": 0,
        "layout": "homes",
    }
    assert rig.sw.entries.policy == PolicyEntry(Policy.STATIC, 5000, 0)
    assert rig.call("Policy", policy="esa") == {
        "policy": "esa",
        "stale_us": 5000,
        "squat_us": DEFAULT_SQUAT_US,
        "part_size": 0,
        "layout": "homes",
    }
    assert rig.call("Policy", policy="atp", squat_us=700)["squat_us"] == 700
    assert Store(rig.db).policy() == PolicyEntry(Policy.ATP, 5000, 700)
    assert rig.sw.entries.policy == PolicyEntry(Policy.ATP, 5000, 700)


def test_fixed_partitions_in_admission_order_and_kept_while_others_leave(rig: Rig) -> None:
    def parts() -> dict[int, tuple[int, int]]:
        return {j: (e.part_base, e.part_size) for j, e in rig.sw.entries.jobs.items()}

    for job, hosts in ((5, ("h1", "h2", "h3")), (2, ("h4", "h5", "h6")), (9, ("h7", "h8", "h9"))):
        rig.call("Admit", job=job, workers=list(hosts[:2]), ps=[hosts[2]], priority=1)
        rig.clock.now += 1
    equal = {2: (0, 22), 5: (22, 21), 9: (43, 21)}  # equal split, laid out by job id
    homes = {2: (0, 21), 5: (21, 22), 9: (43, 21)}  # ESA: the slot left over to the top rank
    assert parts() == homes  # ESA: every job's home; one priority, so 5, admitted first, ranks top
    rig.call("Policy", policy="static")
    assert parts() == equal
    big = rig.ctl.pool_size // 2
    assert rig.call("Policy", policy="static", part_size=big)["part_size"] == big
    assert parts() == {5: (0, big), 2: (big, big), 9: (0, 0)}
    rig.call("Remove", job=5)
    assert parts() == {2: (big, big), 9: (0, big)}
    assert Store(rig.db).part_size() == big
    assert rig.call("Policy", policy="esa")["part_size"] == big, "kept unless given"
    assert parts() == {2: (big, big), 9: (0, big)}, "ESA: the partitions held stay as homes"


def test_the_hashed_layout_gives_no_homes_and_is_kept(rig: Rig) -> None:
    """Under ``--layout hashed`` every ESA job hashes over the pool (no
    partition in its entry); the layout is kept across other policy changes
    and in the state file, and a static policy still cuts its partitions."""

    def parts() -> dict[int, tuple[int, int]]:
        return {j: (e.part_base, e.part_size) for j, e in rig.sw.entries.jobs.items()}

    for job, hosts in ((5, ("h1", "h2", "h3")), (2, ("h4", "h5", "h6"))):
        rig.call("Admit", job=job, workers=list(hosts[:2]), ps=[hosts[2]], priority=1)
    homes = {2: (0, 32), 5: (32, 32)}
    assert parts() == homes
    assert rig.call("Policy", policy="esa", layout="hashed")["layout"] == "hashed"
    assert parts() == {2: (0, 0), 5: (0, 0)}
    assert Store(rig.db).layout() is Layout.HASHED
    assert rig.call("Status")["layout"] == "hashed"
    assert rig.call("Policy", policy="static")["layout"] == "hashed", "kept unless given"
    assert parts() == homes, "static partitions whatever ESA's layout"
    rig.call("Policy", policy="esa")
    assert parts() == {2: (0, 0), 5: (0, 0)}
    assert rig.call("Policy", policy="esa", layout="homes")["layout"] == "homes"
    assert parts() == homes


def test_an_unknown_layout_is_refused_and_changes_nothing(rig: Rig) -> None:
    with pytest.raises(AdminError) as err:
        rig.call("Policy", policy="esa", layout="striped")
    assert err.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert str(err.value) == "unknown layout 'striped' (expected homes|hashed)"
    assert Store(rig.db).layout() is Layout.HOMES


def test_bad_squat_timeout_refused(rig: Rig) -> None:
    """Called directly, the controller refuses what the API's decoding would."""
    squats: tuple[Any, ...] = (-1, 2**48, True, "5")
    for bad in squats:
        with pytest.raises(InvalidRequest, match=r"^squat timeout .* is out of range"):
            rig.ctl.policy(PolicyRequest(policy="esa", squat_us=bad))
    for size in (-1, 65, True):
        with pytest.raises(
            InvalidRequest, match=r"^partition size .* is out of range \(0\.\.64\)$"
        ):
            rig.ctl.policy(PolicyRequest(policy="static", part_size=size))
    assert Store(rig.db).policy() == PolicyEntry()
    assert Store(rig.db).part_size() == 0


def test_stats_exact_counters(rig: Rig) -> None:
    rig.sw.job_events[counter_index(1, Event.AGGREGATED)] = 99
    rig.call("Admit", job=1, workers=["h1", "h2"], ps=["h3"], priority=1)
    assert rig.call("Stats")["jobs"]["1"]["aggregated"] == 0
    rig.sw.job_events[counter_index(1, Event.AGGREGATED)] = 4
    rig.sw.job_events[counter_index(1, Event.COMPLETED)] = 2
    rig.sw.job_events[2 * EVENTS_PER_JOB + 1] = 7
    rig.sw.drops[Drop.UNKNOWN_JOB] = 3
    stats = rig.call("Stats")
    assert stats["jobs"] == {"1": {e.name.lower(): {1: 4, 2: 2}.get(int(e), 0) for e in Event}}
    assert stats["drops"] == {
        "unknown_job": 3,
        "spoofed_worker": 0,
        "bad_type": 0,
        "no_ps_route": 0,
        "malformed": 0,
    }


def test_switch_restart_resyncs(rig: Rig) -> None:
    rig.call("Admit", job=1, workers=["h1", "h2"], ps=["h3"], priority=1)
    rig.call("Policy", policy="atp")
    want = rig.sw.read_entries()
    rig.sw.restart()
    rig.sw.closed = True
    assert rig.ctl.sync() == want.count() + 1
    assert rig.sw.read_entries() == want


def test_a_restarted_switch_gets_back_the_homes_it_held(rig: Rig) -> None:
    """ESA's homes stay where they are when a job leaves, so they are not
    what a layout from nothing gives; a switch restarted empty is given
    back the homes it lost, not a new layout."""
    for job in (1, 2, 3):
        workers = [f"h{3 * job - 2}", f"h{3 * job - 1}"]
        rig.call("Admit", job=job, workers=workers, ps=[f"h{3 * job}"], priority=job)
    rig.call("Remove", job=2)
    want = rig.sw.read_entries()
    assert [(want.jobs[j].part_base, want.jobs[j].part_size) for j in (1, 3)] == [(0, 21), (42, 22)]
    rig.sw.restart()
    rig.sw.closed = True
    assert rig.ctl.sync() == want.count()  # the policy ESA is a restart's default
    assert rig.sw.read_entries() == want


def test_controller_restart_reconciles(rig: Rig) -> None:
    rig.call("Admit", job=1, workers=["h1", "h2"], ps=["h3"], priority=1)
    rig.call("Admit", job=2, workers=["h4", "h5"], ps=["h6"], size=1000)
    want = rig.sw.read_entries()
    # while the controller is down, the switch drifts
    del rig.sw.entries.jobs[2]
    rig.sw.entries.jobs[7] = rig.sw.entries.jobs[1]
    rig.sw.entries.l2[0x0A0B0C0D0E0F] = rig.sw.entries.l2[0x020000000001]
    ctl = make_controller(rig.db, rig.sw, rig.clock)
    assert ctl.sync() == 3
    assert rig.sw.read_entries() == want
    assert ctl.jobs() == rig.ctl.jobs()
    assert make_controller(rig.db, rig.sw, rig.clock).sync() == 0


def test_slots_view(rig: Rig) -> None:
    refused(
        rig,
        grpc.StatusCode.FAILED_PRECONDITION,
        "the switch serves no register reads over P4Runtime (BMv2 serves none): "
        "the slots view needs `serve --thrift-cli CMD`",
        "Slots",
    )
    out = "RuntimeCmd: EsaIngress.pool.slot_owner= 0, 4294967296, 4294967303, 0, 8589934592"
    rig.ctl.thrift_cli = {"s1": [sys.executable, "-c", f"print({out!r})"]}
    held = {"pool_size": 5, "used": 3, "by_job": {"1": 2, "2": 1}}
    assert rig.call("Slots") == {**held, "switches": {"s1": held}}
    assert rig.call("Slots", device="s1") == {**held, "switches": {"s1": held}}
    refused(
        rig,
        grpc.StatusCode.NOT_FOUND,
        "unknown device 's2' (devices: s1)",
        "Slots",
        device="s2",
    )
    rig.ctl.thrift_cli = {"s1": [sys.executable, "-c", "print('Error: no such register')"]}
    refused(
        rig,
        grpc.StatusCode.INTERNAL,
        "unexpected simple_switch_CLI output: 'Error: no such register'",
        "Slots",
    )


class RegisterSwitch(MemorySwitch):
    """An in-memory switch that serves its ``slot_owner`` register, as the
    reference switch does over P4Runtime."""

    def __init__(self, owners: list[int]) -> None:
        super().__init__()
        self.owners = owners
        self.register_reads: list[tuple[str, ...]] = []

    def read_registers(self, *names: str) -> dict[str, list[int]]:
        self._check()
        self.register_reads.append(names)
        return {SLOT_OWNER: list(self.owners)}


def test_slots_view_reads_the_registers_a_switch_serves(tmp_path: Path) -> None:
    """The switch's own register read comes first: the Thrift CLI given
    is not run; a switch that went away is reconnected for the read, and
    one that can not be reached is reported."""
    sw = RegisterSwitch([0, owner_key(3, 1), owner_key(3, 2), 0, owner_key(1, 9)])
    ctl = make_controller(tmp_path / "state.db", sw, Clock())
    ctl.thrift_cli = {"s1": [sys.executable, "-c", "raise SystemExit(3)"]}
    held = SwitchSlots(pool_size=5, used=3, by_job={1: 1, 3: 2})
    assert ctl.slots() == Slots(5, 3, {1: 1, 3: 2}, {"s1": held})
    sw.closed = True
    sw.owners[0] = owner_key(1, 10)
    assert ctl.slots("s1").by_job == {1: 2, 3: 2}
    assert sw.register_reads == [(SLOT_OWNER,), (SLOT_OWNER,)]
    sw.up = False
    sw.closed = True
    with pytest.raises(SwitchUnavailable, match=r"^switch unreachable at memory$"):
        ctl.slots()


def test_a_restarted_controller_keeps_the_fixed_partitions_the_switch_holds(
    rig: Rig, tmp_path: Path
) -> None:
    rig.call("Policy", policy="static", part_size=16)
    for job, hosts in ((1, ("h1", "h2", "h3")), (2, ("h4", "h5", "h6")), (3, ("h7", "h8", "h9"))):
        rig.call("Admit", job=job, workers=list(hosts[:2]), ps=[hosts[2]], priority=1)
        rig.clock.now += 1
    rig.call("Remove", job=1)
    rig.call("Admit", job=4, workers=["h1", "h2"], ps=["h3"], priority=1)
    before = rig.sw.entries.jobs
    assert {j: e.part_base for j, e in before.items()} == {2: 16, 3: 32, 4: 0}
    again = make_controller(rig.db, rig.sw, rig.clock)
    assert again.sync() == 0
    assert rig.sw.entries.jobs == before


def test_a_state_file_of_one_ps_per_job_is_migrated(tmp_path: Path) -> None:
    """A file written when a job had one PS (``ps``: a host name) is taken
    over, its jobs kept: each PS becomes a list of one (``ps_hosts``)."""
    db = tmp_path / "old.db"
    with closing(sqlite3.connect(db)) as old:
        old.executescript(SCHEMA.replace("ps_hosts TEXT", "ps TEXT"))
        old.execute("INSERT INTO jobs VALUES (4, '[\"h1\", \"h2\"]', 'h3', 'auto', 0, 512, 9.5)")
        old.execute("INSERT INTO jobs VALUES (5, '[\"h4\", \"h5\"]', 'h6', 'static', 7, 0, 9.0)")
        old.commit()
    sw = MemorySwitch()
    make_controller(db, sw, Clock()).sync()
    assert Store(db).jobs() == {
        4: JobRecord(4, Placement(("h1", "h2"), ("h3",)), Priority.auto(512), 9.5),
        5: JobRecord(5, Placement(("h4", "h5"), ("h6",)), Priority.static(7), 9.0),
    }
    with closing(sqlite3.connect(db)) as new:
        columns = [c[0] for c in new.execute("SELECT name FROM pragma_table_info('jobs')")]
        assert new.execute("SELECT ps_hosts FROM jobs ORDER BY job").fetchall() == [
            ('["h3"]',),
            ('["h6"]',),
        ]
    assert columns == [
        "job", "workers", "ps_hosts", "mode", "priority", "remaining", "admitted_at"
    ]  # fmt: skip
    assert {k: r.port for k, r in sw.entries.ps_routes.items()} == {
        ShardKey(4, 0, 0): 3,
        ShardKey(5, 0, 0): 6,
    }
