"""Parameter server: bitmap merging, completion, caches, pulls, float recovery."""

from __future__ import annotations

from collections import deque

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given
from hypothesis import strategies as st

from esa import wire
from esa.job import Workers
from esa.wire import Flag, PacketType
from hosts.net import payload, quant
from hosts.net.drops import HostDrop
from hosts.net.transport import Addr, Bytes
from hosts.ps.parameter_server import ParameterServer

SWITCH: Addr = ("10.0.0.254", wire.UDP_PORT)
T = PacketType


class Recorder:
    """Transport that keeps what is sent and serves a queue of datagrams."""

    def __init__(self) -> None:
        self.sent: list[tuple[payload.Header, list[int], Addr]] = []
        self.inbox: deque[bytes] = deque()
        self.source = SWITCH
        """where every datagram in ``inbox`` comes from."""

    def send(self, data: Bytes, addr: Addr) -> None:
        h, v = payload.decode(bytes(data))
        self.sent.append((h, v.tolist(), addr))

    def recv_into(self, buf: bytearray) -> tuple[int, Addr] | None:
        if not self.inbox:
            return None
        data = self.inbox.popleft()
        n = min(len(data), len(buf))
        buf[:n] = data[:n]
        return n, self.source

    def wait(self, timeout: float) -> None:
        raise AssertionError("not used")


def pkt(
    ptype: int, job: int, seq: int, bitmap: int, values: npt.ArrayLike, flags: int = 0
) -> bytes:
    count = bin(bitmap).count("1")
    return payload.encode(payload.Header(ptype, flags, job, seq, bitmap, count), values)


def server(
    jobs: dict[int, int],
    stall: float = 0.2,
    max_pulls: int = 50,
    cache_size: int = 1 << 16,
    shard: int = 0,
    shards: int = 1,
) -> tuple[ParameterServer, Recorder]:
    rec = Recorder()
    specs = {j: Workers.of(f) for j, f in jobs.items()}
    ps = ParameterServer(
        rec, SWITCH, specs, stall, max_pulls, cache_size, shard=shard, shards=shards
    )
    return ps, rec


def feed(ps: ParameterServer, rec: Recorder, *datagrams: bytes, now: float = 0.0) -> None:
    rec.inbox.extend(datagrams)
    ps.poll(now)


def vec(x: int) -> list[int]:
    return [x + i for i in range(wire.K)]


@st.composite
def merge_cases(draw: st.DrawFn) -> tuple[int, list[list[int]], list[int]]:
    fan_in = draw(st.integers(1, 8))
    contrib = [draw(st.lists(st.integers(-(2**20), 2**20), min_size=wire.K, max_size=wire.K))
               for _ in range(fan_in)]  # fmt: skip
    groups = []
    bits = draw(st.permutations(range(fan_in)))
    while bits:
        k = draw(st.integers(1, len(bits)))
        groups.append(sum(1 << b for b in bits[:k]))
        bits = bits[k:]
    extra = draw(st.lists(st.integers(1, (1 << fan_in) - 1), max_size=4))
    order = draw(st.permutations(groups + extra))
    return fan_in, contrib, order


