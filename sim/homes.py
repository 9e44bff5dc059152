"""``python -m sim.homes``: ESA's homes against the hashed pool, packet model.

The controller gives every ESA job a home, its share of the equal split,
while the pool has one for each (``esa-ctl policy esa``; docs/controller.md,
"Partitions"); the simulator's ESA schemes hash every job over the pool, as
the paper's ESA does.  Where a job's workers reach a chunk together the two
place chunks equally well; where they reach it milliseconds apart, as the
host processes around a software switch do, a hashed chunk that lands on
another job's held slot goes to its PS.  This runs a Mininet scenario's
jobs through the packet model (``sim.packet``, calibrated as
``sim.replay`` does) with each worker's packets reaching the switch a
fixed ``U[0, lag)`` later than they would, drawn per worker, under the
static equal split, ESA hashing every job, ESA with homes and ESA with homes
and one priority for all (the run's ``esa-equal``), and prints each one's
average JCT.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from esa.schemes import Scheme
from runner import scenario as scn
from sim import packet
from sim.entry import mean_jct
from sim.params import Net
from sim.replay import net_for

SCENARIOS = (scn.SCENARIOS / "priority.json", scn.DEFAULT, scn.SCENARIOS / "srpt.json")
LAGS_MS = (0.0, 3.0, 10.0)
VARIANTS: dict[str, tuple[Scheme, bool]] = {
    "static-equal": (Scheme.STATIC_EQUAL, False),
    "esa hashed": (Scheme.ESA, False),
    "esa homes": (Scheme.ESA, True),
    "esa-equal homes": (Scheme.ESA_EQUAL, True),
}
"""column -> (scheme, ``Net.esa_homes``)."""


def compare(s: scn.Scenario, lag_ms: float) -> dict[str, float]:
    """Average JCT (s) of each variant on the jobs, pool and links of ``s``."""
    net: Net = replace(net_for(scn.as_json(s)), lag_ns=lag_ms * 1e6)
    jobs = [j.spec for j in s.jobs]
    return {
        name: mean_jct(packet.simulate(jobs, s.pool_size, scheme, replace(net, esa_homes=homes)))
        for name, (scheme, homes) in VARIANTS.items()
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.homes", description=__doc__.splitlines()[0])
    ap.add_argument("scenarios", nargs="*", type=Path, default=list(SCENARIOS))
    ap.add_argument(
        "--lag-ms", type=float, nargs="+", default=list(LAGS_MS), help="worker lag spreads, ms"
    )
    ap.add_argument("--bw", type=float, help="link bandwidth, Mbit/s (default: the scenario's)")
    args = ap.parse_args(argv)
    print(f"{'scenario':<16}{'lag ms':>7}" + "".join(f"{v:>17}" for v in VARIANTS))
    for path in args.scenarios:
        s = scn.load(path)
        if args.bw is not None:
            s = replace(s, link={**s.link, "bw_mbps": args.bw})
        for lag in args.lag_ms:
            avg = compare(s, lag)
            print(f"{path.stem:<16}{lag:>7g}" + "".join(f"{avg[v]:>17.2f}" for v in VARIANTS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
