"""One P4 program, a run-time role per device and job: three BMv2 switches
wired as tests/data/two-racks.json (testbed/bmv2_fabric.py), each
programmed by one controller (its plan per device: jobs, children, groups).

t1 holds h1-h4 and t2 h5-h8 on ports 1-4, each up by port 5 to the spine
s1 (ports 1 and 2); h9 and h10, the PS hosts here, hang off s1's ports 3
and 4.  A job across both racks sums on each ToR, sends the ToR's sum up
as one contribution, completes at the spine and comes back down; a job
inside a rack completes at its ToR, and when its PS hangs off the spine,
the spine is the job's transit: it passes the PS-bound packets up and the
PS's results down.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from scapy.layers.inet import UDP
from scapy.layers.l2 import Ether

from controller.api.messages import AdmitRequest, JobRef, PolicyRequest
from controller.world.fabric import Fabric
from esa import spec, wire
from esa.model import Packet, slot_hash
from esa.p4names import register
from esa.spec import Event, Policy
from esa.toolchain import compile_p4
from esa.wire import Flag, PacketType
from runner.paths import ROOT
from testbed.bmv2_fabric import Bmv2Fabric
from tests.dataplane import frame, parse
from tests.test_controller_fabric_bmv2 import fabric_controller
from tests.test_hosts_ps import feed, server
from tests.wait import LIMIT_S, until

pytestmark = pytest.mark.bmv2

TWO_TIER = ROOT / "tests" / "data" / "two-racks.json"
POOL = 16
LONG_US = 10_000_000
"""Stale and squat timeouts no test outlasts."""


class Net:
    def __init__(self, rig: Bmv2Fabric, program: tuple[Path, Path], tmp: Path) -> None:
        self.rig = rig
        self.fabric = rig.fabric
        self.ctl = fabric_controller(rig, program, tmp, POOL)

    def policy(self, policy: Policy, part_size: int = 0) -> None:
        self.ctl.policy(PolicyRequest(policy.name.lower(), LONG_US, LONG_US, part_size))

    def reset(self) -> None:
        """Remove every job, empty every slot, drain every port."""
        for job in list(self.ctl.state.jobs):
            self.ctl.remove(JobRef(job))
        resets = "\n".join(f"register_reset {register(r.name)}" for r in spec.SLOT_REGISTERS)
        for name in self.rig.switches:
            self.rig.cli(name, resets)
        self.rig.flush()

    def send(self, host: str, pkt: Packet, ps: str) -> None:
        self.rig.send(host, frame(pkt, self.fabric.hosts[host], self.fabric.hosts[ps].ip))

    def got(self, host: str, want: int, timeout: float = LIMIT_S) -> list[Packet]:
        """The ESA packets delivered to ``host``: ``want`` of them, then none
        for a short while."""
        frames = self.rig.recv(host, timeout=timeout, want=want)
        frames += self.rig.recv(host, timeout=0.1)
        return [s.packet for f in frames if (s := parse(0, f)) is not None]

    def events(self, switch: str, job: int) -> dict[Event, int]:
        session = self.ctl.sessions[switch]
        assert session.switch is not None
        counts = session.switch.read_counters().events.get(job, {})
        return {e: n for e, n in counts.items() if n}

    def reached(self, switch: str, job: int, event: Event, n: int = 1) -> None:
        """Wait until ``switch`` counted ``n`` ``event``s of ``job``: frames
        entering different switches or ports race, and a rule's outcome
        depends on which comes first."""
        until(
            lambda: self.events(switch, job).get(event, 0) >= n,
            f"{switch} counting {n} {event.name} of {job}",
        )


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    program = compile_p4(ROOT / "p4src" / "esa.p4", tmp_path_factory.mktemp("p4"), pool=POOL)
    with Bmv2Fabric(Fabric.load(TWO_TIER)) as rig:
        rig.start()
        n = Net(rig, program, tmp_path_factory.mktemp("ctl"))
        n.ctl.sync()
        yield n
        for session in n.ctl.sessions.values():
            session.drop()


def values(worker: int, seq: int) -> tuple[int, ...]:
    return tuple(1000 * (worker + 1) + 10 * seq + i - 16 for i in range(wire.K))


def contrib(job: int, seq: int, worker: int, flags: int = 0) -> Packet:
    return Packet(PacketType.CONTRIB, job, seq, 1 << worker, values(worker, seq), flags, 1)


def exact(seq: int, workers: range) -> tuple[int, ...]:
    return tuple(sum(v) for v in zip(*(values(w, seq) for w in workers), strict=True))


def colliding(hashing: int) -> tuple[int, int, int]:
    """A seq of job ``hashing`` (without a home) and one of the job whose
    home is the whole pool, whose chunks share a slot h; and a seq of
    ``hashing`` hashed to the home chunk's second slot h', half the pool
    away, which a test fills first so that the home's chunk finds both its
    slots held and evicts at h."""
    h = slot_hash(hashing, POOL, POOL)
    half = (h + POOL // 2) % POOL
    filler = next(s for s in range(POOL + 1, 100_000) if slot_hash(hashing, s, POOL) == half)
    return POOL, POOL + h, filler


def ps_sum(job: int, fan_in: int, packets: list[Packet]) -> Packet:
    """What hosts.ps.parameter_server.ParameterServer makes of the PS-bound packets: the
    chunk's PS_RESULT (there must be exactly one)."""
    ps, rec = server({job: fan_in})
    for p in packets:
        feed(ps, rec, frame_payload(p))
    (h, vals, _), *more = [s for s in rec.sent if s[0].ptype == PacketType.PS_RESULT]
    assert more == []
    return Packet(PacketType(h.ptype), h.job, h.seq, h.bitmap, tuple(vals), h.flags, h.count)