@given(merge_cases())
def test_merge_never_adds_a_worker_twice(case: tuple[int, list[list[int]], list[int]]) -> None:
    fan_in, contrib, order = case
    ps, rec = server({1: fan_in})
    mask = (1 << fan_in) - 1
    exact = np.sum(np.array(contrib, np.int64), axis=0)
    have, expect_merged, expect_rejected, expect_after = 0, 0, 0, 0
    firsts = True
    for bitmap in order:
        vals = np.sum([contrib[b] for b in range(fan_in) if bitmap >> b & 1], axis=0)
        # a fallback carries one worker's bit, or, from a switch of a fabric,
        # a child's whole sum (several bits): odd bitmaps come as fallbacks
        feed(ps, rec, pkt(T.FALLBACK if bitmap & 1 else T.PARTIAL, 1, 9, bitmap, vals))
        if have == mask:
            expect_after += 1
        elif have & bitmap:
            expect_rejected += 1
        else:
            have |= bitmap
            expect_merged += 1
            firsts &= bitmap == 1 or not bitmap & 1  # one worker's fallback, or a partial
    c = ps.counters
    assert (c.merged, c.dropped[HostDrop.OVERLAP]) == (expect_merged, expect_rejected)
    assert c.answered_from_cache + c.dropped[HostDrop.LATE] == expect_after
    results = [(h, v) for h, v, _ in rec.sent if h.ptype == T.PS_RESULT]
    if have != mask:
        assert results == [] and c.completed == 0
        return
    assert c.completed == 1
    h, values = results[0]
    held = Flag.HOLD if firsts else 0
    assert (h.job, h.seq, h.bitmap, h.count, h.flags) == (1, 9, mask, fan_in, held)
    assert values == exact.tolist()
    assert all(v == values for _, v in results)


def test_switch_result_marks_done_and_answers_retransmissions() -> None:
    ps, rec = server({1: 2})
    feed(ps, rec, pkt(T.FALLBACK, 1, 5, 0b01, vec(1)))
    feed(ps, rec, pkt(T.RESULT, 1, 5, 0b11, vec(100)))
    assert ps.sums.partials == {} and rec.sent == []
    feed(ps, rec, pkt(T.FALLBACK, 1, 5, 0b10, vec(2), flags=Flag.RETX))
    feed(ps, rec, pkt(T.PARTIAL, 1, 5, 0b10, vec(2)))
    assert [(h.ptype, h.seq, h.bitmap, h.count, v, a) for h, v, a in rec.sent] == [
        (T.PS_RESULT, 5, 0b11, 2, vec(100), SWITCH)
    ]
    c = ps.counters
    assert (c.switch_results, c.answered_from_cache, c.completed) == (1, 1, 0)
    assert c.dropped[HostDrop.LATE] == 1


@pytest.mark.parametrize("flags", [0, Flag.HOLD, Flag.HOLD | Flag.OVERFLOW])
def test_a_switch_sum_from_another_address_is_refused(flags: int) -> None:
    """Only the switch sends a sum it completed, held (ATP) or not: from a
    worker's or any other address (the switch's port, or any other) it is
    dropped as ``source``, unanswered, and the chunk stays open; from the
    switch's host, whatever its port, it is taken."""
    ps, rec = server({1: 2})
    feed(ps, rec, pkt(T.FALLBACK, 1, 5, 0b01, vec(1)))
    rec.source = ("10.0.0.7", SWITCH[1])
    feed(ps, rec, pkt(T.RESULT, 1, 5, 0b11, vec(100), flags=flags))
    c = ps.counters
    assert (c.dropped[HostDrop.SOURCE], c.switch_results, c.held_answered) == (1, 0, 0)
    assert list(ps.sums.partials) == [(1, 5)] and (1, 5) not in ps.done and rec.sent == []
    rec.source = (SWITCH[0], 40001)
    feed(ps, rec, pkt(T.RESULT, 1, 5, 0b11, vec(100), flags=flags))
    held = bool(flags & Flag.HOLD)
    assert (c.dropped[HostDrop.SOURCE], c.switch_results, c.held_answered) == (1, 1, held)
    assert ps.sums.partials == {} and (1, 5) in ps.done
    want = [(T.PS_RESULT, flags, vec(100))] if held else []
    assert [(h.ptype, h.flags, v) for h, v, _ in rec.sent] == want


