"""The reference switch (refswitch/main.py).

* P4Runtime as BMv2 answers it: mastership, refused writes, pipeline checks
  (in process, no root needed);
* what BMv2 does not serve: reads of the slot registers, exactly the slots
  ``esa.model`` holds, for the controller's slot view and the run's
  timeline;
* ``esa-refswitch`` started by hand on veths, with P4Runtime on a free port,
  and ``esa-ctl serve`` against it without a BMv2 JSON: ``esa-ctl slots``
  while a job streams; its argument errors;
* the controller drives the switch process as it drives BMv2: pipeline,
  jobs, entries read back equal, a no-op second reconciliation, counters;
* frames in, frames out: a short trace whose every output frame is written
  out here byte for byte from the rules (esa.model's verdicts, forwarding.p4
  and replicas.p4), through the switch in process and the switch process;
* where BMv2 exists, one random trace through BMv2 and the reference switch
  gives the same frames on every port and the same counters;
* and a device with a fabric's roles (a ToR's up port, a top's children),
  written by the controller's plan, gives BMv2's frames step by step, each
  step's packets written out here from the tier rules (docs/dataplane.md).
"""

from __future__ import annotations

import itertools
import json
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc
import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc
from p4runtime_sh.context import P4Type
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from controller.api.messages import Stats
from controller.device.entries import PolicyEntry, ShardKey, SwitchEntries
from controller.device.reconcile import reconcile
from controller.device.switch import P4RuntimeSwitch
from controller.errors import SwitchError, SwitchUnavailable
from controller.world.fabric import Device as FabricDevice
from controller.world.fabric import JobRole
from controller.world.plan import JobPlan, desired
from controller.world.topology import Host, Topology, ip_to_int
from esa import p4names, wire
from esa.jobrow import JobEntry
from esa.model import FROM_PS, Packet, second_hash, slot_hash
from esa.p4names import JOB_EVENTS, SLOT_OWNER
from esa.spec import DEFAULT_POOL_SIZE, SLOT_REGISTERS, Drop, Event, Policy, owner_key
from esa.target import device_config
from esa.toolchain import compile_p4
from esa.wire import Flag, PacketType
from refswitch.main import main as refswitch_main
from refswitch.server import ServedDevice
from refswitch.tables import PARAMS, SPECS
from runner.devices.netns import PACKET_OUTGOING, Namespace
from runner.devices.refproc import RefSwitch
from runner.paths import ROOT
from runner.timeline import P4RuntimeRegisters, Timeline
from testbed.bmv2_veth import Bmv2Switch
from tests import dataplane
from tests.conftest import REFSWITCH_POOL
from tests.dataplane import Seen, parse
from tests.esa_ctl import esa_ctl
from tests.test_controller_cli import esa_ctl_here
from tests.test_differential import trace as esa_trace
from tests.wait import LIMIT_S

P4INFO = ROOT / "p4src" / "esa.p4info.txtpb"
POOL = REFSWITCH_POOL
PORTS = 6
LONG_US = 60_000_000
"""timeouts no test outlasts: the switch's clock never decides anything here."""
HDR = struct.Struct(wire.struct_format())
VALUES = struct.Struct(f"!{wire.K}i")
TOPO = Topology(
    {
        f"h{i}": Host(f"h{i}", i, f"02:00:00:00:00:{i:02x}", f"10.0.0.{i}", 50000 + i)
        for i in range(1, PORTS + 1)
    },
    POOL,
)
H = TOPO.hosts


class Ports(Protocol):
    """What the tests need of a switch with veth ports: testbed.bmv2_veth.Bmv2Switch
    and RefSwitchProcess."""

    ports: int

    @property
    def grpc_addr(self) -> str: ...

    def send(self, port: int, frame: bytes) -> None: ...

    def sock(self, port: int) -> socket.socket: ...


class RefSwitchProcess:
    """A reference switch process whose ports are veths in a private network
    namespace, shaped like testbed.bmv2_veth.Bmv2Switch: port ``i`` is veth
    ``s<i>``, its peer ``h<i>`` is where a test sends and receives; P4Runtime
    is on a unix socket."""

    def __init__(self, ports: int, pool: int) -> None:
        self.ports = ports
        self.workdir = Path(tempfile.mkdtemp(prefix="esa-refsw-"))
        self.ns = Namespace("rs")
        self._socks: dict[int, socket.socket] = {}
        self.switch = RefSwitch(
            {i: f"s{i}" for i in range(1, ports + 1)},
            f"unix:{self.workdir / 'p4rt.sock'}",
            self.workdir / "refswitch.log",
            pool,
            netns=self.ns.name,
        )
        try:
            for i in range(1, ports + 1):
                self.ns.add_veth(f"h{i}", f"s{i}")
                self._socks[i] = self.ns.raw_socket(f"h{i}")
            self.switch.start()
        except BaseException:
            self.close()
            raise

    @property
    def grpc_addr(self) -> str:
        return self.switch.grpc_addr

    def send(self, port: int, frame: bytes) -> None:
        self._socks[port].send(frame)

    def sock(self, port: int) -> socket.socket:
        return self._socks[port]

    def close(self) -> tuple[int | None, str]:
        """Stop the switch; returns its exit status and its log."""
        status = self.switch.stop()
        for s in self._socks.values():
            s.close()
        self.ns.delete()
        log = self.switch.log.read_text() if self.switch.log.exists() else ""
        shutil.rmtree(self.workdir, ignore_errors=True)
        return status, log


@pytest.fixture(scope="module")
def refsw() -> Iterator[RefSwitchProcess]:
    sw = RefSwitchProcess(PORTS, POOL)
    yield sw
    status, log = sw.close()
    assert status == 0, log


@pytest.fixture
def program(tmp_path: Path) -> tuple[Path, Path]:
    """The pipeline a machine without p4c pushes: the committed P4Info and a
    device config naming the pool."""
    json_path = tmp_path / "esa.json"
    json_path.write_bytes(device_config(POOL))
    return json_path, P4INFO


Twins = tuple[Bmv2Switch, RefSwitchProcess, tuple[Path, Path]]
"""BMv2 and the reference switch with the rig's ports, and the compiled program."""


def fresh(addr: str, program: tuple[Path, Path]) -> None:
    """Push the pipeline again: empty tables, a free pool, zero counters."""
    sw = P4RuntimeSwitch.connect(addr)
    sw.push_pipeline(*program)
    sw.close()


def programmed(twins: Twins, entries: SwitchEntries) -> list[P4RuntimeSwitch]:
    """BMv2 restarted, then both switches given a fresh pipeline and
    ``entries``; the sessions, in (BMv2, reference) order.  BMv2 is
    restarted rather than pushed again: a second push leaves its multicast
    engine holding the old groups' nodes beside the new ones."""
    bmv2, ref, program = twins
    bmv2.restart()
    sessions = []
    for sw in (bmv2, ref):
        fresh(sw.grpc_addr, program)
        sessions.append(P4RuntimeSwitch.connect(sw.grpc_addr))
        reconcile(sessions[-1], entries, sessions[-1].read_entries())
    return sessions


def two_jobs(policy: Policy = Policy.ESA) -> SwitchEntries:
    """The controller's plan for job 1 (priority 1: workers h1 h2, PS h3) and
    job 2 (priority 5: h4 h5, PS h6) under the equal split: under STATIC
    each has half the pool, under ESA and ATP they hash over it."""
    half = POOL // 2 if policy is Policy.STATIC else 0
    at = ip_to_int(dataplane.SWITCH_IP)
    jobs = [
        JobPlan(1, (H["h1"], H["h2"]), (H["h3"],), 1, 0, half, switch_ip=at),
        JobPlan(2, (H["h4"], H["h5"]), (H["h6"],), 5, half, half, switch_ip=at),
    ]
    return desired(list(H.values()), jobs, PolicyEntry(policy, LONG_US, LONG_US))


