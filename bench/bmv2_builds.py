"""BMv2's default build against a performance build, in one run on one
machine: the highest packet rates ``bench.dataplane_rate`` finds and the
time of a training step through the switch (``bench.torch_overlap``).

Each build is a directory holding its ``simple_switch_grpc``; the run puts
it first on ``PATH`` for that build's measurements, so everything else (the
program, p4c, the hosts) is the same.  docs/run.md, "BMv2 for speed", says
how to build one::

    .venv/bin/python -m bench.bmv2_builds \\
        --build default=/usr/local/bin --build performance=/opt/bmv2-perf/bin

A build without BMv2's logging macros logs no packet trace (``make run
--trace``); the table says which build logs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from runner.paths import ROOT

SWITCH = "simple_switch_grpc"
RATE = re.compile(r"^(?P<name>.+?)\s+(?P<rate>\d+) pkt/s$")
TRACE_ON = "#define BM_LOG_TRACE_ON"


def build_arg(text: str) -> tuple[str, Path]:
    """``NAME=DIR``, ``DIR`` holding ``simple_switch_grpc``."""
    name, sep, where = text.partition("=")
    if not sep or not name or not where:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=DIR")
    path = Path(where)
    if not (path / SWITCH).is_file():
        raise argparse.ArgumentTypeError(f"{text!r}: no {SWITCH} in {path}")
    return name, path


def env_for(bindir: Path) -> dict[str, str]:
    return {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}


def logs_packets(bindir: Path) -> str:
    """Whether this build logs a packet trace: its installed configuration
    header (``<prefix>/include/bm/config.h``) defines ``BM_LOG_TRACE_ON``
    unless BMv2 was configured with ``--disable-logging-macros``."""
    config = bindir.parent / "include" / "bm" / "config.h"
    if not config.is_file():
        return f"unknown (no {config})"
    return "yes" if TRACE_ON in config.read_text() else "no"


def rates(bindir: Path, seconds: float) -> dict[str, float]:
    cmd = [sys.executable, "-m", "bench.dataplane_rate", "--seconds", str(seconds)]
    out = subprocess.run(cmd, env=env_for(bindir), cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"bench.dataplane_rate under {bindir} failed:\n{out.stderr}")
    found = {}
    for line in out.stdout.splitlines():
        m = RATE.match(line.strip())
        if m:
            found[m["name"]] = float(m["rate"])
    return found


def step(bindir: Path, steps: int) -> dict[str, float]:
    cmd = [sys.executable, "-m", "bench.torch_overlap", "--json", "--steps", str(steps)]
    out = subprocess.run(cmd, env=env_for(bindir), cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"bench.torch_overlap under {bindir} failed:\n{out.stderr}")
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return {f"step ms, {m}": float(got[m]["step_ms"]) for m in ("esa", "gloo")}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.bmv2_builds", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--build", type=build_arg, action="append", required=True, metavar="NAME=DIR",
        help="a build's name and the directory of its simple_switch_grpc (twice or more)",
    )  # fmt: skip
    ap.add_argument("--seconds", type=float, default=1.5, help="one rate trial (dataplane_rate)")
    ap.add_argument("--steps", type=int, default=50, help="timed steps (torch_overlap)")
    args = ap.parse_args(argv)
    names = [n for n, _ in args.build]
    if len(set(names)) != len(names):
        ap.error("argument --build: each build needs a name of its own")
    table: dict[str, dict[str, str]] = {}
    for name, bindir in args.build:
        print(f"bench.bmv2_builds: {name} ({bindir})", file=sys.stderr, flush=True)
        col = {"logs a packet trace": logs_packets(bindir)}
        col |= {f"{k}, pkt/s": f"{v:,.0f}" for k, v in rates(bindir, args.seconds).items()}
        col |= {k: f"{v:.1f}" for k, v in step(bindir, args.steps).items()}
        table[name] = col
    rows = list(dict.fromkeys(r for col in table.values() for r in col))
    print("| measure | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for r in rows:
        print(f"| {r} | " + " | ".join(table[n].get(r, "-") for n in names) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
