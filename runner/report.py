"""Per-job results of a run, the tables printed, and the files written.

Every report (the table and the legend under it, ``jobs.csv``,
``jobs.json``, ``rounds.json``, ``jct.png``) names a job's numbers by the
columns of ``COLUMNS``, where each is defined once with its meaning.  A job
that failed is a failed result for its scheme: no average is printed for
that scheme and no ratio compares it, only which job failed and why
(``incomplete``); ``jct.png`` hatches its bar and labels it failed.
"""

from __future__ import annotations

import csv
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from esa.job import JobSpec
from runner.scenario import Scenario
from runner.switches import SwitchKind

if TYPE_CHECKING:
    from matplotlib.container import BarContainer
    from matplotlib.figure import Figure

    from runner.inject import FaultEvent

DONE, FAILED = "done", "failed"


def partials_lost(events: dict[str, int]) -> int:
    """A job's partials that left the switch because another job took their
    slot: preempted by a higher priority, or evicted as a guest by a home's
    owner (docs/dataplane.md, rule L)."""
    return int(events.get("preempt_suffered", 0)) + int(events.get("guest_evicted", 0))


@dataclass(frozen=True)
class Column:
    name: str
    meaning: str
    width: int = 0
    """characters in the printed table; 0: in the files only."""
    spec: str = ""
    """how the table formats a number (a format spec)."""


WHERE = (
    Column("scheme", "the scheme the job ran under"),
    Column("switch", "the switch it ran on: bmv2 or model"),
    Column("round", "the round (--repeat), in rounds.json only"),
)
COLUMNS = (
    Column("job", "the job's id in the scenario", 4),
    Column("status", f"{DONE}, or {FAILED}: stopped (why: under the table)", 6),
    Column("values", "gradient values per iteration", 8),
    Column("iterations", "iterations every worker finished (--train torch: DDP steps summed)", 10),
    Column("jct_s", "job completion time, s (failed: until it was stopped)", 8, ".2f"),
    Column("iter_per_s", "iterations per second", 10, ".2f"),
    Column("in_switch", "share of its chunks summed in the switch", 9, ".0%"),
    Column("fallback", "contributions the switch passed to the PS: no slot for them", 8),
    Column(
        "won",
        "partials it took a slot from: of jobs of lower priority, "
        "or of guests in its home (rule L)",
        6,
    ),
    Column(
        "lost",
        "partials taken from it: its slots taken by jobs of higher priority, "
        "or its chunks evicted from another job's home by the owner (rule L)",
        6,
    ),
    Column("retx", "retransmissions by its workers", 6),
    Column("early", "retransmissions too early: the first sent were summed after all", 6),
    Column("dropped", "frames its hosts' links dropped (loss rules, full queues)", 7),
    Column("exact", "every worker received every exact sum, bit for bit", 5),
    Column("accuracy", "test accuracy of the trained model (--train torch)", 8, ".3f"),
    Column("chunks", "32-value chunks it all-reduced, over all iterations"),
    Column("reason", "why it failed (empty when done)"),
)
"""A job's columns, in the order of the table and the files; ``WHERE``
comes first in a file's row.  The one vocabulary of a run's reports."""


