"""A log of every P4Runtime request the controller sends, as the p4lang
tutorials keep one (``logs/s1-p4runtime-requests.txt``).

Each unary and server-streaming call (pipeline config, Write, Read) is
appended as a timestamp, the method, and the request in protobuf text
format between ``---`` lines; a call the switch refused is followed by its
status.  A pipeline's P4Info and device config are summarised, not copied:
they are the compiler's output, and hundreds of kilobytes each push.

BMv2 has no such log of its own, and the reference switch none either, so
the log is kept where the requests start: it reads the same for both.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import text_format
from p4.v1 import p4runtime_pb2

SET_PIPELINE = "/p4.v1.P4Runtime/SetForwardingPipelineConfig"


def _shown(method: str, request: Any) -> str:
    if method == SET_PIPELINE and isinstance(
        request, p4runtime_pb2.SetForwardingPipelineConfigRequest
    ):
        short = p4runtime_pb2.SetForwardingPipelineConfigRequest()
        short.CopyFrom(request)
        info, config = short.config.p4info, short.config.p4_device_config
        note = (
            f"# p4info: {len(info.tables)} tables, {len(info.actions)} actions, "
            f"{len(info.counters)} counters, {len(info.registers)} registers; "
            f"p4_device_config: {len(config)} bytes (not shown)\n"
        )
        short.config.ClearField("p4info")
        short.config.ClearField("p4_device_config")
        return note + text_format.MessageToString(short)
    return str(text_format.MessageToString(request))


class RequestLog(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):  # type: ignore[misc]
    """A channel interceptor appending each request to ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()

    def _write(self, text: str) -> None:
        with self.lock, open(self.path, "a") as f:
            f.write(text)

    def _request(self, method: str, request: Any) -> None:
        now = time.time()
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
        self._write(
            f"[{stamp}.{int(now % 1 * 1000):03d}] {method}\n---\n{_shown(method, request)}---\n"
        )

    def intercept_unary_unary(
        self, continuation: Callable[[Any, Any], Any], details: Any, request: Any
    ) -> Any:
        self._request(details.method, request)
        outcome = continuation(details, request)
        if outcome.exception() is not None:
            self._write(f"=> refused: {outcome.code().name}: {outcome.details()}\n")
        return outcome

    def intercept_unary_stream(
        self, continuation: Callable[[Any, Any], Any], details: Any, request: Any
    ) -> Any:
        self._request(details.method, request)
        return continuation(details, request)
