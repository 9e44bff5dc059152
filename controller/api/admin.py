"""The admin API: gRPC with JSON messages, typed on both sides.

Why JSON rather than generated protobuf stubs: stubs from current
grpcio-tools import protobuf >= 4, and the environment must keep protobuf
3.20.3 for p4runtime-shell; older grpcio-tools that emit 3.20-compatible code
would pin a second, aging toolchain for a few small messages.  gRPC itself
carries any bytes, so the service uses gRPC's generic handlers on raw bytes:
same transport, status codes and deadlines, no generated code.

This module is the API's edge: the server decodes each request into its
dataclass (``controller.api.codec``, which refuses a malformed one) before the
controller's function for that RPC (``routes``) sees it, and encodes the
reply; ``AdminClient`` does the reverse, one typed method per RPC.  The
server listens only on a unix socket or on 127.0.0.1, and only where no
other controller does (``AdminServer``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any, TypeVar

import grpc

from controller.api import codec
from controller.api.address import check_admin_addr, in_use, unix_path
from controller.api.instance import Claim, claim, holder, lock_path
from controller.api.messages import (
    ADMIT,
    IDENTIFY,
    JOBS,
    POLICY,
    PRIO,
    PROGRESS,
    REMOVE,
    SERVICE,
    SLOTS,
    STATS,
    STATUS,
    AdmitRequest,
    DeviceRef,
    Empty,
    Identity,
    JobInfo,
    JobList,
    JobRef,
    PolicyRequest,
    PolicyState,
    PrioRequest,
    ProgressRequest,
    Removed,
    Rpc,
    Slots,
    Stats,
    Status,
)
from controller.api.service import Controller
from controller.errors import ControllerError, InUse, InvalidRequest

DEFAULT_ADDR = "unix:/tmp/esa-ctl.sock"
CALL_TIMEOUT_S = 30.0
PROBE_TIMEOUT_S = 2.0
ALL_DEVICES = DeviceRef()

Req = TypeVar("Req")
Rep = TypeVar("Rep")

Route = tuple[Rpc[Any, Any], Callable[[Any], Any]]


def route(rpc: Rpc[Req, Rep], fn: Callable[[Req], Rep]) -> Route:
    """``rpc`` answered by ``fn`` (checked to take its request and give its reply)."""
    return rpc, fn


def routes(ctl: Controller) -> list[Route]:
    """Every RPC with the controller's function that answers it."""
    return [
        route(ADMIT, ctl.admit),
        route(REMOVE, ctl.remove),
        route(JOBS, lambda _: ctl.jobs()),
        route(PRIO, ctl.prio),
        route(PROGRESS, ctl.progress),
        route(POLICY, ctl.policy),
        route(STATUS, lambda _: ctl.status()),
        route(STATS, lambda req: ctl.stats(req.device)),
        route(SLOTS, lambda req: ctl.slots(req.device)),
        route(IDENTIFY, lambda _: ctl.identify()),
    ]


def _handler(rpc: Rpc[Any, Any], fn: Callable[[Any], Any]) -> Any:
    def call(raw: bytes, context: grpc.ServicerContext) -> bytes:
        try:
            reply = fn(codec.loads(rpc.request, raw, rpc.name, capped=True))
        except ControllerError as e:
            context.abort(e.code, str(e))  # raises
        return codec.dumps(reply)

    return grpc.unary_unary_rpc_method_handler(call)


def _serving(addr: str) -> str:
    """Who answers on ``addr``: the controller's own description if it is one."""
    client = AdminClient(addr)
    try:
        me = client.identify(timeout=PROBE_TIMEOUT_S)
        return holder(me.pid, Path(me.state_file), addr)
    except AdminError:
        return "another program"
    finally:
        client.close()


