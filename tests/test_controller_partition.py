"""Static partitions: the equal split and SwitchML's fixed, BDP-sized partitions."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.world.partition import (
    HOME_CAP,
    HOME_FLOOR,
    Parts,
    by_priority,
    esa_homes,
    fixed,
    home_count,
    partition,
)


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


def test_a_finish_moves_no_home_and_leaves_the_freed_one_unassigned() -> None:
    """Rule L lends the freed slots; a later admission takes them whole."""
    before = partition(256, [7, 3, 9], part_size=100, ranked=True)
    assert before == {3: (0, 85), 7: (85, 86), 9: (171, 85)}
    after = partition(256, [7, 9], part_size=100, previous=before, ranked=True)
    assert after == {7: (85, 86), 9: (171, 85)}
    assert partition(256, [4, 7, 9], part_size=100, previous=after, ranked=True) == {
        4: (0, 85),
        7: (85, 86),
        9: (171, 85),
    }


def test_a_freed_home_goes_to_the_highest_ranked_job_that_hashes() -> None:
    before = partition(256, [7, 3, 9, 5], part_size=120, ranked=True)
    assert before == {3: (0, 128), 7: (128, 128), 9: (0, 0), 5: (0, 0)}
    assert partition(256, [3, 9, 5], part_size=120, previous=before, ranked=True) == {
        3: (0, 128),
        9: (128, 128),
        5: (0, 0),
    }


def test_a_rise_into_the_homes_takes_the_lowest_homed_ones_and_moves_no_other() -> None:
    """Only the two jobs concerned trade; a change of rank among the homed
    moves nothing (nor makes the higher-ranked one's home the larger)."""
    before = {3: (0, 128), 7: (128, 128), 9: (0, 0)}
    assert partition(256, [9, 7, 3], part_size=120, previous=before, ranked=True) == {
        9: (0, 128),
        7: (128, 128),
        3: (0, 0),
    }
    homes = {3: (0, 85), 7: (85, 86), 9: (171, 85)}
    assert partition(256, [9, 3, 7], part_size=100, previous=homes, ranked=True) == homes


def test_an_admission_that_finds_no_free_range_recuts_the_pool_equally() -> None:
    alone = partition(256, [7], part_size=100, ranked=True)
    assert alone == {7: (0, 200)}
    assert partition(256, [7, 3], part_size=100, previous=alone, ranked=True) == {
        3: (0, 128),
        7: (128, 128),
    }
    assert partition(256, [7, 3], part_size=100, previous={7: (0, 182)}, ranked=True) == {
        3: (0, 128),
        7: (128, 128),
    }


def test_a_home_is_at_most_two_least_homes_so_admissions_find_a_free_range() -> None:
    """``make sim``'s least home at 100 G / 1 us, 178 slots, in 1,024: a
    lone job's home leaves the rest free, and the next two admissions take
    free ranges (up to the equal share) without moving a home; only the
    fourth finds none and recuts."""
    homes = partition(1024, [7], part_size=178, ranked=True)
    assert homes == {7: (0, 356)}
    homes = partition(1024, [3, 7], part_size=178, previous=homes, ranked=True)
    assert homes == {3: (356, 356), 7: (0, 356)}
    homes = partition(1024, [3, 7, 9], part_size=178, previous=homes, ranked=True)
    assert homes == {3: (356, 356), 7: (0, 356), 9: (712, 312)}
    assert partition(1024, [3, 7, 9, 4], part_size=178, previous=homes, ranked=True) == {
        3: (0, 256),
        4: (256, 256),
        7: (512, 256),
        9: (768, 256),
    }


def test_homes_below_a_raised_floor_are_dropped_and_the_pool_recut() -> None:
    homes = {3: (0, 85), 7: (85, 86), 9: (171, 85)}
    assert partition(256, [7, 3, 9], part_size=120, previous=homes, ranked=True) == {
        3: (0, 128),
        7: (128, 128),
        9: (0, 0),
    }


def test_with_no_least_home_a_free_range_of_three_quarters_the_equal_share_is_taken() -> None:
    before = partition(96, [1, 2, 3], part_size=0, ranked=True)
    assert before == {1: (0, 32), 2: (32, 32), 3: (64, 32)}
    after = partition(96, [1, 3], part_size=0, previous=before, ranked=True)
    assert after == {1: (0, 32), 3: (64, 32)}
    assert partition(96, [1, 3, 4], part_size=0, previous=after, ranked=True) == {
        1: (0, 32),
        3: (64, 32),
        4: (32, 32),
    }
    taken = {1: (0, 40), 3: (64, 32)}
    assert partition(96, [1, 3, 4], part_size=0, previous=taken, ranked=True) == {
        1: (0, 40),
        3: (64, 32),
        4: (40, 24),
    }
    short = {1: (0, 41), 3: (64, 32)}
    assert partition(96, [1, 3, 4], part_size=0, previous=short, ranked=True) == {
        1: (0, 32),
        3: (32, 32),
        4: (64, 32),
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
    exactly when any job has one, or, where the equal share is above
    ``HOME_CAP`` least homes, its start in homes of that size; no two share
    a slot, and a job never has a smaller home than a job of lower
    priority."""
    level = dict(enumerate(prios))
    order = by_priority(list(level), level)
    parts = partition(pool, order, least, ranked=True)
    slots = sorted(s for b, n in parts.values() for s in range(b, b + n))
    homed = home_count(pool, len(prios), least)
    capped = least and pool // max(1, homed) > HOME_CAP * least
    assert slots == list(range(homed * HOME_CAP * least if capped else pool) if prios else [])
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


Event = tuple[str, int, int]
"""``("finish", i, _)``: the job at rank ``i`` leaves; ``("admit", i, _)``:
a new job enters at rank ``i``; ``("swap", i, j)``: ranks ``i`` and ``j``
trade places (all taken modulo the running jobs)."""


@given(
    pool=st.integers(1, 4096),
    least=st.integers(0, 1024),
    events=st.lists(
        st.tuples(
            st.sampled_from(["finish", "admit", "swap"]), st.integers(0, 50), st.integers(0, 50)
        ),
        max_size=30,
    ),
)
def test_homes_stay_put_through_finishes_and_move_only_to_make_room(
    pool: int, least: int, events: list[Event]
) -> None:
    """Through any run of finishes, admissions and rank changes the homes
    are disjoint and in the pool, the top ``home_count`` ranks hold one,
    no home is below the floor or above ``HOME_CAP`` least homes (with a
    least home), a finish moves no home, and a home moves only to a
    higher-ranked job or in an equal recut."""
    floor = min(pool, math.ceil(least * HOME_FLOOR)) if least else 1
    jobs: list[int] = []
    homes: Parts = {}
    fresh = iter(range(1, 10_000))
    for kind, i, j in events:
        if kind == "finish" and jobs:
            jobs.pop(i % len(jobs))
        elif kind == "admit":
            jobs.insert(i % (len(jobs) + 1), next(fresh))
        elif kind == "swap" and jobs:
            a, b = i % len(jobs), j % len(jobs)
            jobs[a], jobs[b] = jobs[b], jobs[a]
        before = {job: homes[job] for job in jobs if homes.get(job, (0, 0))[1]}
        homes = partition(pool, jobs, least, previous=homes, ranked=True)
        assert list(homes) == jobs
        held = sorted(p for p in homes.values() if p[1])
        assert all(b + n <= c for (b, n), (c, _) in itertools.pairwise(held))
        assert all(b >= 0 and b + n <= pool and n >= floor for b, n in held)
        assert not least or all(n <= HOME_CAP * least for _, n in held)
        count = home_count(pool, len(jobs), least)
        assert all(homes[job][1] for job in jobs[:count])
        if kind == "finish":
            assert all(homes[job] == home for job, home in before.items())
        if homes != esa_homes(pool, jobs, least):
            moved = [job for job, home in before.items() if homes[job] != home]
            assert all(homes[job] == (0, 0) for job in moved)
            assert all(
                any(jobs.index(k) < jobs.index(job) and homes[k] == before[job] for k in jobs)
                for job in moved
            )
