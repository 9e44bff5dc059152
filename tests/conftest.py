"""Skips tests whose toolchain or privileges are missing, naming what is missing."""

from __future__ import annotations

import pytest

from tests.bmv2 import missing_binaries, missing_bmv2
from tests.netns import missing_root


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    checks = {
        "bmv2": missing_bmv2,
        "p4c": lambda: missing_binaries("p4c-bm2-ss"),
        "netns": missing_root,
    }
    for item in items:
        for marker, check in checks.items():
            if marker in item.keywords:
                reason = check()
                if reason:
                    item.add_marker(pytest.mark.skip(reason=reason))
                    break
