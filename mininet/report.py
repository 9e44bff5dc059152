"""Per-job results of a run, the tables printed, and the files written."""

from __future__ import annotations

import csv
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from scenario import JobSpec, Scenario

from esa import wire


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
    exact: bool
    """every worker received every iteration's exact sum (bit for bit)."""

    @classmethod
    def build(
        cls,
        job: JobSpec,
        workers: dict[tuple[int, int], dict[str, Any]],
        stats: dict[str, Any],
        exact: bool,
    ) -> JobResult:
        mine = [r for (j, _), r in workers.items() if j == job.job]
        jct = max(float(r["jct_s"]) for r in mine)
        ev = stats["jobs"].get(str(job.job), {})
        chunks = -(-job.values // wire.K) * job.iterations
        retx = sum(int(r["counters"].get("retransmitted", 0)) for r in mine)
        return cls(
            job=job.job,
            jct_s=jct,
            iters_per_s=job.iterations / jct,
            chunks=chunks,
            switch_share=min(1.0, ev.get("completed", 0) / chunks),
            fallbacks=int(ev.get("fallback", 0)),
            preempt_won=int(ev.get("preempt_won", 0)),
            preempt_suffered=int(ev.get("preempt_suffered", 0)),
            retransmits=retx,
            exact=exact,
        )


def mean_of(rounds: list[dict[int, JobResult]]) -> dict[int, JobResult]:
    """Per job, the mean of each number over rounds; exact only if every round was."""
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
            exact=all(r.exact for r in rs),
        )
    return out


def rounds_table(runs: dict[str, list[dict[int, JobResult]]]) -> str:
    """Average JCT of every round, per policy: the run-to-run spread."""
    lines = ["", "average JCT per round (s)"]
    for policy, rounds in runs.items():
        avgs = [average_jct(r) for r in rounds]
        lines.append(
            f"{policy:>7}: "
            + " ".join(f"{a:6.2f}" for a in avgs)
            + f"   mean {sum(avgs) / len(avgs):.2f}"
        )
    return "\n".join(lines)


def job_table(policy: str, scenario: Scenario, results: dict[int, JobResult]) -> str:
    head = (
        f"{'job':>4} {'values':>8} {'JCT s':>8} {'iter/s':>7} {'in switch':>9} "
        f"{'fallback':>8} {'won':>6} {'lost':>6} {'retx':>6} {'exact':>5}"
    )
    lines = [f"policy {policy}", head]
    specs = {j.job: j for j in scenario.jobs}
    for job, r in sorted(results.items()):
        lines.append(
            f"{job:>4} {specs[job].values:>8} {r.jct_s:>8.2f} {r.iters_per_s:>7.2f} "
            f"{r.switch_share:>8.0%} {r.fallbacks:>8} {r.preempt_won:>6} "
            f"{r.preempt_suffered:>6} {r.retransmits:>6} {'yes' if r.exact else 'NO':>5}"
        )
    lines.append(f"average JCT {average_jct(results):.2f} s")
    return "\n".join(lines)


def average_jct(results: dict[int, JobResult]) -> float:
    return sum(r.jct_s for r in results.values()) / len(results)


def comparison_table(scenario: Scenario, results: dict[str, dict[int, JobResult]]) -> str:
    policies = list(results)
    lines = ["", "JCT per job (s)", f"{'job':>4} " + " ".join(f"{p:>8}" for p in policies)]
    for job in scenario.jobs:
        lines.append(
            f"{job.job:>4} " + " ".join(f"{results[p][job.job].jct_s:>8.2f}" for p in policies)
        )
    lines.append(f"{'avg':>4} " + " ".join(f"{average_jct(results[p]):>8.2f}" for p in policies))
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
) -> list[Path]:
    """jobs.csv and jobs.json (means over rounds), rounds.json (every round), jct.png."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [{"policy": p, **asdict(r)} for p, per_job in results.items() for r in per_job.values()]
    rounds_path = out / "rounds.json"
    rounds_path.write_text(
        json.dumps(
            [
                {"policy": p, "round": k + 1, **asdict(r)}
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
    return [csv_path, json_path, rounds_path, plot(out / "jct.png", scenario, results)]


def plot(path: Path, scenario: Scenario, results: dict[str, dict[int, JobResult]]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = list(results)
    jobs = [j.job for j in scenario.jobs]
    width = 0.8 / len(policies)
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, p in enumerate(policies):
        xs = [k + i * width for k in range(len(jobs))]
        ax.bar(xs, [results[p][j].jct_s for j in jobs], width, label=p)
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(jobs))])
    ax.set_xticklabels([f"job {j}" for j in jobs])
    ax.set_ylabel("JCT (s)")
    ax.set_title(f"JCT per job and policy ({scenario.pool_size} slots)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
