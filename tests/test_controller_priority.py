"""Priority policies and static partitions (no switch needed)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.partition import partition
from controller.priority import AUTO_BOTTOM, AUTO_TOP, Admission, priorities
from esa.job import PrioritySpec
from esa.spec import MAX_PRIORITY

BAND = AUTO_TOP - AUTO_BOTTOM + 1
AGING = st.sampled_from([0.5, 10.0, 3600.0])


@st.composite
def auto_jobs(draw: st.DrawFn, max_size: int = BAND) -> list[Admission]:
    """Running auto jobs: distinct ids, any remaining volume, admission times
    in whole seconds (as often equal as not)."""
    ids = draw(st.lists(st.integers(1, 255), min_size=1, max_size=max_size, unique=True))
    return [
        Admission(
            job,
            PrioritySpec.auto(draw(st.integers(0, 2**40))),
            float(draw(st.integers(0, 1000))),
        )
        for job in ids
    ]


def by_priority(prios: dict[int, int]) -> list[int]:
    return sorted(prios, key=lambda j: -prios[j])


@given(auto_jobs(), st.sampled_from([0.0, 0.5, 10.0, 3600.0]))
def test_auto_jobs_get_distinct_consecutive_levels_in_the_band(
    jobs: list[Admission], aging: float
) -> None:
    prios = priorities(jobs, aging)
    assert sorted(prios.values(), reverse=True) == list(range(AUTO_TOP, AUTO_TOP - len(jobs), -1))


@given(auto_jobs())
def test_without_aging_the_order_is_remaining_then_admission(jobs: list[Admission]) -> None:
    prios = priorities(jobs, 0.0)
    srpt = sorted(jobs, key=lambda j: (j.spec.remaining, j.admitted_at, j.job))
    assert by_priority(prios) == [j.job for j in srpt]


@given(auto_jobs(), AGING)
def test_with_aging_earlier_and_smaller_never_ranks_lower(
    jobs: list[Admission], aging: float
) -> None:
    """SRPT among jobs admitted together, admission order among equal
    volumes, and any mix of the two."""
    prios = priorities(jobs, aging)
    for x in jobs:
        for y in jobs:
            if (
                x.admitted_at <= y.admitted_at
                and x.spec.remaining <= y.spec.remaining
                and (x.admitted_at, x.spec.remaining, x.job)
                < (y.admitted_at, y.spec.remaining, y.job)
            ):
                assert prios[x.job] > prios[y.job]


@given(auto_jobs(), AGING, st.integers(0, 2**40), st.floats(1e-3, 1e4))
def test_starvation_bound(
    jobs: list[Admission], aging: float, newcomer: int, margin: float
) -> None:
    """No job admitted more than ``T * log2(1 + R)`` after a job with R bytes
    left outranks it, however small."""
    x = jobs[0]
    bound = aging * math.log2(1 + x.spec.remaining)
    late = Admission(256, PrioritySpec.auto(newcomer), x.admitted_at + bound + margin)
    prios = priorities([x, late, *jobs[1 : BAND - 1]], aging)
    assert prios[x.job] > prios[late.job]


@given(auto_jobs(BAND - 1), AGING, st.integers(1, 10**6))
def test_a_job_rises_with_age(jobs: list[Admission], aging: float, earlier: int) -> None:
    """Admitted earlier, everything else the same, a job never ranks lower."""
    x, *others = jobs
    older = x._replace(admitted_at=x.admitted_at - earlier)
    assert priorities([older, *others], aging)[x.job] >= priorities(jobs, aging)[x.job]


def test_a_small_newcomer_overtakes_only_within_the_bound() -> None:
    large = Admission(1, PrioritySpec.auto(2**30 - 1), 0.0)  # bound: 30 periods
    small = PrioritySpec.auto(2**10 - 1)  # overtakes if admitted < 20 periods later
    assert by_priority(priorities([large, Admission(2, small, 199.0)], 10.0)) == [2, 1]
    assert by_priority(priorities([large, Admission(2, small, 201.0)], 10.0)) == [1, 2]
    assert by_priority(priorities([large, Admission(2, small, 1e6)], 0.0)) == [2, 1]


def test_equal_jobs_rank_by_admission_then_id() -> None:
    spec = PrioritySpec.auto(4096)
    jobs = [Admission(5, spec, 2.0), Admission(9, spec, 1.0), Admission(3, spec, 2.0)]
    for aging in (0.0, 10.0):
        assert priorities(jobs, aging) == {9: AUTO_TOP, 3: AUTO_TOP - 1, 5: AUTO_TOP - 2}


def test_more_auto_jobs_than_levels_share_the_bottom() -> None:
    jobs = [Admission(j, PrioritySpec.auto(j), 0.0) for j in range(1, 201)]
    prios = priorities(jobs, 10.0)
    assert [prios[j] for j in range(1, BAND + 1)] == list(range(AUTO_TOP, AUTO_BOTTOM - 1, -1))
    assert {prios[j] for j in range(BAND + 1, 201)} == {AUTO_BOTTOM}


@given(
    auto_jobs(),
    st.dictionaries(st.integers(256, 300), st.integers(0, MAX_PRIORITY), max_size=8),
    st.sampled_from([0.0, 10.0]),
)
def test_static_jobs_keep_their_number_and_interleave_by_band(
    jobs: list[Admission], static: dict[int, int], aging: float
) -> None:
    statics = [Admission(j, PrioritySpec.static(p), 0.0) for j, p in static.items()]
    prios = priorities([*jobs, *statics], aging)
    assert {j: prios[j] for j in static} == static
    assert prios == {**priorities(jobs, aging), **static}
    for p in static.values():
        auto = [prios[j.job] for j in jobs]
        if p > AUTO_TOP:
            assert all(p > a for a in auto)
        if p < AUTO_BOTTOM:
            assert all(p < a for a in auto)


def test_partition_equal_shares_in_job_order() -> None:
    assert partition(1024, [5, 1, 3]) == {1: (0, 342), 3: (342, 341), 5: (683, 341)}
    assert partition(1024, []) == {}
    assert partition(1024, [9]) == {9: (0, 1024)}


@pytest.mark.parametrize("pool,jobs", [(1024, 7), (64, 64), (10, 3), (1, 1)])
def test_partitions_tile_the_pool(pool: int, jobs: int) -> None:
    parts = partition(pool, list(range(1, jobs + 1)))
    covered = sorted(i for base, size in parts.values() for i in range(base, base + size))
    assert covered == list(range(pool))


def test_partition_more_jobs_than_slots() -> None:
    assert partition(2, [1, 2, 3]) == {1: (0, 1), 2: (1, 1), 3: (0, 0)}