def test_held_result_is_acknowledged_with_the_same_sum() -> None:
    """The answer to a held sum keeps HOLD (every worker's first
    transmission); the one kept for retransmissions does not: it may answer
    a real loss."""
    ps, rec = server({3: 2})
    feed(ps, rec, pkt(T.RESULT, 3, 8, 0b11, vec(-7), flags=Flag.HOLD | Flag.OVERFLOW))
    [(h, values, addr)] = rec.sent
    assert h == payload.Header(T.PS_RESULT, Flag.HOLD | Flag.OVERFLOW, 3, 8, 0b11, 2)
    assert (values, addr) == (vec(-7), SWITCH)
    assert ps.counters.held_answered == 1
    rec.sent.clear()
    feed(ps, rec, pkt(T.FALLBACK, 3, 8, 0b01, vec(1), flags=Flag.RETX))
    [(h, values, addr)] = rec.sent
    assert h == payload.Header(T.PS_RESULT, Flag.OVERFLOW, 3, 8, 0b11, 2)
    assert (values, ps.counters.answered_from_cache) == (vec(-7), 1)


@pytest.mark.parametrize(
    ("last", "flags", "held"),
    [
        (T.FALLBACK, 0, True),
        (T.FALLBACK, Flag.RETX, False),
        (T.PARTIAL, 0, True),
        (T.PARTIAL, Flag.RETX, False),
    ],
)
def test_a_sum_of_first_sends_alone_is_flagged_hold(last: int, flags: int, held: bool) -> None:
    """A sum the PS gathered from the workers' first sends alone (FALLBACKs
    of one worker's bit and the switch's partials, neither flagged RETX)
    goes out flagged HOLD, as the answer to a held RESULT does: a worker
    that resent the chunk learns its timeout was spurious.  A resend in the
    sum leaves it unflagged, and so is the answer the PS keeps for a later
    resend."""
    ps, rec = server({1: 3})
    feed(ps, rec, pkt(T.FALLBACK, 1, 4, 0b001, vec(1)), pkt(T.FALLBACK, 1, 4, 0b010, vec(2)))
    feed(ps, rec, pkt(last, 1, 4, 0b100, vec(3), flags=flags))
    [(h, values, _)] = rec.sent
    assert h == payload.Header(T.PS_RESULT, Flag.HOLD if held else 0, 1, 4, 0b111, 3)
    assert values == [a + b + c for a, b, c in zip(vec(1), vec(2), vec(3), strict=True)]
    rec.sent.clear()
    feed(ps, rec, pkt(T.FALLBACK, 1, 4, 0b001, vec(1), flags=Flag.RETX))
    assert [(h.flags, v) for h, v, _ in rec.sent] == [(0, values)]


def test_completion_at_ps_and_overflow() -> None:
    ps, rec = server({1: 2, 2: 2})
    big = [2**30] * wire.K
    feed(ps, rec, pkt(T.FALLBACK, 1, 0, 0b01, big), pkt(T.FALLBACK, 1, 0, 0b10, big))
    feed(ps, rec, pkt(T.FALLBACK, 2, 0, 0b01, vec(0), flags=Flag.OVERFLOW))
    feed(ps, rec, pkt(T.FALLBACK, 2, 0, 0b10, vec(0)))
    feed(ps, rec, pkt(T.FALLBACK, 1, 1, 0b01, vec(3)), pkt(T.PARTIAL, 1, 1, 0b10, vec(4)))
    got = [(h.job, h.seq, h.flags, v) for h, v, _ in rec.sent]
    assert got == [
        (1, 0, Flag.OVERFLOW | Flag.HOLD, [2**31 - 1] * wire.K),
        (2, 0, Flag.OVERFLOW | Flag.HOLD, [2 * x for x in vec(0)]),
        (1, 1, Flag.HOLD, [a + b for a, b in zip(vec(3), vec(4), strict=True)]),
    ]
    assert (ps.counters.completed, ps.counters.overflowed) == (3, 2)


def test_stalled_partial_is_pulled_then_abandoned() -> None:
    """Scans run every stall/4; a partial untouched for ``stall`` is pulled
    (and re-armed), and dropped once ``max_pulls`` pulls brought nothing."""
    ps, rec = server({1: 3}, stall=1.0, max_pulls=2)
    feed(ps, rec, pkt(T.FALLBACK, 1, 4, 0b010, vec(0)), now=0.0)
    for now in (0.5, 0.99, 1.0, 1.5, 2.0, 3.0):
        ps.poll(now)
    assert ps.counters.pulls_sent == 2 and ps.counters.abandoned == 0
    ps.poll(4.0)
    pulls = [(h.ptype, h.job, h.seq, h.bitmap, h.count) for h, _, _ in rec.sent]
    assert pulls == [(T.PULL, 1, 4, 0b010, 1)] * 2
    assert ps.sums.partials == {} and ps.counters.abandoned == 1


