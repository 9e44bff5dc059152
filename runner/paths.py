"""Where the test bed finds the project's files: the checkout it runs from
(the project is installed editable, so this is the source tree)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""The project's top directory."""
RUN_OUT = ROOT / "results" / "run"
"""Where ``make run`` writes its results."""
CLI_OUT = ROOT / "results" / "cli"
"""Where ``make run RUN_ARGS=--cli`` (``make cli``) writes its logs and captures."""