def configured(addr: str, program: tuple[Path, Path]) -> P4RuntimeSwitch:
    """A session with a switch running the pipeline afresh and ``two_jobs``."""
    fresh(addr, program)
    sw = P4RuntimeSwitch.connect(addr)
    reconcile(sw, two_jobs(), sw.read_entries())
    return sw


# -- frames, written out from the rules --


def vals(x: int) -> tuple[int, ...]:
    return tuple(x * (i + 1) for i in range(wire.K))


def payload(
    ptype: PacketType, job: int, seq: int, bitmap: int, values: tuple[int, ...], count: int = 1
) -> bytes:
    return HDR.pack(ptype, 0, job, seq, bitmap, count) + VALUES.pack(*values)


def frame(
    src: Host,
    dst: Host,
    body: bytes,
    *,
    ip_src: str | None = None,
    dport: int = wire.UDP_PORT,
    udp_checksum: int | None = None,
) -> bytes:
    """A UDP frame from ``src`` to ``dst``; Scapy fills lengths, the IPv4
    checksum and (unless given) the UDP checksum."""
    return bytes(
        Ether(src=src.mac, dst=dst.mac)
        / IP(src=ip_src or src.ip, dst=dst.ip, id=7)
        / UDP(sport=src.udp_port, dport=dport, chksum=udp_checksum)
        / body
    )


def contrib(src: Host, job: int, seq: int, bit: int, x: int, ps: Host) -> bytes:
    return frame(src, ps, payload(PacketType.CONTRIB, job, seq, 1 << bit, vals(x)))


@dataclass(frozen=True)
class Step:
    what: str
    port: int
    frame: bytes
    out: dict[int, list[bytes]]
    """the frames that must leave, by egress port."""


def colliding_seqs() -> tuple[int, int]:
    """A seq of job 1 and one of job 2 that share a slot, each of one slot
    (its second hash on its first), so neither has another to take."""
    return next(
        (s, t)
        for s in range(100)
        for t in range(100)
        if slot_hash(1, s, POOL) == slot_hash(2, t, POOL)
        and second_hash(1, s, POOL) == slot_hash(1, s, POOL)
        and second_hash(2, t, POOL) == slot_hash(2, t, POOL)
    )


def steps() -> list[Step]:
    """Aggregation to a multicast result, a preemption, a partial's chunk
    following it to the PS, a PS result, L2 unicast and flood, drops."""
    h1, h2, h3, h4, h5, h6 = (H[f"h{i}"] for i in range(1, 7))
    s, t = colliding_seqs()
    done = s + 1
    l2 = bytes(Ether(src=h1.mac, dst=h2.mac, type=0x88B5)) + b"esa-refswitch-l2"
    bcast = bytes(Ether(src=h4.mac, dst="ff:ff:ff:ff:ff:ff", type=0x88B5)) + b"flood"
    ps_result = payload(PacketType.PS_RESULT, 2, t, 0b11, vals(9), count=2)
    result = payload(PacketType.RESULT, 1, done, 0b11, vals(5), count=2)

    def zero(src: Host, dst: Host, body: bytes, **kw: Any) -> bytes:
        return frame(src, dst, body, udp_checksum=0, **kw)

    def result_to(h: Host) -> bytes:
        # the completing frame (from h2), addressed to h: a worker's copy from
        # the PS's address, the PS's from the switch's
        source = dataplane.SWITCH_IP if h is h3 else h3.ip
        return zero(h2, h, result, ip_src=source, dport=h.udp_port)

    return [
        Step("first contribution: claim", 1, contrib(h1, 1, done, 0, 2, h3), {}),
        Step(
            "second: the sum to workers and PS, each copy to its host",
            2,
            contrib(h2, 1, done, 1, 3, h3),
            {1: [result_to(h1)], 2: [result_to(h2)], 3: [result_to(h3)]},
        ),
        Step("job 1 claims the shared slot", 1, contrib(h1, 1, s, 0, 4, h3), {}),
        Step(
            "job 2 preempts it: job 1's partial to job 1's PS",
            4,
            contrib(h4, 2, t, 0, 6, h6),
            {3: [zero(h4, h3, payload(PacketType.PARTIAL, 1, s, 1, vals(4)))]},
        ),
        Step(
            "job 1's chunk follows its partial: FALLBACK to the PS",
            2,
            contrib(h2, 1, s, 1, 7, h3),
            {3: [zero(h2, h3, payload(PacketType.FALLBACK, 1, s, 2, vals(7)))]},
        ),
        Step(
            "a PS result goes to the workers, each copy to its host",
            6,
            frame(h6, h6, ps_result),
            {
                4: [zero(h6, h4, ps_result, ip_src=h6.ip, dport=h4.udp_port)],
                5: [zero(h6, h5, ps_result, ip_src=h6.ip, dport=h5.udp_port)],
            },
        ),
        Step("a PS result from a worker's port: dropped", 4, frame(h4, h6, ps_result), {}),
        Step("a contribution of an unknown job: dropped", 1, contrib(h1, 9, 0, 0, 1, h3), {}),
        Step("L2 unicast, unchanged", 1, l2, {2: [l2]}),
        Step(
            "L2 broadcast: every port but its own", 4, bcast, {p: [bcast] for p in (1, 2, 3, 5, 6)}
        ),
    ]


def assert_counters(sw: P4RuntimeSwitch, bad_type: int) -> None:
    """The counters after ``steps``."""
    job1 = {Event.AGGREGATED: 3, Event.COMPLETED: 1, Event.PREEMPT_SUFFERED: 1}
    job1 |= {Event.FALLBACK: 1, Event.FOLLOWED: 1}
    job2 = {Event.AGGREGATED: 1, Event.PREEMPT_WON: 1, Event.PS_RESULT: 1}
    job2 |= {Event.RELEASED_BY_PS: 1}
    counters = sw.read_counters()
    assert counters.events == {
        j: {e: d.get(e, 0) for e in Event} for j, d in ((1, job1), (2, job2))
    }
    drops = {Drop.BAD_TYPE: bad_type, Drop.UNKNOWN_JOB: 1}
    assert counters.drops == {d: drops.get(d, 0) for d in Drop}


def waiting(sock: socket.socket) -> list[bytes]:
    """The frames queued on a host's raw socket (not those it sent)."""
    frames: list[bytes] = []
    while True:
        try:
            data, addr = sock.recvfrom(65535)
        except BlockingIOError:
            return frames
        if addr[2] != PACKET_OUTGOING:
            frames.append(data)


def collect(
    sw: Ports, want: int | None, quiet: float = 0.03, timeout: float = LIMIT_S
) -> dict[int, list[bytes]]:
    """Frames that left any port: until ``want`` came (None: any number) and
    then none for ``quiet`` seconds, or ``timeout`` passed."""
    got: dict[int, list[bytes]] = {}
    n, start = 0, time.monotonic()
    last = start
    while time.monotonic() - start < timeout:
        for p in range(1, sw.ports + 1):
            frames = waiting(sw.sock(p))
            if frames:
                got.setdefault(p, []).extend(frames)
                n += len(frames)
                last = time.monotonic()
        if (want is None or n >= want) and time.monotonic() - last >= quiet:
            break
        time.sleep(0.001)
    return got


# -- the committed P4Info --


