"""``python -m sim.evictions``: what preemption does, and rules that might do better.

The packet model (``sim.packet``: the switch is ``esa.model``, the P4
program's rules) runs four comm-heavy jobs (``sim.calibrate.US_SKEW``'s: 2
to 8 workers, tens of microseconds of compute, each contribution spread as
the sweep spreads it) in pools smaller and larger than their windows, with
1, 2 and 8 PS shards per job.  For ESA with one priority for all
(``esa-equal``) and ESA-SRPT under the P4 program's rule and under each
candidate rule, it prints the mean JCT beside the bounds (``ps-only``,
``ideal``) and, from the switch's counters:

* evictions per chunk the switch completed;
* the share of chunks completed at a PS (fallbacks and evictions);
* contributions that followed an evicted partial to its PS: the
  aggregation an eviction gives up;
* mutual evictions: the share of evictions between two jobs that also
  evicted each other the other way round (the rank order changed under
  them).

A second table runs both under each layout of ESA's memory (``LAYOUTS``):
hashed, the controller's equal-split homes, and homes of one
bandwidth-delay product for the highest ranks.

The candidate rules are not in the P4 program; they live here only to be
weighed (docs/simulator.md, "Priorities").  About ten minutes.
"""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import dataclass, replace

from esa import arguments
from esa.model import JobConfig, Packet, Result, Slot, SwitchModel
from esa.schemes import Scheme
from esa.spec import Event, Verdict
from esa.wire import PacketType
from sim.calibrate import US_SKEW
from sim.entry import mean_jct
from sim.packet import PacketSim
from sim.params import Net

SHARDS = (1, 2, 8)
POOLS = (16, 64, 256)
NET = Net(hop_ns=500.0)
"""US_SKEW's hops, with the sweep's spread and retransmission timeout."""

WAIT_US = 2
"""``Waited``: a partial untouched for less than this is not evicted
(twice the default spread of a chunk's contributions)."""


class BelowHalf(SwitchModel):
    """Evict only a partial that holds less than half its fan-in: one that
    is nearly complete will free its slot soon, and evicting it sends the
    most work to its PS."""

    def _spared(self, slot: Slot, now: int) -> bool:
        victim = self.jobs.get(slot.owner >> 32)
        return victim is not None and 2 * slot.count >= victim.fan_in

    def _preempts(self, cfg: JobConfig, slot: Slot, now: int) -> bool:
        return super()._preempts(cfg, slot, now) and not self._spared(slot, now)


class Waited(BelowHalf):
    """Evict only a partial that has waited ``WAIT_US`` since its last
    contribution: its stragglers are late, and holding it longer buys
    little."""

    def _spared(self, slot: Slot, now: int) -> bool:
        return now - slot.ts < WAIT_US


RULES: dict[str, type[SwitchModel]] = {
    "p4 rule": SwitchModel,
    "below half": BelowHalf,
    "waited": Waited,
}
"""ESA-SRPT's rule of eviction -> the switch model that applies it."""


@dataclass
class Tally:
    """What the switch did to the chunks of one run."""

    completed: int = 0
    evictions: int = 0
    at_ps: int = 0
    followers: int = 0
    mutual: int = 0


class CountingSim(PacketSim):
    """The packet model, noting each eviction's winner, victim and followers."""

    def __init__(self, *args: object, **kw: object) -> None:
        self.pairs: Counter[tuple[int, int]] = Counter()
        self.evicted: set[tuple[int, int]] = set()
        self.followers = 0
        super().__init__(*args, **kw)  # type: ignore[arg-type]

    def _process(self, pkt: Packet, in_port: int) -> Result:
        res = super()._process(pkt, in_port)
        if res.verdict is Verdict.PREEMPT:
            for out in res.outputs:
                if out.packet.ptype is PacketType.PARTIAL:
                    winner, victim = self.on_wire[pkt.job], self.on_wire[out.packet.job]
                    self.pairs[(winner.spec.job, victim.spec.job)] += 1
                    self.evicted.add((out.packet.job, out.packet.seq))
        elif res.verdict is Verdict.FALLBACK and (pkt.job, pkt.seq) in self.evicted:
            self.followers += 1
        return res

    def tally(self) -> Tally:
        ev = self.switch.events
        completed = sum(ev(w)[Event.COMPLETED] for w in self.on_wire)
        done = sum(j.spec.chunks * j.spec.iterations for j in self.jobs.values())
        mutual = sum(n for (a, b), n in self.pairs.items() if self.pairs.get((b, a)))
        return Tally(
            completed=completed,
            evictions=sum(self.pairs.values()),
            at_ps=done - completed,
            followers=self.followers,
            mutual=mutual,
        )