def frame_payload(p: Packet) -> bytes:
    return bytes(Ether(frame(p, HOST0, "10.0.0.9"))[UDP].payload)


HOST0 = Fabric.load(TWO_TIER).hosts["h1"]
CROSS = ("h1", "h2", "h5", "h6")
"""Two workers on each ToR; bits 0, 1 on t1 and 2, 3 on t2."""


@pytest.mark.parametrize("policy", list(Policy))
def test_a_job_across_racks_sums_on_each_tor_and_completes_at_the_spine(
    net: Net, policy: Policy
) -> None:
    net.reset()
    net.policy(policy)
    net.ctl.admit(AdmitRequest(job=1, workers=CROSS, ps=("h9",), priority=3))
    seqs = range(4)
    for seq in seqs:
        for w, host in enumerate(CROSS):
            net.send(host, contrib(1, seq, w), "h9")
    ps_got = net.got("h9", len(seqs))
    want = {seq: exact(seq, range(4)) for seq in seqs}
    assert sorted((p.seq, p.ptype, p.bitmap, p.count, p.values) for p in ps_got) == [
        (seq, PacketType.RESULT, 0b1111, 4, want[seq]) for seq in seqs
    ]
    hold = Flag.HOLD if policy is Policy.ATP else 0
    assert {p.flags for p in ps_got} == {hold}
    if policy is Policy.ATP:
        for p in ps_got:
            net.send("h9", Packet(PacketType.PS_RESULT, 1, p.seq, p.bitmap, p.values, 0, 4), "h9")
    result = PacketType.PS_RESULT if policy is Policy.ATP else PacketType.RESULT
    for host in CROSS:
        got = net.got(host, len(seqs))
        assert sorted((p.seq, p.ptype, p.bitmap, p.values) for p in got) == [
            (seq, result, 0b1111, want[seq]) for seq in seqs
        ]
    released = {Event.RELEASED_BY_PS: 4, Event.PS_RESULT: 4} if policy is Policy.ATP else {}
    for switch in ("t1", "t2", "s1"):
        assert net.events(switch, 1) == {
            Event.AGGREGATED: 8,
            Event.COMPLETED: 4,
            **released,
        }
    assert net.rig.recv("h9", timeout=0.2) == []


