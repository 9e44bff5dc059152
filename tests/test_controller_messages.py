"""The admin API's messages: admin.proto states the dataclasses of
controller/api/messages.py, every RPC is served, and the JSON conversion keeps
what it is given (no switch needed)."""

from __future__ import annotations

import dataclasses
import re
import types
from pathlib import Path
from typing import Any

import pytest

from controller.api import messages
from controller.api.admin import routes
from controller.api.codec import dumps, fields_of, loads
from controller.api.messages import (
    RPCS,
    SERVICE,
    AdmitRequest,
    HostInfo,
    Identity,
    JobInfo,
    JobList,
    JobPart,
    Slots,
    Stats,
    Status,
    SwitchLink,
    SwitchSlots,
    SwitchStats,
)
from controller.device.memswitch import MemorySwitch
from controller.errors import InvalidRequest
from tests.test_controller_service import Clock, make_controller

PROTO = Path(__file__).resolve().parent.parent / "controller" / "api" / "admin.proto"

SCALARS = {
    "uint32": int,
    "uint64": int,
    "int32": int,
    "int64": int,
    "string": str,
    "double": float,
    "bool": bool,
}
NULLABLE_REPEATED = {("JobInfo", "partition")}
"""proto3 cannot mark a repeated field optional; these are null in the JSON
when they have no value, as their comment in admin.proto says."""

_FIELD = re.compile(r"(optional |repeated )?(map<\w+,\s*\w+>|\w+)\s+(\w+)\s*=\s*\d+;")
_MAP = re.compile(r"map<(\w+),\s*(\w+)>")


@dataclasses.dataclass(frozen=True)
class ProtoField:
    label: str
    type: str
    name: str


def parse_proto(text: str) -> tuple[str, dict[str, tuple[str, str]], dict[str, list[ProtoField]]]:
    """The service's full name, its RPCs (name -> (request, reply)) and its
    messages (name -> fields) as admin.proto states them."""
    text = re.sub(r"//[^\n]*", "", text)
    package = re.search(r"\bpackage\s+([\w.]+);", text)
    service = re.search(r"\bservice\s+(\w+)", text)
    assert package and service
    rpcs = {
        name: (req, rep)
        for name, req, rep in re.findall(r"rpc\s+(\w+)\s*\((\w+)\)\s*returns\s*\((\w+)\)", text)
    }
    bodies = re.findall(r"\bmessage\s+(\w+)\s*\{([^{}]*)\}", text)
    assert len(bodies) == len(re.findall(r"\bmessage\s", text)), "nested messages: flatten them"
    msgs = {
        name: [ProtoField(label.strip(), tp, f) for label, tp, f in _FIELD.findall(body)]
        for name, body in bodies
    }
    return f"{package[1]}.{service[1]}", rpcs, msgs


SERVICE_NAME, PROTO_RPCS, PROTO_MESSAGES = parse_proto(PROTO.read_text())


def python_type(proto_type: str) -> Any:
    """The dataclass field type that stands for a proto type.  A message whose
    only field is a map stands for that map: its JSON is the map itself."""
    if proto_type in SCALARS:
        return SCALARS[proto_type]
    if (m := _MAP.fullmatch(proto_type)) is not None:
        return types.GenericAlias(dict, (python_type(m[1]), python_type(m[2])))
    fields = PROTO_MESSAGES[proto_type]
    if len(fields) == 1 and fields[0].type.startswith("map<"):
        return python_type(fields[0].type)
    return getattr(messages, proto_type)


def dataclasses_of(tp: Any) -> set[type]:
    """The message dataclasses a field type holds, itself included."""
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return {tp}.union(*(dataclasses_of(f.type) for f in fields_of(tp)))
    return set().union(*(dataclasses_of(a) for a in getattr(tp, "__args__", ())))


def test_service_and_rpcs_are_those_of_the_proto() -> None:
    assert SERVICE_NAME == SERVICE
    assert {
        name: (rpc.request.__name__, rpc.reply.__name__) for name, rpc in RPCS.items()
    } == PROTO_RPCS


def test_messages_are_those_of_the_proto() -> None:
    used: set[type] = set()
    for rpc in RPCS.values():
        used |= dataclasses_of(rpc.request) | dataclasses_of(rpc.reply)
    wrappers = {
        n for n, f in PROTO_MESSAGES.items() if len(f) == 1 and f[0].type.startswith("map<")
    }
    assert {m.__name__ for m in used} == set(PROTO_MESSAGES) - wrappers
    for message in used:
        proto = {f.name: f for f in PROTO_MESSAGES[message.__name__]}
        ours = {f.name: f for f in fields_of(message)}
        assert sorted(ours) == sorted(proto), message.__name__
        for name, f in ours.items():
            p = proto[name]
            want = python_type(p.type)
            if p.label == "repeated":
                want = types.GenericAlias(tuple, (want, ...))
            optional = p.label == "optional" or (message.__name__, name) in NULLABLE_REPEATED
            assert (f.type, f.optional) == (want, optional), f"{message.__name__}.{name}"