def run(
    pool: int, scheme: Scheme, net: Net, model: type[SwitchModel] = SwitchModel
) -> tuple[float, Tally]:
    sim = CountingSim(list(US_SKEW.jobs), pool, scheme, net, model=model)
    return mean_jct(sim.run()), sim.tally()


LAYOUTS = ("hashed", "equal-split homes", "homes of one BDP")
"""Where ESA's chunks go: every job hashed over the pool (the paper's
ESA); a home for each job from the equal split while the pool has one
(``esa-ctl policy esa``); homes of one bandwidth-delay product for the
highest ranks (``--part-size``), the rest hashed."""


def layout(net: Net, name: str, pool: int) -> Net:
    if name == "hashed":
        return replace(net, esa_homes=False)
    size = net.bdp_partition(pool) if name == "homes of one BDP" else 0
    return replace(net, esa_homes=True, esa_home_size=size)


def rules_table(shards: list[int], pools: list[int]) -> None:
    print(
        "| PS shards | pool | ps-only us | ideal us | esa-equal us | rule | esa-srpt us "
        "| srpt / equal | evictions / switch chunk | chunks at PS | followers / eviction "
        "| mutual |"
    )
    print("|---" * 12 + "|")
    for n in shards:
        net = replace(NET, ps_shards=n)
        for pool in pools:
            bounds = [run(pool, s, net)[0] for s in (Scheme.PS_ONLY, Scheme.IDEAL)]
            equal, _ = run(pool, Scheme.ESA_EQUAL, net)
            for name, model in RULES.items():
                srpt, t = run(pool, Scheme.ESA_SRPT, net, model)
                chunks = t.completed + t.at_ps
                cells = [
                    f"{n}",
                    f"{pool}",
                    *(f"{x * 1e6:.1f}" for x in (*bounds, equal)),
                    name,
                    f"{srpt * 1e6:.1f}",
                    f"{srpt / equal:.3f}",
                    f"{t.evictions / max(t.completed, 1):.3f}",
                    f"{t.at_ps / chunks:.2f}",
                    f"{t.followers / max(t.evictions, 1):.2f}",
                    f"{t.mutual / max(t.evictions, 1):.2f}",
                ]
                print("| " + " | ".join(cells) + " |", flush=True)


def layouts_table(shards: list[int], pools: list[int]) -> None:
    print("| PS shards | pool | layout | esa-equal us | esa-srpt us | srpt / equal |")
    print("|---" * 6 + "|")
    for n in shards:
        for pool in pools:
            for name in LAYOUTS:
                net = layout(replace(NET, ps_shards=n), name, pool)
                equal, srpt = (run(pool, s, net)[0] for s in (Scheme.ESA_EQUAL, Scheme.ESA_SRPT))
                cells = [f"{n}", f"{pool}", name, f"{equal * 1e6:.1f}", f"{srpt * 1e6:.1f}"]
                print("| " + " | ".join([*cells, f"{srpt / equal:.3f}"]) + " |", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.evictions", description=__doc__)
    ap.add_argument("--shards", type=arguments.shards, nargs="+", default=list(SHARDS))
    ap.add_argument("--pools", type=arguments.POOL_SIZE, nargs="+", default=list(POOLS))
    ap.add_argument("--table", choices=("rules", "layouts", "both"), default="both")
    args = ap.parse_args(argv)
    if args.table in ("rules", "both"):
        rules_table(args.shards, args.pools)
    if args.table in ("layouts", "both"):
        print()
        layouts_table(args.shards, args.pools)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
