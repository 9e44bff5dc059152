"""The controller against a real BMv2 (testbed/bmv2_veth.py): entries, data-plane
behaviour under the controller's priorities and policies, and restarts."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from controller.api.messages import AdmitRequest, JobRef, PolicyRequest, PrioRequest, SwitchSlots
from controller.api.service import Controller
from controller.device.entries import SwitchEntries
from controller.device.switch import P4RuntimeSwitch, Switch
from controller.world.fabric import one_switch
from controller.world.state import Store
from controller.world.topology import Host, Topology
from esa import wire
from esa.model import second_hash, slot_hash
from esa.spec import Policy
from esa.toolchain import compile_p4
from esa.wire import Flag, PacketType
from runner.devices.bmv2 import THRIFT_PORT
from testbed.bmv2_veth import Bmv2Switch
from tests.esa_ctl import esa_ctl
from tests.wait import LIMIT_S, until

pytestmark = pytest.mark.bmv2

ROOT = Path(__file__).resolve().parent.parent
POOL = 64
PORTS = 6
HDR = struct.Struct(wire.struct_format())
VALUES = struct.Struct(f"!{wire.K}i")
ETH_IP_UDP = 14 + 20 + 8
LONG_US = 60_000_000
"""a stale timeout no test outlasts: slots are reclaimed only where a test says so."""


def topology() -> Topology:
    hosts = {
        f"h{i}": Host(f"h{i}", i, f"02:00:00:00:00:{i:02x}", f"10.0.0.{i}", 50000 + i)
        for i in range(1, PORTS + 1)
    }
    return Topology(hosts, POOL)


TOPO = topology()


def _ip_checksum(header: bytes) -> int:
    total: int = sum(struct.unpack("!10H", header))
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def frame(
    src: str, dst: str, job: int, seq: int, bitmap: int, values: list[int], flags: int = 0
) -> bytes:
    """An ESA contribution from host ``src`` to host ``dst``."""
    s, d = TOPO.hosts[src], TOPO.hosts[dst]
    payload = HDR.pack(PacketType.CONTRIB, flags, job, seq, bitmap, 1) + VALUES.pack(*values)
    udp = struct.pack("!HHHH", 40000, wire.UDP_PORT, 8 + len(payload), 0)
    ip = bytearray(
        struct.pack(
            "!BBHHHBBH4s4s",
            0x45,
            0,
            20 + len(udp) + len(payload),
            0,
            0,
            64,
            17,
            0,
            bytes(map(int, s.ip.split("."))),
            bytes(map(int, d.ip.split("."))),
        )
    )
    struct.pack_into("!H", ip, 10, _ip_checksum(bytes(ip)))
    eth = bytes.fromhex(d.mac.replace(":", "")) + bytes.fromhex(s.mac.replace(":", ""))
    return eth + b"\x08\x00" + bytes(ip) + udp + payload


@dataclass(frozen=True)
class Seen:
    """An ESA frame as it left the switch."""

    dst_mac: str
    dst_ip: str
    dport: int
    ptype: PacketType
    flags: int
    job: int
    seq: int
    bitmap: int
    count: int
    values: tuple[int, ...]


def parse(raw: bytes) -> Seen:
    ptype, flags, job, seq, bitmap, count = HDR.unpack_from(raw, ETH_IP_UDP)
    return Seen(
        ":".join(f"{b:02x}" for b in raw[0:6]),
        ".".join(str(b) for b in raw[30:34]),
        struct.unpack_from("!H", raw, 36)[0],
        PacketType(ptype),
        flags,
        job,
        seq,
        bitmap,
        count,
        VALUES.unpack_from(raw, ETH_IP_UDP + HDR.size),
    )


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return compile_p4(ROOT / "p4src" / "esa.p4", tmp_path_factory.mktemp("p4"), pool=POOL)


@pytest.fixture
def bmv2() -> Iterator[Bmv2Switch]:
    sw = Bmv2Switch(PORTS)
    sw.start()
    sw.flush()  # opens every port's socket now: a frame before its socket is lost
    yield sw
    sw.close()


def connector(sw: Bmv2Switch, program: tuple[Path, Path]) -> Callable[[], Switch]:
    def connect() -> Switch:
        p4 = P4RuntimeSwitch.connect(sw.grpc_addr, sw.device_id, (0, 1))
        p4.ensure_pipeline(*program)
        return p4

    return connect


@pytest.fixture
def ctl(bmv2: Bmv2Switch, program: tuple[Path, Path], tmp_path: Path) -> Iterator[Controller]:
    c = Controller(
        Store(tmp_path / "state.db"), one_switch(TOPO), POOL, {"s1": connector(bmv2, program)}, 0.0
    )
    c.sync()
    yield c
    c.sessions["s1"].drop()


def events(c: Controller, job: int) -> dict[str, int]:
    counts = c.stats().jobs[job]
    return {k: v for k, v in counts.items() if v}


def read_back(c: Controller) -> SwitchEntries:
    assert c.sessions["s1"].switch is not None
    return c.sessions["s1"].switch.read_entries()


def colliding_seq(job: int, seq: int, other: int) -> int:
    """A seq of job ``other`` whose chunk hashes to the slot of (job, seq),
    its second hash too: a chunk of one slot, with no other to take."""
    target = slot_hash(job, seq, POOL)
    return next(
        s
        for s in range(100_000)
        if slot_hash(other, s, POOL) == target and second_hash(other, s, POOL) == target
    )


def test_admit_installs_entries_and_aggregates(ctl: Controller, bmv2: Bmv2Switch) -> None:
    ctl.admit(AdmitRequest(job=1, workers=("h1", "h2"), ps=("h3",), priority=1))
    assert read_back(ctl) == ctl.sessions["s1"].applied
    assert [j.job for j in ctl.jobs().jobs] == [1]
    bmv2.send(1, frame("h1", "h3", 1, 0, 0b01, [1] * wire.K))
    bmv2.send(2, frame("h2", "h3", 1, 0, 0b10, [2] * wire.K))
    for port in (1, 2, 3):
        (got,) = [parse(f) for f in bmv2.recv(port, timeout=LIMIT_S, want=1)]
        h = TOPO.hosts[f"h{port}"]
        assert (got.dst_mac, got.dst_ip, got.dport) == (h.mac, h.ip, h.udp_port)
        assert (got.ptype, got.job, got.seq, got.bitmap, got.count) == (
            PacketType.RESULT,
            1,
            0,
            0b11,
            2,
        )
        assert got.values == (3,) * wire.K
    assert events(ctl, 1) == {"aggregated": 2, "completed": 1}


def test_a_job_on_two_ps_hosts(ctl: Controller, bmv2: Bmv2Switch) -> None:
    """The sum of chunk ``seq`` goes to the workers and to the PS of its
    shard, ``ps[seq % 2]``, and not to the other PS."""
    ctl.admit(AdmitRequest(job=1, workers=("h1", "h2"), ps=("h3", "h4"), priority=1))
    assert read_back(ctl) == ctl.sessions["s1"].applied
    for seq, ps, other in ((0, 3, 4), (1, 4, 3)):
        bmv2.send(1, frame("h1", f"h{ps}", 1, seq, 0b01, [1] * wire.K))
        bmv2.send(2, frame("h2", f"h{ps}", 1, seq, 0b10, [2] * wire.K))
        for port in (1, 2, ps):
            (got,) = [parse(f) for f in bmv2.recv(port, timeout=LIMIT_S, want=1)]
            assert (got.dst_ip, got.ptype, got.seq, got.values) == (
                f"10.0.0.{port}",
                PacketType.RESULT,
                seq,
                (3,) * wire.K,
            )
        assert bmv2.recv(other, timeout=0.3) == []
    assert events(ctl, 1) == {"aggregated": 4, "completed": 2}


def test_reprioritise_changes_who_preempts(ctl: Controller, bmv2: Bmv2Switch) -> None:
    """Jobs without a home hash over the pool and preempt each other by
    priority.  One home, the whole pool (``--part-size POOL``): job 3 ranks
    highest and holds it; jobs 1 and 2 have none and hash into it."""
    ctl.policy(PolicyRequest(policy="esa", stale_us=LONG_US, squat_us=LONG_US, part_size=POOL))
    ctl.admit(AdmitRequest(job=1, workers=("h1", "h2"), ps=("h3",), priority=1))
    ctl.admit(AdmitRequest(job=2, workers=("h4", "h5"), ps=("h6",), priority=5))
    ctl.admit(AdmitRequest(job=3, workers=("h1", "h4"), ps=("h2",), priority=200))
    parts = {j: (e.part_base, e.part_size) for j, e in read_back(ctl).jobs.items()}
    assert parts == {1: (0, 0), 2: (0, 0), 3: (0, POOL)}
    seq2 = colliding_seq(1, 0, 2)
    # job 1's next chunk of the same one slot (chunk 0, once evicted, follows it to the PS)
    home = slot_hash(1, 0, POOL)
    seq1 = next(
        s
        for s in range(1, 100_000)
        if slot_hash(1, s, POOL) == home and second_hash(1, s, POOL) == home
    )
    bmv2.send(1, frame("h1", "h3", 1, 0, 0b01, [7] * wire.K))
    until(lambda: events(ctl, 1) == {"aggregated": 1}, "job 1's chunk in its slot")
    bmv2.send(4, frame("h4", "h6", 2, seq2, 0b01, [9] * wire.K))
    (evicted,) = [parse(f) for f in bmv2.recv(3, timeout=LIMIT_S, want=1)]
    assert (evicted.ptype, evicted.job, evicted.seq, evicted.values) == (
        PacketType.PARTIAL,
        1,
        0,
        (7,) * wire.K,
    )
    assert events(ctl, 1) == {"aggregated": 1, "preempt_suffered": 1}
    assert events(ctl, 2) == {"aggregated": 1, "preempt_won": 1}

    ctl.prio(PrioRequest(job=1, priority=9))
    assert read_back(ctl).jobs[1].priority == 9
    bmv2.send(1, frame("h1", "h3", 1, seq1, 0b01, [7] * wire.K))
    (evicted,) = [parse(f) for f in bmv2.recv(6, timeout=LIMIT_S, want=1)]
    assert (evicted.ptype, evicted.job, evicted.seq, evicted.values) == (
        PacketType.PARTIAL,
        2,
        seq2,
        (9,) * wire.K,
    )
    assert events(ctl, 1) == {"aggregated": 2, "preempt_suffered": 1, "preempt_won": 1}
    assert events(ctl, 2) == {"aggregated": 1, "preempt_won": 1, "preempt_suffered": 1}


def test_remove_frees_entries_and_slots(ctl: Controller, bmv2: Bmv2Switch) -> None:
    empty = read_back(ctl)
    ctl.policy(PolicyRequest(policy="esa", stale_us=1000))
    ctl.admit(AdmitRequest(job=1, workers=("h1", "h2"), ps=("h3",), priority=1))
    bmv2.send(1, frame("h1", "h3", 1, 0, 0b01, [5] * wire.K))
    until(lambda: events(ctl, 1) == {"aggregated": 1}, "job 1's chunk in its slot")
    ctl.thrift_cli = {"s1": ["ip", "netns", "exec", bmv2.ns.name, "simple_switch_CLI",
                             "--thrift-port", str(THRIFT_PORT)]}  # fmt: skip
    assert ctl.slots().switches["s1"] == SwitchSlots(pool_size=POOL, used=1, by_job={1: 1})
    ctl.remove(JobRef(job=1))
    after = read_back(ctl)
    assert (after.jobs, after.ps_routes, after.replicas, after.groups) == (
        empty.jobs,
        empty.ps_routes,
        empty.replicas,
        empty.groups,
    )
    ctl.admit(AdmitRequest(job=3, workers=("h4", "h5"), ps=("h6",), priority=0))
    seq3 = POOL  # job 3's home is the whole pool, as job 1's was: slot 0, job 1's stale partial
    time.sleep(0.1)
    bmv2.send(4, frame("h4", "h6", 3, seq3, 0b01, [1] * wire.K))
    bmv2.send(5, frame("h5", "h6", 3, seq3, 0b10, [2] * wire.K))
    (result,) = [parse(f) for f in bmv2.recv(6, timeout=LIMIT_S, want=1)]
    assert (result.ptype, result.job, result.seq, result.values) == (
        PacketType.RESULT,
        3,
        seq3,
        (3,) * wire.K,
    )
    assert events(ctl, 3) == {"aggregated": 2, "completed": 1}
    assert ctl.stats().drops["no_ps_route"] == 1  # job 1's stale partial had no PS left
    idx = seq3 % POOL
    assert f"[{idx}]= 0\n" in bmv2.cli(f"register_read EsaIngress.pool.slot_owner {idx}")
    assert ctl.slots().switches["s1"] == SwitchSlots(pool_size=POOL, used=0, by_job={})


def test_policy_switch_without_recompiling(ctl: Controller, bmv2: Bmv2Switch) -> None:
    ctl.admit(AdmitRequest(job=1, workers=("h1", "h2"), ps=("h3",), priority=1))
    ctl.policy(PolicyRequest(policy="atp", stale_us=LONG_US))
    bmv2.send(1, frame("h1", "h3", 1, 4, 0b01, [1] * wire.K))
    bmv2.send(2, frame("h2", "h3", 1, 4, 0b10, [1] * wire.K))
    (held,) = [parse(f) for f in bmv2.recv(3, timeout=LIMIT_S, want=1)]
    assert (held.ptype, held.flags & Flag.HOLD) == (PacketType.RESULT, Flag.HOLD)
    assert bmv2.recv(1, timeout=0.3) == []
    ctl.policy(PolicyRequest(policy="static"))
    assert read_back(ctl).policy.policy is Policy.STATIC
    seq = next(s for s in range(POOL, 2 * POOL) if s % POOL != slot_hash(1, 4, POOL))
    bmv2.send(1, frame("h1", "h3", 1, seq, 0b01, [1] * wire.K))
    until(lambda: events(ctl, 1)["aggregated"] == 3, "job 1's third contribution counted")
    out = bmv2.cli(f"register_read EsaIngress.pool.slot_owner {seq % POOL}")
    assert f"[{seq % POOL}]= {(1 << 32) | seq}\n" in out


def test_counters_of_a_reused_job_id_start_at_zero(ctl: Controller, bmv2: Bmv2Switch) -> None:
    ctl.admit(AdmitRequest(job=1, workers=("h1", "h2"), ps=("h3",), priority=1))
    bmv2.send(1, frame("h1", "h3", 1, 0, 0b01, [1] * wire.K))
    until(lambda: events(ctl, 1) == {"aggregated": 1}, "job 1's chunk counted")
    ctl.remove(JobRef(job=1))
    ctl.admit(AdmitRequest(job=1, workers=("h1", "h2"), ps=("h3",), priority=1))
    assert events(ctl, 1) == {}
    bmv2.send(1, frame("h5", "h3", 9, 0, 0b01, [1] * wire.K))
    until(lambda: ctl.stats().drops["unknown_job"] > 0, "the unknown job's frame dropped")
    assert ctl.stats().drops["unknown_job"] == 1


def test_bmv2_restart_resyncs(ctl: Controller, bmv2: Bmv2Switch) -> None:
    ctl.admit(AdmitRequest(job=1, workers=("h1", "h2"), ps=("h3",), priority=1))
    ctl.admit(AdmitRequest(job=2, workers=("h4", "h5"), ps=("h6",), size=1 << 20))
    ctl.policy(PolicyRequest(policy="atp", stale_us=777))
    before = read_back(ctl)
    bmv2.restart()
    until(lambda: not ctl.connected, "the controller sees the switch go")
    assert ctl.sync() == before.count() + 1
    assert read_back(ctl) == before
    ctl.policy(PolicyRequest(policy="esa"))
    bmv2.send(4, frame("h4", "h6", 2, 1, 0b01, [1] * wire.K))
    bmv2.send(5, frame("h5", "h6", 2, 1, 0b10, [1] * wire.K))
    assert parse(bmv2.recv(6, timeout=LIMIT_S, want=1)[0]).ptype is PacketType.RESULT


def _serve(bmv2: Bmv2Switch, program: tuple[Path, Path], tmp: Path) -> subprocess.Popen[bytes]:
    topo = tmp / "topo.json"
    topo.write_text(json.dumps(TOPO.to_json()))
    log = open(tmp / "serve.log", "ab")  # noqa: SIM115 - the child owns it
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "controller",
            "--admin",
            f"unix:{tmp}/admin.sock",
            "serve",
            "--switch",
            bmv2.grpc_addr,
            "--p4json",
            str(program[0]),
            "--p4info",
            str(program[1]),
            "--topology",
            str(topo),
            "--db",
            str(tmp / "state.db"),
            "--interval",
            "0.2",
            "--election-id",
            "10",
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + LIMIT_S
    while time.monotonic() < deadline:
        res = esa_ctl(f"unix:{tmp}/admin.sock", "status", "--json")
        if res.returncode == 0 and all(s["connected"] for s in json.loads(res.stdout)["switches"]):
            return proc
        time.sleep(0.2)
    proc.kill()
    raise AssertionError((tmp / "serve.log").read_text())


def _read(bmv2: Bmv2Switch) -> SwitchEntries:
    reader = P4RuntimeSwitch.connect(bmv2.grpc_addr, bmv2.device_id, (0, 1), require_primary=False)
    try:
        return reader.read_entries()
    finally:
        reader.close()


def test_controller_restart_recovers(
    bmv2: Bmv2Switch, program: tuple[Path, Path], tmp_path: Path
) -> None:
    admin = f"unix:{tmp_path}/admin.sock"
    proc = _serve(bmv2, program, tmp_path)
    try:
        assert (
            esa_ctl(
                admin, "admit", "1", "--workers", "h1", "h2", "--ps", "h3", "--priority", "4"
            ).returncode
            == 0
        )
        assert (
            esa_ctl(
                admin, "admit", "2", "--workers", "h4", "h5", "--ps", "h6", "--priority", "2"
            ).returncode
            == 0
        )
        dup = esa_ctl(admin, "admit", "2", "--workers", "h4", "h5", "--ps", "h6", "--priority", "2")
        assert (dup.returncode, dup.stderr) == (
            1,
            "esa-ctl: error: job 2 already exists: remove it first\n",
        )
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    before = _read(bmv2)
    assert sorted(before.jobs) == [1, 2]
    # while the controller is down, the switch drifts: one job lost, one stray
    drift = P4RuntimeSwitch.connect(bmv2.grpc_addr, bmv2.device_id, (0, 20))
    drift.delete_job(2)
    drift.write_job(9, before.jobs[1])
    drift.delete_group(2)
    drift.close()
    proc = _serve(bmv2, program, tmp_path)
    try:
        assert _read(bmv2) == before
        jobs = json.loads(esa_ctl(admin, "jobs", "--json").stdout)
        assert [(j["job"], j["priority"]) for j in jobs] == [(1, 4), (2, 2)]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_new_pipeline_leaves_no_duplicate_multicast_copies(
    ctl: Controller, bmv2: Bmv2Switch, tmp_path: Path
) -> None:
    """A controller that pushes a new program to a running switch (here: the
    same program with a different pool size) rebuilds the job's groups; each
    worker gets exactly one copy of a result."""
    ctl.admit(AdmitRequest(job=1, workers=("h1", "h2"), ps=("h3",), priority=1))
    other = compile_p4(ROOT / "p4src" / "esa.p4", tmp_path / "p4", pool=POOL // 2)
    assert ctl.sessions["s1"].switch is not None
    ctl.sessions["s1"].switch.close()
    p4 = P4RuntimeSwitch.connect(bmv2.grpc_addr, bmv2.device_id, (0, 1))
    assert p4.ensure_pipeline(*other) is True
    p4.close()
    ctl.sessions["s1"].drop()
    ctl.sync()
    bmv2.flush()
    bmv2.send(1, frame("h1", "h3", 1, 5, 0b01, [2] * wire.K))
    bmv2.send(2, frame("h2", "h3", 1, 5, 0b10, [3] * wire.K))
    for port in (1, 2, 3):
        # the first copy, then any duplicate that follows it
        frames = bmv2.recv(port, timeout=LIMIT_S, want=1) + bmv2.recv(port, timeout=1.0)
        got = [parse(f) for f in frames]
        assert [(s.ptype, s.values) for s in got] == [(PacketType.RESULT, (5,) * wire.K)]
