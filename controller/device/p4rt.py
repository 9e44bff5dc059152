"""A P4Runtime session with one device: arbitration, pipeline, write, read.

It is built on the p4runtime protos and p4runtime-shell's P4Info index
(``p4runtime_sh.context.Context``), not on ``p4runtime_sh.P4RuntimeClient``:
that client calls ``sys.exit`` when the switch is unreachable or the
arbitration times out, and prints instead of raising when it is not primary.
A controller must survive a switch restart and report an unreachable switch
as an error, so this session raises ``SwitchUnavailable`` instead.
"""

from __future__ import annotations

import hashlib
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import text_format
from google.rpc import code_pb2, status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc
from p4runtime_sh.context import Context, P4Type

from controller.device.requestlog import RequestLog
from controller.errors import SwitchError, SwitchUnavailable

CONNECT_TIMEOUT_S = 5.0
"""How long a switch may take to accept the connection: one that does not
is down, and the operator hears so at once."""
ARBITRATION_TIMEOUT_S = 60.0
"""How long a switch that accepted the stream may take to answer the
arbitration: it is up, only busy (a loaded machine, a switch still loading
its program), and a stream that ends stops the wait at once."""
RPC_TIMEOUT_S = 10.0


def pipeline_cookie(json_bytes: bytes, p4info_text: str) -> int:
    """A 64-bit fingerprint of a pipeline: equal cookies mean nothing to re-push."""
    digest = hashlib.sha256(json_bytes + p4info_text.encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _write_error(e: grpc.RpcError) -> str:
    """The per-update messages BMv2 puts in a failed Write's status details."""
    for key, value in e.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status()
            status.ParseFromString(value)
            msgs = []
            for any_ in status.details:
                err = p4runtime_pb2.Error()
                if any_.Unpack(err) and err.canonical_code != code_pb2.OK:
                    msgs.append(err.message or code_pb2.Code.Name(err.canonical_code))
            if msgs:
                return "; ".join(msgs)
    return str(e.details())


class Unimplemented(SwitchError):
    """The switch answered ``UNIMPLEMENTED``: it does not serve what was asked
    (BMv2 serves no register reads)."""


class Session:
    """P4Runtime session with ``device_id`` at ``grpc_addr``: primary, or
    refused; a backup (read-only) session only with ``require_primary=False``.
    ``request_log``: a file every request is appended to (``RequestLog``)."""

    def __init__(
        self,
        grpc_addr: str,
        device_id: int,
        election_id: tuple[int, int],
        require_primary: bool = True,
        request_log: Path | None = None,
    ) -> None:
        self.grpc_addr = grpc_addr
        self.require_primary = require_primary
        self.device_id = device_id
        self.election_id = election_id
        self.context = Context()
        self._alive = threading.Event()
        self._out: queue.Queue[Any] = queue.Queue()
        self._arbitration: queue.Queue[Any] = queue.Queue()
        self.channel = grpc.insecure_channel(grpc_addr)
        try:
            grpc.channel_ready_future(self.channel).result(timeout=CONNECT_TIMEOUT_S)
        except grpc.FutureTimeoutError:
            self.channel.close()
            raise SwitchUnavailable(
                f"switch unreachable: no P4Runtime server at {grpc_addr}"
            ) from None
        calls = self.channel
        if request_log is not None:
            calls = grpc.intercept_channel(self.channel, RequestLog(request_log))
        self.stub = p4runtime_pb2_grpc.P4RuntimeStub(calls)
        self._stream = self.stub.StreamChannel(self._requests())
        self._reader = threading.Thread(target=self._read_stream, daemon=True)
        self._reader.start()
        self._arbitrate()
        try:
            self.cookie = self.installed_cookie()
        except SwitchUnavailable:
            self.close()
            raise

    def _requests(self) -> Iterator[Any]:
        while True:
            msg = self._out.get()
            if msg is None:
                return
            yield msg

    def _read_stream(self) -> None:
        try:
            for msg in self._stream:
                if msg.HasField("arbitration"):
                    self._arbitration.put(msg.arbitration)
        except grpc.RpcError:
            pass
        finally:
            self._alive.clear()
            self._arbitration.put(None)

    def _arbitrate(self) -> None:
        req = p4runtime_pb2.StreamMessageRequest()
        req.arbitration.device_id = self.device_id
        req.arbitration.election_id.high = self.election_id[0]
        req.arbitration.election_id.low = self.election_id[1]
        self._out.put(req)
        try:
            rep = self._arbitration.get(timeout=ARBITRATION_TIMEOUT_S)
        except queue.Empty:
            rep = None
        if rep is None:
            self.close()
            raise SwitchUnavailable(
                f"switch at {self.grpc_addr} did not answer arbitration for device {self.device_id}"
            )
        if rep.status.code != code_pb2.OK and self.require_primary:
            self.close()
            high, low = self.election_id
            raise SwitchUnavailable(
                f"switch at {self.grpc_addr} refused to make us primary: another controller "
                f"holds an election id higher than ({high}, {low})"
            )
        self._alive.set()

    @property
    def alive(self) -> bool:
        """False once the stream broke (the switch went away)."""
        return self._alive.is_set()

    def close(self) -> None:
        self._alive.clear()
        self._out.put(None)
        self.channel.close()

    def _call(self, fn: Any, req: Any) -> Any:
        try:
            return fn(req, timeout=RPC_TIMEOUT_S)
        except grpc.RpcError as e:
            if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                self._alive.clear()
                raise SwitchUnavailable(f"switch unreachable at {self.grpc_addr}") from None
            raise SwitchError(f"switch refused the request: {_write_error(e)}") from None

    # -- pipeline --

    def installed_cookie(self) -> int | None:
        """Cookie of the installed pipeline, or None when there is none.

        Also loads the installed P4Info, so a session can read a switch whose
        pipeline another controller pushed.
        """
        req = p4runtime_pb2.GetForwardingPipelineConfigRequest(
            device_id=self.device_id,
            response_type=p4runtime_pb2.GetForwardingPipelineConfigRequest.ALL,
        )
        try:
            rep = self._call(self.stub.GetForwardingPipelineConfig, req)
        except SwitchError:
            return None
        if rep.config.HasField("p4info") and rep.config.p4info.tables:
            self.context.set_p4info(rep.config.p4info)
        if not rep.config.HasField("cookie"):
            return None
        return int(rep.config.cookie.cookie)

    def push_config(self, json_bytes: bytes, p4info_text: str) -> int:
        """Install the pipeline, ``json_bytes`` as its device config (which
        empties every table and group)."""
        info = p4info_pb2.P4Info()
        text_format.Merge(p4info_text, info, allow_unknown_field=True)
        cookie = pipeline_cookie(json_bytes, p4info_text)
        req = p4runtime_pb2.SetForwardingPipelineConfigRequest(
            device_id=self.device_id,
            action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
        )
        req.election_id.high, req.election_id.low = self.election_id
        req.config.p4info.CopyFrom(info)
        req.config.p4_device_config = json_bytes
        req.config.cookie.cookie = cookie
        self._call(self.stub.SetForwardingPipelineConfig, req)
        self.context.set_p4info(info)
        self.cookie = cookie
        return cookie

    # -- names and values --

    def id_of(self, kind: P4Type, name: str) -> int:
        obj_id = self.context.get_obj_id(kind, name)
        if obj_id is None:
            raise SwitchError(f"the pipeline has no {kind.pretty_name} named {name!r}")
        return int(obj_id)

    def name_of(self, obj_id: int) -> str:
        return str(self.context.get_name_from_id(obj_id))

    def register_id(self, name: str) -> int:
        """The id of register array ``name`` (the P4Info's; p4runtime-shell
        indexes no registers)."""
        for r in self.context.p4info.registers if self.context.p4info else ():
            if r.preamble.name == name:
                return int(r.preamble.id)
        raise SwitchError(f"the pipeline has no register named {name!r}")

    def action_params(self, action: str) -> list[tuple[int, str, int]]:
        """``(id, name, bitwidth)`` of each parameter of ``action``."""
        a = self.context.get_obj(P4Type.action, action)
        if a is None:
            raise SwitchError(f"the pipeline has no action named {action!r}")
        return [(int(p.id), str(p.name), int(p.bitwidth)) for p in a.params]

    def key_fields(self, table: str) -> list[tuple[int, int]]:
        """``(id, bitwidth)`` of each key field of ``table``, in key order."""
        t = self.context.get_obj(P4Type.table, table)
        if t is None:
            raise SwitchError(f"the pipeline has no table named {table!r}")
        return [(int(m.id), int(m.bitwidth)) for m in t.match_fields]

    # -- write and read --

    def write(self, updates: list[Any]) -> None:
        if not updates:
            return
        req = p4runtime_pb2.WriteRequest(device_id=self.device_id)
        req.election_id.high, req.election_id.low = self.election_id
        req.updates.extend(updates)
        self._call(self.stub.Write, req)

    def read(self, *entities: Any) -> list[Any]:
        """What the switch answers to one request for all of ``entities``."""
        req = p4runtime_pb2.ReadRequest(device_id=self.device_id)
        req.entities.extend(entities)
        try:
            return [e for rep in self.stub.Read(req, timeout=RPC_TIMEOUT_S) for e in rep.entities]
        except grpc.RpcError as e:
            if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                self._alive.clear()
                raise SwitchUnavailable(f"switch unreachable at {self.grpc_addr}") from None
            if e.code() is grpc.StatusCode.UNIMPLEMENTED:
                raise Unimplemented(f"switch does not serve the read: {e.details()}") from None
            raise SwitchError(f"switch refused a read: {_write_error(e)}") from None
