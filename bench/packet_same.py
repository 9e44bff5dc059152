"""Whether the packet model on this tree is the one on another commit's:
every outcome of many small runs compared, run by run.

    .venv/bin/python -m bench.packet_same --ref 7bf344c

A faster packet model must be the same model (``bench.packet_rate``
compares its one case's JCTs).  This runs six schemes at two pools under
six networks (the barrier and homes; a learnt stall over 2 PS shards;
loss with and without it; a switch with a queue over 4 shards and the
barrier; no stall and a lag), on this tree and, in a subprocess, on ``git archive REF``'s
tree, and compares each run's JCTs, switch verdicts, PULLs, packets each
PS served, retransmissions and spurious timeouts.  It exits 1 if any differ.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping

from esa.job import JobSpec
from esa.schemes import Scheme
from sim.packet import PacketSim
from sim.params import Net

SCHEMES = ("esa-aging", "atp", "static-bdp", "esa-equal", "ps-only", "static-equal")
POOLS = (64, 512)
NETS = {
    "barrier": Net(ps_shards=1, ps_stall_ns=20e3, lag_ns=2000.0, esa_homes=True, barrier=True),
    "learnt": Net(ps_shards=2, ps_stall_ns=0.0, ps_stall_adapts=True, lag_ns=1000.0),
    "loss": Net(ps_shards=2, loss=0.01, ps_stall_ns=0.0, ps_stall_adapts=True, esa_homes=True),
    "loss-stall": Net(ps_shards=1, loss=0.003, ps_stall_ns=30e3),
    "queue": Net(
        ps_shards=4, switch_pkt_ns=50.0, switch_sum_ns=200.0, ps_stall_ns=10e3, barrier=True
    ),
    "lag": Net(ps_shards=1, lag_ns=3000.0),
}
SEED = 3


def jobs() -> list[JobSpec]:
    shapes = ((4, 600, 10), (3, 500, 200), (2, 900, 100), (6, 400, 50))
    return [
        JobSpec(i + 1, w, 32 * chunks, 2, prio, 30e-6 * i, 5e-3, 0.15)
        for i, (w, chunks, prio) in enumerate(shapes)
    ]


def outcomes() -> dict[str, object]:
    """Per run (network/scheme/pool): what it did, or the error it raised."""
    out: dict[str, object] = {}
    for net_name, net in NETS.items():
        for scheme in SCHEMES:
            for pool in POOLS:
                name = f"{net_name}/{scheme}/{pool}"
                sim = PacketSim(jobs(), pool, Scheme(scheme), net, seed=SEED)
                try:
                    jct = sim.run()
                except RuntimeError as e:
                    out[name] = repr(e)
                    continue
                shards = [ps for job in sim.jobs.values() for ps in job.shards]
                workers = [w for job in sim.jobs.values() for w in job.workers]
                out[name] = {
                    "jct": [jct[j] for j in sorted(jct)],
                    "verdicts": sorted([str(k), v] for k, v in sim.verdicts.items()),
                    "pulls": [ps.pulls for ps in shards],
                    "served": [ps.served for ps in shards],
                    "retransmits": [w.retransmits for w in workers],
                    "spurious": [w.spurious for w in workers],
                }
    return out


def differing(before: Mapping[str, object], after: Mapping[str, object]) -> list[str]:
    """The runs whose outcomes differ, or that only one tree ran."""
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ref", required=True, help="the commit whose packet model to compare with")
    args = ap.parse_args(argv)
    # here, not at the top: the other tree loads this file, and its
    # bench.packet_rate may have no ref_tree
    from bench.packet_rate import on_tree, ref_tree

    with ref_tree(args.ref) as tree:
        assert tree is not None  # --ref is required
        before = on_tree(tree, __file__, "outcomes")
    after = json.loads(json.dumps(outcomes()))
    differ = differing(before, after)
    print(f"{len(after)} runs; {len(after) - len(differ)} the same as at {args.ref}")
    for name in differ:
        print(f"DIFFERENT: {name}")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
