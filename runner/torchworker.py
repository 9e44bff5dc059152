"""What a worker host runs under ``make run --train torch``: the job's DDP
script as a child process, its hook's report and progress wired to the run::

    python -m runner.torchworker [--epochs] -- COMMAND...

The script gets this process's environment (torchrun's variables and the
job's ``ESA_*`` settings, which the run sets, ``runner.torchjobs``)
plus ``ESA_REPORT``, a file the hook writes its report to at exit, and
``ESA_PROGRESS_FD``, a pipe the hook writes each finished step's number to
(``hosts.torch.hook``); a socket it was given (``ESA_BIND_FD``) is passed
on.  Everything the script prints goes to this process's stderr, the
worker's log.  On stdout, which the run reads, this process prints only:

- ``step N`` for every DDP step the hook summed (every all-reduce of an
  ``esa`` process group), however many the script runs (the run's
  progress, ``runner.stall``);
- with ``--epochs``, each line of the script's that starts with ``epoch ``
  (the example prints one per epoch: what its job's ``iterations`` count);
- at the end, the hook's report as one JSON line, with the ``accuracy`` of
  the last JSON object the script printed that has one.

It exits with the script's status (the log ends with the hook's report
after a script that succeeded, and with the script's own last words after
one that failed); a script that exits 0 without a report (it never
summed through ESA: no hook, no ``esa`` process group) fails, saying so.
The script dies with this process (``PR_SET_PDEATHSIG``): a run that kills
a worker, or ends, ends its training.  Standard library only: it starts before the script
imports torch.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from runner.lines import Lines

EPOCH = "epoch "
"""how the lines start that the run counts as epochs (``--epochs``)."""
STEP = "step "
"""how the lines start that say the hook summed a step."""
PR_SET_PDEATHSIG = 1
"""prctl(2): the signal a process gets when its parent ends."""
NO_REPORT = (
    "run: {script} ended without an ESA report: it must sum through ESA, with the ESA hook "
    "on its DDP model (hosts.torch.hook.register(model)) or the esa process group "
    "(import hosts.torch.backend; dist.init_process_group('esa'))"
)


def _die_with(parent: int) -> Callable[[], None]:
    """For the child, before it runs the script: SIGKILL when ``parent`` ends."""

    def setup() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0 or os.getppid() != parent:
            os._exit(1)

    return setup


def inherited() -> tuple[int, ...]:
    """The socket this process was given for the worker (``ESA_BIND_FD``),
    which the script takes over."""
    fd = os.environ.get("ESA_BIND_FD", "").strip()
    return (int(fd),) if fd.isdigit() else ()


def script_name(command: Sequence[str]) -> str:
    """The script of ``python SCRIPT ...`` or ``python -m MODULE ...``."""
    if len(command) > 2 and command[1] == "-m":
        return command[2]
    return command[1] if len(command) > 1 else command[0]


def accuracy_of(line: str) -> float | None:
    """The ``accuracy`` of a JSON object on ``line``, if it is one and has a number there."""
    if not line.lstrip().startswith("{"):
        return None
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    value = obj.get("accuracy") if isinstance(obj, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


class Relay:
    """Turns what the script and its hook say into what the run reads."""

    def __init__(self, epochs: bool) -> None:
        self.epochs = epochs
        self.accuracy: float | None = None

    def script_line(self, line: str) -> None:
        print(line, file=sys.stderr, flush=True)
        if self.epochs and line.startswith(EPOCH):
            print(line, flush=True)
        got = accuracy_of(line)
        if got is not None:
            self.accuracy = got

    def step_line(self, line: str) -> None:
        if line.strip():
            print(f"{STEP}{line.strip()}", flush=True)

    def report(self, path: Path) -> dict[str, Any] | None:
        """The hook's report with the script's accuracy, or None if it wrote none."""
        try:
            report: dict[str, Any] = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        if self.accuracy is not None:
            report["accuracy"] = self.accuracy
        return report


def pump(handlers: dict[int, Callable[[str], None]]) -> None:
    """Hand every line read from each descriptor to its handler, until all end."""
    lines, open_fds = Lines(), set(handlers)
    while open_fds:
        ready, _, _ = select.select(list(open_fds), [], [])
        for fd in ready:
            whole, ended = lines.take(fd)
            for line in whole:
                handlers[fd](line)
            if ended:
                open_fds.discard(fd)


def run(command: Sequence[str], epochs: bool) -> int:
    relay = Relay(epochs)
    with tempfile.TemporaryDirectory(prefix="esa-worker-") as tmp:
        report = Path(tmp) / "report.json"
        steps_r, steps_w = os.pipe()
        env = {**os.environ, "ESA_REPORT": str(report), "ESA_PROGRESS_FD": str(steps_w)}
        try:
            child = subprocess.Popen(
                list(command), env=env, stdout=subprocess.PIPE,
                pass_fds=(steps_w, *inherited()), preexec_fn=_die_with(os.getpid()),
            )  # fmt: skip
        except OSError as e:
            print(f"run: can not start {' '.join(command)}: {e}", file=sys.stderr)
            return 127
        finally:
            os.close(steps_w)
        assert child.stdout is not None
        try:
            pump({child.stdout.fileno(): relay.script_line, steps_r: relay.step_line})
        finally:
            os.close(steps_r)
        code = child.wait()
        got = relay.report(report)
    if got is None and code == 0:
        print(NO_REPORT.format(script=script_name(command)), file=sys.stderr)
        return 1
    if got is not None:
        if code == 0:  # a failed script's last words stay last in its log
            print(f"report: {json.dumps(got)}", file=sys.stderr, flush=True)
        print(json.dumps(got), flush=True)
    return code if code >= 0 else 128 - code


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" not in args:
        print("usage: python -m runner.torchworker [OPTIONS] -- COMMAND...", file=sys.stderr)
        return 2
    cut = args.index("--")
    ap = argparse.ArgumentParser(
        prog="python -m runner.torchworker", description=__doc__.splitlines()[0]
    )
    ap.add_argument(
        "--epochs",
        action="store_true",
        help="also relay the script's lines that start with 'epoch ' (the example's epochs)",
    )
    opts = ap.parse_args(args[:cut])
    command = args[cut + 1 :]
    if not command:
        ap.error("no command after --")
    return run(command, opts.epochs)


if __name__ == "__main__":
    sys.exit(main())
