"""Random and mutated datagrams against the PS, the worker and the switch
model: nothing escapes their receive loops, and every later legitimate sum
is exact.

Packets are not authenticated, so a well-formed result or contribution for
a chunk in flight can not be told from the real one; the properties cover
everything else (a forged overflow included).  Control junk is not sealed
with the job's key: that is the secret a stray or forged message lacks.
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench import fuzz_hosts
from esa import model, wire
from esa.job import Workers
from esa.spec import Policy
from esa.wire import ControlType, Flag
from hosts.agreement import auth
from hosts.agreement.desk import GO_COPIES
from hosts.net import payload, quant
from hosts.net.drops import HostDrop
from hosts.ps.parameter_server import ParameterServer
from hosts.worker.agent import Worker
from tests.test_hosts_agreement import Mailbox
from tests.test_hosts_ps import SWITCH, Recorder

T = wire.PacketType
C = ControlType
K = wire.K
FAN_IN = 3
CHUNKS = 4
PS_ADDR = ("10.0.0.9", wire.UDP_PORT)
SESSION = 0x5E55

ESA_FIELD = st.sampled_from([f.name for f in wire.HEADER])
CONTROL_FIELD = st.sampled_from([f.name for f in dataclasses.fields(payload.Control)])


def _limit(name: str, fields: tuple[wire.Field, ...]) -> int:
    bits: int = next(f.bits for f in fields if f.name == name)
    return (1 << bits) - 1


def _value(draw: st.DrawFn, name: str, fields: tuple[wire.Field, ...], near: int) -> int:
    """A new value for field ``name``: small, next to the old one, or anything."""
    limit = _limit(name, fields)
    return draw(
        st.one_of(
            st.integers(0, min(8, limit)),
            st.integers(max(0, near - 2), min(limit, near + 2)),
            st.integers(0, limit),
        )
    )


@st.composite
def mutated_esa(draw: st.DrawFn, templates: list[bytes]) -> bytes:
    """A real datagram with header fields replaced, bytes flipped, rarely cut."""
    h, values = payload.decode(draw(st.sampled_from(templates)))
    for name in draw(st.lists(ESA_FIELD, min_size=1, max_size=3)):
        h = dataclasses.replace(h, **{name: _value(draw, name, wire.HEADER, getattr(h, name))})
    data = bytearray(payload.encode(h, values))
    for pos in draw(st.lists(st.integers(0, len(data) - 1), max_size=2)):
        data[pos] = draw(st.integers(0, 255))
    if draw(st.integers(0, 9)) == 0:
        return bytes(data[: draw(st.integers(0, len(data) + 8))])
    return bytes(data)


@st.composite
def stray_control(draw: st.DrawFn, templates: list[payload.Control]) -> bytes:
    """A real control message from a process nobody knows, fields replaced, rarely cut."""
    msg = draw(st.sampled_from(templates))
    msg = dataclasses.replace(msg, nonce=draw(st.integers(0, 2**32 - 1)))
    for name in draw(st.lists(CONTROL_FIELD, max_size=3)):
        msg = dataclasses.replace(
            msg, **{name: _value(draw, name, wire.CONTROL, getattr(msg, name))}
        )
    data = payload.encode_control(msg)
    if draw(st.integers(0, 9)) == 0:
        return data[: draw(st.integers(0, len(data) + 8))]
    return data


def junk(
    esa: list[bytes], control: list[payload.Control]
) -> st.SearchStrategy[list[tuple[bool, bytes]]]:
    """(to the control port?, datagram) items."""
    garbage = st.one_of(
        st.tuples(st.just(False), st.binary(max_size=2 * wire.PAYLOAD_BYTES)),
        st.tuples(st.just(True), st.binary(max_size=2 * wire.CONTROL_BYTES)),
    )
    mutated = st.one_of(
        st.tuples(st.just(False), mutated_esa(esa)),
        st.tuples(st.just(True), stray_control(control)),
    )
    item = st.one_of(garbage, mutated, mutated, mutated)
    return st.lists(item, max_size=40)


def vals(worker: int, seq: int) -> list[int]:
    return [(worker + 1) * 1000 + seq * K + i for i in range(K)]


def ps_call(ps: ParameterServer, ctl: Mailbox, number: int, now: float) -> list[payload.Control]:
    msgs = []
    for i in range(FAN_IN):
        digest = wire.config_digest(FAN_IN, 7, 1.0, CHUNKS * K, "float32")
        msgs.append(payload.Control(C.CALL, 0, 1, i, 0, 100 + i, number, number * CHUNKS, CHUNKS,
                                  CHUNKS * K, FAN_IN, 7, 0, 0, digest, 0, SESSION,
                                  number + 1))  # fmt: skip
    key = auth.open_key(1)
    ctl.inbox.extend((auth.seal(m, key), ("10.0.1.1", 5000 + m.worker)) for m in msgs)
    ps.poll(now)
    return msgs


OFFSET = wire.epoch_offset(1, {i: 100 + i for i in range(FAN_IN)})
"""where the seqs of the epoch of ``ps_call``'s processes start."""


