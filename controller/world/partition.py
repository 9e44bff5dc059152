"""Partitions of the slot pool: the static policy's (SwitchML-style) and
ESA's homes.

Two ways to cut the pool, chosen with ``esa-ctl policy ... --part-size N``:

``N = 0``: equal split
    Every admitted job gets an equal, contiguous share of the pool, laid out
    in job-id order; the first ``pool % jobs`` jobs get one slot more.
    Shares are recomputed on each admit and remove, so a running job's
    partition moves and shrinks as others arrive.  With more jobs than
    slots, the first ``pool`` jobs in the caller's order get one slot each
    and the others none.
``N > 0``: fixed partitions, as SwitchML sizes them
    The pool holds ``pool // N`` partitions of ``N`` slots (a job's
    bandwidth-delay product is the size that lets it stream at line rate).
    Jobs get them in the caller's order and keep them until they leave; a
    job that finds none has size 0 until one frees up.  A freed partition
    goes to the first job in the caller's order without one.

Under ESA (``ranked``) a partition is a job's home, and ``N`` is the
operator's least home, what a job holds while it streams at line rate
(``esa_homes``): as many of the highest-ranked jobs as the pool gives 3/4
of ``N`` or more (``HOME_FLOOR``) hold a home, the others hash.  A home
stays where it is while its job runs, unless a higher-ranked job needs
its slots: a chunk in flight across a move of its job's home strands
(its contributions claim two slots).
With ``N = 0`` every job has a home, the equal split when the homes are cut.

The caller's order is admission order, except under ESA, where it is
priority order (highest first): memory goes to the most urgent jobs.

Under ESA the operator chooses the layout (``esa-ctl policy esa --layout``,
``Layout``): homes as above (the default), or every job hashed over the
whole pool, as the paper's ESA places chunks.  Which is faster depends on
how far apart a chunk's contributions reach the switch (docs/simulator.md,
"Priorities" and "ESA's homes"): microseconds, as in a rack of
kernel-bypass hosts, favour hashing (a job uses whatever slots are free,
and a home smaller than its window makes its chunks meet their own
predecessors); milliseconds, as among the host processes around a
software switch, favour homes (a hashed chunk that lands on another job's
slot, held that long, goes to its PS).

What a job without a partition does is the policy's: under STATIC the
switch sends its contributions to its PS (rule S1: SwitchML's fall-back
variant); under ESA it hashes over the whole pool and contends by priority,
taking free and idle slots and preempting lower-priority chunks, the
partitions' included.  Under ESA a job's partition is its home: jobs that
hold one never land on each other's chunks, so while the pool has a home
for every job ESA places chunks as the equal split does, and shares it by
priority only when it does not.  ATP ignores partitions.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping


class Layout(enum.Enum):
    """Where ESA places a job's chunks; the value is its name for the operator."""

    HOMES = "homes"
    """a job streams through its partition, its home, while it holds one."""
    HASHED = "hashed"
    """every job hashes over the whole pool; no partitions."""


LAYOUT_NAMES = tuple(layout.value for layout in Layout)


def layout_named(name: str) -> Layout:
    """The layout called ``name``; ``ValueError`` naming the choices."""
    try:
        return Layout(name)
    except ValueError:
        raise ValueError(f"unknown layout {name!r} (expected {'|'.join(LAYOUT_NAMES)})") from None


Parts = dict[int, tuple[int, int]]
"""``job -> (part_base, part_size)``; size 0 means no partition."""


HOME_FLOOR = 0.75
"""ESA's homes are never smaller than this share of the least home (what a
job holds while it streams at line rate), while the pool has one for every
job that size.  A home of ``h`` slots sums about ``h / least`` of a
line-rate stream; the job's ``S`` PS hosts carry ``S / W`` of it for its
``W`` workers, so a home of ``least * (1 - S / W)`` is what a job needs to
stream at line rate: 3/4 for four workers on one PS host, the smallest
fan-in of the mixes the simulator runs and ATP's deployments' ratio or
less.  A smaller home leaves its job below line rate while the slots would
carry a higher-ranked job at it (docs/controller.md, "Partitions")."""
HOME_CAP = 2
"""ESA's homes are never larger than this many least homes.  A home of the
whole equal share leaves no free range, so the next admission recuts the
pool and every homed job's chunks in flight strand (a lone job's home was
the whole pool); capped, the pool keeps free ranges that an admission takes
without moving a home, and rule L lends them meanwhile.  Twice the least
home holds a line-rate stream whose chunks take twice the mean hold."""


def partition(
    pool_size: int,
    jobs: list[int],
    part_size: int = 0,
    previous: Parts | None = None,
    ranked: bool = False,
) -> Parts:
    """Partitions for ``jobs`` (in the caller's order); ``previous``: what
    the switch holds now, kept where it still fits (fixed partitions and
    ESA's homes).  ``ranked`` (ESA): ``jobs`` is in priority order and
    ``part_size`` is the least home (``esa_homes``)."""
    if ranked:
        return esa_homes(pool_size, jobs, part_size, previous)
    if part_size == 0:
        return equal_split(pool_size, jobs)
    return fixed(pool_size, jobs, part_size, previous or {})


def by_priority(jobs: list[int], prios: Mapping[int, int]) -> list[int]:
    """``jobs`` highest priority first, ties kept in the given order: the
    order in which ESA hands out homes (``ranked``)."""
    return sorted(jobs, key=lambda j: -prios[j])


