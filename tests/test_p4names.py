"""The control-plane names in esa/p4names.py are exactly those of the compiled program."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from esa import p4names, spec
from esa.toolchain import compile_p4
from testbed.paths import ROOT

pytestmark = pytest.mark.p4c


@pytest.fixture(scope="module")
def p4info(tmp_path_factory: pytest.TempPathFactory) -> p4info_pb2.P4Info:
    out: Path = tmp_path_factory.mktemp("p4names")
    _, info_path = compile_p4(ROOT / "p4src" / "esa.p4", out, pool=16)
    return text_format.Parse(info_path.read_text(), p4info_pb2.P4Info())


def test_tables_and_their_actions(p4info: p4info_pb2.P4Info) -> None:
    actions = {a.preamble.id: a.preamble.name for a in p4info.actions}
    got = {
        t.preamble.name: tuple(sorted(actions[r.id] for r in t.action_refs)) for t in p4info.tables
    }
    assert got == {t: tuple(sorted(a)) for t, a in p4names.TABLES.items()}


def test_counters_and_registers(p4info: p4info_pb2.P4Info) -> None:
    assert {c.preamble.name: c.size for c in p4info.counters} == p4names.COUNTERS
    assert {r.preamble.name for r in p4info.registers} == {
        p4names.register(r.name) for r in spec.SLOT_REGISTERS
    }
    assert p4names.SLOT_OWNER in {r.preamble.name for r in p4info.registers}
