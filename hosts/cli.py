"""What the host CLIs (``esa-ps``, ``esa-worker``, ``esa-train``) share.

Every argument is checked while parsing, before anything is created; a bad
one ends the program with one line and exit status 2.  A failure at run
time (a port in use, a rejected or timed-out call) ends it with one line
and exit status 1.
"""

from __future__ import annotations

import argparse
import math
import socket
import sys
from collections.abc import Callable
from typing import NoReturn

from esa import wire
from esa.job import MAX_PS_SHARDS, valid_shards
from hosts import auth
from hosts.errors import AllreduceError
from hosts.member import FLOAT32_MAX
from hosts.transport import Addr, UdpTransport, parse_addr


class Failure(Exception):
    """A runtime failure the CLI reports in one line."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def int_in(lo: int, hi: int, name: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} is not an integer: {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{name} {value} is not in {lo}..{hi}")
        return value

    return parse


JOB_ID = int_in(1, wire.MAX_JOB_ID, "job")
FAN_IN = int_in(1, wire.MAX_WORKERS, "fan-in")
WORKER_INDEX = int_in(0, wire.MAX_WORKERS - 1, "index")
MASK = int_in(1, (1 << wire.MAX_WORKERS) - 1, "mask")
COUNT = int_in(1, 1 << 31, "count")
SEED = int_in(0, (1 << 63) - 1, "seed")


def number(allow_zero: bool = False) -> Callable[[str], float]:
    """A finite number, positive (or zero if ``allow_zero``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
        if value < 0 or (value == 0 and not allow_zero):
            raise argparse.ArgumentTypeError(f"must be {'>= 0' if allow_zero else '> 0'}: {text}")
        return value

    return parse


POSITIVE = number()
NON_NEGATIVE = number(allow_zero=True)


def fraction(text: str) -> float:
    """A number in [0, 1)."""
    value = NON_NEGATIVE(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"must be below 1: {text}")
    return value


def bound(text: str) -> float:
    """A gradient bound: positive and a finite float32."""
    value = POSITIVE(text)
    if value > FLOAT32_MAX:
        raise argparse.ArgumentTypeError(f"{text} is beyond float32")
    return value


def key_file(text: str) -> bytes:
    """The job key in the file at ``text`` (hex digits; ``hosts.auth``)."""
    try:
        return auth.read_key(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def address(default_port: int) -> Callable[[str], Addr]:
    """``HOST[:PORT]``, the host resolved to an IPv4 address now."""

    def parse(text: str) -> Addr:
        try:
            host, port = parse_addr(text, default_port)
            infos = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_DGRAM)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        except OSError as e:
            raise argparse.ArgumentTypeError(f"can not resolve {text!r}: {e}") from None
        return str(infos[0][4][0]), port

    return parse


SHARDS_TEXT = f"1, 2, 4 or 8 (a power of two up to {MAX_PS_SHARDS})"


def shards(text: str) -> int:
    """A job's number of PS shards."""
    value = int_in(1, MAX_PS_SHARDS, "shards")(text)
    if not valid_shards(value):
        raise argparse.ArgumentTypeError(f"shards {value} is not {SHARDS_TEXT}")
    return value


SHARD = int_in(0, MAX_PS_SHARDS - 1, "shard")


def pses(default_port: int) -> Callable[[str], tuple[Addr, ...]]:
    """``HOST[:PORT][,HOST[:PORT]...]``: a job's PS hosts, one per shard in
    shard order."""
    one = address(default_port)

    def parse(text: str) -> tuple[Addr, ...]:
        parts = text.split(",")
        if "" in parts:
            raise argparse.ArgumentTypeError(f"an empty address in {text!r}")
        if not valid_shards(len(parts)):
            raise argparse.ArgumentTypeError(
                f"{len(parts)} addresses in {text!r}: a job has {SHARDS_TEXT} PS hosts"
            )
        return tuple(one(part) for part in parts)

    return parse


def add_worker_addresses(p: argparse.ArgumentParser) -> None:
    """A worker's --ps, --control and --bind (esa-worker, esa-train); check
    them with ``check_worker_addresses``."""
    p.add_argument(
        "--ps",
        type=pses(wire.UDP_PORT),
        required=True,
        help="the job's PS hosts HOST[:PORT][,HOST[:PORT]...], one per shard in shard order",
    )
    p.add_argument(
        "--control",
        type=pses(wire.CONTROL_PORT),
        help=f"their control HOST[:PORT],... in the same order (default: port {wire.CONTROL_PORT})",
    )
    p.add_argument(
        "--bind",
        type=address(wire.UDP_PORT),
        default=("0.0.0.0", wire.UDP_PORT),
        help="HOST[:PORT] to listen on",
    )


def check_worker_addresses(p: Parser, args: argparse.Namespace) -> None:
    """One control address per PS host: ``--control``'s, or each PS host's
    ``CONTROL_PORT``."""
    if args.control is None:
        args.control = tuple((host, wire.CONTROL_PORT) for host, _ in args.ps)
    elif len(args.control) != len(args.ps):
        n = len(args.control)
        p.error(
            f"argument --control: {n} address{'es' * (n > 1)} for {len(args.ps)} PS hosts "
            "(one per --ps address)"
        )


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
