"""The admin API's address: ``unix:PATH`` or ``127.0.0.1:PORT``, nothing else
(``esa-ctl serve`` also takes ``127.0.0.1:0``: a free port, which it logs).

The API has no authentication, so it is served only where local users reach
it.  Before ``serve`` binds, ``in_use`` tells whether something already
answers there: gRPC alone would not, since on a unix socket it removes the
existing file and binds anew, and on TCP it sets ``SO_REUSEPORT`` unless told
not to (the server passes ``grpc.so_reuseport=0``).
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import os
import socket
import stat
from pathlib import Path

from controller.errors import InvalidRequest

UNIX_PATH_MAX = 107
"""bytes of a unix socket path (``sun_path`` less its terminating NUL)."""

_FORMS = "use unix:PATH or 127.0.0.1:PORT"


def unix_path(addr: str) -> Path | None:
    """The socket path of a ``unix:PATH`` (or ``unix:///PATH``) address."""
    if not addr.startswith("unix:"):
        return None
    rest = addr[len("unix:") :]
    return Path(rest[2:] if rest.startswith("///") else rest)


def check_admin_addr(addr: str, any_port: bool = False) -> str:
    """``addr`` if it is a local address the API may use, else ``InvalidRequest``;
    ``any_port``: port 0 too (a server binds a free one)."""
    path = unix_path(addr)
    if path is not None:
        rest = addr[len("unix:") :]
        if not rest or (rest.startswith("//") and not rest.startswith("///")):
            raise InvalidRequest(f"admin address {addr!r}: {_FORMS}")
        if len(os.fsencode(path)) > UNIX_PATH_MAX:
            raise InvalidRequest(
                f"admin address {addr!r}: a socket path has at most {UNIX_PATH_MAX} bytes"
            )
        return addr
    host, _, port = addr.rpartition(":")
    lowest = 0 if any_port else 1
    if host == "127.0.0.1" and port.isascii() and port.isdigit() and lowest <= int(port) < 65536:
        return addr
    raise InvalidRequest(f"admin address {addr!r}: {_FORMS}")


def check_socket_path(addr: str) -> None:
    """A unix address's directory exists and its path is free or a socket."""
    path = unix_path(addr)
    if path is None:
        return
    if not path.parent.is_dir():
        raise InvalidRequest(f"admin address {addr}: no directory {path.parent}")
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise InvalidRequest(f"admin address {addr}: {path} exists and is not a socket")


def in_use(addr: str) -> bool:
    """Something accepts connections on ``addr`` (unix) or holds its port (TCP)."""
    path = unix_path(addr)
    if path is not None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            try:
                s.connect(str(path))
            except OSError:
                return False
            return True
    port = int(addr.rpartition(":")[2])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return True
            raise InvalidRequest(f"admin address {addr}: cannot listen: {e.strerror}") from None
    return False


def admin_address(text: str) -> str:
    """An admin address as a command-line argument; port 0 passes here for
    ``serve`` and is refused for the other commands once the command is
    known (``controller.api.cli``)."""
    try:
        return check_admin_addr(text, any_port=True)
    except InvalidRequest as e:
        raise argparse.ArgumentTypeError(str(e)) from None


_METRICS_FORMS = (
    "use HOST:PORT, HOST an IPv4 address, an IPv6 address in brackets or localhost, "
    "PORT 0..65535 (0: a free one, logged): 127.0.0.1:9100, [::1]:9100, 0.0.0.0:9100"
)


def check_metrics_addr(addr: str) -> tuple[str, int]:
    """``--metrics HOST:PORT`` as the host and port to bind; ``InvalidRequest``
    unless HOST is an IP address (an IPv6 one in brackets) or ``localhost``
    and PORT is 0..65535.  No name is looked up: nothing here waits on DNS."""
    host, sep, port = addr.rpartition(":")
    family: type[ipaddress.IPv4Address] | type[ipaddress.IPv6Address]
    if host.startswith("[") and host.endswith("]"):
        host, family = host[1:-1], ipaddress.IPv6Address
    else:
        family = ipaddress.IPv4Address
    try:
        if host != "localhost":
            family(host)
    except ValueError:
        sep = ""
    if not sep or not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise InvalidRequest(f"metrics address {addr!r}: {_METRICS_FORMS}")
    return host, int(port)


def metrics_address(text: str) -> tuple[str, int]:
    """``check_metrics_addr`` as a command-line argument."""
    try:
        return check_metrics_addr(text)
    except InvalidRequest as e:
        raise argparse.ArgumentTypeError(str(e)) from None
