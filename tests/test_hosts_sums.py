"""The PS's open sums (hosts.ps.sums): merging, overflow, float totals and the per-job bound."""

from __future__ import annotations

import numpy as np

from esa import wire
from hosts.net import quant
from hosts.ps.sums import INT32_MAX, INT32_MIN, FloatSum, OpenSums, Partial


def ints(*head: int) -> np.ndarray:
    v = np.zeros(wire.K, np.int32)
    v[: len(head)] = head
    return v


def test_partial_merges_bitmaps_and_counts() -> None:
    p = Partial(touched=0.0, opened=0.0, pulls=3)
    p.merge(0b01, 1, False, ints(1, 2), now=1.0)
    p.merge(0b110, 2, False, ints(10, 20), now=2.0)
    assert (p.bitmap, p.count, p.overflow, p.pulls, p.touched) == (0b111, 3, False, 0, 2.0)
    overflow, values = p.result()
    assert not overflow and values[:3].tolist() == [11, 22, 0]


def test_partial_overflows_past_int32_and_clips() -> None:
    p = Partial(touched=0.0, opened=0.0)
    p.merge(0b01, 1, False, ints(INT32_MAX, INT32_MIN), now=0.0)
    p.merge(0b10, 1, False, ints(1, -1), now=0.0)
    overflow, values = p.result()
    assert overflow and values[:2].tolist() == [INT32_MAX, INT32_MIN]


def test_partial_keeps_a_parts_overflow_flag() -> None:
    p = Partial(touched=0.0, opened=0.0)
    p.merge(0b01, 1, True, ints(1), now=0.0)
    assert p.result()[0]


def test_float_sum_adds_in_worker_order() -> None:
    acc = FloatSum(touched=0.0, pulls=2)
    big, small = np.full(wire.K, 1e8, np.float32), np.full(wire.K, 3.0, np.float32)
    acc.add(0b100, quant.float_bits(small), now=1.0)
    acc.add(0b001, quant.float_bits(big), now=2.0)
    assert not acc.covers(0b111) and (acc.pulls, acc.touched) == (0, 2.0)
    acc.add(0b010, quant.float_bits(-big), now=3.0)
    assert acc.covers(0b111)
    assert acc.total().tolist() == [3.0] * wire.K
    assert acc.total().dtype == np.float32


def test_open_sums_bound_each_job() -> None:
    sums = OpenSums(max_open=2)
    sums.add_job(1)
    sums.add_job(2)
    p = sums.partial((1, 0), 0.0)
    assert p is not None and sums.partial((1, 0), 5.0) is p
    assert sums.float_sum((1, 1), 0.0) is not None
    assert sums.partial((1, 2), 0.0) is None and sums.float_sum((1, 3), 0.0) is None
    assert sums.partial((2, 0), 0.0) is not None
    assert sums.open == {1: 2, 2: 1}
    sums.close_partial((1, 0))
    sums.close_partial((1, 0))
    assert sums.open == {1: 1, 2: 1} and sums.partial((1, 2), 0.0) is not None


def test_forget_closes_one_jobs_sums() -> None:
    sums = OpenSums(max_open=8)
    for job in (1, 2):
        sums.add_job(job)
        sums.partial((job, 0), 0.0)
        sums.float_sum((job, 1), 0.0)
    sums.forget(1)
    assert (list(sums.partials), list(sums.floats), sums.open) == ([(2, 0)], [(2, 1)], {1: 0, 2: 2})


def test_held_and_stalled() -> None:
    sums = OpenSums(max_open=8)
    sums.add_job(1)
    for seq, (bitmap, touched) in enumerate([(0b01, 0.0), (0b10, 1.0), (0b11, 2.0)]):
        p = sums.partial((1, seq), touched)
        assert p is not None
        p.bitmap = bitmap
    assert sums.held(1, lambda seq: seq >= 1) == [0b10, 0b11]
    assert [k for k, _ in sums.stalled_partials(now=2.0, stall=1.0)] == [(1, 0), (1, 1)]
    sums.float_sum((1, 5), 0.5)
    assert [k for k, _ in sums.stalled_floats(now=1.0, stall=0.5)] == [(1, 5)]
    assert list(sums.stalled_floats(now=0.9, stall=0.5)) == []
