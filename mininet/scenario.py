"""A run's scenario: jobs, pool, links and policies, from a JSON file and flags."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from esa import wire
from esa.spec import MAX_PRIORITY

POLICIES = ("esa", "atp", "static")


@dataclass(frozen=True)
class JobSpec:
    job: int
    workers: int
    values: int
    iterations: int
    priority: int | None = None
    """static priority; None means the controller's automatic (SRPT) priority."""

    @property
    def volume_bytes(self) -> int:
        return 4 * self.values * self.iterations


@dataclass(frozen=True)
class Link:
    bw_mbps: float | None = None
    delay_ms: float = 0.0
    loss_pct: float = 0.0


@dataclass(frozen=True)
class Scenario:
    jobs: tuple[JobSpec, ...]
    pool_size: int = 64
    policies: tuple[str, ...] = POLICIES
    link: Link = field(default_factory=Link)
    stale_us: int = 20_000
    window: int = 32
    rto_s: float = 0.05
    description: str = ""


def _error(msg: str) -> ValueError:
    return ValueError(f"scenario: {msg}")


def parse_job(raw: dict[str, Any]) -> JobSpec:
    unknown = set(raw) - {"job", "workers", "values", "iterations", "priority", "size_hint"}
    if unknown:
        raise _error(f"job entry has unknown field(s): {', '.join(sorted(unknown))}")
    job = JobSpec(
        job=int(raw["job"]),
        workers=int(raw["workers"]),
        values=int(raw["values"]),
        iterations=int(raw["iterations"]),
        priority=None if raw.get("size_hint") else int(raw.get("priority", 0)),
    )
    if not 1 <= job.job <= wire.MAX_JOB_ID:
        raise _error(f"job id {job.job} is outside 1..{wire.MAX_JOB_ID}")
    if not 2 <= job.workers <= wire.MAX_WORKERS:
        raise _error(f"job {job.job}: workers must be 2..{wire.MAX_WORKERS}")
    if job.values < 1 or job.iterations < 1:
        raise _error(f"job {job.job}: values and iterations must be positive")
    if job.priority is not None and not 0 <= job.priority <= MAX_PRIORITY:
        raise _error(f"job {job.job}: priority must be 0..{MAX_PRIORITY}")
    return job


def load(path: Path) -> Scenario:
    raw = json.loads(path.read_text())
    jobs = tuple(parse_job(j) for j in raw["jobs"])
    if len({j.job for j in jobs}) != len(jobs):
        raise _error("job ids must be distinct")
    policies = tuple(raw.get("policies", POLICIES))
    bad = [p for p in policies if p not in POLICIES]
    if bad:
        raise _error(f"unknown policy {bad[0]!r} (known: {', '.join(POLICIES)})")
    return Scenario(
        jobs=jobs,
        pool_size=int(raw.get("pool_size", 64)),
        policies=policies,
        link=Link(**raw.get("link", {})),
        stale_us=int(raw.get("stale_us", 20_000)),
        window=int(raw.get("window", 32)),
        rto_s=float(raw.get("rto_s", 0.05)),
        description=str(raw.get("description", "")),
    )


def add_overrides(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--pool", type=int, help="slots in the switch")
    ap.add_argument("--policies", help="comma-separated subset of esa,atp,static")
    ap.add_argument("--iterations", type=int, help="iterations of every job")
    ap.add_argument("--scale", type=float, help="multiply every job's tensor size")
    ap.add_argument("--bw", type=float, help="link bandwidth, Mbit/s")
    ap.add_argument("--delay", type=float, help="link delay, ms")
    ap.add_argument("--loss", type=float, help="link loss, percent")


def apply_overrides(s: Scenario, args: argparse.Namespace) -> Scenario:
    if args.pool is not None:
        s = replace(s, pool_size=args.pool)
    if args.policies:
        s = replace(s, policies=tuple(args.policies.split(",")))
    if args.iterations is not None:
        s = replace(s, jobs=tuple(replace(j, iterations=args.iterations) for j in s.jobs))
    if args.scale is not None:
        s = replace(
            s, jobs=tuple(replace(j, values=max(1, int(j.values * args.scale))) for j in s.jobs)
        )
    link = s.link
    if args.bw is not None:
        link = replace(link, bw_mbps=args.bw)
    if args.delay is not None:
        link = replace(link, delay_ms=args.delay)
    if args.loss is not None:
        link = replace(link, loss_pct=args.loss)
    return replace(s, link=link)


def as_json(s: Scenario) -> dict[str, Any]:
    return asdict(s)
