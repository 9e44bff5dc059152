"""Priority policies and static partitions (no switch needed)."""

from __future__ import annotations

import pytest

from controller.partition import partition
from controller.priority import (
    SRPT_STEP,
    Mode,
    PrioritySpec,
    aging_bonus,
    effective_priority,
    srpt_priority,
)
from esa.spec import MAX_PRIORITY


def test_srpt_smaller_remaining_is_more_urgent() -> None:
    assert srpt_priority(0) == MAX_PRIORITY
    assert srpt_priority(1) == MAX_PRIORITY - SRPT_STEP
    assert srpt_priority(2**20) == MAX_PRIORITY - 21 * SRPT_STEP
    assert srpt_priority(2**30) == MAX_PRIORITY - 31 * SRPT_STEP
    assert srpt_priority(2**20) > srpt_priority(2**21) > srpt_priority(2**30)


def test_srpt_never_below_zero() -> None:
    assert srpt_priority(2**200) == 0


def test_srpt_priority_rises_as_job_progresses() -> None:
    remaining = [2**30, 2**25, 2**10, 0]
    prios = [srpt_priority(r) for r in remaining]
    assert prios == sorted(prios)
    assert len(set(prios)) == 4


def test_aging_one_level_per_period() -> None:
    assert aging_bonus(100.0, 100.0, 10.0) == 0
    assert aging_bonus(100.0, 109.9, 10.0) == 0
    assert aging_bonus(100.0, 110.0, 10.0) == 1
    assert aging_bonus(100.0, 155.0, 10.0) == 5
    assert aging_bonus(100.0, 155.0, 0.0) == 0
    assert aging_bonus(100.0, 50.0, 10.0) == 0


def test_auto_job_is_aged_to_the_top_and_stays_there() -> None:
    spec = PrioritySpec.auto(2**40)
    base = srpt_priority(2**40)
    assert effective_priority(spec, 0.0, 0.0, 10.0) == base
    assert effective_priority(spec, 0.0, 30.0, 10.0) == base + 3
    bound = MAX_PRIORITY * 10.0
    assert effective_priority(spec, 0.0, bound, 10.0) == MAX_PRIORITY
    assert effective_priority(spec, 0.0, 10 * bound, 10.0) == MAX_PRIORITY


def test_large_job_eventually_not_preemptible_by_new_small_jobs() -> None:
    """A job preempts only with a strictly higher priority: once aged to the
    top, the large job is never preempted, however small the newcomers."""
    large = effective_priority(PrioritySpec.auto(2**40), 0.0, MAX_PRIORITY * 5.0, 5.0)
    small = effective_priority(PrioritySpec.auto(0), MAX_PRIORITY * 5.0, MAX_PRIORITY * 5.0, 5.0)
    assert large == small == MAX_PRIORITY
    assert not small > large


def test_static_priority_is_never_aged() -> None:
    spec = PrioritySpec.static(7)
    assert spec.mode is Mode.STATIC
    assert effective_priority(spec, 0.0, 1e9, 1.0) == 7


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
