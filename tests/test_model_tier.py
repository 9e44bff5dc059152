"""The tier rules as stated by esa.model and testbed.fabric_model: a device's role
in a job (up port, children, fan-in), one test per rule, exact outputs and
counters; and whole chunks through a two-ToR fabric programmed by the
controller's plan."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.device.entries import PolicyEntry
from controller.world.fabric import Fabric
from controller.world.plan import JobPlan, desired
from controller.world.topology import ip_to_int, mac_to_int
from esa import wire
from esa.model import INT32_MAX, JobConfig, Out, Output, Packet, SwitchModel, slot_hash
from esa.spec import Drop, Event, Policy, SlotState, Verdict
from esa.wire import Flag, PacketType
from testbed.fabric_model import Addr, Delivery, FabricModel, Frame

POOL = 8
JOB = 1
UP = 5
PS = 3


def vals(x: int) -> tuple[int, ...]:
    return tuple(x + i for i in range(wire.K))


def total(*xs: int) -> tuple[int, ...]:
    return tuple(sum(v) for v in zip(*(vals(x) for x in xs), strict=True))


def contrib(bits: int, x: int, seq: int = 0, flags: int = 0, count: int = 1) -> Packet:
    return Packet(PacketType.CONTRIB, JOB, seq, bits, vals(x), flags, count)


def tor(policy: Policy = Policy.ESA, fan_in: int = 2) -> SwitchModel:
    """A ToR below the job's top: workers 0 (port 1) and 1 (port 2), the
    PS above, up by port 5."""
    sw = SwitchModel(POOL, policy)
    mask = (1 << fan_in) - 1
    part = POOL if policy is Policy.STATIC else 0
    sw.add_job(JOB, JobConfig(fan_in, mask, 1, ps_ports=(UP,), part_size=part, up_port=UP))
    return sw


def spine(policy: Policy = Policy.ESA) -> SwitchModel:
    """The top: children on port 1 (bits 0, 1) and 2 (bit 2), the PS on 3."""
    sw = SwitchModel(POOL, policy)
    part = POOL if policy is Policy.STATIC else 0
    cfg = JobConfig(2, 0b111, 1, (PS,), part_size=part, children=((1, 0b011), (2, 0b100)))
    sw.add_job(JOB, cfg)
    return sw


def slot(sw: SwitchModel, seq: int = 0) -> int:
    return sw.slots[slot_hash(JOB, seq, POOL)].owner


def events(sw: SwitchModel) -> dict[Event, int]:
    return {e: n for e, n in sw.events(JOB).items() if n}


def test_s0_one_contributor_below_the_top_sends_up_at_once() -> None:
    sw = tor(fan_in=1)
    res = sw.process(contrib(0b1, 7), 0, in_port=1)
    assert (res.verdict, res.outputs) == (Verdict.COMPLETE, (Output(Out.UP, contrib(0b1, 7)),))
    assert slot(sw) == 0
    assert events(sw) == {Event.AGGREGATED: 1, Event.COMPLETED: 1}


def test_s0_at_the_top_is_a_result_to_all_or_held_for_the_ps_under_atp() -> None:
    for policy, to, flags in ((Policy.ESA, Out.ALL, 0), (Policy.ATP, Out.PS, Flag.HOLD)):
        sw = SwitchModel(POOL, policy)
        sw.add_job(JOB, JobConfig(1, 0b1, 1, (PS,)))
        res = sw.process(contrib(0b1, 4), 0, in_port=1)
        out = Packet(PacketType.RESULT, JOB, 0, 0b1, vals(4), flags, 1)
        assert res.outputs == (Output(to, out),)


def test_s0_flags_a_sum_at_the_int32_limit() -> None:
    sw = tor(fan_in=1)
    big = Packet(PacketType.CONTRIB, JOB, 0, 0b1, (INT32_MAX,) * wire.K, 0, 1)
    res = sw.process(big, 0, in_port=1)
    flagged = Packet(PacketType.CONTRIB, JOB, 0, 0b1, (INT32_MAX,) * wire.K, Flag.OVERFLOW, 1)
    assert res.outputs == (Output(Out.UP, flagged),)
    assert events(sw)[Event.OVERFLOW] == 1


def test_s0_a_retransmission_takes_the_slot_path() -> None:
    sw = tor(fan_in=1)
    res = sw.process(contrib(0b1, 7, flags=Flag.RETX), 0, in_port=1)
    fallback = Packet(PacketType.FALLBACK, JOB, 0, 0b1, vals(7), Flag.RETX, 1)
    assert res.outputs == (Output(Out.PS, fallback),)
    assert events(sw) == {Event.FALLBACK: 1}


def test_s5_up_esa_sends_the_local_sum_up_and_frees_the_slot() -> None:
    sw = tor()
    assert sw.process(contrib(0b01, 1), 0, in_port=1).verdict is Verdict.CLAIM
    res = sw.process(contrib(0b10, 2), 0, in_port=2)
    summed = Packet(PacketType.CONTRIB, JOB, 0, 0b11, total(1, 2), 0, 2)
    assert res.outputs == (Output(Out.UP, summed),)
    assert slot(sw) == 0
    assert events(sw) == {Event.AGGREGATED: 2, Event.COMPLETED: 1}


def test_s5_up_atp_holds_the_slot_done_until_the_ps_result() -> None:
    sw = tor(Policy.ATP)
    sw.process(contrib(0b01, 1), 0, in_port=1)
    res = sw.process(contrib(0b10, 2), 0, in_port=2)
    assert res.outputs == (
        Output(Out.UP, Packet(PacketType.CONTRIB, JOB, 0, 0b11, total(1, 2), 0, 2)),
    )
    assert sw.slots[slot_hash(JOB, 0, POOL)].state == SlotState.DONE
    late = sw.process(contrib(0b01, 1, flags=Flag.RETX), 0, in_port=1)
    assert late.verdict is Verdict.FALLBACK
    ps_result = Packet(PacketType.PS_RESULT, JOB, 0, 0b11, total(1, 2), 0, 2)
    back = sw.process(ps_result, 0, in_port=UP)
    assert (back.verdict, back.outputs) == (Verdict.PS_RELEASE, (Output(Out.WORKERS, ps_result),))
    assert slot(sw) == 0


def test_d1_a_result_from_above_goes_to_this_devices_group() -> None:
    sw = tor()
    result = Packet(PacketType.RESULT, JOB, 0, 0b111, vals(9), 0, 3)
    res = sw.process(result, 0, in_port=UP)
    assert (res.verdict, res.outputs) == (Verdict.DOWN, (Output(Out.ALL, result),))
    assert events(sw) == {}


def test_t1_a_held_result_a_result_from_below_and_a_transit_row_pass_to_the_ps() -> None:
    held = Packet(PacketType.RESULT, JOB, 0, 0b111, vals(9), Flag.HOLD, 3)
    res = tor().process(held, 0, in_port=UP)
    assert (res.verdict, res.outputs) == (Verdict.TRANSIT, (Output(Out.PS, held),))
    up = Packet(PacketType.RESULT, JOB, 0, 0b011, vals(9), 0, 2)
    assert spine().process(up, 0, in_port=1).outputs == (Output(Out.PS, up),)
    transit = SwitchModel(POOL)
    transit.add_job(JOB, JobConfig(0, 0, 1, (PS,), up_port=UP))
    fb = Packet(PacketType.FALLBACK, JOB, 0, 0b1, vals(1), 0, 1)
    assert transit.process(fb, 0, in_port=UP).outputs == (Output(Out.PS, fb),)
    assert transit.slots[slot_hash(JOB, 0, POOL)].gone == 0


def test_t2_a_passing_fallback_flushes_the_own_slot_and_the_chunk_follows() -> None:
    sw = spine()
    sw.process(contrib(0b011, 1, count=2), 0, in_port=1)
    fb = Packet(PacketType.FALLBACK, JOB, 0, 0b100, vals(5), 0, 1)
    res = sw.process(fb, 0, in_port=2)
    flushed = Packet(PacketType.PARTIAL, JOB, 0, 0b111, total(1, 5), 0, 3)
    assert (res.verdict, res.outputs) == (Verdict.FLUSH, (Output(Out.PS, flushed),))
    assert slot(sw) == 0
    again = sw.process(contrib(0b100, 6), 0, in_port=2)
    assert again.outputs == (
        Output(Out.PS, Packet(PacketType.FALLBACK, JOB, 0, 0b100, vals(6), 0, 1)),
    )
    assert events(sw) == {
        Event.AGGREGATED: 1,
        Event.FLUSHED: 1,
        Event.FALLBACK: 1,
        Event.FOLLOWED: 1,
    }


def test_t2_a_passing_partial_not_own_marks_the_slot_and_passes_unchanged() -> None:
    sw = spine()
    part = Packet(PacketType.PARTIAL, JOB, 0, 0b011, vals(3), 0, 2)
    res = sw.process(part, 0, in_port=1)
    assert (res.verdict, res.outputs) == (Verdict.TRANSIT, (Output(Out.PS, part),))
    assert sw.slots[slot_hash(JOB, 0, POOL)].gone == (JOB << 32)
    assert sw.process(contrib(0b100, 6), 0, in_port=2).verdict is Verdict.FALLBACK
    assert events(sw) == {Event.FALLBACK: 1, Event.FOLLOWED: 1}


def test_t3_done_or_a_common_bit_passes_unchanged_and_keeps_the_slot() -> None:
    atp = spine(Policy.ATP)
    atp.process(contrib(0b011, 1, count=2), 0, in_port=1)
    atp.process(contrib(0b100, 2), 0, in_port=2)
    fb = Packet(PacketType.FALLBACK, JOB, 0, 0b100, vals(5), 0, 1)
    assert atp.process(fb, 0, in_port=2).outputs == (Output(Out.PS, fb),)
    assert slot(atp) == JOB << 32
    esa = spine()
    esa.process(contrib(0b011, 1, count=2), 0, in_port=1)
    common = Packet(PacketType.PARTIAL, JOB, 0, 0b011, vals(5), 0, 2)
    assert esa.process(common, 0, in_port=1).outputs == (Output(Out.PS, common),)
    assert esa.slots[slot_hash(JOB, 0, POOL)].bitmap == 0b011
    assert events(esa) == {Event.AGGREGATED: 1}


def test_a1_switch_types_only_from_the_up_port_or_a_child() -> None:
    for ptype in (PacketType.RESULT, PacketType.FALLBACK, PacketType.PARTIAL):
        sw = tor()
        res = sw.process(Packet(ptype, JOB, 0, 0b1, vals(1), 0, 1), 0, in_port=1)
        assert (res.verdict, res.drop) == (Verdict.DROP, Drop.BAD_TYPE)
        stray = sw.process(Packet(ptype, 9, 0, 0b1, vals(1), 0, 1), 0, in_port=UP)
        assert stray.drop is Drop.BAD_TYPE
        assert sw.drops[Drop.BAD_TYPE] == 2


def test_a6_a_childs_sum_carries_exactly_its_bits() -> None:
    sw = spine()
    for bits, port in ((0b001, 1), (0b111, 1), (0b011, 2), (0b100, 1)):
        res = sw.process(contrib(bits, 1), 0, in_port=port)
        assert (res.verdict, res.drop) == (Verdict.DROP, Drop.SPOOFED_WORKER)
    assert slot(sw) == 0
    assert events(sw) == {Event.SPOOFED: 4}
    assert sw.process(contrib(0b011, 1, count=2), 0, in_port=1).verdict is Verdict.CLAIM


# -- a fabric: t1 (h1, h2 on ports 1, 2) and t2 (h3 on 1) under s1 (PS h9 on 3) --

FABRIC = Fabric.from_json(
    {
        "switches": {
            "s1": {"device_id": 0, "p4runtime": "127.0.0.1:1", "role": "spine"},
            "t1": {"device_id": 1, "p4runtime": "127.0.0.1:2"},
            "t2": {"device_id": 2, "p4runtime": "127.0.0.1:3"},
        },
        "hosts": {
            "h1": {"switch": "t1", "port": 1, "mac": "02:00:00:00:00:01", "ip": "10.0.0.1"},
            "h2": {"switch": "t1", "port": 2, "mac": "02:00:00:00:00:02", "ip": "10.0.0.2"},
            "h3": {"switch": "t2", "port": 1, "mac": "02:00:00:00:00:03", "ip": "10.0.0.3"},
            "h9": {"switch": "s1", "port": 3, "mac": "02:00:00:00:00:09", "ip": "10.0.0.9"},
        },
        "links": [
            {"switch": "t1", "port": 5, "peer": "s1", "peer_port": 1},
            {"switch": "t2", "port": 5, "peer": "s1", "peer_port": 2},
        ],
    }
)
WORKERS = ("h1", "h2", "h3")
TO_PS = Addr(mac_to_int("02:00:00:00:00:ff"), ip_to_int("10.0.0.9"), wire.UDP_PORT)


def fabric(policy: Policy) -> FabricModel:
    """Each device programmed with the plan's entries for one job."""
    roles = FABRIC.job_roles(WORKERS, ("h9",))
    model = FabricModel(FABRIC, POOL)
    for device in FABRIC.devices:
        seen = {h.name: h for h in FABRIC.hosts_as_seen_by(device)}
        plan = JobPlan(
            JOB, tuple(seen[w] for w in WORKERS), (seen["h9"],), 1, 0, POOL, roles[device]
        )
        model.program(device, desired(list(seen.values()), [plan], PolicyEntry(policy)))
    return model