@dataclass(frozen=True)
class JobResult:
    """One job's numbers, each named as its column (``COLUMNS``)."""

    job: int
    values: int
    iterations: int
    jct_s: float
    iter_per_s: float
    chunks: int
    in_switch: float
    fallback: int
    won: int
    lost: int
    retx: int
    early: int
    dropped: int
    exact: bool
    reason: str = ""
    accuracy: float | None = None

    @property
    def failed(self) -> bool:
        return bool(self.reason)

    @property
    def status(self) -> str:
        return FAILED if self.reason else DONE

    @classmethod
    def build(
        cls,
        job: JobSpec,
        workers: dict[tuple[int, int], dict[str, Any]],
        events: dict[str, int],
        exact: bool,
        dropped: int = 0,
    ) -> JobResult:
        """From the workers' JSON reports and the job's switch counters."""
        mine = [r for (j, _), r in workers.items() if j == job.job]
        jct = max(float(r["jct_s"]) for r in mine)
        chunks = job.chunks * job.iterations
        return cls(
            job=job.job,
            values=job.values,
            iterations=job.iterations,
            jct_s=jct,
            iter_per_s=job.iterations / jct,
            chunks=chunks,
            in_switch=min(1.0, events.get("completed", 0) / chunks),
            fallback=int(events.get("fallback", 0)),
            won=int(events.get("preempt_won", 0)),
            lost=partials_lost(events),
            retx=sum(int(r["counters"].get("retransmitted", 0)) for r in mine),
            early=sum(int(r["counters"].get("spurious", 0)) for r in mine),
            dropped=dropped,
            exact=exact,
        )

    @classmethod
    def failure(
        cls,
        job: JobSpec,
        elapsed_s: float,
        why: str,
        events: dict[str, int],
        dropped: int = 0,
        ran: int = 0,
    ) -> JobResult:
        """A job that did not finish: its counters so far (``ran``: the
        iterations every worker finished) and the reason."""
        chunks = job.chunks * job.iterations
        return cls(
            job=job.job,
            values=job.values,
            iterations=ran,
            jct_s=elapsed_s,
            iter_per_s=0.0,
            chunks=chunks,
            in_switch=min(1.0, events.get("completed", 0) / chunks),
            fallback=int(events.get("fallback", 0)),
            won=int(events.get("preempt_won", 0)),
            lost=partials_lost(events),
            retx=0,
            early=0,
            dropped=dropped,
            exact=False,
            reason=why,
        )


def mean_of(rounds: list[dict[int, JobResult]]) -> dict[int, JobResult]:
    """Per job, the mean of each number over rounds; exact only if every round
    was, failed (with the first reason) if any round failed."""
    out = {}
    for job in rounds[0]:
        rs = [r[job] for r in rounds]
        n = len(rs)
        out[job] = JobResult(
            job=job,
            values=rs[0].values,
            iterations=_mean_count(rs, "iterations"),
            jct_s=sum(r.jct_s for r in rs) / n,
            iter_per_s=sum(r.iter_per_s for r in rs) / n,
            chunks=rs[0].chunks,
            in_switch=sum(r.in_switch for r in rs) / n,
            fallback=_mean_count(rs, "fallback"),
            won=_mean_count(rs, "won"),
            lost=_mean_count(rs, "lost"),
            retx=_mean_count(rs, "retx"),
            early=_mean_count(rs, "early"),
            dropped=_mean_count(rs, "dropped"),
            exact=all(r.exact for r in rs),
            reason=next((r.reason for r in rs if r.failed), ""),
            accuracy=_mean_accuracy(rs),
        )
    return out


def _mean_count(rs: list[JobResult], name: str) -> int:
    return round(sum(int(getattr(r, name)) for r in rs) / len(rs))


def _mean_accuracy(rs: list[JobResult]) -> float | None:
    got = [r.accuracy for r in rs if r.accuracy is not None]
    return sum(got) / len(got) if got else None


def incomplete(results: dict[int, JobResult], under: str = "") -> str:
    """``incomplete: job N failed: REASON`` for each failed job (``under``:
    `` under SCHEME`` after "failed"); "" when every job finished."""
    failed = [f"job {j} failed{under}: {r.reason}" for j, r in sorted(results.items()) if r.failed]
    return "incomplete: " + "; ".join(failed) if failed else ""


def average_jct(results: dict[int, JobResult]) -> float | None:
    """Mean JCT over every job; None when a job failed (or there is none): an
    average without the failed job would flatter its scheme."""
    if not results or any(r.failed for r in results.values()):
        return None
    return sum(r.jct_s for r in results.values()) / len(results)


