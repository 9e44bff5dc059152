"""What a host program (``esa-ps``, ``esa-worker``, ``esa-train``) does
around its work: the arguments that need the hosts' own checks (a job key
file, a gradient bound; every other argument is checked by
``esa.arguments``), its sockets, and a failure at run time ended in one
line with exit status 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from esa.arguments import number
from hosts.agreement import auth
from hosts.net.transport import Addr, UdpTransport
from hosts.worker.errors import AllreduceError
from hosts.worker.member import FLOAT32_MAX


class Failure(Exception):
    """A runtime failure the CLI reports in one line."""


def bound(text: str) -> float:
    """A gradient bound: positive and a finite float32."""
    value = number("bound")(text)
    if value > FLOAT32_MAX:
        raise argparse.ArgumentTypeError(f"bound {text} is beyond float32")
    return value


def key_file(text: str) -> bytes:
    """The job key in the file at ``text`` (hex digits; ``hosts.agreement.auth``)."""
    try:
        return auth.read_key(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def shown(addr: Addr) -> str:
    """``HOST:PORT``, as a host's socket is reported once bound (``--bind
    HOST:0`` binds any free port: the line says which)."""
    return f"{addr[0]}:{addr[1]}"


def bind(addr: Addr, what: str) -> UdpTransport:
    try:
        return UdpTransport(addr)
    except OSError as e:
        raise Failure(f"can not listen on {addr[0]}:{addr[1]} ({what}): {e.strerror}") from None


def bind_pair(data: Addr, control: Addr | None = None) -> tuple[UdpTransport, UdpTransport]:
    """A host's ESA socket on ``data`` and its control socket on ``control``
    (default: the same host, any port), or neither."""
    transport = bind(data, "ESA")
    try:
        return transport, bind(control or (data[0], 0), "control")
    except Failure:
        transport.close()
        raise


def run(prog: str, body: Callable[[], int]) -> int:
    """``body()``, with runtime failures reported in one line (exit status 1)."""
    try:
        return body()
    except (Failure, AllreduceError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"{prog}: {e.strerror or e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
