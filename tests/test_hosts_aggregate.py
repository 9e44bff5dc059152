"""The PS's aggregator alone (hosts.ps.aggregate): merge, complete, answer, pull, float recovery."""

from __future__ import annotations

import numpy as np
import pytest

from esa import wire
from esa.job import Workers
from esa.wire import Flag, PacketType
from hosts.net import payload, quant
from hosts.net.counters import PSCounters
from hosts.net.drops import HostDrop
from hosts.ps.aggregate import Aggregator, Outbox
from hosts.ps.results import ResultCache
from hosts.ps.sums import OpenSums
from hosts.timing.ps_stall import PullStall
from tests.test_hosts_ps import SWITCH, Recorder

T = PacketType
JOB = Workers.of(2)


def aggregator(stall: float = 1.0, max_pulls: int = 2) -> tuple[Aggregator, Recorder]:
    rec, counters = Recorder(), PSCounters()
    sums, outbox = OpenSums(max_open=4), Outbox(rec, SWITCH, counters)
    sums.add_job(1)
    outbox.add_job(1, JOB.fan_in, budget=8, stall=stall)
    pull_stall = PullStall(stall, stall, stall)
    agg = Aggregator({1: JOB}, {}, sums, ResultCache(4), outbox, counters, pull_stall, max_pulls)
    return agg, rec


def hdr(ptype: int, seq: int, bitmap: int, flags: int = 0) -> payload.Header:
    return payload.Header(ptype, flags, 1, seq, bitmap, bin(bitmap).count("1"))


def vals(x: int) -> np.ndarray:
    return np.full(wire.K, x, np.int32)


def test_contributions_complete_and_retransmissions_are_answered() -> None:
    agg, rec = aggregator()
    agg.on_contribution((1, 3), JOB, hdr(T.FALLBACK, 3, 0b01), vals(2), 0.0, answer=True)
    agg.on_contribution((1, 3), JOB, hdr(T.FALLBACK, 3, 0b01), vals(2), 0.0, answer=True)
    assert rec.sent == [] and agg.counters.dropped[HostDrop.OVERLAP] == 1
    agg.on_contribution((1, 3), JOB, hdr(T.PARTIAL, 3, 0b10), vals(5), 0.0, answer=False)
    first = (hdr(T.PS_RESULT, 3, 0b11, Flag.HOLD), [7] * wire.K, SWITCH)
    assert rec.sent == [first] and list(agg.done) == [(1, 3)] and agg.sums.partials == {}
    agg.on_contribution((1, 3), JOB, hdr(T.FALLBACK, 3, 0b01, Flag.RETX), vals(2), 1.0, answer=True)
    agg.on_contribution((1, 3), JOB, hdr(T.PARTIAL, 3, 0b01), vals(2), 1.0, answer=False)
    kept = (hdr(T.PS_RESULT, 3, 0b11), [7] * wire.K, SWITCH)
    assert rec.sent == [first, kept] and agg.counters.answered_from_cache == 1
    assert agg.counters.dropped[HostDrop.LATE] == 1


def test_a_held_switch_result_is_acknowledged_and_kept_unflagged() -> None:
    agg, rec = aggregator()
    agg.on_switch_result((1, 0), hdr(T.RESULT, 0, 0b11, Flag.HOLD), vals(4))
    assert rec.sent == [(hdr(T.PS_RESULT, 0, 0b11, Flag.HOLD), [4] * wire.K, SWITCH)]
    answer = agg.done.get((1, 0))
    assert answer is not None and answer.flags == 0
    agg.on_switch_result((1, 2), hdr(T.RESULT, 2, 0b11, Flag.HOLD | Flag.RETX), vals(4))
    assert rec.sent[-1] == (hdr(T.PS_RESULT, 2, 0b11), [4] * wire.K, SWITCH)
    agg.on_switch_result((1, 0), hdr(T.RESULT, 0, 0b11), vals(5))
    agg.on_switch_result((1, 0), hdr(T.RESULT, 0, 0b11), vals(4))
    assert agg.counters.dropped[HostDrop.CONFLICT] == 1 and agg.counters.dropped[HostDrop.LATE] == 1


