"""esa-ctl's text output: the admin API's replies as tables and lines.

Each function reads the fields of one reply dataclass
(``controller.api.messages``); ``--json`` prints the reply's own JSON instead.
A reply of one switch reads as it always has; one of several switches has a
row per switch, and a row ``all`` of their sums where a sum means something
(counters, slots, entries).
"""

from __future__ import annotations

from collections.abc import Sequence

from controller.api.messages import JobInfo, PolicyState, Slots, Stats, Status, SwitchSlots
from controller.world.partition import Layout
from esa.spec import Policy

ALL = "all"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def format_jobs(jobs: Sequence[JobInfo], switches: Sequence[str] = ()) -> str:
    """One row per job, or with ``switches``, one per job and switch of those
    that holds its entry: its fan-in and partition there, ``*`` marking the
    switch where its sums complete."""
    if not jobs:
        return "no jobs"
    if not switches:
        rows = [["JOB", "PRIO", "MODE", "PARTITION", "PS", "WORKERS"]]
        rows += [
            [str(j.job), str(j.priority), _mode(j), _part(j.partition), *_hosts(j)] for j in jobs
        ]
        return _table(rows)
    rows = [["JOB", "SWITCH", "PRIO", "MODE", "FAN-IN", "PARTITION", "PS", "WORKERS"]]
    for j in jobs:
        for name in (n for n in switches if n in j.switches):
            part = j.switches[name]
            switch = f"{name}*" if name == j.top else name
            rows.append(
                [str(j.job), switch, str(j.priority), _mode(j), str(part.fan_in),
                 _part(part.partition), *_hosts(j)]
            )  # fmt: skip
    return _table(rows)


def _mode(j: JobInfo) -> str:
    return j.mode if j.mode == "static" else f"auto ({j.remaining} B left)"


def _part(part: tuple[int, ...] | None) -> str:
    return f"{part[0]}+{part[1]}" if part else "-"


def _hosts(j: JobInfo) -> list[str]:
    return [",".join(j.ps), ",".join(j.workers)]


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in counts.items())


def format_stats(stats: Stats, job: int | None) -> str:
    """Of one switch: a row per job and a line of drops; of several: a row
    per job and switch holding it, and a row ``all`` of the job's sums, and
    a line of drops per switch and ``all``."""
    if len(stats.switches) > 1:
        return _stats_by_switch(stats, job)
    held = next(iter(stats.switches.values())).jobs if stats.switches else stats.jobs
    jobs = {k: v for k, v in stats.jobs.items() if k in held and (job is None or k == job)}
    lines = []
    if jobs:
        events = list(next(iter(jobs.values())))
        rows = [["JOB", *(e.upper() for e in events)]]
        rows += [[str(k), *(str(v[e]) for e in events)] for k, v in jobs.items()]
        lines.append(_table(rows))
    else:
        lines.append("no jobs")
    lines.append("drops: " + _counts(stats.drops))
    return "\n".join(lines)


def _stats_by_switch(stats: Stats, job: int | None) -> str:
    jobs = {k: v for k, v in stats.jobs.items() if job is None or k == job}
    lines = []
    if jobs:
        events = list(next(iter(jobs.values())))
        rows = [["JOB", "SWITCH", *(e.upper() for e in events)]]
        for k, total in jobs.items():
            for name, sw in stats.switches.items():
                if k in sw.jobs:
                    rows.append([str(k), name, *(str(sw.jobs[k][e]) for e in events)])
            rows.append([str(k), ALL, *(str(total[e]) for e in events)])
        lines.append(_table(rows))
    else:
        lines.append("no jobs")
    width = max(len(n) for n in [*stats.switches, ALL])
    for name, sw in stats.switches.items():
        lines.append(f"drops {name.ljust(width)}  {_counts(sw.drops)}")
    lines.append(f"drops {ALL.ljust(width)}  {_counts(stats.drops)}")
    return "\n".join(lines)


def _parts(policy: str, size: int, layout: str) -> str:
    if Policy[policy.upper()] is Policy.ESA:
        if Layout(layout) is Layout.HASHED:
            return "every job hashed over the pool (layout hashed)"
        homes = f"homes of {size} slots" if size else "homes: equal split"
        return f"{homes}, by priority; a job without one hashed over the pool"
    return f"static partitions of {size} slots" if size else "static partitions: equal split"


def format_policy(p: PolicyState) -> str:
    return (
        f"policy {p.policy}, stale timeout {p.stale_us} us, "
        f"squat timeout {p.squat_us} us, {_parts(p.policy, p.part_size, p.layout)}"
    )


def format_status(s: Status) -> str:
    """Of one switch: its address and connection; of several: a table of them."""
    if len(s.switches) == 1:
        sw = s.switches[0]
        head = [f"switch:   {sw.address} ({'connected' if sw.connected else 'NOT connected'})"]
        hosts = ", ".join(s.hosts)
    else:
        rows = [["NAME", "DEVICE", "ADDRESS", "CONNECTED", "JOBS", "ENTRIES"]]
        rows += [
            [sw.name, str(sw.device_id), sw.address, "yes" if sw.connected else "NO",
             str(sw.jobs), str(sw.entries)]
            for sw in s.switches
        ]  # fmt: skip
        rows.append([ALL, "", "", "", str(s.jobs), str(s.entries)])
        head = ["switches:", *("  " + line for line in _table(rows).splitlines())]
        hosts = ", ".join(f"{n} ({h.switch})" for n, h in s.hosts.items())
    return "\n".join(
        [
            *head,
            f"policy:   {s.policy} (stale timeout {s.stale_us} us, "
            f"squat timeout {s.squat_us} us, {_parts(s.policy, s.part_size, s.layout)})",
            f"pool:     {s.pool_size} slots" + (" per switch" if len(s.switches) > 1 else ""),
            f"jobs:     {s.jobs}",
            f"entries:  {s.entries}",
            f"aging:    {s.aging_period_s} s per halving",
            f"hosts:    {hosts}",
        ]
    )


def _slot_line(s: SwitchSlots) -> str:
    held = ", ".join(f"job {j}: {n}" for j, n in s.by_job.items())
    return f"{s.used} of {s.pool_size} slots held" + (f" ({held})" if held else "")


def format_slots(s: Slots) -> str:
    """Of one switch: one line; of several: a line per switch and ``all``."""
    if len(s.switches) <= 1:
        return _slot_line(SwitchSlots(s.pool_size, s.used, s.by_job))
    width = max(len(n) for n in [*s.switches, ALL])
    lines = [f"{name.ljust(width)}  {_slot_line(sw)}" for name, sw in s.switches.items()]
    lines.append(f"{ALL.ljust(width)}  {_slot_line(SwitchSlots(s.pool_size, s.used, s.by_job))}")
    return "\n".join(lines)
