"""Static partitions: the equal split and SwitchML's fixed, BDP-sized partitions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.world.partition import fixed, partition


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


def test_ranked_partitions_go_to_the_highest_ranked_and_a_higher_rank_takes_one() -> None:
    """ESA: ``jobs`` in priority order; a job that outranks a holder takes
    its partition, the holders it does not outrank keep theirs in place;
    while the equal split gives every job the size or more, it is the
    equal split."""
    before = partition(64, [7, 3], part_size=32, ranked=True)
    assert before == {3: (0, 32), 7: (32, 32)} == partition(64, [7, 3])
    after = partition(64, [7, 9, 3], part_size=32, previous=before, ranked=True)
    assert after == {7: (32, 32), 9: (0, 32), 3: (0, 0)}
    assert partition(96, [7, 9, 3], part_size=24, previous=after, ranked=True) == {
        3: (0, 32),
        7: (32, 32),
        9: (64, 32),
    }
    assert partition(64, [7, 9, 3], part_size=32, previous=before) == {
        7: (32, 32),
        3: (0, 32),
        9: (0, 0),
    }


@given(
    pool=st.integers(1, 64),
    size=st.integers(0, 16),
    jobs=st.lists(st.integers(1, 255), unique=True, max_size=40),
    ranked=st.booleans(),
)
def test_partitions_go_to_the_first_jobs_in_the_given_order(
    pool: int, size: int, jobs: list[int], ranked: bool
) -> None:
    """With fewer partitions than jobs (the equal split: one slot each),
    exactly the first ones in the caller's order hold one."""
    parts = partition(pool, jobs, size, ranked=ranked)
    room = pool // size if size else pool
    assert [j for j in jobs if parts[j][1]] == jobs[:room]
    slots = [s for b, n in parts.values() for s in range(b, b + n)]
    assert len(slots) == len(set(slots)) and all(0 <= s < pool for s in slots)
