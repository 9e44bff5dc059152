"""Which switch a run uses, and the program the controller pushes to it.

``bmv2`` is simple_switch_grpc running p4src/esa.p4 as p4c compiles it;
``model`` is the reference switch (``refswitch.main``): the same rules
executed by ``esa.model``, for machines without the P4 toolchain.  Without
p4c there is no compiled P4Info, so the reference switch is given the
committed ``p4src/esa.p4info.txtpb`` (a test holds it equal to what p4c
gives) and, as device config, the least BMv2 JSON that states the pool size.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from esa.target import device_config
from esa.toolchain import compile_p4, missing_binaries
from runner.paths import ROOT

BMV2_BINARIES = ("p4c-bm2-ss", "simple_switch_grpc", "simple_switch_CLI")
COMMITTED_P4INFO = ROOT / "p4src" / "esa.p4info.txtpb"
BUILD = ROOT / "build" / "run"


@dataclass(frozen=True)
class SwitchKind:
    name: str
    """``bmv2`` or ``model``: the value of ``--switch``."""
    label: str
    """how tables and pictures name it."""


BMV2 = SwitchKind("bmv2", "BMv2 (simple_switch_grpc)")
MODEL = SwitchKind("model", "reference switch (esa.model)")
KINDS = {k.name: k for k in (BMV2, MODEL)}


@dataclass(frozen=True)
class Program:
    kind: SwitchKind
    device_config: Path
    """the BMv2 JSON (bmv2) or the reference switch's device config (model)."""
    p4info: Path


def choose(requested: str | None) -> tuple[SwitchKind, str]:
    """The switch to run on, and a note when it is not the one a user would
    expect: BMv2 where its toolchain is on PATH, else the reference switch.
    ``--switch bmv2`` without the toolchain raises ValueError, naming what
    is missing."""
    missing = missing_binaries(*BMV2_BINARIES)
    if requested == MODEL.name:
        return MODEL, ""
    if requested == BMV2.name:
        if missing:
            raise ValueError(f"--switch bmv2: {missing}")
        return BMV2, ""
    if missing:
        return MODEL, (
            f"{missing}: running on the {MODEL.label} instead of BMv2 "
            "(same rules, same controller and hosts; --switch bmv2 insists on BMv2)"
        )
    return BMV2, ""


def build(kind: SwitchKind, pool_size: int) -> Program:
    """Compile for BMv2, or write the reference switch's device config."""
    if kind is BMV2:
        json_path, p4info = compile_p4(ROOT / "p4src" / "esa.p4", BUILD, pool_size)
        return Program(kind, json_path, p4info)
    BUILD.mkdir(parents=True, exist_ok=True)
    config = BUILD / f"model-pool{pool_size}.json"
    config.write_bytes(device_config(pool_size))
    return Program(kind, config, COMMITTED_P4INFO)
