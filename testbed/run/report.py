"""Per-job results of a run, the tables printed, and the files written."""

from __future__ import annotations

import csv
import json
import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from esa.job import JobSpec
from testbed.run.scenario import Scenario
from testbed.run.switches import SwitchKind

if TYPE_CHECKING:
    from testbed.run.inject import FaultEvent


@dataclass(frozen=True)
class JobResult:
    job: int
    jct_s: float
    iters_per_s: float
    chunks: int
    switch_share: float
    """share of the job's chunks whose sum completed in the switch."""
    fallbacks: int
    preempt_won: int
    preempt_suffered: int
    retransmits: int
    lost: int
    """frames the job's hosts' links dropped, both ways: their loss rules and
    the full queues of shaped links."""
    exact: bool
    """every worker received every iteration's exact sum (bit for bit)."""
    failed: str = ""
    """why the job did not finish ("" when it did)."""
    accuracy: float | None = None
    """test accuracy of a trained model (``--train torch``); None for synthetic jobs."""
    spurious: int = 0
    """retransmissions whose chunk's first transmissions were summed in the
    switch after all: timeouts that fired too early (``hosts.rto``)."""

    @classmethod
    def build(
        cls,
        job: JobSpec,
        workers: dict[tuple[int, int], dict[str, Any]],
        events: dict[str, int],
        exact: bool,
        lost: int = 0,
    ) -> JobResult:
        """From the workers' JSON reports and the job's switch counters."""
        mine = [r for (j, _), r in workers.items() if j == job.job]
        jct = max(float(r["jct_s"]) for r in mine)
        chunks = job.chunks * job.iterations
        retx = sum(int(r["counters"].get("retransmitted", 0)) for r in mine)
        spurious = sum(int(r["counters"].get("spurious", 0)) for r in mine)
        return cls(
            job=job.job,
            jct_s=jct,
            iters_per_s=job.iterations / jct,
            chunks=chunks,
            switch_share=min(1.0, events.get("completed", 0) / chunks),
            fallbacks=int(events.get("fallback", 0)),
            preempt_won=int(events.get("preempt_won", 0)),
            preempt_suffered=int(events.get("preempt_suffered", 0)),
            retransmits=retx,
            lost=lost,
            exact=exact,
            spurious=spurious,
        )

    @classmethod
    def failure(
        cls, job: JobSpec, elapsed_s: float, why: str, events: dict[str, int], lost: int = 0
    ) -> JobResult:
        """A job that did not finish: its counters so far and the reason."""
        chunks = job.chunks * job.iterations
        return cls(
            job=job.job,
            jct_s=elapsed_s,
            iters_per_s=0.0,
            chunks=chunks,
            switch_share=min(1.0, events.get("completed", 0) / chunks),
            fallbacks=int(events.get("fallback", 0)),
            preempt_won=int(events.get("preempt_won", 0)),
            preempt_suffered=int(events.get("preempt_suffered", 0)),
            retransmits=0,
            lost=lost,
            exact=False,
            failed=why,
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
            jct_s=sum(r.jct_s for r in rs) / n,
            iters_per_s=sum(r.iters_per_s for r in rs) / n,
            chunks=rs[0].chunks,
            switch_share=sum(r.switch_share for r in rs) / n,
            fallbacks=round(sum(r.fallbacks for r in rs) / n),
            preempt_won=round(sum(r.preempt_won for r in rs) / n),
            preempt_suffered=round(sum(r.preempt_suffered for r in rs) / n),
            retransmits=round(sum(r.retransmits for r in rs) / n),
            lost=round(sum(r.lost for r in rs) / n),
            exact=all(r.exact for r in rs),
            failed=next((r.failed for r in rs if r.failed), ""),
            accuracy=_mean_accuracy(rs),
            spurious=round(sum(r.spurious for r in rs) / n),
        )
    return out


def _mean_accuracy(rs: list[JobResult]) -> float | None:
    got = [r.accuracy for r in rs if r.accuracy is not None]
    return sum(got) / len(got) if got else None


def average_jct(results: dict[int, JobResult]) -> float:
    """Mean JCT of the jobs that finished (nan when none did)."""
    done = [r.jct_s for r in results.values() if not r.failed]
    return sum(done) / len(done) if done else math.nan


