"""The control-plane names in esa/p4names.py are exactly those of the compiled program."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from esa import jobrow, p4names, spec
from esa.job import MAX_PS_SHARDS
from esa.model import JobConfig
from esa.toolchain import compile_p4
from runner.paths import ROOT

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


def test_table_sizes_and_keys(p4info: p4info_pb2.P4Info) -> None:
    """Sizes from esa.spec; the PS route matches a chunk's job exactly and
    the low bits of its seq ternary (one entry per shard), and the job
    table's PS ports hold every shard's."""
    exact, ternary = p4info_pb2.MatchField.EXACT, p4info_pb2.MatchField.TERNARY
    tables = {t.preamble.name: t for t in p4info.tables}
    assert {name: tables[name].size for name in p4names.TABLES} == {
        p4names.POLICY_TABLE: 1,
        p4names.JOBS_TABLE: spec.JOB_TABLE_SIZE,
        p4names.CHILDREN_TABLE: spec.CHILDREN_TABLE_SIZE,
        p4names.L2_TABLE: spec.L2_TABLE_SIZE,
        p4names.PS_TABLE: spec.PS_ROUTE_TABLE_SIZE,
        p4names.REPLICAS_TABLE: spec.REPLICAS_TABLE_SIZE,
    }
    assert spec.PS_ROUTE_TABLE_SIZE == spec.JOB_TABLE_SIZE * MAX_PS_SHARDS
    ps_key = [(m.name, m.bitwidth, m.match_type) for m in tables[p4names.PS_TABLE].match_fields]
    assert ps_key == [("job", 16, exact), ("shard", spec.PS_SHARD_BITS, ternary)]
    assert 1 << spec.PS_SHARD_BITS == MAX_PS_SHARDS
    params = {a.preamble.name: {p.name: p.bitwidth for p in a.params} for a in p4info.actions}
    assert params[p4names.SET_JOB]["ps_ports"] == spec.PORT_T.bits * MAX_PS_SHARDS
    assert params[p4names.SET_JOB]["shard_mask"] == spec.PS_SHARD_BITS
    want_ps = {"port": 9, "mac": 48, "ip": 32, "mgid_all": 16, "switch_ip": 32}
    assert params[p4names.SET_PS] == want_ps
    assert params[p4names.SET_JOB]["up_port"] == spec.PORT_T.bits
    assert params[p4names.SET_CHILD] == {"bitmap": 32}
    child_key = [
        (m.name, m.bitwidth, m.match_type) for m in tables[p4names.CHILDREN_TABLE].match_fields
    ]
    assert child_key == [("job", 16, exact), ("port", spec.PORT_T.bits, exact)]


def _set_job_params(info: p4info_pb2.P4Info) -> list[tuple[int, str, int]]:
    action = next(a for a in info.actions if a.preamble.name == p4names.SET_JOB)
    return [(p.id, p.name, p.bitwidth) for p in action.params]


def test_set_job_is_the_job_row(p4info: p4info_pb2.P4Info) -> None:
    """set_job's parameters, in order and width, are esa.jobrow's, in the
    compiled program and in the committed P4Info; the jobs table runs it."""
    want = [(i, p.name, p.type.bits) for i, p in enumerate(jobrow.PARAMS, 1)]
    assert _set_job_params(p4info) == want
    committed = (ROOT / "p4src" / "esa.p4info.txtpb").read_text()
    assert _set_job_params(text_format.Parse(committed, p4info_pb2.P4Info())) == want
    assert p4names.SET_JOB in p4names.TABLES[p4names.JOBS_TABLE]


def test_job_entry_and_config_are_the_job_row() -> None:
    """JobEntry holds every parameter (shard_mask in its ps_ports), the
    model's JobConfig the row's fields it reads, and action data goes
    through JobEntry unchanged both ways."""
    entry_fields = [f.name for f in fields(jobrow.JobEntry)]
    assert entry_fields == [n for n in jobrow.NAMES if n != "shard_mask"]
    assert {f.name for f in fields(JobConfig)} - {"children"} <= set(entry_fields)
    entry = jobrow.JobEntry(2, 0b11, 7, (3, 4, 5, 6), 5, 8, 16, up_port=9)
    args = entry.args()
    assert list(args) == list(jobrow.NAMES)
    assert args["shard_mask"] == 3 and args["ps_ports"] == spec.pack_ps_ports((3, 4, 5, 6))
    assert jobrow.JobEntry.from_args(args) == entry
    assert JobConfig.from_entry(entry, ((1, 0b1),)) == JobConfig(
        2, 0b11, 7, (3, 4, 5, 6), part_base=8, part_size=16, up_port=9, children=((1, 0b1),)
    )
