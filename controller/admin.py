"""The admin API: gRPC with JSON messages (see ``controller/admin.proto``).

Why JSON rather than generated protobuf stubs: stubs from current
grpcio-tools import protobuf >= 4, and the environment must keep protobuf
3.20.3 for p4runtime-shell; older grpcio-tools that emit 3.20-compatible code
would pin a second, aging toolchain for eight small messages.  gRPC itself
carries any bytes, so the service uses gRPC's generic handlers with JSON
serialisers: same transport, status codes and deadlines, no generated code.

The server listens only on a unix socket or on 127.0.0.1.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc

from controller.errors import ControllerError, InvalidRequest
from controller.service import Controller

SERVICE = "esa.admin.v1.Admin"
DEFAULT_ADDR = "unix:/tmp/esa-ctl.sock"
CALL_TIMEOUT_S = 30.0

Handler = Callable[[dict[str, Any]], Any]


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def _loads(raw: bytes) -> Any:
    return json.loads(raw.decode()) if raw else {}


def check_listen_addr(addr: str) -> str:
    """Only local addresses: the admin API has no authentication."""
    if addr.startswith("unix:"):
        return addr
    host, _, port = addr.rpartition(":")
    if host in ("127.0.0.1", "localhost") and port.isdigit():
        return addr
    raise InvalidRequest(f"admin address {addr!r}: use unix:PATH or 127.0.0.1:PORT")


def handlers(ctl: Controller) -> dict[str, Handler]:
    """RPC name -> handler taking the request object."""
    return {
        "Admit": lambda r: ctl.admit(
            r.get("job"),
            list(r.get("workers", [])),
            str(r.get("ps", "")),
            r.get("priority"),
            r.get("size"),
        ),
        "Remove": lambda r: ctl.remove(r.get("job")),
        "Jobs": lambda r: {"jobs": ctl.list_jobs()},
        "Prio": lambda r: ctl.set_priority(r.get("job"), r.get("priority"), r.get("size")),
        "Progress": lambda r: ctl.progress(r.get("job"), r.get("remaining")),
        "Policy": lambda r: ctl.set_policy(r.get("policy"), r.get("stale_us")),
        "Status": lambda r: ctl.status(),
        "Stats": lambda r: ctl.stats(),
        "Slots": lambda r: ctl.slots(),
    }


def _wrap(fn: Handler) -> Callable[[Any, grpc.ServicerContext], Any]:
    def call(request: Any, context: grpc.ServicerContext) -> Any:
        if not isinstance(request, dict):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "request must be a JSON object")
        try:
            return fn(request)
        except ControllerError as e:
            context.abort(e.code, str(e))

    return call


def serve(ctl: Controller, addr: str, workers: int = 4) -> grpc.Server:
    """Start the admin server (returns it running)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers))
    methods = {
        name: grpc.unary_unary_rpc_method_handler(
            _wrap(fn), request_deserializer=_loads, response_serializer=_dumps
        )
        for name, fn in handlers(ctl).items()
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, methods),))
    if server.add_insecure_port(check_listen_addr(addr)) == 0:
        raise InvalidRequest(f"cannot listen on {addr}")
    server.start()
    return server


class AdminError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class AdminClient:
    def __init__(self, addr: str = DEFAULT_ADDR) -> None:
        self.addr = addr
        self.channel = grpc.insecure_channel(addr)

    def close(self) -> None:
        self.channel.close()

    def call(self, method: str, request: dict[str, Any] | None = None) -> Any:
        rpc = self.channel.unary_unary(
            f"/{SERVICE}/{method}", request_serializer=_dumps, response_deserializer=_loads
        )
        try:
            return rpc(request or {}, timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as e:
            code, details = e.code(), e.details()
            if code is grpc.StatusCode.UNAVAILABLE and not details.startswith("switch"):
                details = f"cannot reach the controller at {self.addr}: is `esa-ctl serve` running?"
            raise AdminError(code, details) from None
