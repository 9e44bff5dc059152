"""The reference switch's control-plane state: the program's tables, default
actions and multicast groups as P4Runtime writes them.

The switch runs one program, p4src/esa.p4.  Its control-plane names are
``esa.p4names``; ``SPECS`` and ``PARAMS`` add what the frame path reads of
each table (a key or none, the default action) and each table action (the
parameters).  Ids and bit widths are the pushed P4Info's.  A pipeline whose
P4Info has other tables, table actions, parameters or counters, or slot
registers other than ``esa.spec.SLOT_REGISTERS`` (the state ``esa.model``
keeps), is refused: a change to p4src the reference switch does not follow
fails at the push instead of being half executed.  Actions no table names
(the slot pool's own) are the program's inside, which ``esa.model`` states.

Two writes BMv2 takes are refused: a ``set_policy`` code that is none of
``esa.spec.Policy`` (BMv2 would run a shared pool without preemption under
it; the model knows the three policies only), and a ``set_job`` whose
``shard_mask`` is not a PS shard count less one (``esa.job.valid_shards``;
the model knows jobs of 1, 2, 4 or 8 PS hosts only).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc
from p4.config.v1 import p4info_pb2

from esa import jobrow
from esa.job import valid_shards
from esa.p4names import (
    CHILDREN_TABLE,
    COUNTERS,
    FLOOD,
    JOBS_TABLE,
    L2_DROP,
    L2_TABLE,
    NO_ACTION,
    NO_PS_ROUTE,
    POLICY_TABLE,
    PS_TABLE,
    REPLICAS_TABLE,
    SET_CHILD,
    SET_DST,
    SET_DST_FROM_SWITCH,
    SET_JOB,
    SET_POLICY,
    SET_PS,
    TABLES,
    TO_PORT,
    UNKNOWN_JOB,
    register,
)
from esa.spec import DEFAULT_SQUAT_US, DEFAULT_STALE_US, SLOT_REGISTERS, Policy
from esa.target import Op


class Refused(Exception):
    """A request the switch refuses, with the gRPC code it answers."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class ActionCall:
    """An action with its arguments, by name."""

    action: str
    args: Mapping[str, int] = field(default_factory=dict)


EXACT = p4info_pb2.MatchField.EXACT
TERNARY = p4info_pb2.MatchField.TERNARY


@dataclass(frozen=True)
class TableSpec:
    match: tuple[int, ...]
    """the match kind of each key field (their names and widths are the
    P4Info's); a table with a ternary field is one whose entries have a
    priority."""
    default: ActionCall
    """the program's default action (p4src), in force after every push."""
    default_writable: bool = False
    """whether the data path follows a written default (only ``policy``'s)."""


SPECS: dict[str, TableSpec] = {
    POLICY_TABLE: TableSpec(
        (),
        ActionCall(
            SET_POLICY,
            {"policy": Policy.ESA, "stale_us": DEFAULT_STALE_US, "squat_us": DEFAULT_SQUAT_US},
        ),
        default_writable=True,
    ),
    JOBS_TABLE: TableSpec((EXACT,), ActionCall(UNKNOWN_JOB)),
    CHILDREN_TABLE: TableSpec((EXACT, EXACT), ActionCall(NO_ACTION)),
    L2_TABLE: TableSpec((EXACT,), ActionCall(L2_DROP)),
    PS_TABLE: TableSpec((EXACT, TERNARY), ActionCall(NO_PS_ROUTE)),
    REPLICAS_TABLE: TableSpec((EXACT,), ActionCall(NO_ACTION)),
}
"""The tables the reference switch executes (``esa.p4names.TABLES``)."""
PARAMS: dict[str, tuple[str, ...]] = {
    SET_POLICY: ("policy", "stale_us", "squat_us"),
    SET_JOB: jobrow.NAMES,
    UNKNOWN_JOB: (),
    SET_CHILD: ("bitmap",),
    TO_PORT: ("port",),
    FLOOD: ("mgid",),
    L2_DROP: (),
    SET_PS: ("port", "mac", "ip", "mgid_all", "switch_ip"),
    NO_PS_ROUTE: (),
    SET_DST: ("mac", "ip", "udp_port"),
    SET_DST_FROM_SWITCH: ("mac", "ip", "udp_port", "switch_ip"),
    NO_ACTION: (),
}  # fmt: skip
"""The parameters of every table action, as the frame path reads them."""
REGISTERS = {register(r.name): r.bits for r in SLOT_REGISTERS}