def test_progress_rearms_the_stall_timer() -> None:
    ps, rec = server({1: 3}, stall=1.0)
    feed(ps, rec, pkt(T.FALLBACK, 1, 4, 0b001, vec(0)), now=0.0)
    feed(ps, rec, pkt(T.FALLBACK, 1, 4, 0b001, vec(0)), now=0.9)
    ps.poll(1.2)
    assert [h.bitmap for h, _, _ in rec.sent] == [0b001]
    feed(ps, rec, pkt(T.FALLBACK, 1, 4, 0b010, vec(0)), now=1.5)
    ps.poll(2.4)
    assert len(rec.sent) == 1
    ps.poll(2.7)
    assert [h.bitmap for h, _, _ in rec.sent] == [0b001, 0b011]


def test_float_recovery_sums_in_worker_bit_order() -> None:
    """Floats are collected per worker bit and summed in bit order; an int
    retransmission meanwhile merges (and, being a RETX, pulls the others at
    once); after completion both kinds are answered with the float sum."""
    ps, rec = server({1: 3})
    rng = np.random.default_rng(1)
    floats = [rng.normal(0, 1e3, wire.K).astype(np.float32) for _ in range(3)]
    feed(ps, rec, pkt(T.FALLBACK, 1, 2, 0b001, vec(0), flags=Flag.OVERFLOW))
    for bit in (2, 0):
        feed(ps, rec, pkt(T.FLOAT, 1, 2, 1 << bit, quant.float_bits(floats[bit])))
    feed(ps, rec, pkt(T.FLOAT, 1, 2, 0b001, quant.float_bits(floats[0])))
    feed(ps, rec, pkt(T.FALLBACK, 1, 2, 0b010, vec(0), flags=Flag.RETX))
    pull = payload.Header(T.PULL, 0, 1, 2, 0b011, 2)
    assert [(h, v) for h, v, _ in rec.sent] == [(pull, [0] * wire.K)]
    feed(ps, rec, pkt(T.FLOAT, 1, 2, 0b010, quant.float_bits(floats[1])))
    total: npt.NDArray[np.float32] = np.zeros(wire.K, np.float32)
    for f in floats:
        total += f
    h, v, _ = rec.sent[-1]
    assert h == payload.Header(T.PS_RESULT, Flag.FLOAT, 1, 2, 0b111, 3)
    assert v == quant.float_bits(total).tolist()
    assert ps.sums.partials == {} and ps.sums.floats == {} and ps.sums.open == {1: 0}
    feed(ps, rec, pkt(T.FALLBACK, 1, 2, 0b100, vec(0), flags=Flag.RETX))
    feed(ps, rec, pkt(T.FLOAT, 1, 2, 0b100, quant.float_bits(floats[2])))
    assert rec.sent[-2:] == [rec.sent[1], rec.sent[1]]
    c = ps.counters
    assert (c.floats, c.dropped[HostDrop.DUPLICATE], c.float_completed) == (5, 1, 1)
    assert c.answered_from_cache == 2


def test_float_for_an_exact_sum_is_answered_with_it() -> None:
    """A worker sent a forged overflow asks for float recovery of a chunk
    the PS summed exactly: it gets the exact sum, and nothing is opened."""
    ps, rec = server({1: 2})
    feed(ps, rec, pkt(T.FALLBACK, 1, 3, 0b01, vec(1)), pkt(T.FALLBACK, 1, 3, 0b10, vec(2)))
    feed(ps, rec, pkt(T.FLOAT, 1, 3, 0b01, vec(0)))
    assert rec.sent[1][1:] == rec.sent[0][1:]
    assert rec.sent[0][0] == payload.Header(T.PS_RESULT, Flag.HOLD, 1, 3, 0b11, 2)
    assert rec.sent[1][0] == payload.Header(T.PS_RESULT, 0, 1, 3, 0b11, 2)
    assert ps.sums.floats == {} and ps.counters.answered_from_cache == 1