def rounds_table(runs: dict[str, list[dict[int, JobResult]]]) -> str:
    """Average JCT of every round, per scheme, and their spread: the
    run-to-run noise any difference between schemes must stand out from.
    A scheme with a failed job in some round gets no mean, only why."""
    lines = ["", "average JCT per round (s)"]
    for scheme, rounds in runs.items():
        avgs = [average_jct(r) for r in rounds]
        cells = " ".join("failed" if a is None else f"{a:6.2f}" for a in avgs)
        done = [a for a in avgs if a is not None]
        if len(done) < len(avgs):
            k, bad = next((k, r) for k, r in enumerate(rounds, 1) if average_jct(r) is None)
            lines.append(f"{scheme:>12}: {cells}   {incomplete(bad)} (round {k})")
            continue
        sd = statistics.stdev(done) if len(done) > 1 else 0.0
        lines.append(
            f"{scheme:>12}: {cells}   mean {sum(done) / len(done):.2f}"
            f"  spread {max(done) - min(done):.2f}  sd {sd:.2f}"
        )
    return "\n".join(lines)


def _cell(c: Column, r: JobResult) -> str:
    value = getattr(r, c.name)
    if isinstance(value, bool):
        text = "yes" if value else "NO"
    elif value is None:
        text = "-"
    else:
        text = format(value, c.spec)
    return f"{text:>{c.width}}"


def legend(columns: tuple[Column, ...]) -> str:
    """What each column means, one line each (printed under a table)."""
    w = max(len(c.name) for c in columns)
    return "\n".join(f"  {c.name:<{w}}  {c.meaning}" for c in columns)


def job_table(name: str, results: dict[int, JobResult], switch: str, under: str = "scheme") -> str:
    """One row per job (with ``accuracy`` when a job trained a model), why
    each failed job failed, the average JCT or why there is none, and the
    legend of the columns shown.  The title names what the jobs ran under:
    the scheme ``name``, or at the prompt the controller's ``policy``."""
    trained = any(r.accuracy is not None for r in results.values())
    shown = tuple(c for c in COLUMNS if c.width and (trained or c.name != "accuracy"))
    lines = [f"{under} {name}; switch: {switch}", " ".join(f"{c.name:>{c.width}}" for c in shown)]
    for _, r in sorted(results.items()):
        lines.append(" ".join(_cell(c, r) for c in shown))
    for job, r in sorted(results.items()):
        if r.failed:
            lines.append(f"job {job} FAILED: {r.reason}")
    avg = average_jct(results)
    lines.append(
        f"average JCT: {incomplete(results)}" if avg is None else f"average JCT {avg:.2f} s"
    )
    lines.append(legend(shown))
    return "\n".join(lines)


def comparison_table(
    scenario: Scenario, results: dict[str, dict[int, JobResult]], switch: str
) -> str:
    """JCT per job and scheme, each scheme's average and each scheme's
    ratio to ESA's: none for a scheme with a failed job (or when ESA has
    one), ``incomplete: job N failed: REASON`` instead."""
    schemes = list(results)
    w = max(10, *(len(p) for p in schemes))
    avgs = {p: average_jct(results[p]) for p in schemes}

    def cell(r: JobResult) -> str:
        return f"{FAILED:>{w}}" if r.failed else f"{r.jct_s:>{w}.2f}"

    def avg_cell(a: float | None) -> str:
        return f"{'incomplete':>{w}}" if a is None else f"{a:>{w}.2f}"

    lines = [
        "",
        f"JCT per job (s); switch: {switch}",
        f"{'job':>4} " + " ".join(f"{p:>{w}}" for p in schemes),
    ]
    for job in (j.spec.job for j in scenario.jobs):
        lines.append(f"{job:>4} " + " ".join(cell(results[p][job]) for p in schemes))
    lines.append(f"{'avg':>4} " + " ".join(avg_cell(avgs[p]) for p in schemes))
    if "esa" in results:
        esa = avgs["esa"]
        for p in schemes:
            if p == "esa":
                continue
            mine = avgs[p]
            if mine is None:
                ratio = incomplete(results[p])
            elif esa is None:
                ratio = incomplete(results["esa"], " under esa")
            else:
                ratio = f"{mine / esa:.2f}"
            lines.append(f"average JCT {p} / esa: {ratio}")
    return "\n".join(lines)