@dataclass(frozen=True)
class InfoField:
    """A match field or an action parameter."""

    id: int
    name: str
    bits: int


@dataclass(frozen=True)
class KeyField(InfoField):
    match: int
    """``p4info_pb2.MatchField.MatchType``."""


@dataclass(frozen=True)
class Action:
    id: int
    name: str
    params: tuple[InfoField, ...]


@dataclass(frozen=True)
class Table:
    id: int
    name: str
    keys: tuple[KeyField, ...]
    scopes: Mapping[int, int]
    """action id -> ``p4info_pb2.ActionRef`` scope."""
    size: int
    spec: TableSpec

    @property
    def ternary(self) -> bool:
        """Its entries have a priority."""
        return TERNARY in self.spec.match


@dataclass(frozen=True)
class Counter:
    id: int
    name: str
    size: int


@dataclass(frozen=True)
class RegisterArray:
    """A slot register array: ``esa.spec.SLOT_REGISTERS``, one cell per slot
    of the switch's pool (the P4Info's size is the pool p4c compiled)."""

    id: int
    name: str
    bits: int


def _differ(what: str, got: Iterable[str], want: Iterable[str]) -> None:
    got, want = set(got), set(want)
    if got != want:
        parts = []
        if want - got:
            parts.append("missing " + ", ".join(sorted(want - got)))
        if got - want:
            parts.append("unknown " + ", ".join(sorted(got - want)))
        raise Refused(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"the P4Info's {what} are not the program the reference switch runs "
            f"({'; '.join(parts)})",
        )


class ProgramInfo:
    """The P4Info of p4src/esa.p4, indexed by name and by id."""

    def __init__(self, info: Any) -> None:
        self.info = info
        _differ("tables", (t.preamble.name for t in info.tables), TABLES)
        _differ("counters", (c.preamble.name for c in info.counters), COUNTERS)
        _differ("registers", (r.preamble.name for r in info.registers), REGISTERS)
        for r in info.registers:
            bits = r.type_spec.bitstring.bit.bitwidth
            if bits != REGISTERS[r.preamble.name]:
                raise Refused(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"the P4Info's register {r.preamble.name} is {bits} bits, "
                    f"esa.spec says {REGISTERS[r.preamble.name]}",
                )
        used = {r.id for t in info.tables for r in t.action_refs}
        table_actions = [a for a in info.actions if a.preamble.id in used]
        _differ("table actions", (a.preamble.name for a in table_actions), PARAMS)
        self.actions = {a.preamble.name: self._action(a) for a in table_actions}
        by_id = {a.id: a for a in self.actions.values()}
        self.tables = {t.preamble.name: self._table(t, by_id) for t in info.tables}
        self.counters = {c.preamble.name: self._counter(c) for c in info.counters}
        self.registers = {
            r.preamble.name: RegisterArray(
                r.preamble.id, r.preamble.name, REGISTERS[r.preamble.name]
            )
            for r in info.registers
        }
        self.action_by_id = by_id
        self.table_by_id = {t.id: t for t in self.tables.values()}
        self.counter_by_id = {c.id: c for c in self.counters.values()}
        self.register_by_id = {r.id: r for r in self.registers.values()}

    @staticmethod
    def _action(a: Any) -> Action:
        params = tuple(InfoField(p.id, p.name, p.bitwidth) for p in a.params)
        name = a.preamble.name
        _differ(f"parameters of {name}", (p.name for p in params), PARAMS[name])
        return Action(a.preamble.id, name, params)

    @staticmethod
    def _table(t: Any, actions: Mapping[int, Action]) -> Table:
        name = t.preamble.name
        spec = SPECS[name]
        keys = tuple(KeyField(m.id, m.name, m.bitwidth, m.match_type) for m in t.match_fields)
        if tuple(k.match for k in keys) != spec.match:
            kinds = ", ".join(p4info_pb2.MatchField.MatchType.Name(m).lower() for m in spec.match)
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the P4Info's key of {name} is not the program's ({kinds or 'none'})",
            )
        _differ(f"actions of {name}", (actions[r.id].name for r in t.action_refs), TABLES[name])
        scopes = {r.id: r.scope for r in t.action_refs}
        return Table(t.preamble.id, name, keys, scopes, t.size, spec)

    @staticmethod
    def _counter(c: Any) -> Counter:
        if c.size != COUNTERS[c.preamble.name]:
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the P4Info's counter {c.preamble.name} has {c.size} cells, "
                f"the program {COUNTERS[c.preamble.name]}",
            )
        return Counter(c.preamble.id, c.preamble.name, c.size)