def contributions(number: int) -> list[bytes]:
    return [
        payload.encode(payload.Header(T.FALLBACK, 0, 1, OFFSET + seq, 1 << i, 1), vals(i, seq))
        for seq in range(number * CHUNKS, (number + 1) * CHUNKS)
        for i in range(FAN_IN)
    ]


PS_TEMPLATES = [
    *contributions(0),
    payload.encode(payload.Header(T.PARTIAL, 0, 1, OFFSET + 5, 0b011, 2), vals(0, 5)),
    payload.encode(payload.Header(T.RESULT, Flag.HOLD, 1, OFFSET + 6, 7, 3), vals(0, 6)),
    payload.encode(payload.Header(T.FLOAT, Flag.RETX, 1, OFFSET + 7, 4, 1), vals(2, 7)),
]
CALL_TEMPLATE = payload.Control(C.CALL, 0, 1, 0, 0, 0, 1, CHUNKS, CHUNKS, CHUNKS * K, FAN_IN, 7)
STATUS_TEMPLATE = payload.Control(C.STATUS, 0, 1, 0, 0, 0, 1)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(junk(PS_TEMPLATES, [CALL_TEMPLATE, STATUS_TEMPLATE]), st.randoms())
def test_ps_survives_junk_and_sums_the_next_call_exactly(
    items: list[tuple[bool, bytes]], rnd: random.Random
) -> None:
    data, ctl = Recorder(), Mailbox()
    ps = ParameterServer(
        data, SWITCH, {1: Workers.of(FAN_IN)}, stall=0.1, control=ctl, session=SESSION
    )
    for number in (0, 1):
        ps_call(ps, ctl, number, now=0.0)
        data.inbox.extend(contributions(number))
        ps.poll(0.0)
    for k, (to_control, datagram) in enumerate(items):
        if to_control:
            ctl.inbox.append((datagram, ("10.0.9.9", 9)))
        else:
            data.inbox.append(datagram)
        ps.poll(k * 0.02)
    data.sent.clear()
    ctl.sent.clear()
    ps_call(ps, ctl, 2, now=1.0)
    gos = [(C.GO, i) for i in range(FAN_IN) for _ in range(GO_COPIES)]
    assert [(m.ctype, m.worker) for m, _ in ctl.sent] == gos
    legit = contributions(2)
    rnd.shuffle(legit)
    data.inbox.extend(legit)
    ps.poll(1.0)
    sums = {h.seq - OFFSET: v for h, v, _ in data.sent if h.ptype == T.PS_RESULT}
    want = {s: [sum(vals(i, s)[j] for i in range(FAN_IN)) for j in range(K)] for s in range(8, 12)}
    assert sums == want
    assert ps.sums.open[1] == sum(k[0] == 1 for k in [*ps.sums.partials, *ps.sums.floats])


def go_for(w: Worker, ctype: int = C.GO) -> tuple[bytes, tuple[str, int]]:
    """The PS's GO (or CHALLENGE) for ``w``'s current call."""
    c, agent = w.cur, w.agent
    assert c is not None and agent is not None
    go = payload.Control(
        ctype, 0, 3, 1, 0, agent.nonce, c.number, c.base, c.n, c.size, 2, 3, 0, 0, c.digest, 0,
        SESSION, agent.numbers[0],
    )  # fmt: skip
    return auth.seal(go, auth.open_key(3)), PS_ADDR


def result_of(seq: int, total: np.ndarray, ptype: int = T.RESULT, flags: int = 0) -> bytes:
    return payload.encode(payload.Header(ptype, flags, 3, seq, 0b11, 2), total)


def forges_a_sum(datagram: bytes, w: Worker) -> bool:
    """A well-formed, unflagged or float result for a chunk of the call in flight."""
    try:
        h = payload.decode_header(datagram, len(datagram))
    except payload.Malformed:
        return False
    c = w.cur
    return (
        c is not None
        and h.ptype in (T.RESULT, T.PS_RESULT)
        and h.job == 3
        and c.index(h.seq) is not None
        and not h.flags & Flag.OVERFLOW
    )


