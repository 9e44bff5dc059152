"""P4Runtime entities of the reference switch: one update written, one read
answered, between protobuf (ids, bytestrings) and ``Tables``' terms (names,
ints).

Table entries, the ``policy`` default action, multicast groups and the
counters ``job_events`` and ``drops`` are served, and reads of the slot
registers (``esa.spec.SLOT_REGISTERS``): one array (by id) or all (id 0),
one cell (by index) or all (no index), each cell the field of
``esa.model``'s slot the register holds in p4src, as an unsigned bitstring
of the register's width (a value lane's two's complement).  A register has
a cell per slot of the switch's pool.  BMv2 answers register reads
``UNIMPLEMENTED`` (its registers are read over Thrift); so does this switch
a register write, and any other entity.  A read answers every counter
cell, zeros included, as BMv2 does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import grpc
from p4.v1 import p4runtime_pb2

from esa import wire
from esa.model import Slot
from esa.p4names import JOB_EVENTS, register
from esa.target import Op
from refswitch.frames import Pipeline
from refswitch.tables import (
    EXACT,
    ActionCall,
    Counter,
    Key,
    ProgramInfo,
    Refused,
    RegisterArray,
    Table,
    Tables,
)

_OPS = {
    p4runtime_pb2.Update.INSERT: Op.INSERT,
    p4runtime_pb2.Update.MODIFY: Op.MODIFY,
    p4runtime_pb2.Update.DELETE: Op.DELETE,
}


def _lane(i: int, slot: Slot) -> int:
    return slot.values[i]


SLOT_FIELDS: dict[str, Callable[[Slot], int]] = {
    register("slot_owner"): lambda slot: slot.owner,
    register("slot_bitmap"): lambda slot: slot.bitmap,
    register("slot_count"): lambda slot: slot.count,
    register("slot_prio"): lambda slot: slot.prio,
    register("slot_ts"): lambda slot: slot.ts,
    register("slot_state"): lambda slot: slot.state,
    register("slot_gone"): lambda slot: slot.gone,
    register("slot_evicted"): lambda slot: slot.evicted,
    **{register(f"slot_v{i}"): functools.partial(_lane, i) for i in range(wire.K)},
}
"""The field of ``esa.model.Slot`` each slot register holds."""


def _int(value: bytes, what: str) -> int:
    if not value:
        raise Refused(grpc.StatusCode.INVALID_ARGUMENT, f"{what}: empty bytestring")
    return int.from_bytes(value, "big")


def _bytes(value: int) -> bytes:
    """P4Runtime's canonical bytestring: no leading zero bytes."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


