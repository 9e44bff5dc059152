"""Who may speak for a job on the control channel (docs/agreement.md).

Every control message ends in ``mac``: the first ``MAC_BYTES`` bytes of
HMAC-SHA256 over every byte before it, keyed with the job's key, which the
job's PS hosts and workers share (``--key-file``, ``ESA_KEY_FILE``).  A
message whose authenticator does not match was not made by a holder of the
key: it is dropped before it is read any further.  What keeps a recorded
message from being played again is the PS's ``session`` (a message made for
another PS process is answered with a CHALLENGE, never acted on) and each
worker process's message ``counter``, of which the PS remembers the highest
and the ``ReplayWindow.SIZE`` below it.

A job without a key file uses its open key (``open_key``), which anybody
can compute from the job id: it keeps stray datagrams of other jobs,
versions and deployments out, and it authenticates nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from esa import wire
from hosts.net import payload
from hosts.net.budget import Budget
from hosts.net.transport import Addr

KEY_BYTES = 32
"""Bytes of a key ``new_key`` makes; a key file holds at least ``MIN_KEY_BYTES``."""
MIN_KEY_BYTES = 16
BODY = wire.CONTROL_BYTES - wire.MAC_BYTES
"""Bytes of a control message the authenticator covers."""


def open_key(job: int) -> bytes:
    """The key of a job nobody gave one: public, derived from the job id."""
    return hashlib.sha256(f"esa open key of job {job}".encode()).digest()


def new_key() -> bytes:
    """A random job key (the rigs give each job one)."""
    return secrets.token_bytes(KEY_BYTES)


def parse_key(text: str) -> bytes:
    """A key written as hex digits (at least ``2 * MIN_KEY_BYTES`` of them)."""
    try:
        key = bytes.fromhex(text.strip())
    except ValueError:
        raise ValueError("a key file holds hex digits only") from None
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"a key has at least {MIN_KEY_BYTES} bytes, this one {len(key)}")
    return key


def read_key(path: str | Path) -> bytes:
    """The key in the file at ``path``; ``ValueError`` names the file and the fault."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ValueError(f"can not read key file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ValueError(f"key file {path}: a key file holds hex digits only") from None
    try:
        return parse_key(text)
    except ValueError as e:
        raise ValueError(f"key file {path}: {e}") from None


def write_key(path: str | Path, key: bytes) -> Path:
    """Write ``key`` to a new file only its owner may read; returns the path."""
    p = Path(path)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key.hex() + "\n")
    return p


def tag(data: bytes | bytearray | memoryview, key: bytes) -> bytes:
    """The authenticator of the control message in ``data``."""
    return hmac.new(key, bytes(data[:BODY]), hashlib.sha256).digest()[: wire.MAC_BYTES]


def seal(msg: payload.Control, key: bytes) -> bytes:
    """``msg`` encoded with its authenticator."""
    body = payload.encode_control(replace(msg, mac=0))[:BODY]
    return body + tag(body, key)


def authentic(data: bytes | bytearray | memoryview, key: bytes) -> bool:
    """Whether the control message in ``data`` (``CONTROL_BYTES`` long) was sealed with ``key``."""
    return hmac.compare_digest(tag(data, key), bytes(data[BODY : wire.CONTROL_BYTES]))


class Keys:
    """Each job's key: the one given, or the job's open key."""

    def __init__(self, keys: Mapping[int, bytes] | None = None) -> None:
        self.given = dict(keys or {})

    def __getitem__(self, job: int) -> bytes:
        key = self.given.get(job)
        return open_key(job) if key is None else key


class ReplayWindow:
    """The message numbers one worker process used: the highest and which of
    the ``SIZE`` below it.  A number seen, or below that window, is a copy."""

    SIZE = 64

    def __init__(self) -> None:
        self.top = 0
        self.seen = 0
        """bit k: number ``top - k`` was used."""

    def fresh(self, n: int) -> bool:
        if n > self.top:
            return True
        back = self.top - n
        return n > 0 and back < self.SIZE and not self.seen >> back & 1

    def take(self, n: int) -> None:
        """Record number ``n`` (``fresh(n)`` must hold)."""
        if n > self.top:
            self.seen = (self.seen << (n - self.top) | 1) & ((1 << self.SIZE) - 1)
            self.top = n
        else:
            self.seen |= 1 << (self.top - n)


class SourceLimit:
    """At most ``burst`` replies to one address, refilled at ``rate`` a
    second, for the ``sources`` addresses answered last: what one address's
    datagrams, forged ones included, can make the PS send there."""

    def __init__(self, rate: float = 2.0, burst: float = 4.0, sources: int = 4096) -> None:
        self.rate, self.burst, self.sources = rate, burst, sources
        self.buckets: OrderedDict[Addr, Budget] = OrderedDict()

    def take(self, addr: Addr, now: float) -> bool:
        b = self.buckets.get(addr)
        if b is None:
            b = self.buckets[addr] = Budget(self.rate, self.burst)
            while len(self.buckets) > self.sources:
                self.buckets.popitem(last=False)
        self.buckets.move_to_end(addr)
        return b.take(now)
