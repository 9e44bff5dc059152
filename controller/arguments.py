"""esa-ctl's argument checks: usage errors are one line and exit status 2.

Each type below parses one argument and refuses, naming the reason, a value
the controller would refuse anyway, so a malformed command fails before it
opens a file or reaches the controller.
"""

from __future__ import annotations

import argparse
import math
import shlex
from collections.abc import Callable
from typing import NoReturn

from controller.address import check_admin_addr
from controller.errors import InvalidRequest

MAX_INTERVAL_S = 3600.0


def usage_line(prog: str, message: str) -> str:
    """A usage error as ``prog`` prints it: one line."""
    return f"{prog}: error: {message} (see {prog} --help)\n"


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, usage_line(self.prog, message))


def host_list(raw: list[str]) -> tuple[str, ...]:
    """Hosts given as separate arguments, comma-separated, or both."""
    return tuple(h for item in raw for h in item.split(",") if h)


def integer(what: str, lo: int, hi: int, bounds: str = "") -> Callable[[str], int]:
    """An integer in ``lo..hi``; ``bounds`` is how the range is shown."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} {text!r} is not an integer") from None
        if not lo <= n <= hi:
            raise argparse.ArgumentTypeError(
                f"{what} {n} is out of range ({bounds or f'{lo}..{hi}'})"
            )
        return n

    return parse


def seconds(what: str, zero: bool = False, hi: float = math.inf) -> Callable[[str], float]:
    """A finite number of seconds, positive (or zero if ``zero``), at most ``hi``."""

    def parse(text: str) -> float:
        try:
            s = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} {text!r} is not a number") from None
        if not math.isfinite(s) or s < 0 or (s == 0 and not zero) or s > hi:
            low = "0 or more" if zero else "more than 0"
            top = "" if hi == math.inf else f" and at most {hi:g}"
            raise argparse.ArgumentTypeError(f"{what} {text} s: give {low}{top} seconds")
        return s

    return parse


def admin_address(text: str) -> str:
    """An admin address; port 0 passes here for ``serve`` and is refused for
    the other commands once the command is known (``controller.cli``)."""
    try:
        return check_admin_addr(text, any_port=True)
    except InvalidRequest as e:
        raise argparse.ArgumentTypeError(str(e)) from None


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
