"""Static partitions of the slot pool (the STATIC policy, SwitchML-style).

Every admitted job gets an equal, contiguous share of the pool, in job-id
order; the first ``pool % jobs`` jobs get one slot more.  The controller
keeps partitions written under every policy, so switching to STATIC needs no
job rewrite, and recomputes them on each admit and remove.  If there are more
jobs than slots, the jobs beyond the pool get size 0: the switch sends their
contributions to their PS (rule S1).
"""

from __future__ import annotations


def partition(pool_size: int, jobs: list[int]) -> dict[int, tuple[int, int]]:
    """``job -> (part_base, part_size)`` for the given jobs."""
    ordered = sorted(jobs)
    if not ordered:
        return {}
    share, extra = divmod(pool_size, len(ordered))
    out: dict[int, tuple[int, int]] = {}
    base = 0
    for i, job in enumerate(ordered):
        size = share + (1 if i < extra else 0)
        out[job] = (base if size else 0, size)
        base += size
    return out
