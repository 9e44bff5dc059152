"""The typed switch API: ESA's tables, groups, counters and registers by meaning.

``Switch`` states the operations; ``P4RuntimeSwitch`` carries them to BMv2
or the reference switch over P4Runtime and ``tests`` use an in-memory one.  Every write goes through
``apply`` as a list of ``Change``s, one batch per call, so reconciliation and
the typed helpers share one path.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from p4.v1 import p4runtime_pb2
from p4runtime_sh.context import P4Type

from controller.device.entries import (
    Child,
    ChildKey,
    L2Entry,
    Members,
    PolicyEntry,
    PsRoute,
    Replica,
    ShardKey,
    SwitchEntries,
)
from controller.device.p4rt import Session, Unimplemented, pipeline_cookie
from controller.errors import SwitchError
from esa.jobrow import JobEntry
from esa.p4names import (
    CHILDREN_TABLE,
    DROPS,
    FLOOD,
    JOB_EVENTS,
    JOBS_TABLE,
    L2_TABLE,
    POLICY_TABLE,
    PS_TABLE,
    REPLICAS_TABLE,
    SET_CHILD,
    SET_DST,
    SET_DST_FROM_SWITCH,
    SET_JOB,
    SET_POLICY,
    SET_PS,
    TO_PORT,
)
from esa.spec import (
    EVENTS_PER_JOB,
    Drop,
    Event,
    Policy,
    counter_index,
)
from esa.target import Op


class Kind(enum.Enum):
    """A keyed collection of ``SwitchEntries`` (its attribute name)."""

    JOBS = "jobs"
    CHILDREN = "children"
    L2 = "l2"
    PS_ROUTES = "ps_routes"
    REPLICAS = "replicas"
    GROUPS = "groups"


Value = JobEntry | Child | L2Entry | PsRoute | Replica | Members
Key = int | ShardKey | ChildKey
"""A ``ps_routes`` entry's key is a ``ShardKey``, a ``children`` entry's a
``ChildKey``, every other an int."""


@dataclass(frozen=True)
class Change:
    kind: Kind
    op: Op
    key: Key
    value: Value | None = None


@dataclass
class Counters:
    events: dict[int, dict[Event, int]] = field(default_factory=dict)
    """per job id, every event (zeros included) of jobs with any count."""
    drops: dict[Drop, int] = field(default_factory=dict)


def counters_from_indices(values: dict[int, int]) -> Counters:
    """Group raw ``job_events`` indices into per-job dicts (``spec.counter_index``)."""
    out = Counters()
    for index, count in values.items():
        job, code = divmod(index, EVENTS_PER_JOB)
        if count and code in Event._value2member_map_:
            out.events.setdefault(job, {e: 0 for e in Event})[Event(code)] = count
    return out


class Switch(abc.ABC):
    """What the controller asks of a switch."""

    @abc.abstractmethod
    def apply(self, changes: list[Change]) -> None:
        """Write the changes as one batch (their order is not guaranteed)."""

    @abc.abstractmethod
    def set_policy(self, entry: PolicyEntry) -> None: ...

    @abc.abstractmethod
    def read_entries(self) -> SwitchEntries: ...

    @abc.abstractmethod
    def read_counters(self, jobs: Iterable[int] | None = None) -> Counters:
        """The drop counters and the events of ``jobs`` (of every job when
        None).  The whole event array is ``COUNTER_SIZE`` cells; a sampler
        that asks several times a second names the jobs it shows."""

    @abc.abstractmethod
    def reset_job_counters(self, job: int) -> None:
        """Zero a job's event counters (a reused job id starts from 0)."""

    def read_registers(self, *names: str) -> dict[str, list[int]]:
        """Every cell of each register array, by name, in index order; raises
        ``Unimplemented`` where the switch serves no register reads (BMv2,
        whose registers are read over Thrift, and, unless overridden, a
        ``Switch``)."""
        raise Unimplemented("the switch serves no register reads")

    @property
    @abc.abstractmethod
    def alive(self) -> bool:
        """False once the connection to the switch is known to be broken."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the connection."""

    def write_job(self, job: int, entry: JobEntry, modify: bool = False) -> None:
        self.apply([Change(Kind.JOBS, Op.MODIFY if modify else Op.INSERT, job, entry)])

    def delete_job(self, job: int) -> None:
        self.apply([Change(Kind.JOBS, Op.DELETE, job)])

    def write_l2(self, mac: int, entry: L2Entry, modify: bool = False) -> None:
        self.apply([Change(Kind.L2, Op.MODIFY if modify else Op.INSERT, mac, entry)])

    def delete_l2(self, mac: int) -> None:
        self.apply([Change(Kind.L2, Op.DELETE, mac)])

    def write_ps_route(self, key: ShardKey, route: PsRoute, modify: bool = False) -> None:
        self.apply([Change(Kind.PS_ROUTES, Op.MODIFY if modify else Op.INSERT, key, route)])

    def delete_ps_route(self, key: ShardKey) -> None:
        self.apply([Change(Kind.PS_ROUTES, Op.DELETE, key)])

    def write_replica(self, rid: int, replica: Replica, modify: bool = False) -> None:
        self.apply([Change(Kind.REPLICAS, Op.MODIFY if modify else Op.INSERT, rid, replica)])

    def delete_replica(self, rid: int) -> None:
        self.apply([Change(Kind.REPLICAS, Op.DELETE, rid)])

    def create_group(self, mgid: int, members: Iterable[tuple[int, int]]) -> None:
        self.apply([Change(Kind.GROUPS, Op.INSERT, mgid, frozenset(members))])

    def modify_group(self, mgid: int, members: Iterable[tuple[int, int]]) -> None:
        self.apply([Change(Kind.GROUPS, Op.MODIFY, mgid, frozenset(members))])

    def delete_group(self, mgid: int) -> None:
        self.apply([Change(Kind.GROUPS, Op.DELETE, mgid)])


