"""Priority policies and static partitions (no switch needed)."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.world.partition import partition
from controller.world.priority import AUTO_BOTTOM, AUTO_TOP, SWAP_MARGIN, Admission, priorities
from esa.job import MAX_PRIORITY, Priority

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
            Priority.auto(draw(st.integers(0, 2**40))),
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
    late = Admission(256, Priority.auto(newcomer), x.admitted_at + bound + margin)
    prios = priorities([x, late, *jobs[1 : BAND - 1]], aging)
    assert prios[x.job] > prios[late.job]


@given(auto_jobs(BAND - 1), AGING, st.integers(1, 10**6))
def test_a_job_rises_with_age(jobs: list[Admission], aging: float, earlier: int) -> None:
    """Admitted earlier, everything else the same, a job never ranks lower."""
    x, *others = jobs
    older = x._replace(admitted_at=x.admitted_at - earlier)
    assert priorities([older, *others], aging)[x.job] >= priorities(jobs, aging)[x.job]


def test_a_small_newcomer_overtakes_only_within_the_bound() -> None:
    large = Admission(1, Priority.auto(2**30 - 1), 0.0)  # bound: 30 periods
    small = Priority.auto(2**10 - 1)  # overtakes if admitted < 20 periods later
    assert by_priority(priorities([large, Admission(2, small, 199.0)], 10.0)) == [2, 1]
    assert by_priority(priorities([large, Admission(2, small, 201.0)], 10.0)) == [1, 2]
    assert by_priority(priorities([large, Admission(2, small, 1e6)], 0.0)) == [2, 1]


def test_equal_jobs_rank_by_admission_then_id() -> None:
    spec = Priority.auto(4096)
    jobs = [Admission(5, spec, 2.0), Admission(9, spec, 1.0), Admission(3, spec, 2.0)]
    for aging in (0.0, 10.0):
        assert priorities(jobs, aging) == {9: AUTO_TOP, 3: AUTO_TOP - 1, 5: AUTO_TOP - 2}


def test_more_auto_jobs_than_levels_share_the_bottom() -> None:
    jobs = [Admission(j, Priority.auto(j), 0.0) for j in range(1, 201)]
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
    statics = [Admission(j, Priority.static(p), 0.0) for j, p in static.items()]
    prios = priorities([*jobs, *statics], aging)
    assert {j: prios[j] for j in static} == static
    assert prios == {**priorities(jobs, aging), **static}
    for p in static.values():
        auto = [prios[j.job] for j in jobs]
        if p > AUTO_TOP:
            assert all(p > a for a in auto)
        if p < AUTO_BOTTOM:
            assert all(p < a for a in auto)


# hysteresis ------------------------------------------------------------------

SWAP = Fraction(SWAP_MARGIN).limit_denominator()
"""the margin as an exact factor ``1 + SWAP`` of ``1 + remaining``."""


def auto(job: int, remaining: int, at: float = 0.0) -> Admission:
    return Admission(job, Priority.auto(remaining), at)


def levels(order: list[int]) -> dict[int, int]:
    """The levels a ranking in ``order``, most urgent first, holds."""
    return {j: AUTO_TOP - rank for rank, j in enumerate(order)}


@st.composite
def held_levels(draw: st.DrawFn, jobs: list[Admission]) -> dict[int, int]:
    """Levels held by some of ``jobs``, in any order, ties included."""
    held = draw(st.lists(st.sampled_from([j.job for j in jobs]), unique=True))
    return {j: draw(st.integers(0, 255)) for j in held}


def beats(x: Admission, y: Admission, aging: float, slack: float = 1e-9) -> bool:
    """``x`` is ahead of ``y`` by more than the margin, and not within
    ``slack`` of it (floats decide the boundary itself)."""
    gap = 0.0 if aging == 0 else (y.admitted_at - x.admitted_at) / aging
    lead = math.log2(1 + y.spec.remaining) + gap - math.log2(1 + x.spec.remaining)
    return lead > math.log2(1 + SWAP) + slack


def test_a_job_within_the_margin_does_not_overtake() -> None:
    holder, close = auto(1, 1000), auto(2, 900)  # 901 * 5/4 > 1001
    assert by_priority(priorities([holder, close], 0.0)) == [2, 1]
    assert by_priority(priorities([holder, close], 0.0, levels([1, 2]))) == [1, 2]
    assert by_priority(priorities([holder, close], 10.0, levels([1, 2]))) == [1, 2]


def test_a_job_beyond_the_margin_overtakes() -> None:
    holder, clear = auto(1, 1000), auto(2, 799)  # 800 * 5/4 < 1001
    assert by_priority(priorities([holder, clear], 0.0, levels([1, 2]))) == [2, 1]
    assert by_priority(priorities([holder, clear], 0.0, levels([1, 2]), margin=0.3)) == [1, 2]


def test_equal_volumes_do_not_swap_back_by_admission() -> None:
    """The later job holds the top; the earlier one catching up ties, which
    from scratch would put it first."""
    first, second = auto(1, 4096, 0.0), auto(2, 4096, 1.0)
    assert by_priority(priorities([first, second], 10.0)) == [1, 2]
    assert by_priority(priorities([first, second], 10.0, levels([2, 1]))) == [2, 1]
    assert by_priority(priorities([first, second], 0.0, levels([2, 1]), margin=0.0)) == [2, 1]
    # with aging and no margin the 0.1 period the first has waited is enough
    assert by_priority(priorities([first, second], 10.0, levels([2, 1]), margin=0.0)) == [1, 2]


def test_one_clear_overtake_carries_a_job_past_the_close_ones() -> None:
    """3 beats 1 by more than the margin but not 2; 1 keeps its place above 2."""
    jobs = [auto(1, 999), auto(2, 849), auto(3, 779)]  # 1000 / 780 > 5/4 > 850 / 780
    assert by_priority(priorities(jobs, 0.0, levels([1, 2, 3]))) == [3, 1, 2]


def test_a_newcomer_lands_below_the_lowest_job_ahead_of_it() -> None:
    held = levels([1, 2])  # 2 has less left, within the margin
    jobs = [auto(1, 1000), auto(2, 900)]
    assert by_priority(priorities([*jobs, auto(3, 950)], 0.0, held)) == [1, 2, 3]
    assert by_priority(priorities([*jobs, auto(3, 899)], 0.0, held)) == [3, 1, 2]
    assert by_priority(priorities([*jobs, auto(3, 10**6)], 0.0, held)) == [1, 2, 3]
    new = priorities([*jobs, auto(3, 899), auto(4, 10)], 0.0, held)
    assert by_priority(new) == [4, 3, 1, 2]


def test_aging_bounds_the_wait_with_the_margin() -> None:
    """``large`` (30 periods) ranks ahead of a job admitted more than
    ``T * log2((1 + SWAP) * 2**30)``, 303.2 s, after it; held on top, a later
    one stays there until then."""
    large = auto(1, 2**30 - 1, 0.0)
    for gap, newcomer, holder in [(199.0, 2, 2), (202.0, 1, 2), (204.0, 1, 1)]:
        small = auto(2, 2**10 - 1, gap)
        assert by_priority(priorities([large, small], 10.0))[0] == newcomer
        assert by_priority(priorities([large, small], 10.0, levels([2, 1])))[0] == holder


def test_static_levels_held_and_unknown_jobs_are_ignored() -> None:
    jobs = [auto(1, 1000), auto(2, 900), Admission(3, Priority.static(250), 0.0)]
    held = {3: 100, 9: AUTO_TOP, 1: AUTO_TOP - 1, 2: AUTO_TOP - 2}
    assert priorities(jobs, 0.0, held) == {1: AUTO_TOP, 2: AUTO_TOP - 1, 3: 250}


def test_a_negative_margin_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^swap margin must be >= 0, got -0\.1$"):
        priorities([auto(1, 1)], 0.0, margin=-0.1)


@given(st.data(), auto_jobs(), st.sampled_from([0.0, 0.5, 10.0, 3600.0]))
def test_held_levels_keep_the_order_strict_and_deterministic(
    data: st.DataObject, jobs: list[Admission], aging: float
) -> None:
    held = data.draw(held_levels(jobs))
    prios = priorities(jobs, aging, held)
    assert sorted(prios.values(), reverse=True) == list(range(AUTO_TOP, AUTO_TOP - len(jobs), -1))
    assert priorities(data.draw(st.permutations(jobs)), aging, dict(held)) == prios
    assert priorities(jobs, aging, prios) == prios, "ranking again from its own levels"


@given(st.data(), auto_jobs(), st.sampled_from([0.0, 0.5, 10.0, 3600.0]))
def test_srpt_decides_between_jobs_farther_apart_than_the_margin(
    data: st.DataObject, jobs: list[Admission], aging: float
) -> None:
    prios = priorities(jobs, aging, data.draw(held_levels(jobs)))
    for x in jobs:
        for y in jobs:
            if beats(x, y, aging):
                assert prios[x.job] > prios[y.job]


@given(st.data(), auto_jobs(), st.sampled_from([0.0, 0.5, 10.0, 3600.0]))
def test_running_jobs_move_only_towards_srpt(
    data: st.DataObject, jobs: list[Admission], aging: float
) -> None:
    """Two jobs that held levels change places only if the one rising has the
    lesser key; a newcomer never ranks above a job with a lesser key."""
    held = data.draw(held_levels(jobs))
    prios = priorities(jobs, aging, held)
    scratch = priorities(jobs, aging)
    for x in jobs:
        for y in jobs:
            both = x.job in held and y.job in held
            if both and held[x.job] > held[y.job] and prios[y.job] > prios[x.job]:
                assert scratch[y.job] > scratch[x.job]
            if x.job not in held and scratch[y.job] > scratch[x.job]:
                assert prios[y.job] > prios[x.job]


@given(
    st.lists(st.integers(1, 255), min_size=2, max_size=BAND, unique=True),
    st.integers(0, 2**40),
    st.data(),
    st.sampled_from([0.0, 10.0]),
)
def test_jobs_within_the_margin_of_each_other_keep_any_held_order(
    ids: list[int], base: int, data: st.DataObject, aging: float
) -> None:
    """No job beats another by more than the margin, so nothing moves."""
    top = (1 + base) * (1 + SWAP)
    volumes = [
        data.draw(st.integers(base, max(base, math.floor(top / (1 + 1e-9)) - 1))) for _ in ids
    ]
    jobs = [auto(j, v, 0.0) for j, v in zip(ids, volumes, strict=True)]
    order = data.draw(st.permutations(ids))
    assert by_priority(priorities(jobs, aging, levels(order))) == order


@given(auto_jobs(BAND - 1), AGING, st.integers(0, 2**40), st.floats(1e-3, 1e4), st.data())
def test_starvation_bound_with_the_margin(
    jobs: list[Admission], aging: float, newcomer: int, after: float, data: st.DataObject
) -> None:
    """Whatever the held levels, no job admitted more than
    ``T * log2((1 + SWAP) * (1 + R))`` after a job with R bytes left outranks it."""
    x = jobs[0]
    bound = aging * math.log2((1 + SWAP) * (1 + x.spec.remaining))
    late = auto(256, newcomer, x.admitted_at + bound + after)
    everyone = [x, late, *jobs[1:]]
    prios = priorities(everyone, aging, data.draw(held_levels(everyone)))
    assert prios[x.job] > prios[late.job]


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
