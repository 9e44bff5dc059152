"""A worker's data path alone (hosts.worker.stream): the window, timers, resends and pulls."""

from __future__ import annotations

import numpy as np

from esa import wire
from esa.job import Workers
from esa.wire import Flag, PacketType
from hosts.net import quant
from hosts.net.counters import WorkerCounters
from hosts.timing.rto import RetransmitTimeout
from hosts.worker.calls import DONE, FLOATING, PENDING, SENT, Call
from hosts.worker.member import Member
from hosts.worker.stream import Stream
from tests.test_hosts_ps import Recorder

T = PacketType
PS = (("10.0.0.1", wire.UDP_PORT), ("10.0.0.2", wire.UDP_PORT))
BIT = 0b10


def setup(window: int = 2, shards: int = 1) -> tuple[Stream, Call, Recorder]:
    rec = Recorder()
    m = Member.of(3, 1, Workers.of(2), 1.0, PS[:shards])
    stream = Stream(m, rec, WorkerCounters(), window, RetransmitTimeout(1.0, 1.0))
    x = np.linspace(-1, 1, 3 * wire.K, dtype=np.float32)
    c = Call(0, 10, x, 1.0, quant.job_scale(1.0, 2))
    stream.begin(c)
    return stream, c, rec


def sent(rec: Recorder) -> list[tuple[int, int, int, int]]:
    out = [(h.ptype, h.seq, h.flags, PS.index(addr)) for h, _, addr in rec.sent]
    rec.sent.clear()
    return out


def test_the_window_bounds_what_is_in_flight() -> None:
    stream, c, rec = setup(window=2)
    assert not stream.step(c, 0, 0.0)
    assert sent(rec) == [(T.CONTRIB, 10, 0, 0), (T.CONTRIB, 11, 0, 0)]
    assert c.state == [SENT, SENT, PENDING] and stream.inflight.deadlines == {0: 1.0, 1: 1.0}
    assert rec.sent == [] and stream.counters.sent == 2
    c.state[0] = DONE
    stream.answered(0, 0.5, T.RESULT, 0)
    stream.step(c, 0, 0.5)
    assert sent(rec) == [(T.CONTRIB, 12, 0, 0)] and stream.timeout.srtt == 0.5


def test_a_timed_out_chunk_is_resent_and_rearmed() -> None:
    stream, c, rec = setup(window=1)
    stream.step(c, 0, 0.0)
    sent(rec)
    assert not stream.step(c, 0, 0.9) and rec.sent == []
    assert stream.step(c, 0, 1.0)
    assert sent(rec) == [(T.CONTRIB, 10, Flag.RETX, 0)]
    assert stream.counters.retransmitted == 1 and stream.inflight.deadlines == {0: 2.0}
    c.state[0] = FLOATING
    stream.step(c, 0, 2.0)
    assert sent(rec) == [(T.FLOAT, 10, Flag.RETX, 0)]


def test_held_shards_wait_and_regained_ones_resend_at_once() -> None:
    stream, c, rec = setup(window=4, shards=2)
    stream.step(c, 0, 0.0)
    assert sent(rec) == [(T.CONTRIB, 10, 0, 0), (T.CONTRIB, 11, 0, 1), (T.CONTRIB, 12, 0, 0)]
    assert stream.step(c, 0b10, 1.0)
    assert sent(rec) == [(T.CONTRIB, 10, Flag.RETX, 0), (T.CONTRIB, 12, Flag.RETX, 0)]
    assert stream.inflight.deadlines == {0: 2.0, 1: 2.0, 2: 2.0}
    c.regained = 0b10
    stream.step(c, 0, 1.5)
    assert sent(rec) == [(T.CONTRIB, 11, Flag.RETX, 1)] and c.regained == 0


def test_a_pull_resends_unless_the_ps_holds_ours() -> None:
    stream, c, rec = setup(window=1)
    stream.pulled(c, 2, BIT | 0b01, 0.0)
    assert rec.sent == [] and stream.counters.pulls_answered == 0
    stream.pulled(c, 2, 0b01, 0.0)
    assert sent(rec) == [(T.CONTRIB, 12, Flag.RETX, 0)] and c.state[2] == SENT
    assert stream.counters.pulls_answered == 1 and stream.inflight.deadlines == {2: 1.0}


def test_an_earlier_calls_chunks_are_not_timed() -> None:
    stream, old, rec = setup(window=1)
    new = Call(1, 13, np.zeros(wire.K, np.float32), 1.0, 1.0)
    stream.begin(new)
    stream.pulled(old, 0, 0b01, 0.0)
    stream.send_float(old, 1, 0, 0.0)
    assert sent(rec) == [(T.CONTRIB, 10, Flag.RETX, 0), (T.FLOAT, 11, 0, 0)]
    assert len(stream.inflight) == 0 and old.state[1] == FLOATING
