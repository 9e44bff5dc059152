"""`make run` (``python -m runner``): ESA against ATP and static partitions on
Mininet, on BMv2 or the reference switch; `make cli` (``--cli``): the same
world at the mininet> prompt.  Scenarios and topologies are data, in
``mininet/scenarios`` and ``mininet/topologies``."""

from __future__ import annotations

import sys

from runner.main import main

if __name__ == "__main__":
    sys.exit(main())
