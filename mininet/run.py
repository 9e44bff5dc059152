"""`make run`: ESA against ATP and static partitions on Mininet, on BMv2 or the
reference switch; `make cli` (``--cli``): the same world at the mininet> prompt.

The run itself lives in ``testbed.run`` (see its ``main``); this launcher
is what ``make run`` calls, with the scenarios and topologies beside it.
"""

from __future__ import annotations

import sys

from testbed.run.main import main

if __name__ == "__main__":
    sys.exit(main())
