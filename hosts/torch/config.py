"""What one DDP worker needs to know about its ESA job, from arguments or
from the environment ``torchrun`` sets (``RANK``, ``WORLD_SIZE``) plus
``ESA_*`` variables.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from esa import wire
from esa.arguments import parse_addr
from esa.job import PS_COUNTS, valid_shards
from hosts.agreement.auth import read_key
from hosts.net.transport import Addr

T = TypeVar("T")

DEFAULT_WINDOW = 64
"""chunks in flight per worker when neither ESA_WINDOW nor ESA_PART_SIZE says."""

ENV_HELP = {
    "RANK": "this worker's index in the job (its bit), set by torchrun",
    "WORLD_SIZE": "the job's number of workers (fan-in), set by torchrun",
    "ESA_JOB": f"the job id the controller admitted, 1..{wire.MAX_JOB_ID}",
    "ESA_PS": "the job's PS addresses HOST[:PORT][,HOST[:PORT]...], one per shard in shard "
    "order: 1, 2, 4 or 8 (the switch intercepts them)",
    "ESA_CONTROL": "the PS hosts' control addresses HOST[:PORT],... in the same order (each "
    f"ESA_PS host:{wire.CONTROL_PORT})",
    "ESA_BOUND": "largest |gradient value| summed in the switch; beyond it, in float (1.0)",
    "ESA_WINDOW": f"chunks in flight per worker (default: ESA_PART_SIZE, at most "
    f"{DEFAULT_WINDOW}; without it {DEFAULT_WINDOW})",
    "ESA_PART_SIZE": "the slots of the job's partition of the switch's pool (esa-ctl jobs shows "
    "it): the window unless ESA_WINDOW is set (0: no partition)",
    "ESA_RTO": "initial retransmission timeout in seconds (0.05)",
    "ESA_TIMEOUT": "seconds an all-reduce may take before it fails (30)",
    "ESA_BIND": f"HOST[:PORT] this worker listens on (0.0.0.0:{wire.UDP_PORT})",
    "ESA_BIND_FD": "instead of ESA_BIND: the descriptor of a bound UDP socket this worker "
    "inherits from its launcher",
    "ESA_LINGER": "seconds a worker keeps answering its peers at exit (1.0)",
    "ESA_KEY_FILE": "a file with the job's control key in hex (default: the job's open key, "
    "which authenticates nothing)",
    "ESA_REPORT": "a file the hook writes its report to at exit (JSON: steps, seconds, "
    "counters, a SHA-256 of the parameters or of the last sums)",
    "ESA_PROGRESS_FD": "a descriptor the hook writes each finished step's number to, a line each",
}


class EsaConfigError(ValueError):
    """A missing or bad setting, named in the message."""


@dataclass(frozen=True)
class EsaConfig:
    job: int
    index: int
    fan_in: int
    ps: tuple[Addr, ...]
    """one per PS shard, in shard order."""
    bound: float = 1.0
    window: int = DEFAULT_WINDOW
    rto: float = 0.05
    timeout: float = 30.0
    bind: Addr = ("0.0.0.0", wire.UDP_PORT)
    linger: float = 1.0
    control: tuple[Addr, ...] | None = None
    """where calls are agreed with each PS; None: each PS's host, ``CONTROL_PORT``."""
    key: bytes | None = field(default=None, repr=False)
    """the job's control key (``hosts.agreement.auth``); None: the job's open key."""
    bind_fd: int | None = None
    """a bound UDP socket the worker takes over instead of binding ``bind``."""
    report: str | None = None
    """where the hook writes its report at exit (``ESA_REPORT``); None: nowhere."""
    progress_fd: int | None = None
    """a descriptor the hook writes each finished step's number to; None: none."""

    def __post_init__(self) -> None:
        checks = [
            (1 <= self.job <= wire.MAX_JOB_ID, f"job must be 1..{wire.MAX_JOB_ID}"),
            (1 <= self.fan_in <= wire.MAX_WORKERS, f"fan-in must be 1..{wire.MAX_WORKERS}"),
            (0 <= self.index < self.fan_in, "worker index must be 0..fan-in - 1"),
            (valid_shards(len(self.ps)), PS_COUNTS),
            (
                self.control is None or len(self.control) == len(self.ps),
                "one control address per PS host",
            ),
            (self.bound > 0 and math.isfinite(self.bound), "bound must be positive and finite"),
            (self.window >= 1, "window must be at least 1"),
            (self.rto > 0, "rto must be positive"),
            (self.timeout > 0, "timeout must be positive"),
            (self.linger >= 0, "linger must not be negative"),
            (self.bind_fd is None or self.bind_fd >= 0, "bind_fd must be a descriptor (>= 0)"),
            (
                self.progress_fd is None or self.progress_fd >= 0,
                "progress_fd must be a descriptor (>= 0)",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise EsaConfigError(f"{message}: {self}")

    @property
    def control_addrs(self) -> tuple[Addr, ...]:
        return self.control or tuple((host, wire.CONTROL_PORT) for host, _ in self.ps)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> EsaConfig:
        """From ``RANK``, ``WORLD_SIZE`` and the ``ESA_*`` variables of ``ENV_HELP``."""
        e = os.environ if env is None else env

        def get(name: str, parse: Callable[[str], T], default: T | None = None) -> T:
            text = e.get(name)
            if text is None or not text.strip():
                if default is None:
                    raise EsaConfigError(f"{name} is not set: {ENV_HELP[name]}")
                return default
            try:
                return parse(text.strip())
            except ValueError:
                raise EsaConfigError(f"{name}={text!r} is not valid: {ENV_HELP[name]}") from None

        def addr(text: str, default_port: int = wire.UDP_PORT) -> Addr:
            host, port = parse_addr(text, default_port)
            if not host or not 0 < port < 1 << 16:
                raise ValueError(text)
            return host, port

        def addrs(text: str, default_port: int = wire.UDP_PORT) -> tuple[Addr, ...]:
            return tuple(addr(part.strip(), default_port) for part in text.split(","))

        def control(text: str) -> tuple[Addr, ...]:
            return addrs(text, wire.CONTROL_PORT)

        def optional(name: str, parse: Callable[[str], T]) -> T | None:
            return get(name, parse) if e.get(name, "").strip() else None

        def key(name: str) -> bytes | None:
            path = e.get(name, "").strip()
            try:
                return read_key(path) if path else None
            except ValueError as err:
                raise EsaConfigError(f"{name}: {err}") from None

        ps = get("ESA_PS", addrs)
        return cls(
            job=get("ESA_JOB", int),
            index=get("RANK", int),
            fan_in=get("WORLD_SIZE", int),
            ps=ps,
            bound=get("ESA_BOUND", float, cls.bound),
            window=get("ESA_WINDOW", int, window_for(optional("ESA_PART_SIZE", int))),
            rto=get("ESA_RTO", float, cls.rto),
            timeout=get("ESA_TIMEOUT", float, cls.timeout),
            bind=get("ESA_BIND", addr, cls.bind),
            linger=get("ESA_LINGER", float, cls.linger),
            control=get("ESA_CONTROL", control, tuple((h, wire.CONTROL_PORT) for h, _ in ps)),
            bind_fd=optional("ESA_BIND_FD", int),
            report=optional("ESA_REPORT", str),
            progress_fd=optional("ESA_PROGRESS_FD", int),
            key=key("ESA_KEY_FILE"),
        )


def window_for(part_size: int | None) -> int:
    """The window for a job whose partition holds ``part_size`` slots: as many
    chunks in flight as it has slots, at most ``DEFAULT_WINDOW`` (a window
    beyond the partition sends chunks whose slot its own earlier chunks
    hold, and those go to the PS); ``DEFAULT_WINDOW`` without a partition
    (None or 0)."""
    if part_size is not None and part_size < 0:
        help_ = ENV_HELP["ESA_PART_SIZE"]
        raise EsaConfigError(f"ESA_PART_SIZE={str(part_size)!r} is not valid: {help_}")
    return min(DEFAULT_WINDOW, part_size) if part_size else DEFAULT_WINDOW