class Entities:
    """The entities of one pipeline: its tables and its model's counters."""

    def __init__(self, tables: Tables, pipeline: Pipeline) -> None:
        self.tables = tables
        self.pipeline = pipeline
        self.program: ProgramInfo = tables.program

    # -- write --

    def write(self, update: Any) -> None:
        """Apply one update (raises ``Refused``)."""
        op = _OPS.get(update.type)
        if op is None:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "Update type is not set")
        entity = update.entity
        kind = entity.WhichOneof("entity")
        if kind == "table_entry":
            self._write_table(op, entity.table_entry)
        elif kind == "packet_replication_engine_entry":
            group = self._group_entry(entity.packet_replication_engine_entry)
            replicas = tuple((int(r.egress_port), int(r.instance)) for r in group.replicas)
            self.tables.write_group(op, int(group.multicast_group_id), replicas)
        elif kind == "counter_entry":
            self._write_counter(op, entity.counter_entry)
        else:
            raise Refused(grpc.StatusCode.UNIMPLEMENTED, f"{kind} writes")

    def _write_table(self, op: Op, te: Any) -> None:
        table = self._table(te.table_id)
        if te.is_default_action:
            if len(te.match):
                raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "the default entry has no key")
            self.tables.write_default(op, table, self._call(te.action))
        elif not table.keys:
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{table.name} has no key: write its default action",
            )
        else:
            call = None if op is Op.DELETE else self._call(te.action)
            self.tables.write_entry(op, table, self._key(table, te.match, te.priority), call)

    def _write_counter(self, op: Op, entry: Any) -> None:
        if op is not Op.MODIFY:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "counters take MODIFY only")
        counter = self._counter(entry.counter_id)
        indices = _indices(counter.name, counter.size, entry)
        cells = self._cells(counter)
        with self.pipeline.lock:
            for i in indices:
                cells[i] = int(entry.data.packet_count)

    # -- read --

    def read(self, entity: Any, rep: Any) -> None:
        """Add what ``entity`` asks for to ``rep`` (raises ``Refused``)."""
        kind = entity.WhichOneof("entity")
        if kind == "table_entry":
            self._read_tables(entity.table_entry, rep)
        elif kind == "packet_replication_engine_entry":
            mgid = self._group_entry(entity.packet_replication_engine_entry).multicast_group_id
            if mgid and mgid not in self.tables.groups:
                raise Refused(grpc.StatusCode.NOT_FOUND, "Multicast group does not exist")
            for gid in [mgid] if mgid else sorted(self.tables.groups):
                g = rep.entities.add().packet_replication_engine_entry.multicast_group_entry
                g.multicast_group_id = gid
                for port, rid in self.tables.groups[gid]:
                    g.replicas.add(egress_port=port, instance=rid)
        elif kind == "counter_entry":
            self._read_counters(entity.counter_entry, rep)
        elif kind == "register_entry":
            self._read_registers(entity.register_entry, rep)
        else:
            raise Refused(grpc.StatusCode.UNIMPLEMENTED, f"{kind} reads")

    def _read_tables(self, want: Any, rep: Any) -> None:
        """One table (or all: id 0): its entries, one of them (by key), or its default."""
        tables = [self._table(want.table_id)] if want.table_id else self.program.tables.values()
        for table in tables:
            if want.is_default_action:
                entry = self._entry(table, (), self.tables.defaults[table.name], default=True)
                rep.entities.add().table_entry.CopyFrom(entry)
                continue
            only = self._key(table, want.match, want.priority) if len(want.match) else None
            for key, call in self.tables.entries[table.name].items():
                if only is None or key == only:
                    rep.entities.add().table_entry.CopyFrom(self._entry(table, key, call))

    def _read_counters(self, want: Any, rep: Any) -> None:
        counters = (
            [self._counter(want.counter_id)] if want.counter_id else self.program.counters.values()
        )
        for counter in counters:
            indices = _indices(counter.name, counter.size, want)
            with self.pipeline.lock:
                cells = list(self._cells(counter))
            for i in indices:
                c = rep.entities.add().counter_entry
                c.counter_id, c.index.index, c.data.packet_count = counter.id, i, cells[i]

    def _read_registers(self, want: Any, rep: Any) -> None:
        registers = (
            [self._register(want.register_id)]
            if want.register_id
            else self.program.registers.values()
        )
        for reg in registers:
            cell = SLOT_FIELDS[reg.name]
            mask = (1 << reg.bits) - 1
            with self.pipeline.lock:
                slots = self.pipeline.model.slots
                indices = _indices(reg.name, len(slots), want)
                cells = [cell(slots[i]) & mask for i in indices]
            for i, value in zip(indices, cells, strict=True):
                r = rep.entities.add().register_entry
                r.register_id, r.index.index = reg.id, i
                r.data.bitstring = _bytes(value)

    # -- encoding --

    def _table(self, table_id: int) -> Table:
        table = self.program.table_by_id.get(table_id)
        if table is None:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, f"no table with id {table_id}")
        return table

    def _counter(self, counter_id: int) -> Counter:
        counter = self.program.counter_by_id.get(counter_id)
        if counter is None:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, f"no counter with id {counter_id}")
        return counter

    def _register(self, register_id: int) -> RegisterArray:
        reg = self.program.register_by_id.get(register_id)
        if reg is None:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, f"no register with id {register_id}")
        return reg

    def _cells(self, counter: Counter) -> list[int]:
        """The model's array behind a counter of the program."""
        model = self.pipeline.model
        return model.job_events if counter.name == JOB_EVENTS else model.drops

    @staticmethod
    def _group_entry(pre: Any) -> Any:
        if pre.WhichOneof("type") != "multicast_group_entry":
            raise Refused(grpc.StatusCode.UNIMPLEMENTED, "clone sessions")
        return pre.multicast_group_entry

    @staticmethod
    def _key(table: Table, match: Any, priority: int) -> Key:
        """The entry's ``Key``, refused as BMv2 refuses it."""
        given = {m.field_id: m for m in match}
        if len(given) != len(match) or not set(given) <= {k.id for k in table.keys}:
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT, f"the key of {table.name} is its match fields"
            )
        out: list[int] = []
        for k in table.keys:
            m = given.get(k.id)
            kind = "exact" if k.match == EXACT else "ternary"
            if m is None and kind == "ternary":
                out += [0, 0]
                continue
            if m is None or m.WhichOneof("field_match_type") != kind:
                article = "an" if kind == "exact" else "a"
                raise Refused(
                    grpc.StatusCode.INVALID_ARGUMENT, f"{k.name} is {article} {kind} match"
                )
            if kind == "exact":
                values = [_int(m.exact.value, k.name)]
            else:
                values = [_int(m.ternary.value, k.name), _int(m.ternary.mask, k.name)]
            if any(v >= 1 << k.bits for v in values):
                raise Refused(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"Bytestring provided does not fit within {k.bits} bits",
                )
            if kind == "ternary":
                value, mask = values
                if mask == 0:
                    raise Refused(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        "Invalid representation of 'don't care' ternary match, "
                        "omit match field instead of using 0 mask",
                    )
                if value & mask != value:
                    raise Refused(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        "Invalid ternary value, make sure value & mask == value",
                    )
            out += values
        if table.ternary:
            if not priority:
                raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "Zero priority for ternary match")
            out.append(priority)
        elif priority:
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT, "Non-zero priority for non-ternary match"
            )
        return tuple(out)

    def _call(self, table_action: Any) -> ActionCall:
        if table_action.WhichOneof("type") != "action":
            raise Refused(grpc.StatusCode.UNIMPLEMENTED, "only direct actions (no profiles)")
        a = table_action.action
        action = self.program.action_by_id.get(a.action_id)
        if action is None:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, f"no action with id {a.action_id}")
        names = {p.id: p.name for p in action.params}
        args: dict[str, int] = {}
        for p in a.params:
            if p.param_id not in names or names[p.param_id] in args:
                raise Refused(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"{action.name}: unknown or repeated parameter id {p.param_id}",
                )
            args[names[p.param_id]] = _int(p.value, names[p.param_id])
        return ActionCall(action.name, args)

    def _entry(self, table: Table, key: Key, call: ActionCall, default: bool = False) -> Any:
        te = p4runtime_pb2.TableEntry(table_id=table.id, is_default_action=default)
        rest = list(key)
        for k in () if default else table.keys:
            if k.match == EXACT:
                te.match.add(field_id=k.id).exact.value = _bytes(rest.pop(0))
                continue
            value, mask = rest.pop(0), rest.pop(0)
            if mask:
                ternary = te.match.add(field_id=k.id).ternary
                ternary.value, ternary.mask = _bytes(value), _bytes(mask)
        if rest:
            te.priority = rest.pop()
        action = self.program.actions[call.action]
        te.action.action.action_id = action.id
        for p in action.params:
            te.action.action.params.add(param_id=p.id, value=_bytes(call.args[p.name]))
        return te


def _indices(name: str, size: int, entry: Any) -> range:
    """The cells a counter or register entry names of array ``name`` of
    ``size`` cells: its index, or every cell."""
    if not entry.HasField("index"):
        return range(size)
    i = int(entry.index.index)
    if not 0 <= i < size:
        raise Refused(grpc.StatusCode.OUT_OF_RANGE, f"{name} has no cell {i}")
    return range(i, i + 1)
