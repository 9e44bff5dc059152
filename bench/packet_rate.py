"""How fast the packet model runs: packets through the switch per CPU
second, on this tree and, with ``--ref``, on another commit's, in one run.

    .venv/bin/python -m bench.packet_rate --ref 287acef

The case is fixed: four jobs of 2 to 8 workers, 1,800 to 4,500 chunks an
iteration and two iterations each, one PS host per job, workers up to 2 us
apart with each contribution spread 1 us, the barrier, a pool of 256
slots (smaller than the jobs' windows together), under ``--schemes``.  A
packet is one ``SwitchModel.process`` call.  The rate is over CPU time, not
wall time: the machine may be shared.  With ``--ref`` the same case runs
in a subprocess on ``git archive REF``'s tree (this file, that tree's
``sim`` and ``esa``), and the two trees' JCTs are compared: a faster model
that changed a JCT would be a different model.  Each tree runs
``--rounds`` times, the two alternately, and each scheme's least CPU time
counts: on a shared machine a run's CPU time grows with the load (the
caches and the cores are shared), and the least is the one least slowed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from esa import arguments
from esa.job import JobSpec
from esa.schemes import Scheme
from sim.packet import PacketSim
from sim.params import Net

POOL = 256
NET = Net(ps_shards=1, ps_stall_ns=20e3, lag_ns=2000.0, esa_homes=True, barrier=True)
SCHEMES = ("esa-aging", "atp", "static-bdp")


def jobs() -> list[JobSpec]:
    shapes = ((4, 3000, 10), (4, 1800, 200), (2, 4500, 100), (8, 2400, 50))
    return [
        JobSpec(i + 1, w, 32 * chunks, 2, prio, 50e-6 * i, 5e-3, 0.15)
        for i, (w, chunks, prio) in enumerate(shapes)
    ]


def measure(*schemes: str) -> dict[str, dict[str, object]]:
    """Per scheme: packets the switch processed, CPU and wall seconds, JCTs."""
    out: dict[str, dict[str, object]] = {}
    for name in schemes:
        sim = PacketSim(jobs(), POOL, Scheme(name), NET)
        cpu, wall = time.process_time(), time.perf_counter()
        jct = sim.run()
        out[name] = {
            "packets": sum(sim.verdicts.values()),
            "cpu_s": time.process_time() - cpu,
            "wall_s": time.perf_counter() - wall,
            "jct": [jct[j] for j in sorted(jct)],
        }
    return out


@contextlib.contextmanager
def ref_tree(ref: str | None) -> Iterator[str | None]:
    """``git archive REF``'s tree in a temporary directory (None: no ref)."""
    if ref is None:
        yield None
        return
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="packet-rate-") as tree:
        archive = subprocess.run(
            ["git", "-C", str(root), "archive", ref], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
        yield tree


def on_tree(tree: str, path: str, function: str, *args: str) -> Any:
    """``function(*args)`` of the module file at ``path`` (of this tree), run
    in a subprocess with ``tree`` first on the path, so its ``sim`` and
    ``esa`` are that tree's; its JSON result."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, path, function, *args],
        env=dict(os.environ, PYTHONPATH=tree),
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout)


def fastest(rounds: list[dict[str, dict[str, object]]]) -> dict[str, dict[str, object]]:
    """Per scheme, the round of least CPU time; every round's JCTs must agree."""
    out: dict[str, dict[str, object]] = {}
    for name in rounds[0]:
        runs = [r[name] for r in rounds]
        if any(r["jct"] != runs[0]["jct"] for r in runs):
            raise RuntimeError(f"{name}: the JCTs differ between rounds of one tree")
        out[name] = min(runs, key=lambda r: float(str(r["cpu_s"])))
    return out


_CHILD = (
    "import importlib.util, json, sys\n"
    "spec = importlib.util.spec_from_file_location('on_tree', sys.argv[1])\n"
    "mod = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(mod)\n"
    "print(json.dumps(getattr(mod, sys.argv[2])(*sys.argv[3:])))\n"
)
"""``on_tree``'s child: loads a module by path and prints a function's result."""


def rate(run: dict[str, object]) -> float:
    return float(str(run["packets"])) / float(str(run["cpu_s"]))


def report(label: str, runs: dict[str, dict[str, object]]) -> float:
    """One line per scheme and the total; returns the total rate."""
    for name, run in runs.items():
        print(
            f"{label:<8} {name:<11} {run['packets']:>9,} packets {float(str(run['cpu_s'])):7.2f} "
            f"CPU s {float(str(run['wall_s'])):7.2f} wall s {rate(run):>9,.0f} packets/CPU s"
        )
    packets = sum(int(str(r["packets"])) for r in runs.values())
    cpu = sum(float(str(r["cpu_s"])) for r in runs.values())
    print(f"{label:<8} {'all':<11} {packets:>9,} packets {cpu:7.2f} CPU s {packets / cpu:>26,.0f}")
    return packets / cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ref", help="also run the case on this commit's tree, and compare")
    ap.add_argument(
        "--schemes", nargs="+", default=list(SCHEMES), choices=[s.value for s in Scheme]
    )
    ap.add_argument(
        "--rounds",
        type=arguments.at_least("rounds", 1),
        default=3,
        help="measure each tree this many times, the trees alternately, and keep "
        "each scheme's least CPU time (default 3): a loaded machine slows some "
        "runs more than others",
    )
    args = ap.parse_args(argv)
    befores, afters = [], []
    with ref_tree(args.ref) as tree:
        for _ in range(args.rounds):
            if tree is not None:
                befores.append(on_tree(tree, __file__, "measure", *args.schemes))
            afters.append(measure(*args.schemes))
    before = fastest(befores) if befores else None
    after = fastest(afters)
    if before is not None:
        old = report(args.ref, before)
    new = report("this", after)
    if before is None:
        return 0
    differ = [s for s in args.schemes if before[s]["jct"] != after[s]["jct"]]
    print(f"this / {args.ref}: {new / old:.2f}x the packets per CPU second")
    print(jct_line(args.schemes, differ))
    return 1 if differ else 0


def jct_line(schemes: list[str], differ: list[str]) -> str:
    """Which schemes' JCTs the two trees share; a scheme whose JCTs differ
    ran another model (another switch rule, or a defect)."""
    if not differ:
        return "JCTs: identical in every scheme"
    same = [s for s in schemes if s not in differ]
    kept = f"identical in {', '.join(same)}; " if same else ""
    return f"JCTs: {kept}DIFFERENT in {', '.join(differ)}"


if __name__ == "__main__":
    raise SystemExit(main())