def test_float_for_an_unknown_chunk_pulls_the_int_contributions() -> None:
    """A FLOAT for a chunk the PS knows nothing of (its copy of the switch's
    sum lost, or a forged overflow): when no other float follows, the PS
    pulls every worker's int contribution; they sum exactly, which answers
    the worker in float recovery and closes the float sum."""
    ps, rec = server({1: 2}, stall=1.0)
    feed(ps, rec, pkt(T.FLOAT, 1, 4, 0b01, vec(0)), now=0.0)
    ps.poll(0.5)
    assert rec.sent == []
    ps.poll(1.0)
    assert [h for h, _, _ in rec.sent] == [payload.Header(T.PULL, 0, 1, 4, 0, 0)]
    feed(ps, rec, pkt(T.FALLBACK, 1, 4, 0b01, vec(1), flags=Flag.RETX), now=1.1)
    feed(ps, rec, pkt(T.FALLBACK, 1, 4, 0b10, vec(2), flags=Flag.RETX), now=1.1)
    h, v, _ = rec.sent[-1]
    assert h == payload.Header(T.PS_RESULT, 0, 1, 4, 0b11, 2)
    assert v == [a + b for a, b in zip(vec(1), vec(2), strict=True)]
    assert ps.sums.floats == {} and ps.sums.partials == {} and ps.sums.open == {1: 0}


def test_stuck_float_recovery_is_abandoned() -> None:
    ps, rec = server({1: 2}, stall=1.0, max_pulls=2)
    feed(ps, rec, pkt(T.FLOAT, 1, 4, 0b01, vec(0)), now=0.0)
    for now in (1.0, 2.0, 3.0):
        ps.poll(now)
    assert [h.ptype for h, _, _ in rec.sent] == [T.PULL, T.PULL]
    assert ps.sums.floats == {} and ps.sums.open == {1: 0} and ps.counters.abandoned == 1


def test_result_cache_is_bounded_lru() -> None:
    ps, rec = server({1: 1}, cache_size=2)
    for seq in range(3):
        feed(ps, rec, pkt(T.FALLBACK, 1, seq, 1, vec(seq)))
    assert list(ps.done) == [(1, 1), (1, 2)] and ps.counters.evicted == 1
    feed(ps, rec, pkt(T.FALLBACK, 1, 1, 1, vec(1), flags=Flag.RETX))
    feed(ps, rec, pkt(T.FALLBACK, 1, 3, 1, vec(3)))
    assert list(ps.done) == [(1, 1), (1, 3)]
    assert ps.counters.completed == 4 and ps.counters.answered_from_cache == 1


def raw(ptype: int, job: int, seq: int, bitmap: int, count: int, flags: int = 0) -> bytes:
    """A datagram whose count need not match its bitmap."""
    return payload.encode(payload.Header(ptype, flags, job, seq, bitmap, count), vec(0))