@pytest.mark.p4c
def test_committed_p4info_is_what_p4c_gives(tmp_path: Path) -> None:
    """p4src/esa.p4info.txtpb is what a machine without p4c pushes; p4src is
    the truth.  Regenerate it with
    ``p4c-bm2-ss --arch v1model --std p4-16 -DPOOL_SIZE=1024
    --p4runtime-files p4src/esa.p4info.txtpb -o /tmp/esa.json p4src/esa.p4``."""
    _, p4info = compile_p4(ROOT / "p4src" / "esa.p4", tmp_path, pool=DEFAULT_POOL_SIZE)
    assert P4INFO.read_text() == p4info.read_text(), "p4src/esa.p4info.txtpb is out of date"


def test_the_switch_knows_every_table_and_action_of_the_program() -> None:
    assert set(SPECS) == set(p4names.TABLES)
    assert set(PARAMS) == {a for actions in p4names.TABLES.values() for a in actions}


# -- P4Runtime, in process --


def test_p4runtime_rules(device: tuple[ServedDevice, str], program: tuple[Path, Path]) -> None:
    """Mastership, write refusals and pipeline checks, as BMv2 answers them."""
    _, addr = device
    with grpc.insecure_channel(addr) as channel, pytest.raises(grpc.RpcError) as err:
        list(p4runtime_pb2_grpc.P4RuntimeStub(channel).Read(p4runtime_pb2.ReadRequest()))
    assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert err.value.details() == "No forwarding pipeline config set for this device"
    first = P4RuntimeSwitch.connect(addr, election_id=(0, 5))
    assert first.ensure_pipeline(*program) is True
    with pytest.raises(SwitchUnavailable, match=r"refused to make us primary"):
        P4RuntimeSwitch.connect(addr, election_id=(0, 4))
    backup = P4RuntimeSwitch.connect(addr, election_id=(0, 3), require_primary=False)
    with pytest.raises(SwitchError, match=r"^switch refused the request: Not primary$"):
        backup.create_group(5, [(1, 2)])
    first.create_group(5, [(1, 2)])
    with pytest.raises(
        SwitchError,
        match=r"^switch refused the request: Multicast group already exists$",
    ):
        first.create_group(5, [(1, 3)])
    assert backup.read_entries().groups == {5: frozenset({(1, 2)})}
    with pytest.raises(SwitchError, match=r"^switch refused the request: Cannot find match entry$"):
        first.delete_job(3)
    first.close()
    # the backup's stream still stands; a new primary may push again
    again = P4RuntimeSwitch.connect(addr, election_id=(0, 6))
    wrong_pool = program[0].parent / "pool9.json"
    wrong_pool.write_bytes(device_config(POOL + 1))
    with pytest.raises(SwitchError, match=r"pool of 9 slots, this switch 8"):
        again.push_pipeline(wrong_pool, program[1])
    info = p4info_pb2.P4Info()
    text_format.Merge(program[1].read_text(), info)
    next(c for c in info.counters if c.preamble.name == JOB_EVENTS).preamble.name = "other"
    foreign = program[0].parent / "foreign.p4info.txtpb"
    foreign.write_text(text_format.MessageToString(info))
    with pytest.raises(
        SwitchError,
        match=rf"counters are not the program .*\(missing {JOB_EVENTS}; unknown other\)$",
    ):
        again.push_pipeline(program[0], foreign)
    assert again.ensure_pipeline(*program) is False  # the refused pushes changed nothing
    again.close()
    backup.close()


