"""Static partitions: the equal split and SwitchML's fixed, BDP-sized partitions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.partition import fixed, partition


def test_fixed_partitions_go_in_admission_order_and_the_rest_wait() -> None:
    assert partition(100, [7, 3, 9, 4], part_size=32) == {
        7: (0, 32),
        3: (32, 32),
        9: (64, 32),
        4: (0, 0),
    }


def test_a_freed_partition_goes_to_the_earliest_waiting_job_and_nobody_moves() -> None:
    before = partition(96, [7, 3, 9, 4, 5], part_size=32)
    after = partition(96, [7, 9, 4, 5], part_size=32, previous=before)
    assert after == {7: (0, 32), 9: (64, 32), 4: (32, 32), 5: (0, 0)}


def test_previous_partitions_of_another_size_are_not_kept() -> None:
    equal = partition(96, [1, 2], part_size=0)
    assert equal == {1: (0, 48), 2: (48, 48)}
    assert partition(96, [1, 2], part_size=32, previous=equal) == {1: (0, 32), 2: (32, 32)}


def test_partition_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"^partition size -1 must be positive$"):
        fixed(64, [1], -1, {})


@given(
    pool=st.integers(1, 4096),
    size=st.integers(1, 512),
    jobs=st.lists(st.integers(1, 255), unique=True, max_size=40),
    leave=st.sets(st.integers(0, 39)),
    arrive=st.lists(st.integers(256, 300), unique=True, max_size=10),
)
def test_fixed_partitions_are_disjoint_stable_and_fill_the_pool(
    pool: int, size: int, jobs: list[int], leave: set[int], arrive: list[int]
) -> None:
    first = partition(pool, jobs, size)
    stay = [j for i, j in enumerate(jobs) if i not in leave]
    second = partition(pool, stay + arrive, size, previous=first)
    for parts in (first, second):
        held = sorted(base for base, n in parts.values() if n)
        assert all(n in (0, size) for _, n in parts.values())
        assert all(base % size == 0 and base + size <= pool for base in held)
        assert len(held) == len(set(held)) == min(len(parts), pool // size)
    assert all(second[j] == first[j] for j in stay if first[j][1])