def test_every_field_is_checked_against_the_job() -> None:
    ps, rec = server({1: 2})
    good = pkt(T.FALLBACK, 1, 0, 0b01, vec(0))
    bad_type = bytearray(good)
    bad_type[wire.field_offsets()["ptype"][0]] = 99
    cases = {
        HostDrop.LENGTH: [b"", b"x" * 10, good + b"\0", good[:-1]],
        HostDrop.PTYPE: [bytes(bad_type), raw(T.CONTRIB, 1, 0, 1, 1), raw(T.PULL, 1, 0, 1, 1),
                         raw(T.PS_RESULT, 1, 0, 3, 2)],
        HostDrop.JOB: [raw(T.FALLBACK, 7, 0, 1, 1), raw(T.FALLBACK, 0, 0, 1, 1)],
        HostDrop.BITMAP: [raw(T.FALLBACK, 1, 0, 0b111, 3), raw(T.FALLBACK, 1, 0, 0b100, 1),
                          raw(T.PARTIAL, 1, 0, 0, 0), raw(T.RESULT, 1, 0, 0b01, 1),
                          raw(T.FLOAT, 1, 0, 0b11, 2)],
        HostDrop.COUNT: [raw(T.FALLBACK, 1, 0, 1, 255), raw(T.FALLBACK, 1, 0, 1, 0),
                         raw(T.PARTIAL, 1, 0, 0b11, 1), raw(T.RESULT, 1, 0, 0b11, 3)],
        HostDrop.FLAGS: [raw(T.FALLBACK, 1, 0, 1, 1, Flag.FLOAT),
                         raw(T.PARTIAL, 1, 0, 1, 1, Flag.HOLD),
                         raw(T.RESULT, 1, 0, 3, 2, Flag.FLOAT),
                         raw(T.FLOAT, 1, 0, 1, 1, Flag.OVERFLOW),
                         raw(T.FALLBACK, 1, 0, 1, 1, 0x80)],
    }  # fmt: skip
    for datagrams in cases.values():
        feed(ps, rec, *datagrams)
    c = ps.counters
    assert c.received == sum(len(d) for d in cases.values())
    assert {r: n for r, n in c.dropped.items() if n} == {r: len(d) for r, d in cases.items()}
    assert rec.sent == [] and ps.sums.partials == {} and c.merged == 0


def test_counts_that_would_add_past_255_are_dropped_and_sums_stay_exact() -> None:
    """Two FALLBACKs with count 200 once made the PS raise while encoding
    the reply; their counts are now checked, and a real sum still completes."""
    ps, rec = server({1: 2})
    feed(ps, rec, raw(T.FALLBACK, 1, 0, 0b01, 200), raw(T.FALLBACK, 1, 0, 0b10, 200))
    feed(ps, rec, pkt(T.FALLBACK, 1, 0, 0b01, vec(1)), pkt(T.FALLBACK, 1, 0, 0b10, vec(2)))
    assert ps.counters.dropped[HostDrop.COUNT] == 2
    [(h, v, _)] = rec.sent
    assert h == payload.Header(T.PS_RESULT, Flag.HOLD, 1, 0, 0b11, 2)
    assert v == [a + b for a, b in zip(vec(1), vec(2), strict=True)]


def test_open_chunks_are_bounded_per_job() -> None:
    ps, rec = server({1: 2, 2: 2})
    ps.sums.max_open = 3
    feed(ps, rec, *[pkt(T.FALLBACK, 1, seq, 0b01, vec(0)) for seq in range(5)])
    feed(ps, rec, pkt(T.FALLBACK, 2, 0, 0b01, vec(0)))
    assert sorted(ps.sums.partials) == [(1, 0), (1, 1), (1, 2), (2, 0)]
    assert ps.counters.dropped[HostDrop.BUDGET] == 2 and ps.sums.open == {1: 3, 2: 1}
    feed(ps, rec, pkt(T.FALLBACK, 1, 0, 0b10, vec(0)))
    feed(ps, rec, pkt(T.FALLBACK, 1, 3, 0b01, vec(0)))
    assert ps.sums.open == {1: 3, 2: 1} and (1, 3) in ps.sums.partials


def test_replies_junk_can_cause_are_budgeted_per_job() -> None:
    """``budget`` replies per worker per ``stall``: a job of two workers may
    cause two pulls at once, then one more per half a stall."""
    ps, rec = server({1: 2}, stall=1.0)
    ps.outbox.budgets[1] = type(ps.outbox.budgets[1])(rate=2.0, burst=2.0)
    feed(ps, rec, *[pkt(T.FALLBACK, 1, seq, 0b01, vec(0)) for seq in range(4)], now=0.0)
    ps.poll(1.0)
    assert ps.counters.pulls_sent == 2 and ps.counters.suppressed == 2
    ps.poll(1.5)
    assert ps.counters.pulls_sent == 3


