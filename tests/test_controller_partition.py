"""Static partitions: the equal split and SwitchML's fixed, BDP-sized partitions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.world.partition import by_priority, fixed, home_count, partition


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


def test_esa_splits_the_pool_equally_while_every_home_is_three_quarters_the_least_home() -> None:
    """ESA: ``jobs`` in priority order; while the equal split gives every
    job 3/4 of the least home or more it is the equal split (in job-id
    order, the slot left by the division to the highest rank); past that,
    the pool split equally among as many of the highest ranks as it gives
    that many, the others hashed (size 0)."""
    assert partition(100, [7, 3, 9], part_size=44, ranked=True) == {
        3: (0, 33),
        7: (33, 34),
        9: (67, 33),
    }
    assert partition(100, [7, 3, 9], part_size=45, ranked=True) == {
        3: (0, 50),
        7: (50, 50),
        9: (0, 0),
    }
    assert partition(100, [7, 3, 9], part_size=66, ranked=True) == {
        3: (0, 50),
        7: (50, 50),
        9: (0, 0),
    }
    assert partition(100, [7, 3, 9], part_size=67, ranked=True) == {
        3: (0, 0),
        7: (0, 100),
        9: (0, 0),
    }
    assert partition(2, [7, 3, 9], part_size=0, ranked=True) == {
        3: (0, 1),
        7: (1, 1),
        9: (0, 0),
    }


def test_esa_homes_follow_the_ranks_not_the_previous_layout() -> None:
    """A job that outranks a holder takes its home at once; the homes are
    recut, not kept where they were."""
    before = partition(256, [7, 3, 9], part_size=100, ranked=True)
    assert before == {3: (0, 85), 7: (85, 86), 9: (171, 85)}
    after = partition(256, [7, 3, 9], part_size=120, previous=before, ranked=True)
    assert after == {3: (0, 128), 7: (128, 128), 9: (0, 0)}
    assert partition(256, [9, 7, 3], part_size=120, previous=after, ranked=True) == {
        7: (0, 128),
        9: (128, 128),
        3: (0, 0),
    }


def test_home_count_is_every_job_down_to_three_quarters_the_least_home() -> None:
    """The least homes of ``make sim``: 178 slots at 100 G / 1 us (floor
    134), 314 with 2 us of lag (floor 236)."""
    assert [home_count(1024, n, 178) for n in (1, 7, 8, 32)] == [1, 7, 7, 7]
    assert [home_count(256, n, 178) for n in (1, 2, 3)] == [1, 1, 1]
    assert [home_count(1024, n, 314) for n in (4, 5)] == [4, 4]
    assert home_count(100, 3, 300) == 1
    assert home_count(2, 5, 0) == 2


@given(
    pool=st.integers(1, 4096),
    least=st.integers(0, 1024),
    prios=st.lists(st.integers(0, 7), max_size=40),
)
def test_esa_homes_are_disjoint_in_the_pool_and_never_smaller_for_a_higher_priority(
    pool: int, least: int, prios: list[int]
) -> None:
    """Jobs ``0..n-1`` with priorities ``prios``: the homes cover the pool
    exactly when any job has one, no two share a slot, and a job never has
    a smaller home than a job of lower priority."""
    level = dict(enumerate(prios))
    order = by_priority(list(level), level)
    parts = partition(pool, order, least, ranked=True)
    slots = sorted(s for b, n in parts.values() for s in range(b, b + n))
    assert slots == (list(range(pool)) if prios else [])
    assert all(parts[a][1] >= parts[b][1] for a in level for b in level if level[a] > level[b])
    assert sum(1 for _, n in parts.values() if n) == home_count(pool, len(prios), least)


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
    fixed_room = pool // size if size else pool
    room = home_count(pool, len(jobs), size) if ranked else fixed_room
    assert [j for j in jobs if parts[j][1]] == jobs[:room]
    slots = [s for b, n in parts.values() for s in range(b, b + n)]
    assert len(slots) == len(set(slots)) and all(0 <= s < pool for s in slots)