def test_the_spine_receives_one_sum_per_rack_and_chunk(net: Net) -> None:
    net.reset()
    net.policy(Policy.ESA)
    net.ctl.admit(AdmitRequest(job=2, workers=CROSS, ps=("h9",), priority=3))
    for w, host in enumerate(CROSS):
        net.send(host, contrib(2, 7, w), "h9")
    assert len(net.got("h9", 1)) == 1
    up = {port: net.rig.arrived("s1", port) for port in (1, 2)}
    sums = {port: [parse(0, f) for f in frames] for port, frames in up.items()}
    assert {
        port: [(s.packet.ptype, s.packet.bitmap, s.packet.count) for s in seen if s is not None]
        for port, seen in sums.items()
    } == {1: [(PacketType.CONTRIB, 0b0011, 2)], 2: [(PacketType.CONTRIB, 0b1100, 2)]}


def test_a_job_inside_a_rack_never_touches_the_spine(net: Net) -> None:
    net.reset()
    net.policy(Policy.ESA)
    net.ctl.admit(AdmitRequest(job=3, workers=("h1", "h2"), ps=("h3",), priority=3))
    for seq in range(3):
        for w, host in enumerate(("h1", "h2")):
            net.send(host, contrib(3, seq, w), "h3")
    assert sorted(p.seq for p in net.got("h3", 3)) == [0, 1, 2]
    for host in ("h1", "h2"):
        assert [(p.seq, p.values) for p in net.got(host, 3)] == [
            (seq, exact(seq, range(2))) for seq in range(3)
        ]
    assert net.events("t1", 3) == {Event.AGGREGATED: 6, Event.COMPLETED: 3}
    assert net.events("s1", 3) == {}
    assert [net.rig.arrived("s1", port, timeout=0.05) for port in (1, 2, 3, 4)] == [[]] * 4
    owners = net.rig.cli("s1", f"register_read {register('slot_owner')}")
    assert f"{register('slot_owner')}= " + ", ".join(["0"] * POOL) in owners


LOW_HIGH = (("h1", "h2", "h5"), ("h3", "h4", "h6"))
"""Two jobs across the racks, two workers each on t1 and one on t2."""


def admit_low_high(net: Net) -> tuple[int, int, int]:
    """One home per switch, the whole pool: HIGH outranks LOW and holds it;
    LOW has none and hashes into it, a guest that HIGH evicts (rule L:
    GUEST_EVICTED on LOW, PREEMPT_WON on HIGH)."""
    net.reset()
    net.policy(Policy.ESA, part_size=POOL)
    net.ctl.admit(AdmitRequest(job=4, workers=LOW_HIGH[0], ps=("h9",), priority=1))
    net.ctl.admit(AdmitRequest(job=5, workers=LOW_HIGH[1], ps=("h10",), priority=9))
    return colliding(4)


def test_a_preemption_at_a_tor_ends_in_an_exact_sum_at_the_ps(net: Net) -> None:
    low, high, filler = admit_low_high(net)
    net.send("h1", contrib(4, low, 0), "h9")  # t1 claims for LOW
    net.send("h1", contrib(4, filler, 0), "h9")  # and HIGH's h' there
    net.reached("t1", 4, Event.AGGREGATED, 2)
    net.send("h3", contrib(5, high, 0), "h10")  # t1: HIGH preempts, LOW's bit 0 to h9
    net.send("h4", contrib(5, high, 1), "h10")  # HIGH complete on t1, up
    net.send("h6", contrib(5, high, 2), "h10")  # t2's only worker: up; spine completes
    for host in LOW_HIGH[1]:
        assert [(p.ptype, p.values) for p in net.got(host, 1)] == [
            (PacketType.RESULT, exact(high, range(3)))
        ]
    net.send("h2", contrib(4, low, 1), "h9")  # t1 follows its partial (S13)
    net.send("h5", contrib(4, low, 2), "h9")  # spine follows it too
    at_ps = net.got("h9", 3)
    assert sorted((p.ptype, p.bitmap) for p in at_ps) == [
        (PacketType.FALLBACK, 0b010),
        (PacketType.FALLBACK, 0b100),
        (PacketType.PARTIAL, 0b001),
    ]
    done = ps_sum(4, 3, at_ps)
    assert (done.bitmap, done.count, done.values) == (0b111, 3, exact(low, range(3)))
    assert net.events("t1", 4) == {
        Event.AGGREGATED: 2,
        Event.GUEST_EVICTED: 1,
        Event.FALLBACK: 1,
        Event.FOLLOWED: 1,
    }
    # the partial passing through marked its chunk gone; t2's sum follows it
    assert net.events("s1", 4) == {Event.FALLBACK: 1, Event.FOLLOWED: 1}


