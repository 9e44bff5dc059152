"""Which switch ``make run`` takes, and what it pushes to the reference switch."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.device.pipeline import pool_size_of
from esa.toolchain import missing_binaries
from runner import switches
from runner.paths import ROOT
from runner.switches import BMV2, MODEL


def test_without_the_toolchain_the_run_says_so_and_takes_the_reference_switch(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no p4c, no BMv2
    assert switches.choose(None) == (
        MODEL,
        "'p4c-bm2-ss' not found on PATH (see README.md, Prerequisites): running on the "
        "reference switch (esa.model) instead of BMv2 (same rules, same controller and "
        "hosts; --switch bmv2 insists on BMv2)",
    )
    assert switches.choose("model") == (MODEL, "")
    with pytest.raises(ValueError, match=r"^--switch bmv2: 'p4c-bm2-ss' not found on PATH"):
        switches.choose("bmv2")


@pytest.mark.skipif(
    missing_binaries(*switches.BMV2_BINARIES) is not None, reason="needs p4c and BMv2 on PATH"
)
def test_with_the_toolchain_bmv2_is_the_default() -> None:
    assert switches.choose(None) == (BMV2, "")
    assert switches.choose("model") == (MODEL, "")


def test_the_reference_switch_gets_the_committed_p4info_and_its_pool(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(switches, "BUILD", tmp_path)
    program = switches.build(MODEL, 64)
    assert program == switches.Program(
        MODEL, tmp_path / "model-pool64.json", ROOT / "p4src" / "esa.p4info.txtpb"
    )
    assert pool_size_of(program.device_config) == 64