def home_count(pool_size: int, jobs: int, least: int) -> int:
    """How many jobs ESA gives a home: every one while the pool gives each
    ``least * HOME_FLOOR`` slots or more (and one at least), else as many
    as it gives that many, and at least one."""
    floor = max(1, math.ceil(least * HOME_FLOOR))
    return min(jobs, max(1, pool_size // floor))


def esa_homes(
    pool_size: int, jobs: list[int], least: int = 0, previous: Parts | None = None
) -> Parts:
    """ESA's homes for ``jobs`` (highest priority first), ``previous`` the
    homes held now.  The first ``home_count`` jobs must hold one; a home
    moves only to make room for them:

    * every running job keeps the home it holds (a finish moves nobody: the
      freed slots are lent by rule L until a job takes them);
    * a job among them without a home, in rank order, takes the largest
      unassigned range if it has ``floor`` slots or more (up to the equal
      share, ``pool // home_count``, and ``HOME_CAP`` least homes), else
      the home of the lowest-ranked job outside them (which hashes from
      then on);
    * if neither is there, the pool is recut equally among them, each home
      at most ``HOME_CAP`` least homes (``_laid_out``), as with no
      ``previous`` home.

    Only the jobs whose home changes can strand a chunk in flight: none at
    a finish without a job that hashes, the one taking the freed range
    otherwise (it hashed until then); none at an admission into a free
    range; two at a rank change across the last home (the jobs trading
    it); every homed job at a recut, which happens only at an admission
    (or a rise into the homes) that finds no room."""
    count = home_count(pool_size, len(jobs), least)
    top = jobs[:count]
    share = pool_size // max(1, count)
    floor = _take_floor(least, share)
    if least:
        share = min(share, HOME_CAP * least)
    kept = _kept(pool_size, jobs, previous or {}, min(pool_size, floor) if least else 1)
    if not kept:
        return _laid_out(pool_size, jobs, top, share)
    for job in top:
        if job in kept:
            continue
        base, size = _largest_gap(pool_size, kept.values())
        if size >= floor:
            kept[job] = (base, min(size, share))
            continue
        outside = [j for j in reversed(jobs) if j in kept and j not in top]
        if not outside:
            return _laid_out(pool_size, jobs, top, share)
        kept[job] = kept.pop(outside[0])
    return dict.fromkeys(jobs, (0, 0)) | kept


def _take_floor(least: int, share: int) -> int:
    """The fewest slots of a free range a job takes as its home rather than
    have the pool recut: ``HOME_FLOOR`` of the least home, or of the equal
    share when the operator gives none (``N = 0``)."""
    return max(1, math.ceil((least or share) * HOME_FLOOR))


def _kept(pool_size: int, jobs: list[int], previous: Parts, least: int) -> Parts:
    """The homes in ``previous`` of the running ``jobs`` that lie in the
    pool, have ``least`` slots or more (the floor, when the operator gave a
    least home: one raised since drops the homes below it) and overlap no
    higher-ranked one's."""
    out: Parts = {}
    for job in jobs:
        base, size = previous.get(job, (0, 0))
        clear = all(base + size <= b or b + n <= base for b, n in out.values())
        if size >= least and base >= 0 and base + size <= pool_size and clear:
            out[job] = (base, size)
    return out


def _largest_gap(pool_size: int, homes: Iterable[tuple[int, int]]) -> tuple[int, int]:
    """``(base, size)`` of the largest range of the pool outside ``homes``
    (the lowest of equals; size 0 when none)."""
    best, at = (0, 0), 0
    for base, size in [*sorted(homes), (pool_size, 0)]:
        if base - at > best[1]:
            best = (at, base - at)
        at = base + size
    return best


def equal_split(pool_size: int, jobs: list[int]) -> Parts:
    return _laid_out(pool_size, jobs, sorted(jobs[:pool_size]))


def _laid_out(pool_size: int, jobs: list[int], homed: list[int], cap: int = 0) -> Parts:
    """The pool split equally among ``homed``, the slots left by the
    division going one each to the first of them, laid out in job-id order;
    the rest of ``jobs`` without a partition (size 0).  With ``cap`` below
    the equal share each gets ``cap`` and the rest of the pool stays free."""
    out: Parts = dict.fromkeys(jobs, (0, 0))
    if not homed:
        return out
    share, extra = divmod(pool_size, len(homed))
    if 0 < cap < share:
        share, extra = cap, 0
    size = {job: share + (1 if rank < extra else 0) for rank, job in enumerate(homed)}
    base = 0
    for job in sorted(homed):
        out[job] = (base, size[job])
        base += size[job]
    return out


def fixed(pool_size: int, jobs: list[int], part_size: int, previous: Parts) -> Parts:
    if part_size < 1:
        raise ValueError(f"partition size {part_size} must be positive")
    free = list(range(pool_size // part_size))
    out: Parts = dict.fromkeys(jobs, (0, 0))
    for job in jobs:
        base, size = previous.get(job, (0, 0))
        k, off = divmod(base, part_size)
        if size == part_size and off == 0 and k in free:
            free.remove(k)
            out[job] = (base, size)
    for job in jobs:
        if out[job] == (0, 0) and free:
            out[job] = (free.pop(0) * part_size, part_size)
    return out
