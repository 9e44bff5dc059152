"""Running the ``esa-ctl`` CLI from tests, as a user would."""

from __future__ import annotations

import subprocess
import sys

from runner.paths import ROOT
from tests.wait import LIMIT_S


def esa_ctl(admin: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``esa-ctl --admin ADMIN ARGS...``, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "controller", "--admin", admin, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        timeout=LIMIT_S,
    )