def row(r: JobResult, **where: object) -> dict[str, object]:
    """``r`` as a row of jobs.csv, jobs.json or rounds.json: the columns of
    ``WHERE`` given in ``where``, then every column of ``COLUMNS``."""
    first = {c.name: where[c.name] for c in WHERE if c.name in where}
    return {**first, **{c.name: getattr(r, c.name) for c in COLUMNS}}


def write(
    out: Path,
    scenario: Scenario,
    results: dict[str, dict[int, JobResult]],
    runs: dict[str, list[dict[int, JobResult]]],
    switch: SwitchKind,
) -> list[Path]:
    """jobs.csv and jobs.json (means over rounds), rounds.json (every round),
    jct.png; every row names the switch (``bmv2`` or ``model``)."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [
        row(r, scheme=p, switch=switch.name)
        for p, per_job in results.items()
        for r in per_job.values()
    ]
    rounds_path = out / "rounds.json"
    rounds_path.write_text(
        json.dumps(
            [
                row(r, scheme=p, switch=switch.name, round=k + 1)
                for p, rounds in runs.items()
                for k, per_job in enumerate(rounds)
                for r in per_job.values()
            ],
            indent=2,
        )
    )
    csv_path = out / "jobs.csv"
    with csv_path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    json_path = out / "jobs.json"
    json_path.write_text(json.dumps(rows, indent=2))
    return [
        csv_path,
        json_path,
        rounds_path,
        plot(out / "jct.png", scenario, results, switch.label),
    ]


FAILED_HATCH = "//"
"""how jct.png marks the bar of a failed job (with the word failed above it)."""


def jct_figure(scenario: Scenario, results: dict[str, dict[int, JobResult]], switch: str) -> Figure:
    """Bars of ``jct_s`` per job and scheme; a failed job's bar hatched and
    labelled failed (its height: until it was stopped)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    schemes = list(results)
    jobs = [j.spec.job for j in scenario.jobs]
    width = 0.8 / len(schemes)
    fig, ax = plt.subplots(figsize=(7, 4))
    handles: list[BarContainer | Patch] = []
    for i, p in enumerate(schemes):
        mine = [results[p][j] for j in jobs]
        xs = [k + i * width for k in range(len(jobs))]
        bars = ax.bar(xs, [r.jct_s for r in mine], width, color=f"C{i % 10}", label=p)
        handles.append(bars)
        for bar, r in zip(bars, mine, strict=True):
            if r.failed:
                bar.set_hatch(FAILED_HATCH)
                bar.set_edgecolor("black")
                ax.annotate(
                    FAILED, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize="small", color="red",
                )  # fmt: skip
    if any(r.failed for per_job in results.values() for r in per_job.values()):
        handles.append(
            Patch(facecolor="white", edgecolor="black", hatch=FAILED_HATCH, label=FAILED)
        )
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(jobs))])
    ax.set_xticklabels([f"job {j}" for j in jobs])
    ax.set_ylabel("jct_s (job completion time, s)")
    ax.set_title(f"jct_s per job and scheme ({scenario.pool_size} slots)\nswitch: {switch}")
    ax.legend(handles=handles)
    fig.tight_layout()
    return fig


def plot(
    path: Path, scenario: Scenario, results: dict[str, dict[int, JobResult]], switch: str
) -> Path:
    import matplotlib.pyplot as plt

    fig = jct_figure(scenario, results, switch)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def fault_lines(events: list[FaultEvent], scenario: Scenario) -> str:
    """What each fault did, or that it was not reached; "" without faults."""
    if not scenario.faults:
        return ""
    lines = ["faults:"]
    done = {e.fault for e in events}
    for e in events:
        lines.append(f"  {e.fault} at {e.at_s:.1f} s: {e.what}{'' if e.ok else '  << FAILED'}")
    for f in scenario.faults:
        if f not in done:
            lines.append(f"  {f}: not reached (every job had ended)")
    return "\n".join(lines)
