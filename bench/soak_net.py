"""The soak's network (``bench.soak``): a network namespace of its own,
whose loopback every process of the soak uses, and the faults nftables
makes there, each a rule added and deleted again:

- a loss burst: a share of every UDP datagram dropped (hook input);
- a host's link down and up: every datagram from or to the host's sockets
  dropped (its hosts share the namespace's loopback, so the link is cut by
  a rule, not by ``ip link``);
- duplicated datagrams: a share of every UDP datagram sent twice (netdev
  ingress on the loopback, ``dup to lo``);
- reordered datagrams: a share of every UDP datagram held back behind its
  successors (hook output: ``meta priority set`` puts it in the slow class
  of the loopback's htb queueing discipline).

The loopback's htb (made with the namespace, kept to its end) has one
class, the slow one, rate-limited to ``SLOW_RATE`` without bursts: a
datagram in it waits for those ahead of it in the class, about 0.7 ms
each at the soak's datagrams (170 bytes on average), while every other
datagram, unclassified, takes htb's direct queue, unshaped.  Its queue
(``SLOW_LIMIT``) is deeper than the soak ever fills, so a held datagram is
late, never lost.  The netem queueing discipline would delay without a
class, but many kernels (this machine's) lack it.

Nothing outside the namespace is touched; deleting it deletes the rules.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

from runner.devices.netns import Namespace, missing_root

TABLE = "esa_soak"
SLOW_CLASS = "1:2"
"""The htb class of the held-back datagrams (a datagram's ``skb->priority``
naming it classifies it there)."""
SLOW_RATE = "2mbit"
"""Above what a reorder burst's largest share (10 %) of the soak's
datagrams (about 12,000 a second, 16 Mbit/s, on a loaded machine of 2 cores)
asks of it: the class holds datagrams a little, its queue never grows for
long."""
SLOW_LIMIT = 100_000
"""Datagrams the slow class may queue: none is dropped."""


def missing_net() -> str | None:
    """Why the soak can not make its network faults here, or None."""
    why = missing_root()
    if why is not None:
        return why
    if shutil.which("nft") is None:
        return "needs 'nft' (nftables)"
    if shutil.which("tc") is None:
        return "needs 'tc' (iproute2)"
    return None


@dataclass(frozen=True)
class SlowClass:
    """The slow class's counters since the namespace was made."""

    sent: int
    dropped: int
    queued: int


class Net:
    """The namespace and its rules; ``close`` deletes both."""

    def __init__(self) -> None:
        self.ns = Namespace("soak")
        try:
            self.nft(f"add table inet {TABLE}")
            self.nft(f"add chain inet {TABLE} input {{ type filter hook input priority 0; }}")
            self.nft(f"add table netdev {TABLE}")
            self.nft(
                f"add chain netdev {TABLE} ingress "
                "{ type filter hook ingress device lo priority 0; }"
            )
            self.nft(f"add chain inet {TABLE} output {{ type filter hook output priority 0; }}")
            self.tc("qdisc add dev lo root handle 1: htb")
            self.tc(
                f"class add dev lo parent 1: classid {SLOW_CLASS} htb rate {SLOW_RATE} "
                f"ceil {SLOW_RATE} burst 1 cburst 1"
            )
            self.tc(f"qdisc add dev lo parent {SLOW_CLASS} pfifo limit {SLOW_LIMIT}")
        except RuntimeError:
            self.ns.delete()
            raise

    @property
    def name(self) -> str:
        return self.ns.name

    def nft(self, command: str) -> str:
        return self.ns.exec("nft", *command.split())

    def tc(self, command: str) -> str:
        return self.ns.exec("tc", *command.split())

    def _rule(self, family: str, chain: str, rule: str) -> tuple[str, str, int]:
        out = self.nft(f"-e -a add rule {family} {TABLE} {chain} {rule}")
        m = re.search(r"# handle (\d+)", out)
        if m is None:
            raise RuntimeError(f"nft printed no handle for {rule!r}: {out!r}")
        return family, chain, int(m[1])

    def loss(self, percent: int) -> tuple[str, str, int]:
        rule = f"meta l4proto udp numgen random mod 100 < {percent} drop"
        return self._rule("inet", "input", rule)

    def link_down(self, ports: list[int]) -> list[tuple[str, str, int]]:
        some = "{ " + ", ".join(map(str, ports)) + " }"
        return [
            self._rule("inet", "input", f"udp sport {some} drop"),
            self._rule("inet", "input", f"udp dport {some} drop"),
        ]

    def duplicate(self, percent: int) -> tuple[str, str, int]:
        rule = f"meta l4proto udp numgen random mod 100 < {percent} dup to lo"
        return self._rule("netdev", "ingress", rule)

    def reorder(self, percent: int) -> tuple[str, str, int]:
        rule = f"meta l4proto udp numgen random mod 100 < {percent} meta priority set {SLOW_CLASS}"
        return self._rule("inet", "output", rule)

    def slow_class(self) -> SlowClass:
        """What the slow class has carried and holds now."""
        out = self.tc(f"-s class show dev lo classid {SLOW_CLASS}")
        sent = re.search(r"Sent \d+ bytes (\d+) pkt \(dropped (\d+)", out)
        backlog = re.search(r"backlog \S+ (\d+)p", out)
        if sent is None or backlog is None:
            raise RuntimeError(f"tc printed no counters for class {SLOW_CLASS}: {out!r}")
        return SlowClass(int(sent[1]), int(sent[2]), int(backlog[1]))

    def delete(self, rule: tuple[str, str, int]) -> None:
        family, chain, handle = rule
        self.nft(f"delete rule {family} {TABLE} {chain} handle {handle}")

    def prefix(self) -> list[str]:
        """What runs a command in the namespace."""
        return ["ip", "netns", "exec", self.name]

    def close(self) -> None:
        self.ns.delete()

    def left(self) -> bool:
        """The namespace is still there."""
        res = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
        return any(line.split()[0] == self.name for line in res.stdout.splitlines() if line)
