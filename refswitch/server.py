"""The reference switch's P4Runtime server: the subset the controller uses.

Served: ``StreamChannel`` (arbitration only: the program has no CPU port),
``SetForwardingPipelineConfig`` (VERIFY, VERIFY_AND_COMMIT),
``GetForwardingPipelineConfig``, and ``Write`` and ``Read`` of the entities
``refswitch.entities`` serves (the slot registers' reads among them, which
BMv2 does not serve).  Requests are answered as ``simple_switch_grpc``
answers them: the same status codes and messages where the controller or a
user sees them, a batch applied update by update and, when any update
fails, ``UNKNOWN`` with one ``p4.v1.Error`` per update in the status details.

The device config pushed with a pipeline is a BMv2 JSON, of which the switch
reads one fact: the size of ``slot_owner``, which must be its own pool.
Where no p4c has made one, ``device_config`` (``controller.device.pipeline``'s, which
``esa-ctl serve --no-p4json`` pushes) writes the least JSON that states it; an
empty device config states nothing and is taken too.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any, NoReturn

import grpc
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from esa.p4names import SLOT_OWNER
from refswitch.arbiter import Arbiter, Connection
from refswitch.entities import Entities
from refswitch.frames import Pipeline
from refswitch.tables import ProgramInfo, Refused, Tables

_CONFIG = p4runtime_pb2.SetForwardingPipelineConfigRequest
_GET = p4runtime_pb2.GetForwardingPipelineConfigRequest
NO_PIPELINE = "No forwarding pipeline config set for this device"


def pool_of(config: bytes) -> int:
    """The slot pool size a device config states (raises ``Refused``)."""
    try:
        program = json.loads(config)
        return next(
            int(r["size"]) for r in program["register_arrays"] if r.get("name") == SLOT_OWNER
        )
    except (ValueError, TypeError, KeyError, StopIteration):
        raise Refused(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"the device config is no BMv2 JSON with the register {SLOT_OWNER}",
        ) from None


class BatchRefused(Refused):
    """A Write of which at least one update failed: one entry per update."""

    def __init__(self, errors: list[Refused | None]) -> None:
        super().__init__(grpc.StatusCode.UNKNOWN, "; ".join(e.message for e in errors if e))
        self.errors = errors


class ServedDevice:
    """The switch as P4Runtime sees it.  ``pipeline`` is what the data path
    runs (None: no program, every frame dropped); ``lock`` orders the
    control-plane requests."""

    def __init__(self, device_id: int, pool_size: int) -> None:
        self.device_id = device_id
        self.pool_size = pool_size
        self.lock = threading.Lock()
        self.config: Any = None
        self.entities: Entities | None = None
        self.pipeline: Pipeline | None = None

    def check(self, config: Any) -> ProgramInfo:
        """The program of a pipeline config this switch can run (raises ``Refused``)."""
        program = ProgramInfo(config.p4info)
        if config.p4_device_config:
            pool = pool_of(config.p4_device_config)
            if pool != self.pool_size:
                raise Refused(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"the device config has a pool of {pool} slots, this switch {self.pool_size}",
                )
        return program

    def install(self, config: Any) -> None:
        """Run a pipeline config with empty tables, a free pool and zero
        counters (raises ``Refused``)."""
        tables = Tables(self.check(config))
        pipeline = Pipeline(self.pool_size)
        pipeline.load(tables)
        self.config = p4runtime_pb2.ForwardingPipelineConfig()
        self.config.CopyFrom(config)
        self.entities, self.pipeline = Entities(tables, pipeline), pipeline

    def running(self) -> Entities:
        if self.entities is None:
            raise Refused(grpc.StatusCode.FAILED_PRECONDITION, NO_PIPELINE)
        return self.entities


def _abort(context: Any, refused: Refused) -> NoReturn:
    """End an RPC with ``refused``'s code; a failed batch as PI fails it."""
    if isinstance(refused, BatchRefused):
        status = status_pb2.Status(code=code_pb2.UNKNOWN, message=refused.message)
        for e in refused.errors:
            err = p4runtime_pb2.Error(canonical_code=code_pb2.OK)
            if e is not None:
                err.canonical_code, err.message = e.code.value[0], e.message
                err.space = "ALL-sswitch-p4org"
            status.details.add().Pack(err)
        context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
    context.abort(refused.code, refused.message)
    raise AssertionError("grpc's abort returns only by raising")


