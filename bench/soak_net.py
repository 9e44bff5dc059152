"""The soak's network (``bench.soak``): a network namespace of its own,
whose loopback every process of the soak uses, and the faults nftables
makes there, each a rule added and deleted again:

- a loss burst: a share of every UDP datagram dropped (hook input);
- a host's link down and up: every datagram from or to the host's sockets
  dropped (its hosts share the namespace's loopback, so the link is cut by
  a rule, not by ``ip link``);
- duplicated datagrams: a share of every UDP datagram sent twice (netdev
  ingress on the loopback, ``dup to lo``).

Nothing outside the namespace is touched; deleting it deletes the rules.
Reordering would need the netem queueing discipline, which this module
does not use (many kernels lack it; nftables can not delay).
"""

from __future__ import annotations

import re
import shutil
import subprocess

from runner.devices.netns import Namespace, missing_root

TABLE = "esa_soak"


def missing_net() -> str | None:
    """Why the soak can not make its network faults here, or None."""
    why = missing_root()
    if why is not None:
        return why
    if shutil.which("nft") is None:
        return "needs 'nft' (nftables)"
    return None


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
        except RuntimeError:
            self.ns.delete()
            raise

    @property
    def name(self) -> str:
        return self.ns.name

    def nft(self, command: str) -> str:
        return self.ns.exec("nft", *command.split())

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
