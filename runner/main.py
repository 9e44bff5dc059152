"""`make run`: the scenario's jobs on Mininet under each scheme, with JCT tables;
with ``--cli``, the same world at a ``mininet>`` prompt and no jobs started.

The run happens in a private world (new network, PID and mount namespaces;
``runner.launch``) with a work directory of its own, so Mininet and the
switch touch no link, process or file outside it, and everything they
started ends with it, also on Ctrl-C, on leaving the prompt, and on ``make
stop`` (SIGTERM).  ``runner.batch`` runs the schemes one after the
other; ``runner.prompt`` is the prompt.

The switch is BMv2 where its toolchain is installed and the reference
switch otherwise (``--switch`` chooses; ``runner.switches``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import sys
from pathlib import Path

from esa import arguments
from esa.toolchain import missing_binaries
from runner import network as topo_mod
from runner import scenario as scn
from runner import switches, torchjobs
from runner.batch import Setup, run_batch
from runner.launch import PRIVATE_ENV, WORK_ENV, Stopped, launch, stop_on_signals
from runner.links import LinkError
from runner.network import Network
from runner.paths import CLI_OUT, RUN_OUT
from runner.prompt import prompt
from runner.switches import MODEL, SwitchKind


def missing(scenario: scn.Scenario, topo: Network, kind: SwitchKind, pcap: bool) -> str | None:
    if os.geteuid() != 0:
        return "make run needs root (network namespaces, Mininet)"
    need = ["unshare", "mnexec"]
    if any(a.link.overridden(scenario.link).loss_pct for a in topo.links):
        need.append("nft")
    if pcap and kind is MODEL:
        need.append("tcpdump")
    return missing_binaries(*need)


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = arguments.Parser(prog="make run", description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", type=Path, default=scn.DEFAULT)
    ap.add_argument(
        "--out", type=Path, help="results directory (default results/run; with --cli results/cli)"
    )
    ap.add_argument("--quiet", action="store_true", help="no live progress display")
    ap.add_argument(
        "--repeat",
        type=arguments.COUNT,
        default=1,
        help="rounds of all schemes; tables show the means",
    )
    ap.add_argument(
        "--switch",
        choices=sorted(switches.KINDS),
        help="BMv2, or the reference switch (model); default: BMv2 where p4c-bm2-ss and "
        "simple_switch_grpc are on PATH, else model",
    )
    ap.add_argument("--pcap", action="store_true", help="capture every switch port to <out>/pcaps/")
    ap.add_argument(
        "--trace",
        action="store_true",
        help="BMv2 logs every packet's way through the pipeline to logs/.../<switch>.log (slow)",
    )
    ap.add_argument(
        "--cli",
        action="store_true",
        help="start the network, switch and controller with no jobs and open the mininet> "
        "prompt (its first scheme); leaving the prompt stops everything",
    )
    scn.add_overrides(ap)
    return ap.parse_args(argv)


def run_cli(setup: Setup) -> int:
    with setup.world(Path()) as world:
        prompt(world, setup.args.scenario, setup.out)
    print("run: the prompt is closed; everything the run started is stopped")
    return 0


def inside(
    args: argparse.Namespace, scenario: scn.Scenario, topo: Network, kind: SwitchKind, out: Path
) -> int:
    """The run, in its private world."""
    stop_on_signals()
    for sub in ("logs", "pcaps"):  # the last run's: the directory is this run's now
        shutil.rmtree(out / sub, ignore_errors=True)
    try:
        program = switches.build(kind, scenario.pool_size)
        setup = Setup(args, scenario, topo, program, out, Path(os.environ[WORK_ENV]))
        return run_cli(setup) if args.cli else run_batch(setup)
    except (KeyboardInterrupt, Stopped):
        print("\nrun: interrupted; everything it started is stopped", file=sys.stderr)
        return 130
    except (LinkError, RuntimeError) as e:
        print(f"\nrun: {e}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    inner = os.environ.get(PRIVATE_ENV) == "1"
    # in the private world the scenario is read a second time: what reading
    # it says on stderr (a deprecated name) was said outside already
    quiet = contextlib.redirect_stderr(io.StringIO()) if inner else contextlib.nullcontext()
    try:
        with quiet:
            scenario = torchjobs.prepare(scn.apply_overrides(scn.load(args.scenario), args))
        topo = topo_mod.load(scenario.topology)
        topo_mod.assign(scenario, topo)
        topo_mod.check_faults(scenario, topo)
        kind, note = switches.choose(args.switch)
        if args.trace and kind is MODEL:
            raise ValueError("--trace: the reference switch logs no packet trace; --switch bmv2")
    except (OSError, ValueError) as e:
        print(f"run: {e}", file=sys.stderr)
        return 2
    why = missing(scenario, topo, kind, args.pcap)
    if why:
        print(f"run: {why}", file=sys.stderr)
        return 2
    out = (args.out or (CLI_OUT if args.cli else RUN_OUT)).resolve()
    if not inner:
        if note:
            print(f"run: {note}", file=sys.stderr, flush=True)
        return launch([*argv, "--switch", kind.name], out)
    return inside(args, scenario, topo, kind, out)


if __name__ == "__main__":
    sys.exit(main())
