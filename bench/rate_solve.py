"""How often the fluid model's rate solve converges, with and without its
root search, over random points of several jobs streaming at once.

    .venv/bin/python -m bench.rate_solve --points 1000 --seed 7 --ps-shards 2

Each point: 2 to 5 jobs of one size (4, 8 or 16 workers) and priorities 0
to 3, one workers' skew for all (half the points 0.1-5 us, half up to
2 ms), each job's lag spread 0 or 0.5 us, a pool of 256, 1,024 or 4,096
slots, one shared-pool scheme (ATP, ESA-equal, ESA, ESA-SRPT), the
default network with ``--ps-shards`` PS shards per job (fewer shards make
the PS bound steeper, and the solve harder).  It solves every point
twice: with the damped rounds alone (``sim.rates.ROOT_METHODS`` empty) and as
the simulator does (rounds, then ``scipy.optimize.root``), and prints how
many of each ended unconverged.
"""

from __future__ import annotations

import argparse
import random
import time
from unittest import mock

from esa.schemes import Scheme
from sim import rates
from sim.params import Net
from sim.rates import Flow, NotConverged, SolveConstants, solve

SCHEMES = (Scheme.ATP, Scheme.ESA_EQUAL, Scheme.ESA, Scheme.ESA_SRPT)


def points(n: int, seed: int) -> list[tuple[Scheme, list[tuple[int, int, float, float]], int]]:
    """(scheme, (workers, priority, skew ns, lag spread ns) per job, pool) of ``n`` points."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        scheme = rng.choice(SCHEMES)
        jobs, workers = rng.randint(2, 5), rng.choice([4, 8, 16])
        skew = rng.uniform(100, 5000) if rng.random() < 0.5 else rng.uniform(100, 2e6)
        pool = rng.choice([256, 1024, 4096])
        spec = [(workers, rng.randint(0, 3), skew, rng.choice([0.0, 500.0])) for _ in range(jobs)]
        out.append((scheme, spec, pool))
    return out


def unconverged(
    cases: list[tuple[Scheme, list[tuple[int, int, float, float]], int]], net: Net
) -> int:
    failed = 0
    for scheme, spec, pool in cases:
        flows = [Flow(w, p, skew, spread, spread) for w, p, skew, spread in spec]
        try:
            solve(flows, [], SolveConstants.of(scheme, net, pool), net)
        except NotConverged:
            failed += 1
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--ps-shards", type=int, default=2, choices=(1, 2, 4, 8))
    args = parser.parse_args(argv)
    if args.points < 1:
        parser.error("--points must be at least 1")
    net = Net(ps_shards=args.ps_shards)
    cases = points(args.points, args.seed)
    start = time.monotonic()
    with mock.patch.object(rates, "ROOT_METHODS", ()):
        alone = unconverged(cases, net)
    both = unconverged(cases, net)
    print(f"{args.points} points (seed {args.seed}, {args.ps_shards} PS shards): unconverged "
          f"with the damped rounds alone {alone}, with the rounds and the root search {both} "
          f"({time.monotonic() - start:.0f} s)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
