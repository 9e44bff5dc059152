"""The wire format is defined once: the P4 side and the codes must agree with it."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from esa import codegen, spec, wire
from esa.job import MAX_PS_SHARDS, ps_shard
from esa.toolchain import compile_p4
from runner.paths import ROOT

WIRE_P4 = ROOT / "p4src" / "include" / "wire.p4"


def p4_header_fields(text: str, name: str) -> list[tuple[str, int]]:
    """Field names and widths of header ``name``, through the file's typedefs."""
    widths = {t: int(w) for w, t in re.findall(r"typedef bit<(\d+)>\s+(\w+);", text)}
    body = re.search(rf"header {name} \{{(.*?)\}}", text, re.S)
    assert body, f"header {name} not found"
    fields = re.findall(r"^\s*(bit<\d+>|\w+)\s+(\w+);", body.group(1), re.M)
    return [(f, int(t[4:-1]) if t.startswith("bit<") else widths[t]) for t, f in fields]


def test_generated_p4_is_current() -> None:
    assert codegen.main(["--check"]) == 0


def test_p4_header_matches_wire_definition() -> None:
    fields = p4_header_fields(WIRE_P4.read_text(), "esa_h")
    assert fields == [(f.name, f.bits) for f in wire.HEADER]
    values = p4_header_fields(WIRE_P4.read_text(), "esa_values_h")
    assert values == [(f"v{i}", 32) for i in range(wire.K)]


def test_changed_width_in_p4_alone_is_caught(tmp_path: Path) -> None:
    edited = WIRE_P4.read_text().replace("typedef bit<32> seq_t;", "typedef bit<24> seq_t;")
    assert edited != WIRE_P4.read_text()
    fields = p4_header_fields(edited, "esa_h")
    assert fields != [(f.name, f.bits) for f in wire.HEADER]
    assert codegen.wire_p4() != edited


def test_layout_is_whole_bytes_and_struct_agrees() -> None:
    assert all(f.bits % 8 == 0 for f in wire.HEADER)
    assert struct.calcsize(wire.struct_format()) == wire.HEADER_BYTES
    offsets = wire.field_offsets()
    assert offsets["ptype"] == (0, 1)
    assert sum(w for _, w in offsets.values()) == wire.HEADER_BYTES
    assert wire.PAYLOAD_BYTES == wire.HEADER_BYTES + 4 * wire.K


def test_groups_and_replication_ids_are_distinct_and_fit() -> None:
    """Every job's groups (workers, and one "all" group per shard) and every
    member's rid (workers, one PS per shard) are its own."""
    jobs = range(1, wire.MAX_JOB_ID + 1)
    groups = [spec.mgid_workers(j) for j in jobs]
    groups += [spec.mgid_all(j, s) for j in jobs for s in range(MAX_PS_SHARDS)]
    assert len(set(groups)) == len(groups) and spec.BCAST_MGID not in groups
    assert min(groups) > 0 and max(groups) < 1 << spec.MCAST_GRP_T.bits
    members = [*range(wire.MAX_WORKERS), *(spec.PS_MEMBER + s for s in range(MAX_PS_SHARDS))]
    rids = [spec.rid(j, m) for j in jobs for m in members]
    assert len(set(rids)) == len(rids) and min(rids) > 0 and max(rids) < 1 << 16
    assert spec.mgid_all(7) == 14 and spec.rid(7, spec.PS_MEMBER) == 481  # as with one PS


@given(st.sampled_from([1, 2, 4, 8]), st.data())
def test_ps_ports_pack_and_unpack(shards: int, data: st.DataObject) -> None:
    ports = data.draw(st.lists(st.integers(0, 510), min_size=shards, max_size=shards))
    packed = spec.pack_ps_ports(ports)
    assert 0 <= packed < 1 << spec.PS_PORTS_T.bits
    assert spec.unpack_ps_ports(packed, shards) == tuple(ports)
    for seq in range(2 * MAX_PS_SHARDS):
        shard = seq & (shards - 1)
        assert (packed >> (spec.PORT_T.bits * shard)) & 0x1FF == ports[ps_shard(seq, shards)]


def test_codes_are_distinct_and_fit() -> None:
    assert len({int(t) for t in wire.PacketType}) == len(wire.PacketType)
    assert all(0 < e < spec.EVENTS_PER_JOB for e in spec.Event)
    assert all(d > 0 for d in spec.Drop)
    assert spec.counter_index(wire.MAX_JOB_ID, spec.Event.RELEASED_BY_PS) < spec.COUNTER_SIZE
    assert int(spec.SlotState.OVERFLOW) == int(wire.Flag.OVERFLOW)


@pytest.mark.p4c
def test_compiled_program_matches_definitions(tmp_path: Path) -> None:
    json_path, _ = compile_p4(ROOT / "p4src" / "esa.p4", tmp_path, pool=8)
    program = json.loads(json_path.read_text())
    types = {t["name"]: t["fields"] for t in program["header_types"]}
    assert [(f, w) for f, w, *_ in types["esa_h"]] == [(f.name, f.bits) for f in wire.HEADER]
    registers = {
        r["name"].rsplit(".", 1)[-1]: (r["bitwidth"], r["size"]) for r in program["register_arrays"]
    }
    assert registers == {r.name: (r.bits, 8) for r in spec.SLOT_REGISTERS}
    counters = {c["name"].rsplit(".", 1)[-1]: c["size"] for c in program["counter_arrays"]}
    assert counters == {"job_events": spec.COUNTER_SIZE, "drops": len(spec.Drop) + 1}


@pytest.mark.p4c
@pytest.mark.parametrize("name", ["bare_sum", "l2_fwd"])
def test_benchmark_programs_compile_against_the_shared_includes(name: str, tmp_path: Path) -> None:
    json_path, _ = compile_p4(ROOT / "p4src" / "bench" / f"{name}.p4", tmp_path)
    assert json.loads(json_path.read_text())["pipelines"]
