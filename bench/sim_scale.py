"""What the fluid model costs per 1,000 jobs as a run grows at one offered
load, and what it does with more jobs at once than there are wire ids.

    .venv/bin/python -m bench.sim_scale --sizes 1000 5000 10000 --schemes esa atp

Each size N is ``WorkloadSpec(mix="mixed", jobs=N, load=--load)`` on the
network and pool of ``sim.sweep.REGIMES``'s "moderate" point, seed
``--seed``.  The load fixes how many jobs run at once whatever N (the
table shows it, ``sim.workload.concurrency``), so the CPU seconds per
1,000 jobs stay flat if an event costs the same however many jobs came
before it (CPU time, not wall time: the machine may be shared).
Then ``--burst`` jobs arrive at one instant under the first scheme: more
than the ``esa.wire.MAX_JOB_ID`` wire ids, so the rest wait for one
(``sim.leases``); it prints how many waited, the most that held an id at
once and the mean wait.  The defaults run ESA and ATP only: every scheme
of ``esa.schemes.SIM_SCHEMES`` (``--schemes``) takes several times as long.
"""

from __future__ import annotations

import argparse
import time

from esa import wire
from esa.schemes import SIM_SCHEMES, Scheme
from sim.fluid import FluidSim
from sim.rates import Flow
from sim.sweep import REGIMES
from sim.workload import WorkloadSpec, concurrency, make_jobs

MODERATE = next(p for p in REGIMES if p.name == "moderate")


def seconds(scheme: Scheme, jobs: int, load: float, seed: int) -> tuple[float, float]:
    """(concurrency, CPU seconds) of one run of ``jobs`` jobs."""
    net = MODERATE.net()
    specs = make_jobs(WorkloadSpec(mix="mixed", jobs=jobs, load=load), net, seed)
    start = time.process_time()
    FluidSim(specs, MODERATE.pool, scheme, net, seed).run()
    return concurrency(specs, net), time.process_time() - start


def burst(scheme: Scheme, jobs: int, load: float, seed: int) -> str:
    """``jobs`` jobs arriving together: how they waited for wire ids."""
    net = MODERATE.net()
    specs = make_jobs(WorkloadSpec(mix="mixed", jobs=jobs, load=load, burst=jobs), net, seed)
    most = 0

    def observe(now: float, flows: list[Flow]) -> None:
        nonlocal most
        most = max(most, len(sim.parts.leases.held))

    sim = FluidSim(specs, MODERATE.pool, scheme, net, seed, observer=observe)
    start = time.process_time()
    sim.run()
    cpu = time.process_time() - start
    waits = [j.admitted_at * 1e-9 - j.spec.arrival_s for j in sim.jobs.values()]
    waited = [w for w in waits if w > 0]
    return (
        f"{jobs} jobs at once under {scheme.value}: {len(waited)} waited for a wire id "
        f"(of {wire.MAX_JOB_ID}), at most {most} held one at a time, mean wait "
        f"{sum(waited) / max(len(waited), 1):.2f} s ({cpu:.0f} CPU s to run)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument(
        "--schemes",
        type=Scheme,
        nargs="+",
        default=[Scheme.ESA, Scheme.ATP],
        choices=SIM_SCHEMES,
        metavar="SCHEME",
        help=f"of {', '.join(s.value for s in SIM_SCHEMES)} (default: esa atp)",
    )
    parser.add_argument("--load", type=float, default=4.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--burst", type=int, default=600, help="0: no burst")
    args = parser.parse_args(argv)
    if min(args.sizes) < 1 or args.burst < 0 or args.load <= 0:
        parser.error("--sizes must be >= 1, --burst >= 0 and --load > 0")
    print(f"{'jobs':>6} {'at once':>8}" + "".join(f" {s.value:>12}" for s in args.schemes))
    for n in args.sizes:
        runs = [seconds(s, n, args.load, args.seed) for s in args.schemes]
        per = "".join(f" {1000 * t / n:10.2f} s" for _, t in runs)
        print(f"{n:>6} {runs[0][0]:>8.1f}{per}")
    print("(CPU seconds of simulation per 1,000 jobs; at once: jobs running together)")
    if args.burst:
        print(burst(args.schemes[0], args.burst, args.load, args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