def raw_entry(sw: P4RuntimeSwitch, table: str, key: list[Any], priority: int) -> Any:
    """A table entry written field by field: ``key`` holds an int (exact), a
    (value, mask) pair (ternary) or None (left out) per key field; the
    action is the table's first, every argument 1."""
    s = sw.session
    te = p4runtime_pb2.TableEntry(table_id=s.id_of(P4Type.table, table), priority=priority)
    for (field_id, bits), k in zip(s.key_fields(table), key, strict=True):
        if isinstance(k, int):
            te.match.add(field_id=field_id).exact.value = k.to_bytes((bits + 7) // 8, "big")
        elif k is not None:
            t = te.match.add(field_id=field_id).ternary
            t.value, t.mask = k[0].to_bytes(1, "big"), k[1].to_bytes(1, "big")
    action = p4names.TABLES[table][0]
    te.action.action.action_id = s.id_of(P4Type.action, action)
    for pid, _, bits in s.action_params(action):
        te.action.action.params.add(param_id=pid, value=(1).to_bytes((bits + 7) // 8, "big"))
    return te


def test_ps_route_entries_as_bmv2_answers_them(
    device: tuple[ServedDevice, str], program: tuple[Path, Path]
) -> None:
    """The ternary ``ps_route`` takes a priority, a don't-care shard left out
    and a value inside its mask; an exact table takes no priority; a job's
    shard mask is a shard count less one.  BMv2's messages, as
    simple_switch_grpc gives them."""
    _, addr = device
    sw = P4RuntimeSwitch.connect(addr)
    sw.ensure_pipeline(*program)
    ps, jobs = p4names.PS_TABLE, p4names.JOBS_TABLE
    refused: list[tuple[str, list[Any], int, str]] = [
        (ps, [1, (1, 1)], 0, "Zero priority for ternary match"),
        (ps, [1, None], 0, "Zero priority for ternary match"),
        (ps, [1, (3, 1)], 1, "Invalid ternary value, make sure value & mask == value"),
        (
            ps,
            [1, (0, 0)],
            1,
            "Invalid representation of 'don't care' ternary match, "
            "omit match field instead of using 0 mask",
        ),
        (ps, [1, (8, 8)], 1, "Bytestring provided does not fit within 3 bits"),
        (jobs, [1], 1, "Non-zero priority for non-ternary match"),
    ]
    for table, key, priority, message in refused:
        update = p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT)
        update.entity.table_entry.CopyFrom(raw_entry(sw, table, key, priority))
        with pytest.raises(
            SwitchError, match=rf"^switch refused the request: {re.escape(message)}$"
        ):
            sw.session.write([update])
    for key, priority in (([1, (1, 1)], 1), ([1, (1, 1)], 2), ([1, None], 1)):
        update = p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT)
        update.entity.table_entry.CopyFrom(raw_entry(sw, ps, key, priority))
        sw.session.write([update])
    assert sorted(sw.read_entries().ps_routes) == [ShardKey(1, 0, 0), ShardKey(1, 1, 1)]
    bad = JobEntry(2, 0b11, 1, (1, 2, 3), 3, 0, 0)
    with pytest.raises(SwitchError, match=r"shard_mask 2 is not a PS shard count less one$"):
        sw.write_job(1, bad)
    sw.push_pipeline(*program)
    want = dataplane.entries(PolicyEntry(Policy.ESA))
    assert {k.mask for k in want.ps_routes} == {0, 1, 3}
    reconcile(sw, want, sw.read_entries())
    assert sw.read_entries() == want
    sw.close()


def run_steps(deliver: Callable[[int, bytes], dict[int, list[bytes]]], trace: list[Step]) -> None:
    for step in trace:
        got = deliver(step.port, step.frame)
        assert got == step.out, step.what


def test_frames_in_process(device: tuple[ServedDevice, str], program: tuple[Path, Path]) -> None:
    """The trace through the switch's pipeline, without ports (no root)."""
    dev, addr = device
    sw = configured(addr, program)
    clock = iter(range(0, 10**9, 1000))

    def deliver(port: int, frame: bytes) -> dict[int, list[bytes]]:
        assert dev.pipeline is not None
        out: dict[int, list[bytes]] = {}
        for p, f in dev.pipeline.process(port, frame, next(clock)):
            out.setdefault(p, []).append(f)
        return out

    run_steps(deliver, steps())
    # a packet type no host may send, and one that is no type at all
    for ptype in (PacketType.RESULT, 99):
        body = HDR.pack(ptype, 0, 1, 1, 1, 1) + VALUES.pack(*vals(1))
        assert deliver(1, frame(H["h1"], H["h3"], body)) == {}
    assert_counters(sw, bad_type=3)
    sw.close()


def test_a_held_sum_leaves_for_the_ps_from_the_switch(
    device: tuple[ServedDevice, str], program: tuple[Path, Path]
) -> None:
    """Under ATP the switch holds a sum it completed and sends it to the PS
    alone, from the switch's address (``forwarding.p4``): the PS takes a
    switch sum from there only."""
    dev, addr = device
    fresh(addr, program)
    sw = P4RuntimeSwitch.connect(addr)
    reconcile(sw, two_jobs(Policy.ATP), sw.read_entries())
    h1, h2, h3 = H["h1"], H["h2"], H["h3"]
    assert dev.pipeline is not None
    assert dev.pipeline.process(1, contrib(h1, 1, 9, 0, 2, h3), 1000) == []
    [(port, out)] = dev.pipeline.process(2, contrib(h2, 1, 9, 1, 3, h3), 2000)
    ip = Ether(out)[IP]
    header = HDR.unpack_from(bytes(ip[UDP].payload))
    assert (port, ip.src, ip.dst) == (h3.port, dataplane.SWITCH_IP, h3.ip)
    assert header == (PacketType.RESULT, Flag.HOLD, 1, 9, 0b11, 2)
    sw.close()


# -- the switch process, in a network namespace --


@pytest.mark.netns
def test_controller_sessions_with_the_switch_process(
    refsw: RefSwitchProcess, program: tuple[Path, Path]
) -> None:
    """The controller's switch API: pipeline, entries read back equal, a
    second reconciliation with nothing to do, a restarted session that finds
    its pipeline, counters."""
    # started with the P4Info alone, as simple_switch_grpc with a JSON: no cookie
    refsw.switch.p4info = P4INFO
    refsw.switch.restart()
    sw = P4RuntimeSwitch.connect(refsw.grpc_addr)
    assert sw.ensure_pipeline(*program) is True
    want = two_jobs()
    assert reconcile(sw, want, sw.read_entries()) == want.count() + 1
    assert sw.read_entries() == want
    sw.reset_job_counters(1)
    sw.close()
    again = P4RuntimeSwitch.connect(refsw.grpc_addr)
    assert again.ensure_pipeline(*program) is False
    assert reconcile(again, want, again.read_entries()) == 0
    h1, h2, h3 = H["h1"], H["h2"], H["h3"]
    refsw.send(1, contrib(h1, 1, 3, 0, 1, h3))
    refsw.send(2, contrib(h2, 1, 3, 1, 1, h3))
    assert sorted(collect(refsw, 3)) == [1, 2, 3]
    counters = again.read_counters()
    assert counters.events == {
        1: {e: 2 if e is Event.AGGREGATED else int(e is Event.COMPLETED) for e in Event}
    }
    again.delete_job(2)
    assert sorted(again.read_entries().jobs) == [1]
    again.close()


@pytest.mark.netns
def test_esa_ctl_serves_the_switch_process(
    refsw: RefSwitchProcess, program: tuple[Path, Path], tmp_path: Path
) -> None:
    """``esa-ctl serve`` against the switch process, as on a machine without p4c."""
    fresh(refsw.grpc_addr, program)
    topo = tmp_path / "topo.json"
    topo.write_text(json.dumps({"hosts": {h.name: h.to_json() for h in H.values()}}))
    admin, log = f"unix:{tmp_path}/admin.sock", tmp_path / "serve.log"
    argv = [sys.executable, "-m", "controller", "--admin", admin, "serve"]
    argv += ["--switch", refsw.grpc_addr, "--p4json", str(program[0]), "--p4info", str(P4INFO)]
    argv += ["--topology", str(topo), "--db", str(tmp_path / "state.db"), "--interval", "0.1"]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + LIMIT_S
        while esa_ctl(admin, "status").returncode != 0:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        res = esa_ctl(admin, "admit", "1", "--workers", "h1", "h2", "--ps", "h3", "--priority", "4")
        assert res.returncode == 0, res.stderr
        h1, h2, h3 = H["h1"], H["h2"], H["h3"]
        refsw.send(1, contrib(h1, 1, 7, 0, 1, h3))
        refsw.send(2, contrib(h2, 1, 7, 1, 1, h3))
        assert sorted(collect(refsw, 3)) == [1, 2, 3]
        stats = json.loads(esa_ctl(admin, "stats", "--json").stdout)
        assert {k: n for k, n in stats["jobs"]["1"].items() if n} == {
            "aggregated": 2,
            "completed": 1,
        }
    finally:
        proc.terminate()
        assert proc.wait(timeout=LIMIT_S) == 0, log.read_text()


@pytest.mark.netns
def test_frames_through_the_switch_process(
    refsw: RefSwitchProcess, program: tuple[Path, Path]
) -> None:
    sw = configured(refsw.grpc_addr, program)
    sent = itertools.count()

    def deliver(port: int, frame: bytes) -> dict[int, list[bytes]]:
        got: list[dict[int, list[bytes]]] = [{}]
        send_in_step([refsw], next(sent), port, frame, got)
        for p, frames in collect(refsw, None).items():
            got[0].setdefault(p, []).extend(frames)
        return without_probes(got[0])

    run_steps(deliver, steps())
    assert_counters(sw, bad_type=1)
    sw.close()


@pytest.mark.netns
def test_a_port_going_down_and_up(refsw: RefSwitchProcess, program: tuple[Path, Path]) -> None:
    """A link that goes down (a Mininet host torn down first) costs that port
    only; when it comes back, so does its traffic."""
    configured(refsw.grpc_addr, program).close()
    h1, h2, h6 = H["h1"], H["h2"], H["h6"]
    to_h2 = bytes(Ether(src=h1.mac, dst=h2.mac, type=0x88B5)) + b"while s6 is down"
    to_h6 = bytes(Ether(src=h1.mac, dst=h6.mac, type=0x88B5)) + b"s6 is back"
    refsw.ns.exec("ip", "link", "set", "s6", "down")
    refsw.send(1, to_h2)
    assert collect(refsw, 1) == {2: [to_h2]}
    refsw.ns.exec("ip", "link", "set", "s6", "up")
    deadline = time.monotonic() + LIMIT_S
    while refsw.ns.exec("cat", "/sys/class/net/s6/operstate").strip() != "up":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    refsw.send(1, to_h6)
    assert collect(refsw, 1) == {6: [to_h6]}
    assert refsw.switch.running


# -- the slot registers over P4Runtime --

SLOT_REGISTER_NAMES = [p4names.register(r.name) for r in SLOT_REGISTERS]


def partials() -> tuple[list[tuple[int, bytes, int]], dict[str, list[int]], int]:
    """Three contributions that leave partial sums in the pool under
    ``two_jobs``, each with its port and arrival (switch microseconds); every
    slot register afterwards, written out from the rules; and the slot job 2
    took from job 1."""
    h1, h2, h3, h4, h6 = (H[n] for n in ("h1", "h2", "h3", "h4", "h6"))
    s, t = colliding_seqs()
    a = next(q for q in range(100) if slot_hash(1, q, POOL) != slot_hash(1, s, POOL))
    frames = [
        (1, contrib(h1, 1, a, 0, -3, h3), 1000),  # job 1 claims a free slot (S8)
        (2, contrib(h2, 1, s, 1, 4, h3), 2000),  # and another
        (4, contrib(h4, 2, t, 0, 6, h6), 3000),  # job 2, priority 5, preempts it (S9)
    ]
    want = {name: [0] * POOL for name in SLOT_REGISTER_NAMES}

    def held(slot: int, owner: int, bitmap: int, prio: int, ts: int, evicted: int, x: int) -> None:
        fields = {"slot_owner": owner, "slot_bitmap": bitmap, "slot_count": 1}
        fields |= {"slot_prio": prio, "slot_ts": ts, "slot_evicted": evicted}
        fields |= {f"slot_v{i}": v & 0xFFFFFFFF for i, v in enumerate(vals(x))}
        for name, value in fields.items():
            want[p4names.register(name)][slot] = value

    held(slot_hash(1, a, POOL), owner_key(1, a), 0b01, 1, 1000, 0, -3)
    preempted = slot_hash(1, s, POOL)
    held(preempted, owner_key(2, t), 0b01, 5, 3000, owner_key(1, s), 6)
    return frames, want, preempted


def read_raw(
    sw: P4RuntimeSwitch, register_id: int, index: int | None
) -> list[tuple[int, int, int]]:
    """A Read of one register (0: every one) at one index (None: every
    cell): (register id, index, value) of each entity answered."""
    entity = p4runtime_pb2.Entity()
    entity.register_entry.register_id = register_id
    if index is not None:
        entity.register_entry.index.index = index
    out: list[tuple[int, int, int]] = []
    for e in sw.session.read(entity):
        r = e.register_entry
        out.append((r.register_id, r.index.index, int.from_bytes(r.data.bitstring, "big")))
    return out


def test_slot_registers_over_p4runtime(
    device: tuple[ServedDevice, str], program: tuple[Path, Path]
) -> None:
    """After contributions went through esa.model, a Read of the slot
    registers answers the model's slots, every register and cell; one
    register or all, one cell or all; a cell beyond the pool, an unknown
    register and a register write are refused."""
    dev, addr = device
    sw = configured(addr, program)
    assert dev.pipeline is not None
    frames, want, slot = partials()
    for port, frame, now in frames:
        dev.pipeline.process(port, frame, now)
    assert sw.read_registers(*SLOT_REGISTER_NAMES) == want
    ids = {sw.session.register_id(name): name for name in SLOT_REGISTER_NAMES}
    owner = sw.session.register_id(SLOT_OWNER)
    assert read_raw(sw, owner, slot) == [(owner, slot, want[SLOT_OWNER][slot])]
    assert read_raw(sw, 0, slot) == [(i, slot, want[name][slot]) for i, name in ids.items()]
    assert read_raw(sw, 0, None) == [
        (i, cell, want[name][cell]) for i, name in ids.items() for cell in range(POOL)
    ]
    with pytest.raises(SwitchError, match=rf"^switch refused a read: {SLOT_OWNER} has no cell 8$"):
        read_raw(sw, owner, POOL)
    with pytest.raises(SwitchError, match=r"^switch refused a read: no register with id 7$"):
        read_raw(sw, 7, None)
    update = p4runtime_pb2.Update(type=p4runtime_pb2.Update.MODIFY)
    update.entity.register_entry.register_id = owner
    update.entity.register_entry.index.index = slot
    update.entity.register_entry.data.bitstring = b"\x01"
    with pytest.raises(SwitchError, match=r"^switch refused the request: register_entry writes$"):
        sw.session.write([update])
    assert sw.read_registers(SLOT_OWNER) == {SLOT_OWNER: want[SLOT_OWNER]}
    sw.close()


def test_the_run_timeline_reads_the_slots_over_p4runtime(
    device: tuple[ServedDevice, str], program: tuple[Path, Path]
) -> None:
    """``make run``'s slot timeline on the reference switch: no slots while
    it has no pipeline, then each job's slots and the contributions in them."""
    dev, addr = device
    reader = P4RuntimeRegisters(FabricDevice("s1", 0, addr), (0, 2))
    no_counters = Stats(jobs={}, drops={}, switches={})
    timeline = Timeline("esa", 1, reader, lambda: no_counters, 0.25, t0=0.0)
    timeline.sample()
    assert (timeline.samples, timeline.slots_seen) == ([], False)
    configured(addr, program).close()
    assert dev.pipeline is not None
    frames, _, _ = partials()
    for port, frame, now in frames:
        dev.pipeline.process(port, frame, now)
    timeline.sample()
    assert [(s.job, s.slots, s.contributions) for s in timeline.samples] == [(1, 1, 1), (2, 1, 1)]
    assert (timeline.slots_now, timeline.slots_seen) == ({1: 1, 2: 1}, True)
    reader.close()


def test_serve_without_a_bmv2_json_names_the_refused_pipeline(
    device: tuple[ServedDevice, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``esa-ctl serve --no-p4json`` whose pool the switch does not have: the
    switch refuses the pipeline and serve stops, saying so."""
    _, addr = device
    topo = tmp_path / "topo.json"
    topo.write_text(json.dumps({"hosts": {h.name: h.to_json() for h in H.values()}}))
    argv = ["--admin", f"unix:{tmp_path}/admin.sock", "serve", "--switch", addr, "--no-p4json"]
    argv += ["--p4info", str(P4INFO), "--pool-size", "64", "--topology", str(topo)]
    code, out, err = esa_ctl_here(capsys, [*argv, "--db", str(tmp_path / "state.db")])
    assert (code, out, err.splitlines()[-1]) == (
        1,
        "",
        f"esa-ctl: error: s1 at {addr} refused the pipeline without a BMv2 JSON (--no-p4json, "
        "for the reference switch; a BMv2 needs --p4json): switch refused the request: "
        "the device config has a pool of 64 slots, this switch 8",
    )


# -- esa-refswitch, by hand --

REFSWITCH = Path(sys.executable).parent / "esa-refswitch"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--iface", "1@esa-none0", "--pool", "8"],
         "port 1: no interface 'esa-none0' in this network namespace"),
        (["--iface", "1@lo", "--pool", "8", "--grpc", "9559"], "argument --grpc: expected "
         "HOST:PORT with PORT 0..65535 (0: any free port) or unix:PATH, got '9559'"),
        (["--iface", "1@lo", "--pool", "8", "--grpc", "127.0.0.1:65536"], "argument --grpc: "
         "expected HOST:PORT with PORT 0..65535 (0: any free port) or unix:PATH, got "
         "'127.0.0.1:65536'"),
        (["--iface", "1@lo", "--pool", "8", "--grpc", "unix:"], "argument --grpc: unix: needs "
         "a PATH"),
        (["--iface", "1@lo", "--iface", "2@lo", "--pool", "8"], "a port or interface is given "
         "twice"),
        (["--iface", "1:lo", "--pool", "8"], "argument -i/--iface: expected PORT@IFACE with PORT "
         "0..510, got '1:lo'"),
        (["--iface", "1@lo", "--pool", "0"], "argument --pool: pool size 0 is out of range "
         "(1..2^63-1)"),
        (["--iface", "1@lo"], "the following arguments are required: --pool"),
    ],
)  # fmt: skip
def test_refswitch_argument_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    """Refused before any port is opened: one line, status 2."""
    with pytest.raises(SystemExit) as stop:
        refswitch_main(argv)
    assert stop.value.code == 2
    assert capsys.readouterr() == (
        "",
        f"esa-refswitch: error: {message} (see esa-refswitch --help)\n",
    )


def first_line(proc: subprocess.Popen[bytes], timeout: float = LIMIT_S) -> str:
    """The first line ``proc`` writes to its stdout."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "no line within the timeout"
    return proc.stdout.readline().decode().strip()


class HandStarted:
    """``esa-refswitch`` started as a user starts it, on veths ``s1..s3`` of
    a network namespace of this test's, P4Runtime on ``127.0.0.1:0`` inside
    it; the veths' peers ``h1..h3`` are where the test sends and receives."""

    ports = 3

    def __init__(self, log: Path) -> None:
        self.ns = Namespace("rh")
        self.log = log
        self._socks: dict[int, socket.socket] = {}
        self.proc: subprocess.Popen[bytes] | None = None
        try:
            for i in range(1, self.ports + 1):
                self.ns.add_veth(f"h{i}", f"s{i}")
                self._socks[i] = self.ns.raw_socket(f"h{i}")
            self.proc, self.address = self.start("127.0.0.1:0")
        except BaseException:
            self.close()
            raise

    def start(self, grpc_addr: str) -> tuple[subprocess.Popen[bytes], str]:
        """A switch on the veths: the process, and the first line it printed."""
        argv = [str(REFSWITCH), "--iface", "1@s1", "--iface", "2@s2", "--iface", "3@s3"]
        argv += ["--grpc", grpc_addr, "--pool", "64"]
        with self.log.open("ab") as log:
            proc = subprocess.Popen(
                ["ip", "netns", "exec", self.ns.name, *argv],
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
            )
        return proc, first_line(proc)

    @property
    def grpc_addr(self) -> str:
        return self.address

    def send(self, port: int, frame: bytes) -> None:
        self._socks[port].send(frame)

    def sock(self, port: int) -> socket.socket:
        return self._socks[port]

    def stop(self, sig: signal.Signals) -> int:
        """Stop the switch with ``sig``; its exit status."""
        assert self.proc is not None
        self.proc.send_signal(sig)
        status = self.proc.wait(timeout=LIMIT_S)
        self.close_proc()
        return status

    def close_proc(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            if self.proc.stdout is not None:
                self.proc.stdout.close()
        self.proc = None

    def close(self) -> None:
        self.close_proc()
        for s in self._socks.values():
            s.close()
        self.ns.delete()


@pytest.mark.netns
def test_esa_ctl_slots_on_the_reference_switch_started_by_hand(tmp_path: Path) -> None:
    """The commands of docs/controller.md, "Without BMv2": ``esa-refswitch``
    on veths with P4Runtime on a free port, ``esa-ctl serve`` with the
    committed P4Info and no BMv2 JSON, a job admitted; while its worker 0
    streams, ``esa-ctl slots`` counts the slots its chunks hold, exactly;
    then both stop cleanly on SIGINT and SIGTERM."""
    sw = HandStarted(tmp_path / "refswitch.log")
    serve: subprocess.Popen[bytes] | None = None
    try:
        assert re.fullmatch(r"127\.0\.0\.1:[1-9]\d*", sw.address), sw.address
        taken, line = sw.start(sw.address)
        assert (taken.wait(timeout=LIMIT_S), line) == (1, "")
        if taken.stdout is not None:
            taken.stdout.close()
        assert sw.log.read_text().splitlines()[-1] == (
            f"esa-refswitch: error: P4Runtime on {sw.address}: can not listen on {sw.address}"
        )
        hosts = [H["h1"], H["h2"], H["h3"]]
        topo = tmp_path / "topo.json"
        topo.write_text(json.dumps({"hosts": {h.name: h.to_json() for h in hosts}}))
        admin, log = f"unix:{tmp_path}/admin.sock", tmp_path / "serve.log"
        argv = [sys.executable, "-m", "controller", "--admin", admin, "serve"]
        argv += ["--switch", sw.address, "--no-p4json", "--p4info", str(P4INFO)]
        argv += ["--pool-size", "64", "--topology", str(topo), "--db", str(tmp_path / "db")]
        with log.open("wb") as out:
            serve = subprocess.Popen(
                ["ip", "netns", "exec", sw.ns.name, *argv],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + LIMIT_S
        while esa_ctl(admin, "status").returncode != 0:
            assert serve.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        res = esa_ctl(admin, "admit", "1", "--workers", "h1", "h2", "--ps", "h3", "--priority", "4")
        assert res.returncode == 0, res.stderr
        assert esa_ctl(admin, "slots").stdout == "0 of 64 slots held\n"
        h1, h2, h3 = hosts
        got: list[dict[int, list[bytes]]] = [{}]
        for seq in range(5):  # job 1's home is the whole pool: chunk seq in slot seq
            send_in_step([sw], seq, 1, contrib(h1, 1, seq, 0, seq + 1, h3), got)
        assert without_probes(got[0]) == {}
        assert esa_ctl(admin, "slots").stdout == "5 of 64 slots held (job 1: 5)\n"
        for seq in range(3):
            send_in_step([sw], 5 + seq, 2, contrib(h2, 1, seq, 1, 1, h3), got)
        assert sorted(without_probes(got[0])) == [1, 2, 3]
        assert json.loads(esa_ctl(admin, "slots", "--json").stdout) == {
            "pool_size": 64,
            "used": 2,
            "by_job": {"1": 2},
            "switches": {"s1": {"pool_size": 64, "used": 2, "by_job": {"1": 2}}},
        }
        serve.send_signal(signal.SIGINT)
        assert serve.wait(timeout=LIMIT_S) == 0, log.read_text()
        serve = None
        assert sw.stop(signal.SIGTERM) == 0
        last = sw.log.read_text().splitlines()[-1]
        assert re.fullmatch(
            r".* refswitch stopped: \d+ frames in, \d+ out, 0 not sent \(port full or down\)", last
        ), last
    finally:
        if serve is not None:
            serve.kill()
            serve.wait()
        sw.close()


# -- against BMv2 --


def bmv2_trace(seed: int) -> list[tuple[int, bytes]]:
    """tests/test_differential.py's random ESA trace as frames, with stray
    frames mixed in: L2 unicast and flood, a MAC nobody has, a packet type
    that is none, an ESA port frame cut before its header ends, IPv4 with
    options on the ESA port."""
    frames: list[tuple[int, bytes]] = []
    for pkt, src in esa_trace(seed, 150):
        dst = dataplane.JOBS.get(pkt.job, dataplane.LOW).ps_for(pkt.seq).ip
        frames.append((src.port, dataplane.frame(pkt, src, dst)))
    h1, h3 = dataplane.host(1), dataplane.host(3)
    udp = Ether(src=h1.mac, dst=h3.mac) / IP(src=h1.ip, dst=h3.ip)
    body = HDR.pack(99, 0, 1, 1, 1, 1) + VALUES.pack(*vals(1))
    strays = [
        bytes(Ether(src=h1.mac, dst=h3.mac, type=0x88B5)) + b"unicast",
        bytes(Ether(src=h3.mac, dst="ff:ff:ff:ff:ff:ff", type=0x88B5)) + b"flood",
        bytes(Ether(src=h1.mac, dst="02:00:00:00:00:77", type=0x88B5)) + b"nobody",
        bytes(udp / UDP(sport=1, dport=wire.UDP_PORT) / body),
        bytes(udp / UDP(sport=1, dport=wire.UDP_PORT) / body[:10]),
        bytes(Ether(src=h1.mac, dst=h3.mac) / IP(src=h1.ip, dst=h3.ip, options=b"\x01\x01\x01\x01")
              / UDP(sport=1, dport=wire.UDP_PORT) / body),
    ]  # fmt: skip
    for i, f in enumerate(strays):
        frames.insert(len(frames) * (i + 1) // (len(strays) + 1), (1 + i % 3, f))
    return frames


def dataplane_entries(policy: Policy) -> Any:
    return dataplane.entries(PolicyEntry(policy, LONG_US, LONG_US))


PROBE = 0x88B6
"""Ethertype of the frames that pace ``send_in_step``."""


def send_in_step(
    switches: list[Ports], n: int, port: int, frame: bytes, got: list[dict[int, list[bytes]]]
) -> None:
    """Send frame ``n`` of a trace to every switch, and return once it has
    passed every switch's ingress; what left meanwhile is added to ``got``.

    The frame is followed on its port by a probe, an L2 frame to the next
    port, and a switch takes a port's frames in order: once the probe is
    out, the frame has been through.  Without this pacing a switch that
    falls behind on a loaded machine may take frames of different ports in
    another order than they were sent, and the slot rules give another
    outcome.
    """
    to = port % switches[0].ports + 1
    src, dst = dataplane.host(port), dataplane.host(to)
    probe = bytes(Ether(src=src.mac, dst=dst.mac, type=PROBE)) + n.to_bytes(4, "big")
    for sw in switches:
        sw.send(port, frame)
        sw.send(port, probe)
    for sw, out in zip(switches, got, strict=True):
        deadline = time.monotonic() + LIMIT_S
        while probe not in out.get(to, []):
            assert time.monotonic() < deadline, f"frame {n}: the probe did not come back"
            for p, frames in collect(sw, 0, quiet=0.0, timeout=0.01).items():
                out.setdefault(p, []).extend(frames)


def without_probes(out: dict[int, list[bytes]]) -> dict[int, list[bytes]]:
    kept = {
        p: [f for f in frames if f[12:14] != PROBE.to_bytes(2, "big")] for p, frames in out.items()
    }
    return {p: frames for p, frames in kept.items() if frames}


def in_step(switches: list[Ports], trace: list[tuple[int, bytes]]) -> list[dict[int, list[bytes]]]:
    """Send ``trace`` to every switch in step; what left each one, port by port."""
    got: list[dict[int, list[bytes]]] = [{} for _ in switches]
    for n, (port, frame) in enumerate(trace):
        send_in_step(switches, n, port, frame, got)
    for sw, out in zip(switches, got, strict=True):
        for p, frames in collect(sw, None, quiet=0.3).items():
            out.setdefault(p, []).extend(frames)
    return [without_probes(out) for out in got]


def first_difference(bmv2: dict[int, list[bytes]], ref: dict[int, list[bytes]]) -> str:
    """Where the reference switch's output first departs from BMv2's, per port."""
    out = []
    for port in sorted(set(bmv2) | set(ref)):
        a, b = bmv2.get(port, []), ref.get(port, [])
        i = next(
            (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
        )
        if a != b:
            x = a[i].hex() if i < len(a) else None
            y = b[i].hex() if i < len(b) else None
            out.append(f"port {port}: {len(a)} vs {len(b)} frames; #{i}: bmv2 {x} ref {y}")
    return "\n".join(out)


@pytest.fixture(scope="module")
def twins(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twins]:
    """BMv2 and the reference switch with the rig's ports, and the compiled program."""
    program = compile_p4(
        ROOT / "p4src" / "esa.p4", tmp_path_factory.mktemp("p4"), pool=dataplane.POOL
    )
    bmv2 = Bmv2Switch(dataplane.PORTS)
    ref = None
    try:
        bmv2.start()
        bmv2.flush()
        ref = RefSwitchProcess(dataplane.PORTS, dataplane.POOL)
        yield bmv2, ref, program
    finally:
        bmv2.close()
        if ref is not None:
            ref.close()


@pytest.mark.bmv2
@pytest.mark.parametrize("policy", list(Policy))
def test_same_frames_as_bmv2(twins: Twins, policy: Policy) -> None:
    """BMv2 is restarted rather than pushed again: a second push leaves its
    multicast engine holding the old groups' nodes beside the new ones, so
    every multicast copy would leave twice."""
    switches: list[Ports] = [twins[0], twins[1]]
    sessions = programmed(twins, dataplane_entries(policy))
    try:
        got = in_step(switches, bmv2_trace(seed=int(policy)))
        assert got[1] == got[0], first_difference(got[0], got[1])
        assert sum(len(f) for f in got[0].values()) > 100
        counters = [s.read_counters() for s in sessions]
        assert counters[1] == counters[0]
        not_from_their_ps = sum(
            pkt.ptype in FROM_PS and src != dataplane.JOBS[pkt.job].ps_for(pkt.seq)
            for pkt, src in esa_trace(int(policy), 150)
        )
        assert not_from_their_ps > 0
        assert counters[0].drops[Drop.BAD_TYPE] == 1 + not_from_their_ps
    finally:
        for s in sessions:
            s.close()


# -- a device with roles of a fabric, against BMv2 --


def _remote(n: int, port: int, net: int) -> Host:
    """A host behind ``port``: a worker of another rack (net 1, reached up)
    or a worker under a child switch (net 3)."""
    return Host(f"x{net}.{n}", port, f"02:00:00:00:{net:02x}:{n:02x}", f"10.0.{net}.{n}", 40000 + n)


UP, CHILD_A, CHILD_B = 16, 13, 14
"""The device's port toward the spine and its two child switches' ports."""
W = dataplane.host
PS_UP = Host("ps-up", UP, "02:00:00:00:02:01", "10.0.2.1", wire.UDP_PORT)
"""The PS of the jobs the device is a leaf of, above it."""
PS_HERE = dataplane.ps_hosts(6)[0]
"""The PS of the job the device is the top of, on its port 6."""
LEAF = JobPlan(
    1,
    (W(1), W(2), _remote(1, UP, 1), _remote(2, UP, 1)),
    (PS_UP,),
    1,
    0,
    4,
    JobRole({1: 0b01, 2: 0b10}, {}, UP),
)
"""A ToR's role in a job across racks: bits 0 and 1 here, 2 and 3 in another rack."""
TOP = JobPlan(
    2,
    (
        _remote(1, CHILD_A, 3),
        _remote(2, CHILD_A, 3),
        _remote(3, CHILD_B, 3),
        _remote(4, CHILD_B, 3),
        W(4),
    ),
    (PS_HERE,),
    3,
    4,
    4,
    switch_ip=dataplane.AT,
    role=JobRole({4: 0b10000}, {CHILD_A: 0b0011, CHILD_B: 0b1100}, None),
)
"""The top of a job: two children of two workers each and a local worker (fan-in 3)."""
ALONE = JobPlan(3, (W(3), _remote(3, UP, 1)), (PS_UP,), 2, 8, 4, JobRole({3: 0b1}, {}, UP))
"""A ToR with one worker of a job across racks (fan-in 1, S0)."""


def tier_entries() -> SwitchEntries:
    """What the controller's plan writes for the device's three roles."""
    hosts = {h.mac: h for j in (LEAF, TOP, ALONE) for h in (*j.workers, *j.ps)}
    hosts |= {W(p).mac: W(p) for p in range(1, dataplane.PORTS + 1) if p != PS_HERE.port}
    return desired(
        list(hosts.values()), [LEAF, TOP, ALONE], PolicyEntry(Policy.ESA, LONG_US, LONG_US)
    )


@dataclass(frozen=True)
class TierStep:
    what: str
    port: int
    packet: Packet
    out: dict[int, list[Seen]]
    """the ESA packets that must leave, by egress port, with where each is addressed."""


def tier_steps() -> list[TierStep]:
    """ToR (S7, S5 up, S0, D1, D2, A1) and top (A6, A1, T2 flush, S13, T3,
    S5 to all, T2 not own) in turn."""
    sent_to = "02:00:00:00:00:ff"  # tests.dataplane.frame's destination MAC
    ps_up, ps_here = PS_UP.ip, PS_HERE.ip

    def p(ptype: PacketType, job: int, seq: int, bitmap: int, x: int, count: int = 1) -> Packet:
        return Packet(ptype, job, seq, bitmap, vals(x), count=count)

    def at(port: int, pkt: Packet, h: Host | None = None, ip: str = "") -> Seen:
        """``pkt`` out of ``port``, addressed to ``h`` (a replica or a PS
        route) or, unaddressed, as it came in to ``ip``."""
        if h is None:
            return Seen(port, pkt, sent_to, ip, wire.UDP_PORT)
        return Seen(port, pkt, h.mac, h.ip, h.udp_port)

    c, r, ps_result = PacketType.CONTRIB, PacketType.RESULT, PacketType.PS_RESULT
    part, fb = PacketType.PARTIAL, PacketType.FALLBACK
    local_sum = p(c, 1, 0, 0b11, 3, count=2)
    down = p(r, 1, 0, 0b1111, 10, count=4)
    from_ps = p(ps_result, 1, 1, 0b1111, 11, count=4)
    flushed = p(part, 2, 5, 0b1111, 11, count=4)
    common = p(part, 2, 6, 0b0011, 8, count=2)
    done = p(r, 2, 6, 0b11111, 6, count=5)
    not_own = p(part, 2, 7, 0b0011, 9, count=2)
    return [
        TierStep("leaf: the first local worker claims", 1, p(c, 1, 0, 0b01, 1), {}),
        TierStep(
            "S5 up: the rack's sum leaves as one CONTRIB with the rack's bitmap",
            2,
            p(c, 1, 0, 0b10, 2),
            {UP: [at(UP, local_sum, ip=ps_up)]},
        ),
        TierStep(
            "S0: the rack's one worker goes up at once",
            3,
            p(c, 3, 0, 0b1, 4),
            {UP: [at(UP, p(c, 3, 0, 0b1, 4), ip=ps_up)]},
        ),
        TierStep(
            "D1: a RESULT from the up port to the local workers, each addressed",
            UP,
            down,
            {1: [at(1, down, W(1))], 2: [at(2, down, W(2))]},
        ),
        TierStep("A1: a RESULT from a host's port is dropped", 1, down, {}),
        TierStep(
            "D2: a PS result from above to the local workers, not back up",
            UP,
            from_ps,
            {1: [at(1, from_ps, W(1))], 2: [at(2, from_ps, W(2))]},
        ),
        TierStep("top: a child's sum claims", CHILD_A, p(c, 2, 5, 0b0011, 5, count=2), {}),
        TierStep(
            "A6: a child's sum with a bitmap not the child's", CHILD_B, p(c, 2, 5, 0b0100, 6), {}
        ),
        TierStep("A1: a PARTIAL from a host's port is dropped", 4, p(part, 2, 5, 0b10000, 6), {}),
        TierStep(
            "T2: a child's PARTIAL flushes the chunk's slot, summed, to the PS",
            CHILD_B,
            p(part, 2, 5, 0b1100, 6, count=2),
            {PS_HERE.port: [at(PS_HERE.port, flushed, PS_HERE)]},
        ),
        TierStep(
            "S13: the chunk's last contribution follows",
            4,
            p(c, 2, 5, 0b10000, 7),
            {PS_HERE.port: [at(PS_HERE.port, p(fb, 2, 5, 0b10000, 7), PS_HERE)]},
        ),
        TierStep("a child's sum claims", CHILD_A, p(c, 2, 6, 0b0011, 1, count=2), {}),
        TierStep(
            "T3: a PARTIAL with a bit in common passes unchanged",
            CHILD_A,
            common,
            {PS_HERE.port: [at(PS_HERE.port, common, PS_HERE)]},
        ),
        TierStep("the other child's sum adds", CHILD_B, p(c, 2, 6, 0b1100, 2, count=2), {}),
        TierStep(
            "S5 at the top: to the local worker and the PS addressed, to the children as is",
            4,
            p(c, 2, 6, 0b10000, 3),
            {
                4: [at(4, done, W(4))],
                PS_HERE.port: [at(PS_HERE.port, done, PS_HERE)],
                CHILD_A: [at(CHILD_A, done, ip=ps_here)],
                CHILD_B: [at(CHILD_B, done, ip=ps_here)],
            },
        ),
        TierStep(
            "T2: a PARTIAL of a chunk without a slot passes unchanged",
            CHILD_A,
            not_own,
            {PS_HERE.port: [at(PS_HERE.port, not_own, PS_HERE)]},
        ),
        TierStep(
            "S13: and the chunk's next sum follows it",
            CHILD_B,
            p(c, 2, 7, 0b1100, 1, count=2),
            {PS_HERE.port: [at(PS_HERE.port, p(fb, 2, 7, 0b1100, 1, count=2), PS_HERE)]},
        ),
    ]


def tier_frame(step: TierStep) -> bytes:
    """The step's packet as the host or switch on its port sends it, to the job's PS."""
    job = {j.job: j for j in (LEAF, TOP, ALONE)}[step.packet.job]
    return dataplane.frame(step.packet, W(step.port), job.ps_for(step.packet.seq).ip)


@pytest.mark.bmv2
def test_tier_roles_as_bmv2(twins: Twins) -> None:
    """One device with a ToR's role in two jobs across racks (a leaf with an
    up port, and one with a single worker) and the top's role, with
    children, in a third: the controller's entries through P4Runtime to
    BMv2 and the reference switch, the same frames into both, step by step."""
    switches: list[Ports] = [twins[0], twins[1]]
    sessions = programmed(twins, tier_entries())
    try:
        assert [sw.read_entries() for sw in sessions] == [tier_entries()] * 2
        for n, step in enumerate(tier_steps()):
            got: list[dict[int, list[bytes]]] = [{}, {}]
            send_in_step(switches, n, step.port, tier_frame(step), got)
            want = sum(len(s) for s in step.out.values())
            for sw, out in zip(switches, got, strict=True):
                have = sum(len(f) for f in without_probes(out).values())
                for port, frames in collect(sw, want - have, quiet=0.05).items():
                    out.setdefault(port, []).extend(frames)
            bmv2_out, ref_out = (without_probes(out) for out in got)
            assert ref_out == bmv2_out, f"{step.what}\n{first_difference(bmv2_out, ref_out)}"
            seen = {port: [parse(port, f) for f in frames] for port, frames in bmv2_out.items()}
            assert seen == step.out, step.what
        counters = [s.read_counters() for s in sessions]
        assert counters[1] == counters[0]
        leaf = {Event.AGGREGATED: 2, Event.COMPLETED: 1, Event.PS_RESULT: 1}
        top = {Event.AGGREGATED: 4, Event.COMPLETED: 1, Event.SPOOFED: 1, Event.FLUSHED: 1}
        top |= {Event.FALLBACK: 2, Event.FOLLOWED: 2}
        alone = {Event.AGGREGATED: 1, Event.COMPLETED: 1}
        assert counters[0].events == {
            j: {e: d.get(e, 0) for e in Event} for j, d in ((1, leaf), (2, top), (3, alone))
        }
        drops = {Drop.BAD_TYPE: 2, Drop.SPOOFED_WORKER: 1}
        assert counters[0].drops == {d: drops.get(d, 0) for d in Drop}
    finally:
        for s in sessions:
            s.close()
