"""Partitions of the slot pool (the STATIC policy, SwitchML-style; ESA's
fixed partitions).

Two ways to cut the pool, chosen with ``esa-ctl policy static --part-size N``:

``N = 0``: equal split
    Every admitted job gets an equal, contiguous share of the pool, in
    job-id order; the first ``pool % jobs`` jobs get one slot more.  Shares
    are recomputed on each admit and remove, so a running job's partition
    moves and shrinks as others arrive.
``N > 0``: fixed partitions, as SwitchML sizes them
    The pool holds ``pool // N`` partitions of ``N`` slots (a job's
    bandwidth-delay product is the size that lets it stream at line rate).
    Jobs get them in admission order and keep them until they leave; a job
    that finds none has size 0 until one frees up, and the switch sends its
    contributions to its PS (rule S1) meanwhile: SwitchML's fall-back
    variant.  A freed partition goes to the earliest-admitted job without one.

ESA uses fixed partitions too: a job streams through its own while it
has one, so jobs that hold partitions never land on each other's chunks;
a job without one hashes over the whole pool and contends by priority.
Under ESA with the equal split no job gets a partition (ESA hashes every
chunk, as the paper's ESA does).  ATP ignores partitions.  If there are
more jobs than slots (equal split), the jobs beyond the pool get size 0
as well.
"""

from __future__ import annotations

Parts = dict[int, tuple[int, int]]
"""``job -> (part_base, part_size)``; size 0 means no partition."""


def partition(
    pool_size: int, jobs: list[int], part_size: int = 0, previous: Parts | None = None
) -> Parts:
    """Partitions for ``jobs`` (in admission order); ``previous``: what the
    switch holds now, kept where it still fits (fixed partitions only)."""
    if part_size == 0:
        return equal_split(pool_size, jobs)
    return fixed(pool_size, jobs, part_size, previous or {})


def equal_split(pool_size: int, jobs: list[int]) -> Parts:
    ordered = sorted(jobs)
    if not ordered:
        return {}
    share, extra = divmod(pool_size, len(ordered))
    out: Parts = {}
    base = 0
    for i, job in enumerate(ordered):
        size = share + (1 if i < extra else 0)
        out[job] = (base if size else 0, size)
        base += size
    return out


def fixed(pool_size: int, jobs: list[int], part_size: int, previous: Parts) -> Parts:
    if part_size < 1:
        raise ValueError(f"partition size {part_size} must be positive")
    free = list(range(pool_size // part_size))
    out: Parts = {}
    for job in jobs:
        base, size = previous.get(job, (0, 0))
        k, off = divmod(base, part_size)
        if size == part_size and off == 0 and k in free:
            free.remove(k)
            out[job] = (base, size)
    for job in jobs:
        if job not in out:
            out[job] = (free.pop(0) * part_size, part_size) if free else (0, 0)
    return out
