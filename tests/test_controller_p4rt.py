"""The P4Runtime path (session, encoding, reconciliation) against an
in-process P4Runtime server, so it runs without BMv2.

The server keeps entities as the protobufs it was sent and answers reads
with them, which checks that what the controller writes decodes back to the
same entries.  Its P4Info is written from the names in p4src/ by hand.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import text_format
from google.rpc import code_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from controller.device import p4rt
from controller.device.entries import PolicyEntry, ShardKey, SwitchEntries
from controller.device.reconcile import reconcile
from controller.device.switch import P4RuntimeSwitch
from controller.errors import SwitchError, SwitchUnavailable
from controller.world.plan import JobPlan, desired
from controller.world.topology import Host
from esa import p4names as n
from esa.p4names import SLOT_OWNER
from esa.spec import Drop, Event, Policy, counter_index
from esa.toolchain import compile_p4
from tests.esa_ctl import esa_ctl
from tests.wait import LIMIT_S, until

ROOT = Path(__file__).resolve().parent.parent


class FakeP4Runtime(p4runtime_pb2_grpc.P4RuntimeServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        self.config: Any = None
        self.primary: tuple[int, int] | None = None
        self.entries: dict[bytes, Any] = {}
        self.counters: dict[tuple[int, int], int] = {}
        self.reads: list[int] = []
        """entities per Read request, in order."""
        self.pushes = 0

    def StreamChannel(self, requests: Iterator[Any], context: Any) -> Iterator[Any]:
        mine = None
        try:
            for req in requests:
                eid = (req.arbitration.election_id.high, req.arbitration.election_id.low)
                rep = p4runtime_pb2.StreamMessageResponse()
                rep.arbitration.CopyFrom(req.arbitration)
                if self.primary is None or eid > self.primary:
                    self.primary = mine = eid
                    rep.arbitration.status.code = code_pb2.OK
                else:
                    rep.arbitration.status.code = code_pb2.ALREADY_EXISTS
                yield rep
        finally:
            if mine is not None and self.primary == mine:
                self.primary = None

    def SetForwardingPipelineConfig(self, req: Any, context: Any) -> Any:
        self.config = req.config
        self.entries.clear()
        self.pushes += 1
        # the P4 program's default: set_policy(POLICY_ESA, DEFAULT_STALE_US, DEFAULT_SQUAT_US)
        ids = {
            o.preamble.name: o.preamble.id
            for o in (*req.config.p4info.tables, *req.config.p4info.actions)
        }
        e = p4runtime_pb2.Entity()
        e.table_entry.table_id = ids[n.POLICY_TABLE]
        e.table_entry.is_default_action = True
        e.table_entry.action.action.action_id = ids[n.SET_POLICY]
        e.table_entry.action.action.params.add(param_id=1, value=b"\x01")
        e.table_entry.action.action.params.add(param_id=2, value=(20000).to_bytes(6, "big"))
        e.table_entry.action.action.params.add(param_id=3, value=(5000).to_bytes(6, "big"))
        self.entries[self._key(e)] = e
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def GetForwardingPipelineConfig(self, req: Any, context: Any) -> Any:
        if self.config is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no pipeline")
        return p4runtime_pb2.GetForwardingPipelineConfigResponse(config=self.config)

    @staticmethod
    def _key(entity: Any) -> bytes:
        if entity.HasField("table_entry"):
            key = p4runtime_pb2.TableEntry()
            key.CopyFrom(entity.table_entry)
            key.ClearField("action")
            return b"t" + bytes(key.SerializeToString(deterministic=True))
        group = entity.packet_replication_engine_entry.multicast_group_entry
        return b"g" + int(group.multicast_group_id).to_bytes(2, "big")

    def Write(self, req: Any, context: Any) -> Any:
        for u in req.updates:
            e = u.entity
            if e.HasField("counter_entry"):
                c = e.counter_entry
                self.counters[(c.counter_id, c.index.index)] = c.data.packet_count
                continue
            key, exists = self._key(e), self._key(e) in self.entries
            if (u.type == p4runtime_pb2.Update.INSERT) == exists and not (
                e.HasField("table_entry") and e.table_entry.is_default_action
            ):
                context.abort(grpc.StatusCode.UNKNOWN, "exists" if exists else "missing")
            if u.type == p4runtime_pb2.Update.DELETE:
                del self.entries[key]
            else:
                self.entries[key] = e
        return p4runtime_pb2.WriteResponse()

    def Read(self, req: Any, context: Any) -> Iterator[Any]:
        self.reads.append(len(req.entities))
        rep = p4runtime_pb2.ReadResponse()
        for want in req.entities:
            self._read(want, rep)
        yield rep

    def _read(self, want: Any, rep: Any) -> None:
        """A counter entry with an index reads that cell (0 if never written),
        without one every written cell."""
        if want.HasField("counter_entry"):
            ask = want.counter_entry
            for cid, index in (
                [(ask.counter_id, ask.index.index)]
                if ask.HasField("index")
                else sorted(k for k in self.counters if k[0] == ask.counter_id)
            ):
                c = rep.entities.add().counter_entry
                c.counter_id, c.index.index = cid, index
                c.data.packet_count = self.counters.get((cid, index), 0)
        elif want.HasField("table_entry"):
            for e in self.entries.values():
                te = e.table_entry if e.HasField("table_entry") else None
                if (
                    te is not None
                    and te.table_id == want.table_entry.table_id
                    and te.is_default_action == want.table_entry.is_default_action
                ):
                    rep.entities.append(e)
        else:
            rep.entities.extend(
                e for e in self.entries.values() if e.HasField("packet_replication_engine_entry")
            )


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[FakeP4Runtime, str]]:
    fake = FakeP4Runtime()
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(fake, srv)
    addr = f"unix:{tmp_path}/p4rt.sock"
    srv.add_insecure_port(addr)
    srv.start()
    yield fake, addr
    srv.stop(None)


@pytest.fixture
def program(tmp_path: Path) -> tuple[Path, Path]:
    json_path, p4info = tmp_path / "esa.json", tmp_path / "esa.p4info.txtpb"
    json_path.write_text('{"program": "esa"}')
    p4info.write_text((ROOT / "p4src" / "esa.p4info.txtpb").read_text())
    return json_path, p4info


def hosts() -> list[Host]:
    return [
        Host(f"h{i}", i, f"02:00:00:00:00:{i:02x}", f"10.0.0.{i}", 5000 + i) for i in range(1, 12)
    ]


def test_pipeline_pushed_once_and_entries_round_trip(
    server: tuple[FakeP4Runtime, str], program: tuple[Path, Path]
) -> None:
    round_trip(server, program)


@pytest.mark.p4c
def test_round_trip_with_the_compiled_p4info(
    server: tuple[FakeP4Runtime, str], tmp_path: Path
) -> None:
    """The names and widths the controller uses are those p4c gives p4src/."""
    round_trip(server, compile_p4(ROOT / "p4src" / "esa.p4", tmp_path / "build", pool=64))


def round_trip(server: tuple[FakeP4Runtime, str], program: tuple[Path, Path]) -> None:
    fake, addr = server
    sw = P4RuntimeSwitch.connect(addr)
    assert sw.ensure_pipeline(*program) is True
    h = hosts()
    jobs = [
        JobPlan(1, (h[0], h[1]), (h[2],), 7, 0, 32),
        JobPlan(200, tuple(h[3:5]), (h[5], h[6]), 255, 32, 16),
        JobPlan(255, (h[0], h[3]), tuple(h[7:11]), 0, 48, 16),
    ]
    want = desired(h, jobs, PolicyEntry(Policy.STATIC, 2**40, 2**47 + 3))
    assert {k.mask for k in want.ps_routes} == {0, 1, 3}
    assert reconcile(sw, want, sw.read_entries()) == want.count() + 1
    assert sw.read_entries() == want
    sw.close()
    again = P4RuntimeSwitch.connect(addr)
    assert again.ensure_pipeline(*program) is False
    assert fake.pushes == 1
    assert again.read_entries() == want
    assert reconcile(again, want, again.read_entries()) == 0
    again.delete_job(200)
    again.delete_group(400)
    again.delete_ps_route(ShardKey(200, 1, 1))
    left = again.read_entries()
    assert sorted(left.jobs) == [1, 255]
    assert 400 not in left.groups
    assert sorted(k for k in left.ps_routes if k.job == 200) == [ShardKey(200, 0, 1)]
    again.close()


def test_switch_refuses_duplicate_insert(
    server: tuple[FakeP4Runtime, str], program: tuple[Path, Path]
) -> None:
    sw = P4RuntimeSwitch.connect(server[1])
    sw.ensure_pipeline(*program)
    sw.create_group(5, [(1, 2)])
    with pytest.raises(SwitchError, match=r"^switch refused the request: exists$"):
        sw.create_group(5, [(1, 3)])
    sw.close()


def test_counters(server: tuple[FakeP4Runtime, str], program: tuple[Path, Path]) -> None:
    fake, addr = server
    sw = P4RuntimeSwitch.connect(addr)
    sw.ensure_pipeline(*program)
    info = p4info_pb2.P4Info()
    text_format.Parse(program[1].read_text(), info)
    ids = {c.preamble.name: c.preamble.id for c in info.counters}
    events, drops = ids[n.JOB_EVENTS], ids[n.DROPS]
    fake.counters[(events, counter_index(3, Event.COMPLETED))] = 11
    fake.counters[(events, counter_index(3, Event.FALLBACK))] = 2
    fake.counters[(events, counter_index(4, Event.AGGREGATED))] = 0
    fake.counters[(drops, int(Drop.SPOOFED_WORKER))] = 5
    c = sw.read_counters()
    assert c.events == {3: {e: {Event.COMPLETED: 11, Event.FALLBACK: 2}.get(e, 0) for e in Event}}
    assert c.drops == {d: 5 if d is Drop.SPOOFED_WORKER else 0 for d in Drop}
    fake.reads.clear()
    assert sw.read_counters([3, 4, 9]).events == {3: c.events[3]}
    assert sw.read_counters([]).events == {}
    # one request for the three jobs' cells (every event of each), one for the drops
    assert fake.reads == [3 * len(Event), 1, 1]
    sw.reset_job_counters(3)
    assert sw.read_counters().events == {}
    sw.close()


def test_second_controller_is_refused(server: tuple[FakeP4Runtime, str]) -> None:
    addr = server[1]
    first = P4RuntimeSwitch.connect(addr, election_id=(0, 5))
    with pytest.raises(SwitchUnavailable) as err:
        P4RuntimeSwitch.connect(addr, election_id=(0, 4))
    assert str(err.value) == (
        f"switch at {addr} refused to make us primary: another controller holds an election id "
        "higher than (0, 4)"
    )
    reader = P4RuntimeSwitch.connect(addr, election_id=(0, 4), require_primary=False)
    reader.close()
    first.close()


def test_unreachable_switch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(p4rt, "CONNECT_TIMEOUT_S", 0.3)
    addr = f"unix:{tmp_path}/nothing.sock"
    with pytest.raises(SwitchUnavailable) as err:
        P4RuntimeSwitch.connect(addr)
    assert str(err.value) == f"switch unreachable: no P4Runtime server at {addr}"


def test_session_notices_the_switch_going_away(tmp_path: Path, program: tuple[Path, Path]) -> None:
    fake = FakeP4Runtime()
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(fake, srv)
    addr = f"unix:{tmp_path}/gone.sock"
    srv.add_insecure_port(addr)
    srv.start()
    sw = P4RuntimeSwitch.connect(addr)
    sw.ensure_pipeline(*program)
    assert sw.alive
    srv.stop(None)
    with pytest.raises(SwitchUnavailable, match=f"^switch unreachable at {addr}$"):
        sw.set_policy(PolicyEntry(Policy.ATP, 10, 0))
    assert not sw.alive
    sw.close()


def _start(fake: FakeP4Runtime, addr: str) -> grpc.Server:
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(fake, srv)
    srv.add_insecure_port(addr)
    srv.start()
    return srv


def _wait_connected(admin: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + LIMIT_S
    while time.monotonic() < deadline and proc.poll() is None:
        res = esa_ctl(admin, "status", "--json")
        if res.returncode == 0 and all(s["connected"] for s in json.loads(res.stdout)["switches"]):
            return
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(log.read_text())


def _read(addr: str) -> SwitchEntries:
    reader = P4RuntimeSwitch.connect(addr, election_id=(0, 1), require_primary=False)
    try:
        return reader.read_entries()
    finally:
        reader.close()


def test_serve_end_to_end(tmp_path: Path, program: tuple[Path, Path]) -> None:
    """`esa-ctl serve` against the fake switch: admit through the CLI, survive
    a controller restart with drift on the switch, and a switch restart."""
    json_path, p4info = program
    json_path.write_text(json.dumps({"register_arrays": [{"name": SLOT_OWNER, "size": 64}]}))
    topo = tmp_path / "topo.json"
    topo.write_text(json.dumps({"hosts": {h.name: h.to_json() for h in hosts()}}))
    addr, admin, log = f"unix:{tmp_path}/sw.sock", f"unix:{tmp_path}/admin.sock", tmp_path / "log"
    fake = FakeP4Runtime()
    srv = _start(fake, addr)
    argv = [sys.executable, "-m", "controller", "--admin", admin, "serve", "--switch", addr]
    argv += ["--p4json", str(json_path), "--p4info", str(p4info), "--topology", str(topo)]
    argv += ["--db", str(tmp_path / "state.db"), "--interval", "0.1", "--election-id", "10"]

    def serve() -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        _wait_connected(admin, proc, log)
        return proc

    proc = serve()
    try:
        res = esa_ctl(admin, "admit", "1", "--workers", "h1", "h2", "--ps", "h3", "--priority", "4")
        assert res.returncode == 0, res.stderr
        res = esa_ctl(admin, "admit", "2", "--workers", "h4,h5", "--ps", "h6", "--size", "1000")
        assert res.returncode == 0, res.stderr
        assert esa_ctl(admin, "policy", "static").returncode == 0
        before = _read(addr)
        assert sorted(before.jobs) == [1, 2] and before.policy.policy is Policy.STATIC
    finally:
        proc.terminate()
        assert proc.wait(timeout=LIMIT_S) == 0
    drift = P4RuntimeSwitch.connect(addr, election_id=(0, 1))
    drift.delete_job(2)
    drift.write_job(9, before.jobs[1])
    drift.set_policy(PolicyEntry(Policy.ATP, 5, 0))
    drift.close()
    proc = serve()
    try:
        assert _read(addr) == before
        assert fake.pushes == 1
        srv.stop(None)
        fresh = FakeP4Runtime()
        srv = _start(fresh, addr)
        until(lambda: len(fresh.entries) >= before.count() + 1, "the restarted switch re-synced")
        assert fresh.pushes == 1
        assert _read(addr) == before
        jobs = json.loads(esa_ctl(admin, "jobs", "--json").stdout)
        assert [(j["job"], j["mode"]) for j in jobs] == [(1, "static"), (2, "auto")]
    finally:
        proc.terminate()
        proc.wait(timeout=LIMIT_S)
        srv.stop(None)