def test_stalled_partials_are_pulled_then_abandoned() -> None:
    agg, rec = aggregator(stall=1.0, max_pulls=2)
    agg.on_contribution((1, 0), JOB, hdr(T.FALLBACK, 0, 0b01), vals(1), 0.0, answer=True)
    agg.scan(0.5)
    assert rec.sent == []
    for now in (1.0, 2.0, 3.0):
        agg.scan(now)
    pull = (hdr(T.PULL, 0, 0b01), [0] * wire.K, SWITCH)
    assert rec.sent == [pull, pull] and agg.counters.abandoned == 1 and agg.sums.partials == {}


def test_floats_of_an_overflowed_chunk_are_summed() -> None:
    agg, rec = aggregator()
    agg.on_contribution((1, 0), JOB, hdr(T.PARTIAL, 0, 0b11, Flag.OVERFLOW), vals(9), 0.0, False)
    assert rec.sent[-1][0].flags == Flag.OVERFLOW | Flag.HOLD
    halves = np.full(wire.K, 0.5, np.float32)
    agg.on_float((1, 0), JOB, hdr(T.FLOAT, 0, 0b01), quant.float_bits(halves), 1.0)
    agg.on_float((1, 0), JOB, hdr(T.FLOAT, 0, 0b01), quant.float_bits(halves), 1.0)
    assert agg.counters.dropped[HostDrop.DUPLICATE] == 1
    agg.on_float((1, 0), JOB, hdr(T.FLOAT, 0, 0b10), quant.float_bits(halves), 1.0)
    h, values, _ = rec.sent[-1]
    assert (h.ptype, h.flags, h.bitmap, h.count) == (T.PS_RESULT, Flag.FLOAT, 0b11, 2)
    assert quant.from_bits(np.array(values, np.int32)).tolist() == [1.0] * wire.K
    assert agg.counters.float_completed == 1 and agg.sums.floats == {} and agg.sums.open == {1: 0}


def test_forget_drops_a_jobs_sums_and_answers() -> None:
    agg, _ = aggregator()
    agg.on_contribution((1, 0), JOB, hdr(T.FALLBACK, 0, 0b01), vals(1), 0.0, answer=True)
    agg.on_switch_result((1, 1), hdr(T.RESULT, 1, 0b11), vals(1))
    agg.forget(1)
    assert (list(agg.done), agg.sums.partials, agg.sums.open) == ([], {}, {1: 0})


def test_a_pulls_answer_and_an_unpulled_gather_teach_the_stall() -> None:
    """A resend after a pull samples the pull's round trip; a chunk gathered
    without a pull samples its span; a first send a pull overtook is a span."""
    agg, _ = aggregator(stall=1.0)
    agg.stall = PullStall(1.0, 0.0, 10.0)
    agg.on_contribution((1, 0), JOB, hdr(T.FALLBACK, 0, 0b01), vals(1), 0.0, answer=True)
    agg.scan(1.0)
    agg.on_contribution((1, 0), JOB, hdr(T.FALLBACK, 0, 0b10, Flag.RETX), vals(1), 1.25, True)
    assert agg.stall.answer.srtt == 0.25 and agg.stall.gather.srtt is None
    agg.on_contribution((1, 1), JOB, hdr(T.PARTIAL, 1, 0b01), vals(1), 2.0, answer=False)
    agg.on_contribution((1, 1), JOB, hdr(T.PARTIAL, 1, 0b10), vals(1), 2.5, answer=False)
    assert agg.stall.gather.srtt == 0.5
    agg.on_contribution((1, 2), JOB, hdr(T.FALLBACK, 2, 0b01), vals(1), 3.0, answer=True)
    agg.scan(3.0 + agg.stall.value)
    agg.on_contribution((1, 2), JOB, hdr(T.FALLBACK, 2, 0b10), vals(1), 5.0, answer=True)
    assert agg.stall.gather.srtt == pytest.approx(0.875 * 0.5 + 0.125 * 2.0)
    assert agg.stall.answer.srtt == 0.25