class AdminServer:
    """The admin API's server.  Creating it claims the address: a unix socket
    by its lock file (``controller.api.instance``), and either kind by checking
    that nothing answers there yet; ``InUse`` names who does."""

    def __init__(self, addr: str, name: str) -> None:
        self.addr = check_admin_addr(addr, any_port=True)
        path = unix_path(addr)
        self.claim: Claim | None = None
        if path is not None:
            self.claim = claim(lock_path(path), name, f"admin address {addr}")
        try:
            if in_use(addr):
                raise InUse(f"admin address {addr} is in use by {_serving(addr)}")
        except ControllerError:
            self._release()
            raise
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=4), options=[("grpc.so_reuseport", 0)]
        )

    def start(self, ctl: Controller) -> None:
        methods = {rpc.name: _handler(rpc, fn) for rpc, fn in routes(ctl)}
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, methods),)
        )
        try:
            port = self.server.add_insecure_port(self.addr)
        except RuntimeError:
            port = 0
        if port == 0:
            raise InvalidRequest(f"cannot listen on {self.addr}")
        if unix_path(self.addr) is None:
            self.addr = f"127.0.0.1:{port}"
        self.server.start()

    def stop(self, grace: float | None = None) -> None:
        """Stop serving (letting calls in progress run for ``grace`` seconds), release."""
        self.server.stop(grace).wait()
        self._release()

    def _release(self) -> None:
        if self.claim is not None:
            self.claim.release()


def serve(ctl: Controller, addr: str) -> AdminServer:
    """Start the admin server for ``ctl`` (returns it running)."""
    server = AdminServer(addr, holder(os.getpid(), ctl.store.path, addr))
    try:
        server.start(ctl)
    except ControllerError:
        server.stop()
        raise
    return server


class AdminError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class AdminClient:
    """The admin API as methods: a request dataclass in, a reply dataclass out,
    ``AdminError`` (with the gRPC status code) for a refusal."""

    def __init__(self, addr: str = DEFAULT_ADDR) -> None:
        self.addr = addr
        self.channel = grpc.insecure_channel(addr)

    def close(self) -> None:
        self.channel.close()

    def admit(self, req: AdmitRequest, timeout: float = CALL_TIMEOUT_S) -> JobInfo:
        return self._rpc(ADMIT, req, timeout)

    def remove(self, req: JobRef, timeout: float = CALL_TIMEOUT_S) -> Removed:
        return self._rpc(REMOVE, req, timeout)

    def jobs(self, timeout: float = CALL_TIMEOUT_S) -> JobList:
        return self._rpc(JOBS, Empty(), timeout)

    def prio(self, req: PrioRequest, timeout: float = CALL_TIMEOUT_S) -> JobInfo:
        return self._rpc(PRIO, req, timeout)

    def progress(self, req: ProgressRequest, timeout: float = CALL_TIMEOUT_S) -> JobInfo:
        return self._rpc(PROGRESS, req, timeout)

    def policy(self, req: PolicyRequest, timeout: float = CALL_TIMEOUT_S) -> PolicyState:
        return self._rpc(POLICY, req, timeout)

    def status(self, timeout: float = CALL_TIMEOUT_S) -> Status:
        return self._rpc(STATUS, Empty(), timeout)

    def stats(self, req: DeviceRef = ALL_DEVICES, timeout: float = CALL_TIMEOUT_S) -> Stats:
        return self._rpc(STATS, req, timeout)

    def slots(self, req: DeviceRef = ALL_DEVICES, timeout: float = CALL_TIMEOUT_S) -> Slots:
        return self._rpc(SLOTS, req, timeout)

    def identify(self, timeout: float = CALL_TIMEOUT_S) -> Identity:
        return self._rpc(IDENTIFY, Empty(), timeout)

    def _rpc(self, rpc: Rpc[Req, Rep], req: Req, timeout: float) -> Rep:
        raw = self._send(rpc.name, codec.dumps(req), timeout)
        try:
            return codec.loads(rpc.reply, raw, rpc.name, capped=False)
        except InvalidRequest as e:
            raise AdminError(
                grpc.StatusCode.INTERNAL, f"unexpected reply from {self.addr}: {e}"
            ) from None

    def _call(self, method: str, request: Any, timeout: float = CALL_TIMEOUT_S) -> Any:
        """Any JSON value to any method name, the reply as JSON data: for tests
        of what the server does with requests no typed method can send."""
        return json.loads(self._send(method, json.dumps(request).encode(), timeout))

    def _send(self, method: str, body: bytes, timeout: float) -> bytes:
        rpc = self.channel.unary_unary(f"/{SERVICE}/{method}")
        try:
            reply: bytes = rpc(body, timeout=timeout)
        except grpc.RpcError as e:
            code, details = e.code(), e.details()
            if code is grpc.StatusCode.UNAVAILABLE and not details.startswith("switch"):
                details = f"cannot reach the controller at {self.addr}: is `esa-ctl serve` running?"
            raise AdminError(code, details) from None
        return reply