def test_a_retransmission_into_an_incomplete_chunk_pulls_at_once() -> None:
    """The retransmitting worker is still waiting; the others may have the
    sum and never send again by themselves.  At most one pull per stall/4."""
    ps, rec = server({1: 3}, stall=1.0)
    feed(ps, rec, pkt(T.FALLBACK, 1, 6, 0b001, vec(0)), now=0.0)
    assert rec.sent == []
    feed(ps, rec, pkt(T.FALLBACK, 1, 6, 0b010, vec(0), flags=Flag.RETX), now=0.1)
    feed(ps, rec, pkt(T.FALLBACK, 1, 6, 0b010, vec(0), flags=Flag.RETX), now=0.2)
    feed(ps, rec, pkt(T.FALLBACK, 1, 6, 0b001, vec(0), flags=Flag.RETX), now=0.4)
    assert [(h.ptype, h.bitmap, h.count) for h, _, _ in rec.sent] == [(T.PULL, 0b011, 2)] * 2
    assert ps.counters.dropped[HostDrop.OVERLAP] == 2


# -- one PS of several per job ------------------------------------------------


def test_a_shard_takes_only_its_chunks_and_ignores_other_shards_sums() -> None:
    """PS shard 1 of 2 owns the odd seqs: it completes seq 1, drops the
    even seqs' contributions, partials and floats, and records no switch
    sum of an even seq (nor acknowledges a held one)."""
    ps, rec = server({1: 2}, shard=1, shards=2)
    feed(ps, rec, pkt(T.FALLBACK, 1, 1, 0b01, vec(1)), pkt(T.PARTIAL, 1, 1, 0b10, vec(2)))
    feed(
        ps, rec, pkt(T.FALLBACK, 1, 0, 0b01, vec(0)), pkt(T.PARTIAL, 1, 2, 0b11, vec(0)),
        pkt(T.FLOAT, 1, 4, 0b10, vec(0), flags=Flag.RETX),
        pkt(T.RESULT, 1, 6, 0b11, vec(0)), pkt(T.RESULT, 1, 8, 0b11, vec(0), flags=Flag.HOLD),
        pkt(T.RESULT, 1, 3, 0b11, vec(3)),
    )  # fmt: skip
    assert [(h.ptype, h.seq) for h, _, _ in rec.sent] == [(T.PS_RESULT, 1)]
    c = ps.counters
    assert {r: n for r, n in c.dropped.items() if n} == {HostDrop.SHARD: 3}
    assert (c.completed, c.switch_results, c.other_shard_results) == (1, 1, 2)
    assert list(ps.done) == [(1, 1), (1, 3)] and ps.sums.partials == {} and ps.sums.floats == {}


@given(st.sampled_from([1, 2, 4, 8]), st.data())
def test_a_shard_completes_exactly_the_seqs_whose_low_bits_name_it(
    shards: int, data: st.DataObject
) -> None:
    shard = data.draw(st.integers(0, shards - 1))
    seqs = data.draw(st.lists(st.integers(0, 2**32 - 1), max_size=20, unique=True))
    ps, rec = server({1: 1}, shard=shard, shards=shards)
    feed(ps, rec, *[pkt(T.FALLBACK, 1, seq, 1, vec(0)) for seq in seqs])
    mine = [seq for seq in seqs if seq % shards == shard]
    assert [h.seq for h, _, _ in rec.sent] == mine
    assert ps.counters.dropped[HostDrop.SHARD] == len(seqs) - len(mine)


@pytest.mark.parametrize(("shard", "shards"), [(0, 3), (2, 2), (-1, 2), (0, 16)])
def test_a_shard_outside_its_count_is_refused(shard: int, shards: int) -> None:
    with pytest.raises(ValueError, match=f"PS shard {shard} of {shards}: shards must be"):
        server({1: 2}, shard=shard, shards=shards)
