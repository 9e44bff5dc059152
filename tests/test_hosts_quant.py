"""Fixed-point quantisation: the scale rule, the error bound, clipping."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from esa import wire
from hosts.net import quant

INT32_MAX = 2**31 - 1
BOUNDS = st.floats(2.0**-20, 2.0**20, width=32)
FAN_INS = st.integers(1, wire.MAX_WORKERS)


@given(BOUNDS, FAN_INS)
def test_scale_is_largest_safe_power_of_two(bound: float, fan_in: int) -> None:
    s = quant.job_scale(bound, fan_in)
    assert math.frexp(s)[0] == 0.5
    assert fan_in * (bound * s + 0.5) <= INT32_MAX
    assert fan_in * (bound * 2 * s + 0.5) > INT32_MAX
    assert s <= INT32_MAX / (fan_in * bound)


@given(BOUNDS, FAN_INS, st.sampled_from([-1.0, 1.0]))
def test_sum_of_fan_in_extreme_values_fits_int32(bound: float, fan_in: int, sign: float) -> None:
    s = quant.job_scale(bound, fan_in)
    q = quant.quantise(np.full(wire.K, sign * bound, np.float32), bound, s)
    total = q.values.astype(np.int64).sum(axis=0) * fan_in
    assert np.abs(total).max() <= INT32_MAX
    assert not q.clipped.any()


@st.composite
def gradients(draw: st.DrawFn) -> tuple[float, list[np.ndarray], int]:
    bound = draw(st.floats(1e-3, 1e3))
    fan_in = draw(FAN_INS)
    n = draw(st.integers(1, 3 * wire.K))
    b32 = float(np.float32(bound))
    assume(b32 <= bound)
    elems = st.floats(-b32, b32, width=32)
    tensors = [np.array(draw(st.lists(elems, min_size=n, max_size=n)), np.float32)]
    tensors += [np.roll(tensors[0], i) * np.float32(0.5) for i in range(1, fan_in)]
    return bound, tensors, n


@given(gradients())
def test_dequantised_sum_within_bound(case: tuple[float, list[np.ndarray], int]) -> None:
    bound, tensors, n = case
    fan_in = len(tensors)
    s = quant.job_scale(bound, fan_in)
    qs = [quant.quantise(t, bound, s) for t in tensors]
    assert not any(q.clipped.any() for q in qs)
    total = sum(q.values.astype(np.int64) for q in qs)
    assert isinstance(total, np.ndarray)
    assert np.abs(total).max() <= INT32_MAX
    got = quant.dequantise(total, s).ravel()[:n].astype(np.float64)
    exact = np.sum([t.astype(np.float64) for t in tensors], axis=0)
    rounding = fan_in / (2 * s)
    assert np.all(np.abs(got - exact) <= rounding + 2.0**-24 * (np.abs(exact) + rounding))


@given(st.lists(st.integers(-(2**31) + 1, INT32_MAX), min_size=1, max_size=64), FAN_INS)
def test_dequantise_is_exact_division(total: list[int], fan_in: int) -> None:
    s = quant.job_scale(1.0, fan_in)
    got = quant.dequantise(np.array(total), s)
    assert got.tolist() == [float(np.float32(t / s)) for t in total]


def test_out_of_bound_values_are_clipped_and_flagged() -> None:
    x = np.zeros(3 * wire.K, np.float32)
    x[wire.K + 1] = 2.5
    x[2 * wire.K] = -np.inf
    x[2 * wire.K + 1] = np.nan
    s = quant.job_scale(1.0, 4)
    q = quant.quantise(x, 1.0, s)
    assert q.clipped.tolist() == [False, True, True]
    assert q.values[1, 1] == int(s)
    assert q.values[2, :2].tolist() == [-int(s), 0]
    assert q.floats[1, 1] == np.float32(2.5)
    assert np.isnan(q.floats[2, 1])


def test_padding_and_shape() -> None:
    q = quant.quantise(np.ones((5, 7), np.float32), 1.0, 4.0)
    assert q.values.shape == (quant.chunks(35), wire.K)
    assert q.values.ravel()[:35].tolist() == [4] * 35
    assert q.values.ravel()[35:].tolist() == [0] * (q.values.size - 35)


@given(st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=wire.K))
def test_float_bits_round_trip(values: list[float]) -> None:
    arr = np.array(values, np.float32)
    assert quant.from_bits(quant.float_bits(arr)).tolist() == arr.tolist()


def test_huge_bound_gives_fractional_power_of_two() -> None:
    s = quant.job_scale(1e12, 32)
    assert s == 2.0**-14
    q = quant.quantise(np.full(wire.K, -1e12, np.float32), 1e12, s)
    assert 32 * int(q.values.min()) >= -(2**31)


@pytest.mark.parametrize(
    ("bound", "fan_in"), [(0.0, 2), (-1.0, 2), (math.inf, 2), (1.0, 0), (1.0, 33)]
)
def test_bad_job_parameters(bound: float, fan_in: int) -> None:
    with pytest.raises(ValueError):
        quant.job_scale(bound, fan_in)