def addressed(host: str) -> Addr:
    h = FABRIC.hosts[host]
    return Addr(mac_to_int(h.mac), ip_to_int(h.ip), h.udp_port)


@settings(max_examples=30, deadline=None)
@given(st.permutations(range(3)))
def test_a_chunk_across_racks_completes_at_the_spine_in_any_order(order: list[int]) -> None:
    model = fabric(Policy.ESA)
    got: list[Delivery] = []
    for w in order:
        got += model.send(WORKERS[w], Frame(contrib(1 << w, w), TO_PS), 0).delivered
    result = Packet(PacketType.RESULT, JOB, 0, 0b111, total(0, 1, 2), 0, 3)
    assert sorted((d.host, d.frame) for d in got) == [
        (h, Frame(result, addressed(h))) for h in ("h1", "h2", "h3", "h9")
    ]
    for name, dev in model.devices.items():
        assert events(dev.model) == {
            Event.AGGREGATED: 1 if name == "t2" else 2,
            Event.COMPLETED: 1,
        }


def test_d2_a_ps_result_spreads_over_the_tree_never_back() -> None:
    model = fabric(Policy.ATP)
    for w in range(3):
        model.send(WORKERS[w], Frame(contrib(1 << w, w), TO_PS), 0)
    ps_result = Packet(PacketType.PS_RESULT, JOB, 0, 0b111, total(0, 1, 2), 0, 3)
    back = model.send("h9", Frame(ps_result, addressed("h1")), 0)
    assert [(a.device, a.port) for a in back.arrivals] == [("s1", 3), ("t1", 5), ("t2", 5)]
    assert back.lost == ()
    assert sorted((d.host, d.frame) for d in back.delivered) == [
        (h, Frame(ps_result, addressed(h))) for h in ("h1", "h2", "h3")
    ]
    held = {Event.AGGREGATED: 2, Event.COMPLETED: 1, Event.PS_RESULT: 1, Event.RELEASED_BY_PS: 1}
    assert {name: events(dev.model) for name, dev in model.devices.items()} == {
        "s1": held,
        "t1": held,
        "t2": {Event.AGGREGATED: 1, Event.COMPLETED: 1, Event.PS_RESULT: 1},  # S0: no slot
    }