Key = tuple[int, ...]
"""An entry's key: each exact field's value, each ternary field's value and
mask (0 and 0 when the field is left out: don't care), then, in a table
with a ternary field, the priority."""
Replicas = tuple[tuple[int, int], ...]
"""A multicast group's ``(egress port, rid)`` pairs in the order written."""


class Tables:
    """Entries, default actions and multicast groups, under P4Runtime's write
    rules as BMv2 applies them (an INSERT of an existing key, a MODIFY or
    DELETE of a missing one is refused; a batch goes update by update)."""

    def __init__(self, program: ProgramInfo) -> None:
        self.program = program
        self.entries: dict[str, dict[Key, ActionCall]] = {name: {} for name in program.tables}
        self.defaults = {name: t.spec.default for name, t in program.tables.items()}
        self.groups: dict[int, Replicas] = {}

    def check_call(self, table: Table, call: ActionCall, default: bool) -> None:
        """The action may be used here and its arguments fit their widths."""
        action = self.program.actions[call.action]
        scope = table.scopes.get(action.id)
        allowed = p4info_pb2.ActionRef.TABLE_ONLY if default else p4info_pb2.ActionRef.DEFAULT_ONLY
        if scope is None or scope == allowed:
            where = "the default action" if default else "an entry"
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{call.action} can not be {where} of {table.name}",
            )
        for p in action.params:
            value = call.args.get(p.name)
            if value is None or not 0 <= value < 1 << p.bits:
                raise Refused(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"{call.action}: parameter {p.name} missing or wider than {p.bits} bits",
                )

    def write_entry(self, op: Op, table: Table, key: Key, call: ActionCall | None) -> None:
        rows = self.entries[table.name]
        if op is Op.INSERT and key in rows:
            raise Refused(
                grpc.StatusCode.ALREADY_EXISTS,
                "Match entry exists, use MODIFY if you wish to change action",
            )
        if op is not Op.INSERT and key not in rows:
            raise Refused(grpc.StatusCode.NOT_FOUND, "Cannot find match entry")
        if op is Op.DELETE:
            del rows[key]
            return
        if call is None:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "an entry needs an action")
        self.check_call(table, call, default=False)
        if call.action == SET_JOB and not valid_shards(call.args["shard_mask"] + 1):
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"shard_mask {call.args['shard_mask']} is not a PS shard count less one",
            )
        if op is Op.INSERT and len(rows) >= table.size:
            raise Refused(grpc.StatusCode.RESOURCE_EXHAUSTED, f"table {table.name} is full")
        rows[key] = call

    def write_default(self, op: Op, table: Table, call: ActionCall) -> None:
        if op is not Op.MODIFY:
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT, f"Cannot use {op.name} for default entry"
            )
        if not table.spec.default_writable:
            raise Refused(
                grpc.StatusCode.UNIMPLEMENTED,
                f"the reference switch keeps the program's default action of {table.name}",
            )
        self.check_call(table, call, default=True)
        if call.action == SET_POLICY and call.args["policy"] not in {int(p) for p in Policy}:
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"policy code {call.args['policy']} is not one of esa.spec.Policy",
            )
        self.defaults[table.name] = call

    def write_group(self, op: Op, mgid: int, replicas: Replicas) -> None:
        if mgid == 0:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "multicast group id 0 is reserved")
        if op is Op.INSERT and mgid in self.groups:
            raise Refused(grpc.StatusCode.ALREADY_EXISTS, "Multicast group already exists")
        if op is not Op.INSERT and mgid not in self.groups:
            raise Refused(grpc.StatusCode.NOT_FOUND, "Multicast group does not exist")
        if op is Op.DELETE:
            del self.groups[mgid]
        else:
            self.groups[mgid] = replicas
