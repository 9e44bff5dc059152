"""Parameter server: bitmap merging, completion, caches, pulls, float recovery."""

from __future__ import annotations

from collections import deque

import numpy as np
import numpy.typing as npt
from hypothesis import given
from hypothesis import strategies as st

from esa import wire
from esa.wire import Flag, PacketType
from hosts import codec, quant
from hosts.ps import JobSpec, ParameterServer
from hosts.transport import Addr, Bytes

SWITCH: Addr = ("10.0.0.254", wire.UDP_PORT)
T = PacketType


class Recorder:
    """Transport that keeps what is sent and serves a queue of datagrams."""

    def __init__(self) -> None:
        self.sent: list[tuple[codec.Header, list[int], Addr]] = []
        self.inbox: deque[bytes] = deque()

    def send(self, data: Bytes, addr: Addr) -> None:
        h, v = codec.decode(bytes(data))
        self.sent.append((h, v.tolist(), addr))

    def recv_into(self, buf: bytearray) -> tuple[int, Addr] | None:
        if not self.inbox:
            return None
        data = self.inbox.popleft()
        n = min(len(data), len(buf))
        buf[:n] = data[:n]
        return n, SWITCH

    def wait(self, timeout: float) -> None:
        raise AssertionError("not used")


def pkt(
    ptype: int, job: int, seq: int, bitmap: int, values: npt.ArrayLike, flags: int = 0
) -> bytes:
    count = bin(bitmap).count("1")
    return codec.encode(codec.Header(ptype, flags, job, seq, bitmap, count), values)


def server(
    jobs: dict[int, int], stall: float = 0.2, max_pulls: int = 50, cache_size: int = 1 << 16
) -> tuple[ParameterServer, Recorder]:
    rec = Recorder()
    specs = {j: JobSpec.of(f) for j, f in jobs.items()}
    ps = ParameterServer(rec, SWITCH, specs, stall, max_pulls, cache_size)
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
    for bitmap in order:
        vals = np.sum([contrib[b] for b in range(fan_in) if bitmap >> b & 1], axis=0)
        single = bitmap & (bitmap - 1) == 0
        feed(ps, rec, pkt(T.FALLBACK if single else T.PARTIAL, 1, 9, bitmap, vals))
        if have == mask:
            expect_after += 1
        elif have & bitmap:
            expect_rejected += 1
        else:
            have |= bitmap
            expect_merged += 1
    c = ps.counters
    assert (c.merged, c.rejected_overlap) == (expect_merged, expect_rejected)
    assert c.answered_from_cache + c.late == expect_after
    results = [(h, v) for h, v, _ in rec.sent if h.ptype == T.PS_RESULT]
    if have != mask:
        assert results == [] and c.completed == 0
        return
    assert c.completed == 1
    h, values = results[0]
    assert (h.job, h.seq, h.bitmap, h.count, h.flags) == (1, 9, mask, fan_in, 0)
    assert values == exact.tolist()
    assert all(v == values for _, v in results)


def test_switch_result_marks_done_and_answers_retransmissions() -> None:
    ps, rec = server({1: 2})
    feed(ps, rec, pkt(T.FALLBACK, 1, 5, 0b01, vec(1)))
    feed(ps, rec, pkt(T.RESULT, 1, 5, 0b11, vec(100)))
    assert ps.partials == {} and rec.sent == []
    feed(ps, rec, pkt(T.FALLBACK, 1, 5, 0b10, vec(2), flags=Flag.RETX))
    feed(ps, rec, pkt(T.PARTIAL, 1, 5, 0b10, vec(2)))
    assert [(h.ptype, h.seq, h.bitmap, h.count, v, a) for h, v, a in rec.sent] == [
        (T.PS_RESULT, 5, 0b11, 2, vec(100), SWITCH)
    ]
    c = ps.counters
    assert (c.switch_results, c.answered_from_cache, c.late, c.completed) == (1, 1, 1, 0)


def test_held_result_is_acknowledged_with_the_same_sum() -> None:
    ps, rec = server({3: 2})
    feed(ps, rec, pkt(T.RESULT, 3, 8, 0b11, vec(-7), flags=Flag.HOLD | Flag.OVERFLOW))
    [(h, values, addr)] = rec.sent
    assert h == codec.Header(T.PS_RESULT, Flag.OVERFLOW, 3, 8, 0b11, 2)
    assert (values, addr) == (vec(-7), SWITCH)
    assert ps.counters.held_answered == 1