def test_a_preemption_at_the_spine_ends_in_an_exact_sum_at_the_ps(net: Net) -> None:
    low, high, filler = admit_low_high(net)
    net.send("h1", contrib(4, low, 0), "h9")
    net.send("h2", contrib(4, low, 1), "h9")  # t1's sum of LOW waits at the spine
    net.send("h1", contrib(4, filler, 0), "h9")
    net.send("h2", contrib(4, filler, 1), "h9")  # and holds HIGH's h' there
    net.reached("s1", 4, Event.AGGREGATED, 2)
    net.send("h3", contrib(5, high, 0), "h10")
    net.send("h4", contrib(5, high, 1), "h10")  # t1's sum of HIGH preempts it there
    net.send("h6", contrib(5, high, 2), "h10")
    for host in LOW_HIGH[1]:
        assert [p.values for p in net.got(host, 1)] == [exact(high, range(3))]
    net.send("h5", contrib(4, low, 2), "h9")  # follows LOW's partial to the PS
    at_ps = net.got("h9", 2)
    assert sorted((p.ptype, p.bitmap, p.count) for p in at_ps) == [
        (PacketType.FALLBACK, 0b100, 1),
        (PacketType.PARTIAL, 0b011, 2),
    ]
    done = ps_sum(4, 3, at_ps)
    assert (done.bitmap, done.values) == (0b111, exact(low, range(3)))
    assert net.events("s1", 4) == {
        Event.AGGREGATED: 2,
        Event.GUEST_EVICTED: 1,
        Event.FALLBACK: 1,
        Event.FOLLOWED: 1,
    }
    assert net.events("s1", 5)[Event.PREEMPT_WON] == 1


def test_a_restarted_tor_is_resynced_and_the_job_finishes_exact(net: Net) -> None:
    net.reset()
    net.policy(Policy.ESA)
    net.ctl.admit(AdmitRequest(job=6, workers=CROSS, ps=("h9",), priority=3))
    for w, host in enumerate(CROSS):
        net.send(host, contrib(6, 0, w), "h9")
    assert [p.values for p in net.got("h9", 1)] == [exact(0, range(4))]
    net.send("h5", contrib(6, 1, 2), "h9")
    net.send("h6", contrib(6, 1, 3), "h9")  # t2's sum of chunk 1 waits at the spine
    net.rig.restart("t1", crash=True)
    until(lambda: not net.ctl.sessions["t1"].connected, "the controller sees t1 go")
    assert net.ctl.disconnected() == ["t1"]
    assert net.ctl.sync("t1") > 0
    net.rig.flush()
    net.send("h1", contrib(6, 1, 0), "h9")
    net.send("h2", contrib(6, 1, 1), "h9")
    assert [(p.seq, p.bitmap, p.values) for p in net.got("h9", 1)] == [
        (1, 0b1111, exact(1, range(4)))
    ]
    for host in CROSS:
        assert [p.values for p in net.got(host, 1)] == [exact(1, range(4))]


RACK_SPINE_PS = ("h1", "h2")
"""A job inside rack t1 whose PS, h9, hangs off the spine: its transit."""