def test_every_rpc_is_routed(tmp_path: Path) -> None:
    ctl = make_controller(tmp_path / "state.db", MemorySwitch(), Clock())
    assert sorted(rpc.name for rpc, _ in routes(ctl)) == sorted(RPCS)


STATUS = Status(
    switches=(SwitchLink("s1", 0, "127.0.0.1:9559", True, 1, 12),),
    policy="esa",
    stale_us=5000,
    squat_us=0,
    part_size=16,
    layout="homes",
    pool_size=64,
    jobs=1,
    entries=12,
    aging_period_s=10.0,
    hosts={"h1": HostInfo("s1", 1, "02:00:00:00:00:01", "10.0.0.1", 58784)},
)
JOB = JobInfo(
    1, ("h1", "h2"), ("h3", "h4"), "auto", 191, None, 5, 1000.5, (0, 64), (2, 514), 3, "s1",
    {"s1": JobPart(2, 0b11, (0, 64))},
)  # fmt: skip


@pytest.mark.parametrize(
    "reply",
    [
        STATUS,
        JobList((JOB, dataclasses.replace(JOB, job=2, partition=None, priority=None))),
        Stats(
            {1: {"aggregated": 3}, 17: {}},
            {"unknown_job": 0},
            {"t1": SwitchStats({1: {"aggregated": 3}}, {"unknown_job": 0})},
        ),
        Slots(5, 3, {1: 3}, {"t1": SwitchSlots(5, 3, {1: 3})}),
        Identity(7, "/" + "x" * 300),
    ],
)
def test_replies_survive_the_wire(reply: Any) -> None:
    assert loads(type(reply), dumps(reply), "reply", capped=False) == reply


def test_stats_keys_are_strings_on_the_wire() -> None:
    assert dumps(Stats({1: {"completed": 2}}, {}, {"s1": SwitchStats({1: {}}, {})})) == (
        b'{"jobs": {"1": {"completed": 2}}, "drops": {}, '
        b'"switches": {"s1": {"jobs": {"1": {}}, "drops": {}}}}'
    )


@pytest.mark.parametrize(
    ("message", "raw", "error"),
    [
        (Status, dumps(STATUS).replace(b"true", b'"yes"'),
         "Status: field 'switches[0].connected' must be a boolean"),
        (Status, dumps(STATUS).replace(b'"port": 1', b'"port": 1, "vlan": 2'),
         "Status: unknown field \"hosts['h1'].vlan\" (fields: switch, port, mac, ip, udp_port)"),
        (Stats, b'{"jobs": {"x": {}}, "drops": {}, "switches": {}}',
         "Stats: field 'jobs' has key 'x', which is not an integer"),
        (Stats, b'{"jobs": {}, "drops": {}}', "Stats: field 'switches' is required"),
        (JobList, b'{"jobs": [{"job": 1}]}', "JobList: field 'jobs[0].workers' is required"),
        (Identity, b'{"pid": 1.5, "state_file": "/s.db"}',
         "Identity: field 'pid' must be an integer"),
    ],
)  # fmt: skip
def test_a_reply_that_does_not_fit_is_named(message: type, raw: bytes, error: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        loads(message, raw, message.__name__, capped=False)
    assert str(err.value) == error


def test_a_key_given_twice_is_refused_not_overwritten() -> None:
    raw = b'{"job": 1, "workers": ["h1", "h2"], "ps": ["h3"], "size": 1, "job": 2}'
    with pytest.raises(InvalidRequest) as err:
        loads(AdmitRequest, raw, "Admit", capped=True)
    assert str(err.value) == "request is not valid JSON: key 'job' given twice"


def test_requests_are_capped_replies_not() -> None:
    raw = b'{"job": 1, "workers": ["h1", "h2"], "ps": ["h3", "' + b"h" * 257 + b'"], "size": 1}'
    with pytest.raises(InvalidRequest, match="has a string longer than 256 characters"):
        loads(AdmitRequest, raw, "Admit", capped=True)
    assert loads(AdmitRequest, raw, "Admit", capped=False).ps == ("h3", "h" * 257)
