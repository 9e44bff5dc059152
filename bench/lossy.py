"""ESA against its baselines on a lossy network, on Mininet (issue 39).

    .venv/bin/python -m bench.lossy --switch model --loss 1 5 10 --rounds 3

Runs each scenario (``lossy.json`` and ``lossy-pool.json`` by default) at
each loss rate, each direction of every host link, under each scheme,
``--rounds`` times, one ``runner`` run per round, each round starting with
the next scheme (``rotated``); each round's PS reports are kept:
``<out>/<scenario>/loss<L>/r<N>/logs/<scheme>/j<job>ps<shard>.json``.
Prints one row per scenario, loss and scheme: the mean JCT over rounds
(each round's mean over jobs), the rounds' spread (slowest less fastest),
each job's JCT (mean over rounds: which job a scheme slows), whether every
sum was exact in every round, the PULLs each job's PS hosts sent (mean over
rounds, per job), the workers' retransmissions and those that came too
early (``retx`` / ``early``, the RTO's check), and the frames each host's
link dropped (the loss injected, counted by its nftables rules:
``logs/<scheme>/links.json``), mean over rounds, on the way up (from the
host) / down (to it), each host named by its roles: ``j1w0`` a worker,
``j1ps0`` a PS.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from runner.jobs import LINKS_FILE
from runner.paths import ROOT

SCENARIOS = ROOT / "mininet" / "scenarios"
DEFAULT_SCENARIOS = ("lossy.json", "lossy-pool.json")
SCHEMES = "esa,esa-equal,atp,static"


@dataclass
class Cell:
    """One scenario, loss and scheme: per round, the mean JCT; per job, its pulls."""

    jct: list[float] = field(default_factory=list)
    exact: bool = True
    failed: int = 0
    pulls: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    job_jct: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    """per job, per round: its JCT."""
    retx: int = 0
    early: int = 0
    dropped: dict[str, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))
    """per host, named by its roles, per round: frames its link dropped (up, down)."""


def pulls_of(logs: Path, job: int) -> int:
    """PULLs the PS hosts of ``job`` sent in one scheme's run."""
    return sum(json.loads(f.read_text())["ps"]["pulls_sent"] for f in logs.glob(f"j{job}ps*.json"))


def rotated(schemes: list[str], r: int) -> list[str]:
    """The schemes in the order round ``r`` (from 0) runs them: each round
    starts one further along, so no scheme always runs first (the load of a
    shared machine drifts within a round)."""
    k = r % len(schemes)
    return schemes[k:] + schemes[:k]


def one_round(
    args: argparse.Namespace, scenario: Path, loss: float, schemes: list[str], out: Path
) -> bool:
    cmd = [
        sys.executable, "-m", "runner", "--scenario", str(scenario), "--loss", f"{loss:g}",
        "--schemes", ",".join(schemes), "--repeat", "1", "--switch", args.switch,
        "--out", str(out),
    ]  # fmt: skip
    log = out.with_suffix(".log")
    out.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as f:
        done = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0 or not (out / "rounds.json").exists():
        print(f"  {out}: the run failed (exit {done.returncode}), see {log}", flush=True)
        return False
    return True


def collect(cells: dict[str, Cell], out: Path) -> None:
    rows = json.loads((out / "rounds.json").read_text())
    by_scheme: dict[str, list[dict[str, object]]] = defaultdict(list)
    for row in rows:
        by_scheme[str(row["scheme"])].append(row)
    for scheme, jobs in by_scheme.items():
        cell = cells.setdefault(scheme, Cell())
        if any(j["status"] != "done" for j in jobs):
            cell.failed += 1
            cell.exact = False
            continue
        cell.jct.append(statistics.fmean(float(str(j["jct_s"])) for j in jobs))
        cell.exact &= all(bool(j["exact"]) for j in jobs)
        cell.retx += sum(int(str(j["retx"])) for j in jobs)
        cell.early += sum(int(str(j["early"])) for j in jobs)
        for j in jobs:
            job = int(str(j["job"]))
            cell.pulls[job].append(pulls_of(out / "logs" / scheme, job))
            cell.job_jct[job].append(float(str(j["jct_s"])))
        for link in json.loads((out / "logs" / scheme / LINKS_FILE).read_text()).values():
            cell.dropped["+".join(link["roles"])].append((link["up"], link["down"]))


def role_order(roles: str) -> tuple[int, bool, int]:
    """By a host's first role's job, workers (``j<J>w<I>``) before PS hosts
    (``j<J>ps<S>``)."""
    m = re.match(r"j(\d+)(w|ps)(\d+)", roles)
    if m is None:
        raise ValueError(f"not a role: {roles}")
    return int(m[1]), m[2] == "ps", int(m[3])


def drops(cell: Cell) -> str:
    """Per link, mean over rounds: frames dropped up / down."""
    parts = []
    for role in sorted(cell.dropped, key=role_order):
        got = cell.dropped[role]
        up = statistics.fmean(u for u, _ in got)
        down = statistics.fmean(d for _, d in got)
        parts.append(f"{role} {up:.0f}/{down:.0f}")
    return ", ".join(parts)


def row(name: str, loss: float, scheme: str, cell: Cell) -> str:
    if not cell.jct:
        return f"| {name} | {loss:g} | {scheme} | failed | | | no | | | |"
    mean = statistics.fmean(cell.jct)
    spread = max(cell.jct) - min(cell.jct)
    pulls = " / ".join(f"{statistics.fmean(p):.0f}" for _, p in sorted(cell.pulls.items()))
    jobs = " / ".join(f"{statistics.fmean(t):.2f}" for _, t in sorted(cell.job_jct.items()))
    exact = "yes" if cell.exact and not cell.failed else f"no ({cell.failed} failed)"
    return (
        f"| {name} | {loss:g} | {scheme} | {mean:.2f} | {spread:.2f} | {jobs} | {exact} | {pulls} "
        f"| {cell.retx} / {cell.early} | {drops(cell)} |"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.lossy", description=__doc__)
    ap.add_argument("--switch", choices=("model", "bmv2"), default="model")
    ap.add_argument("--loss", type=float, nargs="+", default=[1.0, 5.0, 10.0], help="percent")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scenario", nargs="+", default=list(DEFAULT_SCENARIOS))
    ap.add_argument("--schemes", default=SCHEMES)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "lossy")
    args = ap.parse_args(argv)
    print(
        "| scenario | loss % | scheme | mean JCT s | rounds' spread s | JCT per job s | exact "
        "| PS pulls per job | retx / early | frames dropped per link, up / down |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|", flush=True)
    schemes = args.schemes.split(",")
    for name in args.scenario:
        scenario = Path(name) if Path(name).exists() else SCENARIOS / name
        for loss in args.loss:
            cells: dict[str, Cell] = {}
            for r in range(1, args.rounds + 1):
                out = args.out / args.switch / scenario.stem / f"loss{loss:g}" / f"r{r}"
                if one_round(args, scenario, loss, rotated(schemes, r - 1), out):
                    collect(cells, out)
            for scheme in schemes:
                print(row(scenario.stem, loss, scheme, cells.get(scheme, Cell())), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
