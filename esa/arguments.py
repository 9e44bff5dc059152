"""Argument checks for every command line (``esa-ctl``, ``esa-ps``,
``esa-worker``, ``esa-train``, ``esa-refswitch``, ``make run``).

Each type parses one argument and refuses, naming the argument and the
reason, a value the program would refuse anyway, so a malformed command
ends with one line and exit status 2 before it opens a file, a socket or
reaches the controller.  The ranges come from the facts they check
(``esa.wire``, ``esa.job``, ``esa.spec``), not from the programs; where the
controller or a program checks the same range again, both call its one
check (``esa.job.check_priority``, ``esa.job.check_job_id``,
``esa.spec.check_stale_us``, ...).
"""

from __future__ import annotations

import argparse
import math
import shlex
import socket
from collections.abc import Callable
from typing import NoReturn

from esa import wire
from esa.job import MAX_PS_SHARDS, SHARD_COUNTS, check_job_id, check_priority, valid_shards
from esa.ranges import check_range
from esa.spec import check_squat_us, check_stale_us


def usage_line(prog: str, message: str) -> str:
    """A usage error as ``prog`` prints it: one line."""
    return f"{prog}: error: {message} (see {prog} --help)\n"


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, usage_line(self.prog, message))


def _int(what: str, text: str) -> int:
    """``text`` as an integer, decimal or with a 0x, 0o or 0b prefix."""
    try:
        return int(text)
    except ValueError:
        try:
            return int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} {text!r} is not an integer") from None


def checked(what: str, check: Callable[[int], int]) -> Callable[[str], int]:
    """An integer (decimal or with a 0x, 0o or 0b prefix) that ``check``
    accepts: the range check the controller or the program runs itself, its
    ``ValueError`` the message."""

    def parse(text: str) -> int:
        try:
            return check(_int(what, text))
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return parse


def integer(what: str, lo: int, hi: int, bounds: str = "") -> Callable[[str], int]:
    """An integer in ``lo..hi`` (``esa.ranges.check_range``); ``bounds`` is
    how the range is shown."""
    return checked(what, lambda n: check_range(what, n, lo, hi, bounds))


def at_least(what: str, lo: int) -> Callable[[str], int]:
    """An integer ``lo`` or more: a count (``lo`` 1), or one where 0 has a
    meaning of its own (``lo`` 0)."""
    return integer(what, lo, 2**63 - 1, f"{lo} or more")


def number(
    what: str, zero: bool = False, hi: float = math.inf, unit: str = ""
) -> Callable[[str], float]:
    """A finite number, positive (or zero if ``zero``), at most ``hi``;
    ``unit`` names what it counts in the message."""

    def parse(text: str) -> float:
        try:
            x = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} {text!r} is not a number") from None
        if not math.isfinite(x):
            raise argparse.ArgumentTypeError(f"{what} {text!r} is not a finite number")
        if x < 0 or (x == 0 and not zero) or x > hi:
            low = "0 or more" if zero else "more than 0"
            top = "" if hi == math.inf else f" and at most {hi:g}"
            shown = f"{text} s" if unit == SECONDS else text
            raise argparse.ArgumentTypeError(f"{what} {shown}: give {low}{top}{unit}")
        return x

    return parse


SECONDS = " seconds"


def seconds(what: str, zero: bool = False, hi: float = math.inf) -> Callable[[str], float]:
    """A duration in seconds (``number``)."""
    return number(what, zero, hi, unit=SECONDS)


def fraction(what: str) -> Callable[[str], float]:
    """A number in [0, 1)."""

    def parse(text: str) -> float:
        x = number(what, zero=True)(text)
        if x >= 1:
            raise argparse.ArgumentTypeError(f"{what} {text}: give 0 or more and below 1")
        return x

    return parse


def nonempty(what: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"{what} is empty")
        return text

    return parse


def command_line(text: str) -> list[str]:
    """A command as a shell would split it."""
    try:
        argv = shlex.split(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e}") from None
    if not argv:
        raise argparse.ArgumentTypeError("the command is empty")
    return argv


def host_list(raw: list[str]) -> tuple[str, ...]:
    """Hosts given as separate arguments, comma-separated, or both."""
    return tuple(h for item in raw for h in item.split(",") if h)


PRIORITY = checked("priority", check_priority)
JOB_ID = checked("job id", check_job_id)
STALE_US = checked("stale timeout", check_stale_us)
SQUAT_US = checked("squat timeout", check_squat_us)
FAN_IN = integer("fan-in", 1, wire.MAX_WORKERS)
WORKER_INDEX = integer("index", 0, wire.MAX_WORKERS - 1)
MASK = integer("mask", 1, (1 << wire.MAX_WORKERS) - 1)
COUNT = integer("count", 1, 1 << 31)
SEED = integer("seed", 0, (1 << 63) - 1)
SHARD = integer("shard", 0, MAX_PS_SHARDS - 1)
DEVICE_ID = integer("device id", 0, 2**64 - 1, "0..2^64-1")
POOL_SIZE = integer("pool size", 1, 2**63 - 1, "1..2^63-1")
SHARDS_TEXT = f"{SHARD_COUNTS} (a power of two up to {MAX_PS_SHARDS})"


def shards(text: str) -> int:
    """A job's number of PS shards."""
    value = integer("shards", 1, MAX_PS_SHARDS)(text)
    if not valid_shards(value):
        raise argparse.ArgumentTypeError(f"shards {value} is not {SHARDS_TEXT}")
    return value


def parse_addr(text: str, default_port: int) -> tuple[str, int]:
    """``HOST`` or ``HOST:PORT``; raises ``ValueError`` on a bad port."""
    host, sep, port = text.rpartition(":")
    if not sep:
        return text, default_port
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"bad port {port!r} in {text!r}")
    if not host:
        raise ValueError(f"no host in {text!r}")
    return host, int(port)


def address(default_port: int) -> Callable[[str], tuple[str, int]]:
    """``HOST[:PORT]``, the host resolved to an IPv4 address now."""

    def parse(text: str) -> tuple[str, int]:
        try:
            host, port = parse_addr(text, default_port)
            infos = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_DGRAM)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        except OSError as e:
            raise argparse.ArgumentTypeError(f"can not resolve {text!r}: {e}") from None
        return str(infos[0][4][0]), port

    return parse


def pses(default_port: int) -> Callable[[str], tuple[tuple[str, int], ...]]:
    """``HOST[:PORT][,HOST[:PORT]...]``: a job's PS hosts, one per shard in
    shard order."""
    one = address(default_port)

    def parse(text: str) -> tuple[tuple[str, int], ...]:
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


def check_worker_addresses(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
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
