"""``make stop``: end a run left behind, and tidy what it left (see
``runner.lock``): the runs writing the default results directories, or
the one ``--out`` names.  Other ``make run`` flags are accepted and ignored,
so ``make stop RUN_ARGS=...`` takes the same flags as the run it stops.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from runner import lock
from runner.paths import CLI_OUT, RUN_OUT


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="make stop", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, action="append", help="the run's results directory")
    args, _ = ap.parse_known_args(argv)
    status = 0
    for out in args.out or [RUN_OUT, CLI_OUT]:
        try:
            for line in lock.stop(out.resolve()):
                print(line)
        except (OSError, RuntimeError) as e:
            print(f"make stop: {out}: {e}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
