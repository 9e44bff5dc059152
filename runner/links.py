"""Link properties that really happen: loss by nftables, bandwidth by tbf,
delay by netem, each checked when applied, and loss counted.

Mininet's TCLink applies all three with netem, which this project's kernels
may lack ("Specified qdisc kind is unknown"); Mininet only logs that, and
the run used to go on with perfect links.  So the run builds plain links and
applies each requested property here, raising ``LinkError`` when one can not
be applied:

- loss: an nftables ``netdev`` table on the host's interface, inside the
  host's namespace, drops each frame with the requested probability, in
  both directions (ingress and egress hooks), and counts what it dropped;
- bandwidth: a tbf qdisc on both ends of the link, whose queue holds 50 ms
  at the link's rate: what overflows it is dropped, and counted too;
- delay: a netem qdisc on both ends; without netem the run refuses.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from runner.scenario import LinkShape

TABLE = "esa_loss"
LOSS_SCALE = 1_000_000
"""nft draws ``numgen random mod LOSS_SCALE``: loss is applied in steps of 1e-4 %."""
DIRECTIONS = ("ingress", "egress")

Exec = Callable[[str], tuple[int, str]]
"""Runs a shell command where the interface lives; returns (exit status, output)."""


class LinkError(RuntimeError):
    """A requested link property could not be applied."""


def loss_threshold(loss_pct: float) -> int:
    """Frames whose random draw is below this are dropped."""
    return round(loss_pct / 100 * LOSS_SCALE)


def loss_ruleset(dev: str, loss_pct: float) -> str:
    """The nft ruleset dropping ``loss_pct`` % of frames each way on ``dev``."""
    keep = loss_threshold(loss_pct)
    lines = [f"table netdev {TABLE} {{"]
    lines += [f"  counter dropped_{d} {{ }}" for d in DIRECTIONS]
    for d in DIRECTIONS:
        lines += [
            f"  chain {d} {{",
            f'    type filter hook {d} device "{dev}" priority 0;',
            f'    numgen random mod {LOSS_SCALE} < {keep} counter name "dropped_{d}" drop',
            "  }",
        ]
    lines.append("}")
    return "\n".join(lines) + "\n"


def dropped_by_hook(nft_json: str) -> dict[str, int]:
    """Frames dropped per hook (``DIRECTIONS``: ingress, the way down to the
    host; egress, the way up from it), from ``nft -j list counters table
    netdev esa_loss``."""
    out = dict.fromkeys(DIRECTIONS, 0)
    for item in json.loads(nft_json).get("nftables", []):
        counter = item.get("counter")
        if counter is not None and counter.get("table") == TABLE:
            out[counter["name"].removeprefix("dropped_")] += int(counter["packets"])
    return out


def dropped(nft_json: str) -> int:
    """Frames dropped both ways."""
    return sum(dropped_by_hook(nft_json).values())


def _heredoc(text: str) -> str:
    return f"<<'NFT'\n{text}NFT"


def apply_loss(run: Exec, dev: str, loss_pct: float) -> None:
    code, out = run(f"nft -f - {_heredoc(loss_ruleset(dev, loss_pct))}")
    if code != 0:
        raise LinkError(f"cannot apply {loss_pct:g}% loss on {dev} with nftables: {out.strip()}")
    code, out = run(f"nft list chain netdev {TABLE} egress")
    if code != 0 or f'device "{dev}"' not in out:
        raise LinkError(f"nftables loss on {dev} is not in place: {out.strip()}")


def read_counters(run: Exec) -> str:
    code, out = run(f"nft -j list counters table netdev {TABLE}")
    if code != 0:
        raise LinkError(f"cannot read the loss counters: {out.strip()}")
    return out


def read_dropped(run: Exec) -> int:
    return dropped(read_counters(run))


def read_dropped_by_hook(run: Exec) -> dict[str, int]:
    return dropped_by_hook(read_counters(run))


def qdisc_drops(tc_json: str) -> int:
    """Frames the qdiscs dropped, from ``tc -s -j qdisc show dev DEV``."""
    return sum(int(q.get("drops", 0)) for q in json.loads(tc_json))


def read_qdisc_drops(run: Exec, dev: str) -> int:
    code, out = run(f"tc -s -j qdisc show dev {dev}")
    if code != 0:
        raise LinkError(f"cannot read the queue drops of {dev}: {out.strip()}")
    return qdisc_drops(out)


def tbf_command(dev: str, bw_mbps: float) -> str:
    """A tbf root qdisc (handle 5:) at ``bw_mbps``; bursts of 10 ms at that rate,
    at least 3 frames."""
    burst = max(3 * 1514, int(bw_mbps * 1e6 / 8 / 100))
    return (
        f"tc qdisc add dev {dev} root handle 5: tbf rate {bw_mbps:g}mbit burst {burst} latency 50ms"
    )


def netem_command(dev: str, delay_ms: float, under_tbf: bool) -> str:
    """A netem delay, as the root qdisc or as the tbf's child (as Mininet nests them)."""
    parent = "parent 5:1" if under_tbf else "root"
    return f"tc qdisc add dev {dev} {parent} handle 10: netem delay {delay_ms:g}ms"


def apply_shaping(run: Exec, dev: str, link: LinkShape) -> None:
    """Bandwidth and delay on the egress of ``dev`` (call it for both ends)."""
    if link.bw_mbps:
        code, out = run(tbf_command(dev, link.bw_mbps))
        if code != 0:
            raise LinkError(f"cannot limit {dev} to {link.bw_mbps:g} Mbit/s: {out.strip()}")
    if link.delay_ms:
        code, out = run(netem_command(dev, link.delay_ms, bool(link.bw_mbps)))
        if code != 0:
            hint = (
                " (delay needs the kernel's netem qdisc, sch_netem, which this kernel lacks)"
                if "unknown" in out
                else ""
            )
            raise LinkError(
                f"cannot apply {link.delay_ms:g} ms delay on {dev}: {out.strip()}{hint}"
            )