class RefSwitchP4Runtime(p4runtime_pb2_grpc.P4RuntimeServicer):  # type: ignore[misc]
    def __init__(self, device: ServedDevice) -> None:
        self.device = device
        self.arbiter = Arbiter(device.device_id)

    def _check_device(self, device_id: int) -> None:
        if device_id != self.device.device_id:
            raise Refused(grpc.StatusCode.NOT_FOUND, f"no device {device_id}")

    def StreamChannel(self, requests: Iterator[Any], context: Any) -> Iterator[Any]:
        conn = Connection()

        def read() -> None:
            try:
                for req in requests:
                    if req.HasField("arbitration"):
                        self.arbiter.arbitrate(conn, req.arbitration)
            except Refused as r:
                conn.out.put(r)
            except grpc.RpcError:
                pass
            conn.out.put(None)

        threading.Thread(target=read, daemon=True).start()
        context.add_callback(lambda: conn.out.put(None))
        try:
            while (msg := conn.out.get()) is not None:
                if isinstance(msg, Refused):
                    _abort(context, msg)
                yield msg
        finally:
            self.arbiter.remove(conn)

    def SetForwardingPipelineConfig(self, req: Any, context: Any) -> Any:
        try:
            self._check_device(req.device_id)
            self.arbiter.check_primary(req)
            if req.action == _CONFIG.VERIFY:
                self.device.check(req.config)
            elif req.action == _CONFIG.VERIFY_AND_COMMIT:
                with self.device.lock:
                    self.device.install(req.config)
            else:
                raise Refused(
                    grpc.StatusCode.UNIMPLEMENTED,
                    f"pipeline action {_CONFIG.Action.Name(req.action)}",
                )
        except Refused as r:
            _abort(context, r)
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def GetForwardingPipelineConfig(self, req: Any, context: Any) -> Any:
        try:
            self._check_device(req.device_id)
            with self.device.lock:
                config = self.device.config
            if config is None:
                raise Refused(grpc.StatusCode.FAILED_PRECONDITION, NO_PIPELINE)
        except Refused as r:
            _abort(context, r)
        rep = p4runtime_pb2.GetForwardingPipelineConfigResponse()
        if config.HasField("cookie"):
            rep.config.cookie.CopyFrom(config.cookie)
        if req.response_type in (_GET.ALL, _GET.P4INFO_AND_COOKIE):
            rep.config.p4info.CopyFrom(config.p4info)
        if req.response_type in (_GET.ALL, _GET.DEVICE_CONFIG_AND_COOKIE):
            rep.config.p4_device_config = config.p4_device_config
        return rep

    def Write(self, req: Any, context: Any) -> Any:
        try:
            self._check_device(req.device_id)
            self.arbiter.check_primary(req)
            if req.atomicity != p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR:
                raise Refused(grpc.StatusCode.UNIMPLEMENTED, "only CONTINUE_ON_ERROR writes")
            errors: list[Refused | None] = []
            with self.device.lock:
                entities = self.device.running()
                for update in req.updates:
                    try:
                        entities.write(update)
                        errors.append(None)
                    except Refused as r:
                        errors.append(r)
                entities.pipeline.load(entities.tables)
            if any(errors):
                raise BatchRefused(errors)
        except Refused as r:
            _abort(context, r)
        return p4runtime_pb2.WriteResponse()

    def Read(self, req: Any, context: Any) -> Iterator[Any]:
        rep = p4runtime_pb2.ReadResponse()
        try:
            self._check_device(req.device_id)
            with self.device.lock:
                entities = self.device.running()
                for entity in req.entities:
                    entities.read(entity, rep)
        except Refused as r:
            _abort(context, r)
        yield rep


def serve(device: ServedDevice, address: str, workers: int = 16) -> tuple[grpc.Server, str]:
    """Start the P4Runtime server at ``address`` (``host:port`` or
    ``unix:PATH``); the server and the address it bound (port 0: the port
    the kernel chose).  ``SO_REUSEPORT`` is off, so a second switch on a
    taken port fails instead of sharing it."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers), options=[("grpc.so_reuseport", 0)]
    )
    p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(RefSwitchP4Runtime(device), server)
    try:
        port = server.add_insecure_port(address)
    except RuntimeError:  # grpcio >= 1.60 raises where older ones returned 0
        port = 0
    if port == 0:
        raise OSError(f"can not listen on {address}")
    server.start()
    if address.startswith("unix:"):
        return server, address
    return server, f"{address.rsplit(':', 1)[0]}:{port}"
