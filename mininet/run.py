"""`make run`: the scenario's jobs on Mininet under each policy, with JCT tables.

The run happens in a private world (new network, PID and mount namespaces)
with a work directory of its own, so Mininet and BMv2 touch no link,
process or file outside it, and everything they started ends with it, also
on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import report  # noqa: E402
import scenario as scn  # noqa: E402
from testbed import Testbed  # noqa: E402

from esa.toolchain import compile_p4  # noqa: E402

PRIVATE_ENV = "ESA_RUN_PRIVATE"


def enter_private_world(argv: list[str]) -> int:
    """Re-run this script inside fresh network, PID and mount namespaces."""
    inner = 'ip link set lo up && exec "$@"'
    cmd = [
        "unshare", "--net", "--pid", "--mount", "--fork", "--mount-proc",
        "--propagation", "private", "--", "bash", "-c", inner, "bash",
        sys.executable, str(Path(__file__).resolve()), *argv,
    ]  # fmt: skip
    env = {**os.environ, PRIVATE_ENV: "1"}
    proc = subprocess.Popen(cmd, env=env)
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            # Ctrl-C reached the run inside too; wait while it stops everything
            continue


def missing() -> str | None:
    if os.geteuid() != 0:
        return "make run needs root (network namespaces, Mininet)"
    for b in ("p4c-bm2-ss", "simple_switch_grpc", "unshare", "mnexec"):
        if shutil.which(b) is None:
            return f"'{b}' not found on PATH (see README.md, Prerequisites)"
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", type=Path, default=HERE / "scenarios" / "default.json")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "run", help="results directory")
    ap.add_argument("--quiet", action="store_true", help="no live progress display")
    ap.add_argument(
        "--repeat", type=int, default=1, help="rounds of all policies; tables show the means"
    )
    scn.add_overrides(ap)
    args = ap.parse_args(argv)
    why = missing()
    if why:
        print(f"run: {why}", file=sys.stderr)
        return 2
    if os.environ.get(PRIVATE_ENV) != "1":
        return enter_private_world(argv)

    scenario = scn.apply_overrides(scn.load(args.scenario), args)
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    json_path, p4info = compile_p4(
        ROOT / "p4src" / "esa.p4", ROOT / "build" / "run", scenario.pool_size
    )
    runs: dict[str, list[dict[int, report.JobResult]]] = {p: [] for p in scenario.policies}
    started = time.monotonic()
    try:
        for rnd in range(args.repeat):
            for policy in scenario.policies:
                tag = f"round {rnd + 1}/{args.repeat}, " if args.repeat > 1 else ""
                print(f"\n=== policy {policy}: {tag}{len(scenario.jobs)} jobs, "
                      f"{scenario.pool_size} slots ===", flush=True)  # fmt: skip
                logs = args.out / "logs" / policy
                if args.repeat > 1:
                    logs = logs / f"round{rnd + 1}"
                with (
                    tempfile.TemporaryDirectory(prefix="esa-run-") as work,
                    Testbed(scenario, json_path, p4info, logs, Path(work)) as bed,
                ):
                    runs[policy].append(bed.run(policy, live=not args.quiet))
                print(report.job_table(policy, scenario, runs[policy][-1]), flush=True)
    except KeyboardInterrupt:
        print("\nrun: interrupted; everything it started is stopped", file=sys.stderr)
        return 130
    results = {p: report.mean_of(r) for p, r in runs.items()}
    if args.repeat > 1:
        print(report.rounds_table(runs))
    print(report.comparison_table(scenario, results))
    wrong = [(p, j) for p, per_job in results.items() for j, r in per_job.items() if not r.exact]
    written = report.write(args.out, scenario, results, runs)
    print(f"\nwrote {', '.join(str(p) for p in written)}")
    print(f"total time {time.monotonic() - started:.0f} s")
    (args.out / "scenario.json").write_text(json.dumps(scn.as_json(scenario), indent=2))
    if wrong:
        print(f"run: sums not exact for (policy, job) {wrong}", file=sys.stderr)
        return 1
    print("every worker received every exact sum (bit for bit)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