def test_a_job_inside_a_rack_reaches_its_ps_on_the_spine_through_a_transit(net: Net) -> None:
    net.reset()
    net.policy(Policy.ESA, part_size=POOL)  # job 8, admitted later, outranks 7: the home is 8's
    net.ctl.admit(AdmitRequest(job=7, workers=RACK_SPINE_PS, ps=("h9",), priority=3))
    seqs = range(3)
    for seq in seqs:
        for w, host in enumerate(RACK_SPINE_PS):
            net.send(host, contrib(7, seq, w), "h9")
    want = {seq: exact(seq, range(2)) for seq in seqs}
    assert sorted((p.seq, p.ptype, p.bitmap, p.count, p.values) for p in net.got("h9", 3)) == [
        (seq, PacketType.RESULT, 0b11, 2, want[seq]) for seq in seqs
    ]
    for host in RACK_SPINE_PS:
        assert sorted((p.seq, p.ptype, p.values) for p in net.got(host, 3)) == [
            (seq, PacketType.RESULT, want[seq]) for seq in seqs
        ]
    assert net.events("t1", 7) == {Event.AGGREGATED: 6, Event.COMPLETED: 3}
    assert net.events("s1", 7) == {}
    # a preemption at t1: the partial and the chunk's rest cross the spine
    net.ctl.admit(AdmitRequest(job=8, workers=("h3", "h4"), ps=("h5",), priority=9))
    low, high, filler = colliding(7)
    net.send("h1", contrib(7, low, 0), "h9")
    net.send("h1", contrib(7, filler, 0), "h9")  # holds job 8's h'
    net.reached("t1", 7, Event.AGGREGATED, 8)
    net.send("h3", contrib(8, high, 0), "h5")  # preempts: job 7's bit 0 to h9
    net.reached("t1", 7, Event.GUEST_EVICTED)
    net.send("h2", contrib(7, low, 1), "h9")  # follows its partial (S13)
    at_ps = net.got("h9", 2)
    assert sorted((p.ptype, p.bitmap) for p in at_ps) == [
        (PacketType.FALLBACK, 0b10),
        (PacketType.PARTIAL, 0b01),
    ]
    done = ps_sum(7, 2, at_ps)
    assert (done.bitmap, done.count, done.values) == (0b11, 2, exact(low, range(2)))
    net.send("h9", done, "h9")
    for host in RACK_SPINE_PS:
        assert [(p.ptype, p.seq, p.values) for p in net.got(host, 1)] == [
            (PacketType.PS_RESULT, low, exact(low, range(2)))
        ]
    assert net.events("s1", 7) == {Event.PS_RESULT: 1}
    assert net.rig.recv("h9", timeout=0.2) == []


def test_a_static_job_without_a_partition_falls_back_through_the_spine(net: Net) -> None:
    net.reset()
    net.ctl.policy(PolicyRequest("static", LONG_US, 0, POOL))
    net.ctl.admit(AdmitRequest(job=9, workers=("h3", "h4"), ps=("h5",), priority=3))
    net.ctl.admit(AdmitRequest(job=10, workers=RACK_SPINE_PS, ps=("h9",), priority=3))
    assert net.ctl.jobs().jobs[1].switches["t1"].partition == (0, 0)
    for w, host in enumerate(RACK_SPINE_PS):
        net.send(host, contrib(10, 5, w), "h9")
    at_ps = net.got("h9", 2)
    assert sorted((p.ptype, p.bitmap) for p in at_ps) == [
        (PacketType.FALLBACK, 0b01),
        (PacketType.FALLBACK, 0b10),
    ]
    done = ps_sum(10, 2, at_ps)
    assert (done.bitmap, done.values) == (0b11, exact(5, range(2)))
    net.send("h9", done, "h9")
    for host in RACK_SPINE_PS:
        assert [(p.ptype, p.values) for p in net.got(host, 1)] == [
            (PacketType.PS_RESULT, exact(5, range(2)))
        ]
    assert net.events("t1", 10) == {Event.FALLBACK: 2, Event.PS_RESULT: 1}
    assert net.events("s1", 10) == {Event.PS_RESULT: 1}
