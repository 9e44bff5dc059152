"""What the simulated controller hands out: partitions and priorities."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.world.partition import partition
from esa.job import EQUAL_PRIORITY, JobSpec
from esa.schemes import Scheme
from sim.control import Partitions, priorities
from sim.params import Net

NET = Net()
BDP = NET.bdp_partition(1 << 20)

# a trace: arrivals (True) and finishes (False) of jobs 1, 2, ...
traces = st.lists(st.booleans(), min_size=1, max_size=40)
pools = st.sampled_from([64, 139, 256, 600, 1024, 4096])


def replay(scheme: Scheme, pool: int, trace: list[bool]) -> tuple[Partitions, list[int]]:
    """Arrive a new job on True, finish the oldest running one on False;
    return the partitions and the order in which jobs were admitted."""
    parts = Partitions(scheme, pool, NET.bdp_partition(pool))
    admitted: list[int] = []
    next_id = 1
    for arrive in trace:
        if arrive:
            if parts.request(next_id):
                admitted.append(next_id)
            next_id += 1
        elif parts.running:
            admitted += parts.release(parts.running[0])
        check(parts, scheme, pool)
    return parts, admitted


def check(parts: Partitions, scheme: Scheme, pool: int) -> None:
    layout = parts.layout()
    assert set(layout) == set(parts.running)
    used = sorted((b, b + s) for b, s in layout.values() if s)
    assert all(lo >= 0 and hi <= pool for lo, hi in used)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(used)), "disjoint"
    if scheme is Scheme.STATIC_EQUAL:
        assert layout == partition(pool, parts.running)
    else:
        size = min(pool, BDP)
        assert {s for _, s in layout.values()} <= {0, size}
        assert sum(1 for _, s in layout.values() if s) <= pool // size


@settings(max_examples=60, deadline=None)
@given(trace=traces, pool=pools)
def test_static_bdp_admits_first_come_first_served_while_partitions_last(
    trace: list[bool], pool: int
) -> None:
    parts, admitted = replay(Scheme.STATIC_BDP, pool, trace)
    assert admitted == sorted(admitted), "first come, first served"
    assert all(s for _, s in parts.layout().values()), "no running job without a partition"
    assert not parts.waiting or not parts.free


@settings(max_examples=60, deadline=None)
@given(trace=traces, pool=pools)
def test_static_fb_runs_everyone_and_hands_freed_partitions_on_in_order(
    trace: list[bool], pool: int
) -> None:
    parts, admitted = replay(Scheme.STATIC_FB, pool, trace)
    assert admitted == list(range(1, len(admitted) + 1)), "everyone runs at once"
    without = [j for j, (_, s) in parts.layout().items() if s == 0]
    assert without == list(parts.waiting) == sorted(without)
    assert not without or not parts.free


def test_static_fb_forgets_a_job_that_finishes_without_a_partition() -> None:
    """Job 2 runs through its PS and finishes first: the partition job 1
    frees goes to job 3, the one still waiting, and no partition is lost."""
    parts = Partitions(Scheme.STATIC_FB, BDP, BDP)
    assert [parts.request(j) for j in (1, 2, 3)] == [True, True, True]
    assert list(parts.waiting) == [2, 3]
    assert parts.release(2) == []
    assert list(parts.waiting) == [3]
    assert parts.release(1) == []
    assert parts.layout() == {3: (0, BDP)}
    assert parts.release(3) == []
    assert parts.free == [0] and not parts.held and not parts.waiting


@settings(max_examples=60, deadline=None)
@given(trace=traces, pool=pools)
def test_static_equal_is_the_controllers_split_of_the_running_jobs(
    trace: list[bool], pool: int
) -> None:
    replay(Scheme.STATIC_EQUAL, pool, trace)


def test_shared_pool_schemes_have_no_partitions() -> None:
    parts, _ = replay(Scheme.ESA, 64, [True] * 5)
    assert parts.layout() == {j: (0, 0) for j in range(1, 6)}


def test_esa_equal_puts_every_job_on_one_level() -> None:
    running = [(JobSpec(i, 2, 32 * 10 * i, 2, priority=i), 0, 0.0) for i in range(1, 5)]
    assert set(priorities(Scheme.ESA_EQUAL, NET, running).values()) == {EQUAL_PRIORITY}
    assert priorities(Scheme.ESA, NET, running) == {i: i for i in range(1, 5)}
    srpt = priorities(Scheme.ESA_SRPT, NET, running)
    assert len(set(srpt.values())) == 4 and srpt[1] > srpt[4], "strict order, smaller first"
