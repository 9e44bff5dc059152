"""Random requests at the admin API, against the in-memory switch.

Random RPC names, bytes that are not JSON, JSON of every shape, wrong types,
huge numbers, unknown jobs and hosts: every request is answered, a refusal
carries a client-error code and changes neither the switch nor the state
file, an accepted one leaves them in agreement, and afterwards a legitimate
admission works.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from controller.api.admin import AdminClient, AdminError, serve
from controller.api.codec import fields_of
from controller.api.messages import RPCS, SERVICE, AdmitRequest, JobRef, Removed
from controller.device.memswitch import MemorySwitch
from controller.world.state import Store
from tests.test_controller_service import Clock, Rig, make_controller
from tests.wait import LIMIT_S

REFUSALS = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.FAILED_PRECONDITION,
}
HOSTS = [f"h{i}" for i in range(1, 41)]
FIELD_NAMES = sorted({f.name for rpc in RPCS.values() for f in fields_of(rpc.request)})

huge = st.sampled_from([2**31, 2**32, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**100])
numbers = st.one_of(st.integers(-3, 300), st.integers(), huge, st.floats(), st.booleans())
words = st.one_of(
    st.sampled_from([*HOSTS[:6], "port:3", "10.0.0.2", "esa", "atp", "static", "", "x" * 300]),
    st.text(max_size=20),
)
scalars = st.one_of(st.none(), numbers, words)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)
worker_lists = st.lists(st.one_of(words, numbers), max_size=5)
requests = st.one_of(
    st.dictionaries(
        st.one_of(st.sampled_from(FIELD_NAMES), st.text(max_size=8)),
        st.one_of(values, worker_lists),
        max_size=6,
    ),
    values,
)
refs = st.sampled_from([*HOSTS[:9], "port:3", "port:x", "10.0.0.2", "02:00:00:00:00:05", "h0", ""])
KINDS: dict[Any, st.SearchStrategy[Any]] = {
    int: st.one_of(st.integers(-1, 6), st.integers(-3, 300), huge),
    str: st.one_of(refs, st.sampled_from(["esa", "atp", "static", "ESA"])),
    tuple[str, ...]: st.one_of(
        st.lists(refs, max_size=4), st.lists(refs, min_size=30, max_size=34)
    ),
}


def near_valid(method: str) -> st.SearchStrategy[dict[str, Any]]:
    """Requests of ``method`` with its own fields, each absent, null or of its kind."""
    return st.fixed_dictionaries(
        {},
        optional={
            f.name: st.one_of(st.none(), KINDS[f.type]) for f in fields_of(RPCS[method].request)
        },
    )


admits = st.builds(
    lambda job, workers, ps, prio: {"job": job, "workers": workers, "ps": ps, **prio},
    st.integers(0, 12),
    st.lists(st.sampled_from(HOSTS[:9]), min_size=2, max_size=4, unique=True),
    st.one_of(
        st.lists(st.sampled_from(HOSTS[8:12]), min_size=1, max_size=1),
        st.lists(st.sampled_from(HOSTS[6:14]), min_size=0, max_size=5),
    ),
    st.one_of(
        st.fixed_dictionaries({"priority": st.integers(-1, 256)}),
        st.fixed_dictionaries({"size": st.integers(-1, 2**40)}),
    ),
)
known = st.sampled_from(sorted(RPCS)).flatmap(
    lambda m: st.tuples(st.just(m), st.one_of(near_valid(m), requests))
)
calls = st.one_of(
    known,
    known,
    st.tuples(st.just("Admit"), admits),
    st.tuples(st.text("AdmitRemovePrigsyJobtuSl", min_size=1, max_size=10), requests),
)
raw_bodies = st.one_of(
    st.binary(max_size=64),
    st.sampled_from(
        [
            b"[" * 100_000,
            b'{"job": ' + b"9" * 5000 + b"}",
            b'{"job": 1e999}',
            b'{"job": NaN}',
            b"\xff\xfe{}",
            b'{"workers": ["h1", "h2"], "ps": ["h3"], "priority": 1, "job": 7',
        ]
    ),
)


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    tmp = tmp_path_factory.mktemp("fuzz")
    sw, clock, db = MemorySwitch(), Clock(), tmp / "state.db"
    ctl = make_controller(db, sw, clock)
    ctl.sync()
    ctl.admit(AdmitRequest(job=1, workers=("h1", "h2"), ps=("h3",), priority=5))
    addr = f"unix:{tmp}/admin.sock"
    server = serve(ctl, addr)
    client = AdminClient(addr)
    yield Rig(sw, ctl, client, db, clock)
    client.close()
    server.stop(None)


def state(rig: Rig) -> tuple[Any, ...]:
    store = Store(rig.db)
    try:
        return rig.sw.read_entries(), store.jobs(), store.policy(), dict(rig.ctl.state.jobs)
    finally:
        store.close()


def in_agreement(rig: Rig) -> bool:
    """The switch holds exactly what a controller restarted on the state file plans."""
    return make_controller(rig.db, rig.sw, rig.clock).sync() == 0


def send(rig: Rig, method: str, body: bytes) -> grpc.StatusCode | None:
    """One call with a raw body: None if accepted, else the status code."""
    rpc = rig.client.channel.unary_unary(f"/{SERVICE}/{method}")
    try:
        rpc(body, timeout=LIMIT_S)
    except grpc.RpcError as e:
        return e.code()
    return None


def check(rig: Rig, method: str, body: bytes) -> None:
    before = state(rig)
    code = send(rig, method, body)
    event(f"{method if method in RPCS else 'unknown RPC'}: {code.name if code else 'OK'}")
    if method not in RPCS:
        assert code is grpc.StatusCode.UNIMPLEMENTED
    elif code is not None:
        assert code in REFUSALS
        assert state(rig) == before
    else:
        assert in_agreement(rig)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(call=calls)
def test_random_json_requests(rig: Rig, call: tuple[str, Any]) -> None:
    method, request = call
    check(rig, method, json.dumps(request).encode())


@settings(max_examples=150, deadline=None)
@given(method=st.sampled_from(sorted(RPCS)), body=raw_bodies)
def test_random_bytes(rig: Rig, method: str, body: bytes) -> None:
    check(rig, method, body)


@pytest.mark.parametrize(
    ("method", "request_", "message"),
    [
        ("Admit", [1, 2], "request must be a JSON object"),
        ("Admit", {"job": 2, "workers": "h1,h2"},
         "Admit: field 'workers' must be a list of strings"),
        ("Admit", {"job": 2, "workers": ["h1", 2]},
         "Admit: field 'workers' must be a list of strings"),
        ("Admit", {"job": 2, "ps": 3}, "Admit: field 'ps' must be a list of strings"),
        ("Admit", {"job": 2, "ps": "h3"}, "Admit: field 'ps' must be a list of strings"),
        ("Admit", {"job": True}, "Admit: field 'job' must be an integer"),
        ("Admit", {"job": 2.0}, "Admit: field 'job' must be an integer"),
        ("Prio", {"job": 1, "size": 2**63}, "Prio: field 'size' is out of range (64-bit integer)"),
        ("Progress", {"job": 1, "remaining": -(2**63) - 1},
         "Progress: field 'remaining' is out of range (64-bit integer)"),
        ("Policy", {"policy": "atp", "stale": 5},
         "Policy: unknown field 'stale' (fields: policy, stale_us, squat_us, part_size, layout)"),
        ("Policy", {"policy": "atp", "stale_us": True},
         "Policy: field 'stale_us' must be an integer"),
        ("Remove", {"job": 1, "x" * 100: 1},
         f"Remove: unknown field '{'x' * 40}' (fields: job)"),
        ("Jobs", {"job": 1}, "Jobs: unknown field 'job' (fields: none)"),
        ("Admit", {"job": 2, "workers": ["h1", "h2"], "ps": ["h3", "h" * 257], "priority": 1},
         "Admit: field 'ps' has a string longer than 256 characters"),
        ("Admit", {"job": 2, "workers": ["h1", "h2"], "priority": 1},
         "Admit: field 'ps' is required"),
        ("Progress", {"job": 1, "remaining": None}, "Progress: field 'remaining' is required"),
        ("Remove", {}, "Remove: field 'job' is required"),
    ],
)  # fmt: skip
def test_malformed_requests_are_named(rig: Rig, method: str, request_: Any, message: str) -> None:
    before = state(rig)
    with pytest.raises(AdminError) as err:
        rig.client._call(method, request_)
    assert (err.value.code, str(err.value)) == (grpc.StatusCode.INVALID_ARGUMENT, message)
    assert state(rig) == before


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\xff", "request is not UTF-8"),
        (b"{", "request is not valid JSON: Expecting property name enclosed in double quotes: "
         "line 1 column 2 (char 1)"),
        (b"[" * 100_000, "request is nested too deeply"),
    ],
)  # fmt: skip
def test_undecodable_bodies_are_named(rig: Rig, body: bytes, message: str) -> None:
    rpc = rig.client.channel.unary_unary(f"/{SERVICE}/Remove")
    with pytest.raises(grpc.RpcError) as err:
        rpc(body, timeout=LIMIT_S)
    assert (err.value.code(), err.value.details()) == (grpc.StatusCode.INVALID_ARGUMENT, message)


def test_legitimate_admission_after_the_fuzz(rig: Rig) -> None:
    free = min(set(range(2, 256)) - set(rig.ctl.state.jobs))
    job = rig.client.admit(AdmitRequest(job=free, workers=("h7", "h8"), ps=("h9",), priority=42))
    assert (job.job, job.workers, job.ps, job.priority) == (free, ("h7", "h8"), ("h9",), 42)
    assert rig.sw.entries.jobs[free].priority == 42
    assert in_agreement(rig)
    assert rig.client.remove(JobRef(job=free)) == Removed(job=free, removed=True)
    assert free not in rig.sw.entries.jobs