def test_completion_at_ps_and_overflow() -> None:
    ps, rec = server({1: 2, 2: 2})
    big = [2**30] * wire.K
    feed(ps, rec, pkt(T.FALLBACK, 1, 0, 0b01, big), pkt(T.FALLBACK, 1, 0, 0b10, big))
    feed(ps, rec, pkt(T.FALLBACK, 2, 0, 0b01, vec(0), flags=Flag.OVERFLOW))
    feed(ps, rec, pkt(T.FALLBACK, 2, 0, 0b10, vec(0)))
    feed(ps, rec, pkt(T.FALLBACK, 1, 1, 0b01, vec(3)), pkt(T.PARTIAL, 1, 1, 0b10, vec(4)))
    got = [(h.job, h.seq, h.flags, v) for h, v, _ in rec.sent]
    assert got == [
        (1, 0, Flag.OVERFLOW, [2**31 - 1] * wire.K),
        (2, 0, Flag.OVERFLOW, [2 * x for x in vec(0)]),
        (1, 1, 0, [a + b for a, b in zip(vec(3), vec(4), strict=True)]),
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
    assert ps.partials == {} and ps.counters.abandoned == 1


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
    ps, rec = server({1: 3})
    rng = np.random.default_rng(1)
    floats = [rng.normal(0, 1e3, wire.K).astype(np.float32) for _ in range(3)]
    feed(ps, rec, pkt(T.FALLBACK, 1, 2, 0b001, vec(0), flags=Flag.OVERFLOW))
    for bit in (2, 0):
        feed(ps, rec, pkt(T.FLOAT, 1, 2, 1 << bit, quant.float_bits(floats[bit])))
    feed(ps, rec, pkt(T.FLOAT, 1, 2, 0b001, quant.float_bits(floats[0])))
    feed(ps, rec, pkt(T.FALLBACK, 1, 2, 0b010, vec(0), flags=Flag.RETX))
    notice = codec.Header(T.PS_RESULT, Flag.OVERFLOW, 1, 2, 0b111, 3)
    assert [(h, v) for h, v, _ in rec.sent] == [(notice, [0] * wire.K)]
    feed(ps, rec, pkt(T.FLOAT, 1, 2, 0b010, quant.float_bits(floats[1])))
    total: npt.NDArray[np.float32] = np.zeros(wire.K, np.float32)
    for f in floats:
        total += f
    h, v, _ = rec.sent[-1]
    assert h == codec.Header(T.PS_RESULT, Flag.FLOAT, 1, 2, 0b111, 3)
    assert v == quant.float_bits(total).tolist()
    feed(ps, rec, pkt(T.FALLBACK, 1, 2, 0b100, vec(0), flags=Flag.RETX))
    feed(ps, rec, pkt(T.FLOAT, 1, 2, 0b100, quant.float_bits(floats[2])))
    assert rec.sent[-2:] == [rec.sent[1], rec.sent[1]]
    c = ps.counters
    assert (c.floats, c.float_duplicates, c.float_completed, c.answered_from_cache) == (5, 1, 1, 3)


def test_result_cache_is_bounded_lru() -> None:
    ps, rec = server({1: 1}, cache_size=2)
    for seq in range(3):
        feed(ps, rec, pkt(T.FALLBACK, 1, seq, 1, vec(seq)))
    assert list(ps.done) == [(1, 1), (1, 2)] and ps.counters.evicted == 1
    feed(ps, rec, pkt(T.FALLBACK, 1, 1, 1, vec(1), flags=Flag.RETX))
    feed(ps, rec, pkt(T.FALLBACK, 1, 3, 1, vec(3)))
    assert list(ps.done) == [(1, 1), (1, 3)]
    assert ps.counters.completed == 4 and ps.counters.answered_from_cache == 1


def test_malformed_and_foreign_are_counted_and_dropped() -> None:
    ps, rec = server({1: 2})
    good = pkt(T.FALLBACK, 1, 0, 0b01, vec(0))
    bad_type = bytearray(good)
    bad_type[wire.field_offsets()["ptype"][0]] = 99
    feed(
        ps,
        rec,
        b"",
        b"x" * 10,
        good + b"\0",
        bytes(bad_type),
        pkt(T.CONTRIB, 1, 0, 0b01, vec(0)),
        pkt(T.PULL, 1, 0, 0b01, vec(0)),
        pkt(T.FALLBACK, 1, 0, 0b11, vec(0)),
        pkt(T.FALLBACK, 1, 0, 0b100, vec(0)),
        pkt(T.PARTIAL, 1, 0, 0, vec(0)),
        pkt(T.RESULT, 1, 0, 0b01, vec(0)),
        pkt(T.FALLBACK, 7, 0, 0b01, vec(0)),
    )
    c = ps.counters
    assert (c.received, c.malformed, c.foreign, c.merged) == (11, 10, 1, 0)
    assert rec.sent == [] and ps.partials == {}
