"""esa-ctl's text output: the admin API's replies as tables and lines.

Each function reads the fields of one reply dataclass
(``controller.messages``); ``--json`` prints the reply's own JSON instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from controller.messages import JobInfo, PolicyState, Slots, Stats, Status


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def format_jobs(jobs: Sequence[JobInfo]) -> str:
    if not jobs:
        return "no jobs"
    rows = [["JOB", "PRIO", "MODE", "PARTITION", "PS", "WORKERS"]]
    for j in jobs:
        part = j.partition
        rows.append(
            [
                str(j.job),
                str(j.priority),
                j.mode if j.mode == "static" else f"auto ({j.remaining} B left)",
                f"{part[0]}+{part[1]}" if part else "-",
                j.ps,
                ",".join(j.workers),
            ]
        )
    return _table(rows)


def format_stats(stats: Stats, job: int | None) -> str:
    jobs = {k: v for k, v in stats.jobs.items() if job is None or k == job}
    lines = []
    if jobs:
        events = list(next(iter(jobs.values())))
        rows = [["JOB", *(e.upper() for e in events)]]
        rows += [[str(k), *(str(v[e]) for e in events)] for k, v in jobs.items()]
        lines.append(_table(rows))
    else:
        lines.append("no jobs")
    lines.append("drops: " + ", ".join(f"{k}={v}" for k, v in stats.drops.items()))
    return "\n".join(lines)


def _parts(size: int) -> str:
    return f"static partitions of {size} slots" if size else "static partitions: equal split"


def format_policy(p: PolicyState) -> str:
    return (
        f"policy {p.policy}, stale timeout {p.stale_us} us, "
        f"squat timeout {p.squat_us} us, {_parts(p.part_size)}"
    )


def format_status(s: Status) -> str:
    sw = s.switch
    return "\n".join(
        [
            f"switch:   {sw.address} ({'connected' if sw.connected else 'NOT connected'})",
            f"policy:   {s.policy} (stale timeout {s.stale_us} us, "
            f"squat timeout {s.squat_us} us, {_parts(s.part_size)})",
            f"pool:     {s.pool_size} slots",
            f"jobs:     {s.jobs}",
            f"entries:  {s.entries}",
            f"aging:    {s.aging_period_s} s per halving",
            f"hosts:    {', '.join(s.hosts)}",
        ]
    )


def format_slots(s: Slots) -> str:
    held = ", ".join(f"job {j}: {n}" for j, n in s.by_job.items())
    return f"{s.used} of {s.pool_size} slots held" + (f" ({held})" if held else "")