def rounds_table(runs: dict[str, list[dict[int, JobResult]]]) -> str:
    """Average JCT of every round, per policy, and their spread: the
    run-to-run noise any difference between policies must stand out from."""
    lines = ["", "average JCT per round (s)"]
    for policy, rounds in runs.items():
        avgs = [average_jct(r) for r in rounds]
        sd = statistics.stdev(avgs) if len(avgs) > 1 else 0.0
        lines.append(
            f"{policy:>12}: "
            + " ".join(f"{a:6.2f}" for a in avgs)
            + f"   mean {sum(avgs) / len(avgs):.2f}"
            + f"  spread {max(avgs) - min(avgs):.2f}  sd {sd:.2f}"
        )
    return "\n".join(lines)


def job_table(policy: str, scenario: Scenario, results: dict[int, JobResult], switch: str) -> str:
    """One row per job; with a column of test accuracy when a job trained a model."""
    trained = any(r.accuracy is not None for r in results.values())
    head = (
        f"{'job':>4} {'values':>8} {'JCT s':>8} {'iter/s':>7} {'in switch':>9} "
        f"{'fallback':>8} {'won':>6} {'lost':>6} {'retx':>6} {'early':>6} {'dropped':>7} "
        f"{'exact':>5}" + (f" {'accuracy':>8}" if trained else "")
    )
    lines = [f"policy {policy}; switch: {switch}", head]
    specs = {j.spec.job: j.spec for j in scenario.jobs}
    for job, r in sorted(results.items()):
        exact = "FAIL" if r.failed else ("yes" if r.exact else "NO")
        accuracy = f" {'-' if r.accuracy is None else f'{r.accuracy:.3f}':>8}" if trained else ""
        lines.append(
            f"{job:>4} {specs[job].values:>8} {r.jct_s:>8.2f} {r.iters_per_s:>7.2f} "
            f"{r.switch_share:>8.0%} {r.fallbacks:>8} {r.preempt_won:>6} "
            f"{r.preempt_suffered:>6} {r.retransmits:>6} {r.spurious:>6} {r.lost:>7} "
            f"{exact:>5}{accuracy}"
        )
    for job, r in sorted(results.items()):
        if r.failed:
            lines.append(f"job {job} FAILED: {r.failed}")
    lines.append(f"average JCT {average_jct(results):.2f} s (jobs that finished)")
    return "\n".join(lines)


def comparison_table(
    scenario: Scenario, results: dict[str, dict[int, JobResult]], switch: str
) -> str:
    policies = list(results)
    w = max(8, *(len(p) for p in policies))

    def cell(r: JobResult) -> str:
        return f"{'failed':>{w}}" if r.failed else f"{r.jct_s:>{w}.2f}"

    lines = [
        "",
        f"JCT per job (s); switch: {switch}",
        f"{'job':>4} " + " ".join(f"{p:>{w}}" for p in policies),
    ]
    for job in (j.spec.job for j in scenario.jobs):
        lines.append(f"{job:>4} " + " ".join(cell(results[p][job]) for p in policies))
    lines.append(f"{'avg':>4} " + " ".join(f"{average_jct(results[p]):>{w}.2f}" for p in policies))
    if "esa" in results:
        esa = average_jct(results["esa"])
        for p in policies:
            if p != "esa":
                lines.append(f"average JCT {p} / esa: {average_jct(results[p]) / esa:.2f}")
    return "\n".join(lines)


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
        {"policy": p, "switch": switch.name, **asdict(r)}
        for p, per_job in results.items()
        for r in per_job.values()
    ]
    rounds_path = out / "rounds.json"
    rounds_path.write_text(
        json.dumps(
            [
                {"policy": p, "switch": switch.name, "round": k + 1, **asdict(r)}
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


def plot(
    path: Path, scenario: Scenario, results: dict[str, dict[int, JobResult]], switch: str
) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = list(results)
    jobs = [j.spec.job for j in scenario.jobs]
    width = 0.8 / len(policies)
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, p in enumerate(policies):
        xs = [k + i * width for k in range(len(jobs))]
        ax.bar(xs, [results[p][j].jct_s for j in jobs], width, label=p)
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(jobs))])
    ax.set_xticklabels([f"job {j}" for j in jobs])
    ax.set_ylabel("JCT (s)")
    ax.set_title(f"JCT per job and policy ({scenario.pool_size} slots)\nswitch: {switch}")
    ax.legend()
    fig.tight_layout()
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