_UPDATE = {
    Op.INSERT: p4runtime_pb2.Update.INSERT,
    Op.MODIFY: p4runtime_pb2.Update.MODIFY,
    Op.DELETE: p4runtime_pb2.Update.DELETE,
}

_TABLES = {
    Kind.JOBS: JOBS_TABLE,
    Kind.CHILDREN: CHILDREN_TABLE,
    Kind.L2: L2_TABLE,
    Kind.PS_ROUTES: PS_TABLE,
    Kind.REPLICAS: REPLICAS_TABLE,
}


PS_ROUTE_PRIORITY = 1
"""Of every ``ps_route`` entry (a ternary table's entries need one): a job's
entries never overlap, one value each under one mask."""


def _bytes(value: int, bits: int) -> bytes:
    return value.to_bytes((bits + 7) // 8, "big")


def _int(value: bytes) -> int:
    return int.from_bytes(value, "big")


class P4RuntimeSwitch(Switch):
    """ESA's switch API over one P4Runtime session."""

    def __init__(self, session: Session) -> None:
        self.session = session

    @classmethod
    def connect(
        cls,
        grpc_addr: str,
        device_id: int = 0,
        election_id: tuple[int, int] = (0, 1),
        require_primary: bool = True,
    ) -> P4RuntimeSwitch:
        """Open a session and become primary (raises ``SwitchUnavailable``)."""
        return cls(Session(grpc_addr, device_id, election_id, require_primary))

    @property
    def alive(self) -> bool:
        return self.session.alive

    def close(self) -> None:
        self.session.close()

    def ensure_pipeline(self, json_path: Path, p4info_path: Path) -> bool:
        """Push the pipeline of these files unless the switch runs this very
        one; True if pushed."""
        return self.ensure_config(json_path.read_bytes(), p4info_path.read_text())

    def ensure_config(self, device_config: bytes, p4info_text: str) -> bool:
        """Push the pipeline unless the switch runs this very one; True if pushed."""
        if self.session.cookie == pipeline_cookie(device_config, p4info_text):
            return False
        self.push_config(device_config, p4info_text)
        return True

    def push_pipeline(self, json_path: Path, p4info_path: Path) -> None:
        """Install the pipeline of these files (``push_config``)."""
        self.push_config(json_path.read_bytes(), p4info_path.read_text())

    def push_config(self, device_config: bytes, p4info_text: str) -> None:
        """Install the pipeline.  Multicast groups of a pipeline already there
        are deleted first: simple_switch_grpc forgets them on a push but keeps
        their nodes, so a group re-created after the push would send every
        copy twice."""
        if self.session.cookie is not None:
            groups = self.read_groups()
            if groups:
                self.apply([Change(Kind.GROUPS, Op.DELETE, mgid) for mgid in groups])
        self.session.push_config(device_config, p4info_text)

    # -- encoding --

    def _action(self, name: str, args: dict[str, int]) -> Any:
        action = p4runtime_pb2.Action(action_id=self.session.id_of(P4Type.action, name))
        for pid, pname, bits in self.session.action_params(name):
            action.params.add(param_id=pid, value=_bytes(args[pname], bits))
        return action

    def _table_entry(self, kind: Kind, key: Key, value: Value | None) -> Any:
        table = _TABLES[kind]
        entry = p4runtime_pb2.TableEntry(table_id=self.session.id_of(P4Type.table, table))
        (field_id, bits), *shard = self.session.key_fields(table)
        if isinstance(key, ShardKey):
            entry.match.add(field_id=field_id).exact.value = _bytes(key.job, bits)
            shard_id, shard_bits = shard[0]
            if key.mask:  # P4Runtime leaves a don't-care ternary field out
                ternary = entry.match.add(field_id=shard_id).ternary
                ternary.value = _bytes(key.value, shard_bits)
                ternary.mask = _bytes(key.mask, shard_bits)
            entry.priority = PS_ROUTE_PRIORITY
        elif isinstance(key, ChildKey):
            port_id, port_bits = shard[0]
            entry.match.add(field_id=field_id).exact.value = _bytes(key.job, bits)
            entry.match.add(field_id=port_id).exact.value = _bytes(key.port, port_bits)
        else:
            entry.match.add(field_id=field_id).exact.value = _bytes(key, bits)
        if value is None:
            return entry
        if isinstance(value, JobEntry):
            action = self._action(SET_JOB, value.args())
        elif isinstance(value, Child):
            action = self._action(SET_CHILD, {"bitmap": value.bitmap})
        elif isinstance(value, L2Entry):
            if value.mgid:
                action = self._action(FLOOD, {"mgid": value.mgid})
            else:
                action = self._action(TO_PORT, {"port": value.port})
        elif isinstance(value, PsRoute):
            args = {"port": value.port, "mac": value.mac, "ip": value.ip}
            args |= {"mgid_all": value.mgid_all, "switch_ip": value.switch_ip or 0}
            action = self._action(SET_PS, args)
        elif isinstance(value, Replica):
            args = {"mac": value.mac, "ip": value.ip, "udp_port": value.udp_port}
            if value.switch_ip is None:
                action = self._action(SET_DST, args)
            else:
                action = self._action(SET_DST_FROM_SWITCH, args | {"switch_ip": value.switch_ip})
        else:
            raise TypeError(f"not a table value: {value!r}")
        entry.action.action.CopyFrom(action)
        return entry

    def _entity(self, change: Change) -> Any:
        entity = p4runtime_pb2.Entity()
        if change.kind is Kind.GROUPS:
            group = entity.packet_replication_engine_entry.multicast_group_entry
            group.multicast_group_id = change.key
            if change.op is not Op.DELETE and isinstance(change.value, frozenset):
                for port, rid in sorted(change.value):
                    group.replicas.add(egress_port=port, instance=rid)
        else:
            value = None if change.op is Op.DELETE else change.value
            entity.table_entry.CopyFrom(self._table_entry(change.kind, change.key, value))
        return entity

    def apply(self, changes: list[Change]) -> None:
        updates = []
        for c in changes:
            update = p4runtime_pb2.Update(type=_UPDATE[c.op])
            update.entity.CopyFrom(self._entity(c))
            updates.append(update)
        self.session.write(updates)

    def set_policy(self, entry: PolicyEntry) -> None:
        te = p4runtime_pb2.TableEntry(
            table_id=self.session.id_of(P4Type.table, POLICY_TABLE), is_default_action=True
        )
        args = {"policy": int(entry.policy), "stale_us": entry.stale_us, "squat_us": entry.squat_us}
        te.action.action.CopyFrom(self._action(SET_POLICY, args))
        update = p4runtime_pb2.Update(type=p4runtime_pb2.Update.MODIFY)
        update.entity.table_entry.CopyFrom(te)
        self.session.write([update])

    # -- reading --

    def _params(self, action: Any) -> tuple[str, dict[str, int]]:
        name = self.session.name_of(action.action_id)
        names = {pid: pname for pid, pname, _ in self.session.action_params(name)}
        return name, {names[p.param_id]: int.from_bytes(p.value, "big") for p in action.params}

    def _read_table(self, table: str) -> list[tuple[dict[int, Any], str, dict[str, int]]]:
        """Each entry's match fields by field id, its action and the arguments."""
        entity = p4runtime_pb2.Entity()
        entity.table_entry.table_id = self.session.id_of(P4Type.table, table)
        out = []
        for e in self.session.read(entity):
            te = e.table_entry
            name, args = self._params(te.action.action)
            out.append(({m.field_id: m for m in te.match}, name, args))
        return out

    def _read_keyed(self, table: str) -> list[tuple[int, str, dict[str, int]]]:
        """The entries of a table keyed by one exact field."""
        (field_id, _), *_ = self.session.key_fields(table)
        return [(_int(m[field_id].exact.value), n, a) for m, n, a in self._read_table(table)]

    def _read_ps_routes(self) -> dict[ShardKey, PsRoute]:
        (job_id, _), (shard_id, _) = self.session.key_fields(PS_TABLE)
        out = {}
        for match, _, a in self._read_table(PS_TABLE):
            job = _int(match[job_id].exact.value)
            shard = match.get(shard_id)
            key = ShardKey(job, 0, 0)
            if shard is not None:
                key = ShardKey(job, _int(shard.ternary.value), _int(shard.ternary.mask))
            source = a["switch_ip"] or None
            out[key] = PsRoute(a["port"], a["mac"], a["ip"], a["mgid_all"], source)
        return out

    def _read_children(self) -> dict[ChildKey, Child]:
        (job_id, _), (port_id, _) = self.session.key_fields(CHILDREN_TABLE)
        return {
            ChildKey(_int(m[job_id].exact.value), _int(m[port_id].exact.value)): Child(a["bitmap"])
            for m, _, a in self._read_table(CHILDREN_TABLE)
        }

    def read_policy(self) -> PolicyEntry:
        entity = p4runtime_pb2.Entity()
        entity.table_entry.table_id = self.session.id_of(P4Type.table, POLICY_TABLE)
        entity.table_entry.is_default_action = True
        for e in self.session.read(entity):
            _, args = self._params(e.table_entry.action.action)
            return PolicyEntry(Policy(args["policy"]), args["stale_us"], args["squat_us"])
        raise SwitchError("the switch returned no default action for the policy table")

    def read_groups(self) -> dict[int, Members]:
        entity = p4runtime_pb2.Entity()
        entity.packet_replication_engine_entry.multicast_group_entry.multicast_group_id = 0
        out: dict[int, Members] = {}
        for e in self.session.read(entity):
            g = e.packet_replication_engine_entry.multicast_group_entry
            out[int(g.multicast_group_id)] = frozenset(
                (int(r.egress_port), int(r.instance)) for r in g.replicas
            )
        return out

    def read_entries(self) -> SwitchEntries:
        out = SwitchEntries(policy=self.read_policy(), groups=self.read_groups())
        for key, _, a in self._read_keyed(JOBS_TABLE):
            out.jobs[key] = JobEntry.from_args(a)
        for key, name, a in self._read_keyed(L2_TABLE):
            out.l2[key] = L2Entry(mgid=a["mgid"]) if name == FLOOD else L2Entry(port=a["port"])
        out.children = self._read_children()
        out.ps_routes = self._read_ps_routes()
        for key, _, a in self._read_keyed(REPLICAS_TABLE):
            out.replicas[key] = Replica(a["mac"], a["ip"], a["udp_port"], a.get("switch_ip"))
        return out

    def _read_counter(self, name: str, indices: Iterable[int] | None = None) -> dict[int, int]:
        """Cells of counter ``name``: those at ``indices``, or all, in one request."""
        counter_id = self.session.id_of(P4Type.counter, name)

        def cell(index: int | None = None) -> Any:
            entity = p4runtime_pb2.Entity()
            entity.counter_entry.counter_id = counter_id
            if index is not None:
                entity.counter_entry.index.index = index
            return entity

        entities = [cell()] if indices is None else [cell(i) for i in indices]
        if not entities:
            return {}
        return {
            int(e.counter_entry.index.index): int(e.counter_entry.data.packet_count)
            for e in self.session.read(*entities)
        }

    def read_registers(self, *names: str) -> dict[str, list[int]]:
        """Each array in one request, every cell (no index: P4Runtime's wildcard)."""
        ids = {self.session.register_id(name): name for name in names}
        entities = []
        for register_id in ids:
            entity = p4runtime_pb2.Entity()
            entity.register_entry.register_id = register_id
            entities.append(entity)
        cells: dict[str, dict[int, int]] = {name: {} for name in names}
        for e in self.session.read(*entities):
            r = e.register_entry
            name = ids.get(r.register_id)
            if name is None:
                raise SwitchError(f"the switch answered with register id {r.register_id}")
            cells[name][int(r.index.index)] = _int(r.data.bitstring)
        out = {}
        for name, values in cells.items():
            if sorted(values) != list(range(len(values))):
                raise SwitchError(f"the switch answered register {name} with cells missing")
            out[name] = [values[i] for i in range(len(values))]
        return out

    def read_counters(self, jobs: Iterable[int] | None = None) -> Counters:
        cells = (
            None
            if jobs is None
            else [counter_index(j, e) for j in sorted(set(jobs)) for e in Event]
        )
        out = counters_from_indices(self._read_counter(JOB_EVENTS, cells))
        drops = self._read_counter(DROPS)
        out.drops = {d: drops.get(int(d), 0) for d in Drop}
        return out

    def reset_job_counters(self, job: int) -> None:
        counter_id = self.session.id_of(P4Type.counter, JOB_EVENTS)
        updates = []
        for i in range(job * EVENTS_PER_JOB, (job + 1) * EVENTS_PER_JOB):
            update = p4runtime_pb2.Update(type=p4runtime_pb2.Update.MODIFY)
            update.entity.counter_entry.counter_id = counter_id
            update.entity.counter_entry.index.index = i
            update.entity.counter_entry.data.packet_count = 0
            updates.append(update)
        self.session.write(updates)