WORKER_TEMPLATES = [
    result_of(0, np.arange(K)),
    result_of(1, np.arange(K), T.PS_RESULT, Flag.FLOAT),
    result_of(1, np.arange(K), T.PS_RESULT, Flag.OVERFLOW),
    payload.encode(payload.Header(T.PULL, 0, 3, 0, 0b01, 1), [0] * K),
]
ANSWER_TEMPLATE = payload.Control(C.GO, 0, 3, 1, 0, 0, 1, 2, 2, 2 * K, 2, 3)


@settings(max_examples=150, deadline=None)
@given(junk(WORKER_TEMPLATES, [ANSWER_TEMPLATE]), junk(WORKER_TEMPLATES, [ANSWER_TEMPLATE]))
def test_worker_survives_junk_and_returns_the_exact_sum(
    before_go: list[tuple[bool, bytes]], after_go: list[tuple[bool, bytes]]
) -> None:
    rec, ctl = Recorder(), Mailbox()
    w = Worker(3, 1, 2, (PS_ADDR,), rec, window=8, rto=1.0, control=ctl)
    rng = np.random.default_rng(0)
    xs = [rng.uniform(-1, 1, 2 * K).astype(np.float32) for _ in range(2)]
    q = [quant.quantise(x, 1.0, w.scale).values.astype(np.int64) * 2 for x in xs]
    w.begin(xs[0])
    w.poll(0.0)
    ctl.inbox.append(go_for(w, C.CHALLENGE))
    w.poll(0.0)
    ctl.inbox.append(go_for(w))
    w.poll(0.0)
    rec.inbox.extend(result_of(s, q[0][s]) for s in range(2))
    w.poll(0.0)
    assert w.done
    w.begin(xs[1])
    for phase, items in ((0, before_go), (1, after_go)):
        if phase:
            ctl.inbox.append(go_for(w))
        for to_control, datagram in items:
            if not to_control and forges_a_sum(datagram, w):
                continue
            if to_control:
                ctl.inbox.append((datagram, PS_ADDR))
            else:
                rec.inbox.append(datagram)
            w.poll(0.1)
    w.poll(0.2)
    rec.inbox.extend(result_of(2 + s, q[1][s]) for s in range(2))
    w.poll(0.3)
    assert w.done
    assert np.array_equal(w.result(), quant.dequantise(q[1], w.scale).ravel()[: xs[1].size])


PACKETS = st.builds(
    model.Packet,
    ptype=st.sampled_from(list(wire.PacketType)),
    job=st.integers(0, 2**16 - 1),
    seq=st.integers(0, 2**32 - 1),
    bitmap=st.integers(0, 2**32 - 1),
    values=st.lists(st.integers(-(2**31), 2**31 - 1), min_size=K, max_size=K).map(tuple),
    flags=st.integers(0, 255),
    count=st.integers(0, 255),
)


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(list(Policy)),
    st.lists(st.tuples(PACKETS, st.integers(0, 4), st.integers(0, 5000)), max_size=60),
)
def test_switch_model_takes_any_packet(
    policy: Policy, items: list[tuple[model.Packet, int, int]]
) -> None:
    sw = model.SwitchModel(pool_size=4, policy=policy, stale_us=1000)
    sw.add_job(1, model.JobConfig(2, 0b11, priority=1, ps_ports=(1,), part_size=2))
    sw.add_job(2, model.JobConfig(3, 0b111, priority=2, ps_ports=(2, 3), part_base=2, part_size=2))
    now = 0
    for pkt, port, step in items:
        now += step
        res = sw.process(pkt, now, in_port=port)
        for out in res.outputs:
            payload.from_model(out.packet)


def test_junk_between_iterations_is_dropped_for_its_reason() -> None:
    """On sockets, through the switch model: every kind of junk whose fate
    is known is counted under its reason, exactly; the sums are exact."""
    r = fuzz_hosts.run(datagrams=1200, iters=3, size=600, mutate=False)
    assert r.crashes == [] and (r.sums, r.mismatches) == (6, 0)
    assert sum(r.sent.values()) == 1200
    assert r.ps == dict(r.expected["ps"])
    seen = {k: v for k, v in r.workers.items() if k != HostDrop.DUPLICATE and v}
    want = dict(r.expected["workers"])
    stale = HostDrop.STALE.value
    late = seen.pop(stale, 0) - want.pop(stale, 0)
    assert seen == want
    # the answers to the workers' own resends that came after their call
    # ended, at most one to each of the two workers: none on a quiet machine,
    # where no timer fires early
    assert 0 <= late <= 2 * r.resent


def test_mutated_junk_leaves_every_sum_exact() -> None:
    r = fuzz_hosts.run(datagrams=1200, iters=3, size=600, seed=2)
    assert r.crashes == [] and (r.sums, r.mismatches) == (6, 0)
    assert sum(r.sent.values()) == 1200 and sum(n for k, n in r.sent.items() if "mutated" in k) > 0
