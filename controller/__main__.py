"""``python -m controller``: ``esa-ctl``."""

import sys

from controller.api.cli import main

sys.exit(main())
