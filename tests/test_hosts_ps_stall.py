"""The PS's stall before a pull, learnt from what it observes (hosts.timing.ps_stall)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hosts.timing.ps_stall import PullStall


def test_initial_until_a_sample_then_srtt_plus_four_variances() -> None:
    s = PullStall(0.2, 0.001, 1.0)
    assert s.value == 0.2
    s.answered(0.01)
    assert s.value == pytest.approx(0.01 + 4 * 0.005)
    s.answered(0.01)
    assert s.answer.srtt == pytest.approx(0.01)
    assert s.value == pytest.approx(0.01 + 4 * 0.75 * 0.005)


def test_the_larger_of_the_gather_and_the_pull_round_trip() -> None:
    s = PullStall(0.2, 0.0, 1.0)
    s.gathered(0.004)
    assert s.value == pytest.approx(0.012)
    s.answered(0.002)
    assert s.value == pytest.approx(0.012)
    s.answered(0.002)
    s.gathered(0.0)
    assert s.gather.bound is not None
    assert s.value == pytest.approx(max(s.gather.bound, 0.002 + 4 * 0.00075))


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError):
        PullStall(0.1, 0.2, 1.0)
    with pytest.raises(ValueError):
        PullStall(0.0, 0.0, 0.0)


@given(
    st.lists(st.tuples(st.booleans(), st.floats(0, 100, allow_nan=False)), min_size=1, max_size=50)
)
def test_never_below_the_floor_nor_above_the_cap(samples: list[tuple[bool, float]]) -> None:
    s = PullStall(1.0, 0.5, 2.0)
    for answer, delay in samples:
        (s.answered if answer else s.gathered)(delay)
        assert 0.5 <= s.value <= 2.0
