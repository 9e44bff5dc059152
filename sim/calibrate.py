"""``python -m sim.calibrate``: the fluid model against the packet model.

Small scenarios both models can run, each with and without the barrier, in
pools smaller and larger than the jobs' windows together; per scheme the
mean time beyond compute (JCT less the slowest worker's compute, summed over
iterations: what aggregation costs) in both models and the fluid model's
error.  The scenarios are the tests' (tests/test_sim_fluid.py); the table
is docs/simulator.md's ("Calibration").  A few minutes.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace

from esa import wire
from esa.job import JobSpec
from esa.schemes import SIM_SCHEMES, Scheme
from esa.spec import Event
from sim import fluid, packet
from sim.params import ESA_SCHEMES, Net
from sim.workload import beyond_compute


@dataclass(frozen=True)
class Case:
    name: str
    jobs: tuple[JobSpec, ...]
    net: Net
    pools: tuple[int, ...]


def _jobs(chunks: int, compute_s: float, jitter: float, spacing_s: float) -> tuple[JobSpec, ...]:
    shapes = ((4, 1.0, 10), (4, 0.6, 200), (2, 1.5, 100), (8, 0.8, 50))
    return tuple(
        JobSpec(i + 1, w, 32 * round(chunks * m), 2, p, spacing_s * i, compute_s, jitter)
        for i, (w, m, p) in enumerate(shapes)
    )


STILL = Net(jitter_ns=0.0, rto_ns=0.0)
"""The first cases isolate one mechanism each: no spread of a chunk's
contributions and no retransmission timer (the PS's PULL recovers)."""
US_SKEW = Case(
    "us skew",
    _jobs(1000, 20e-6, 0.01, 5e-6),
    replace(STILL, hop_ns=500, ps_shards=2),
    (256, 1024),
)
"""Jobs tens of microseconds long; workers skewed by up to 0.4 us."""
MS_SKEW = Case(
    "ms skew",
    _jobs(3000, 5e-3, 0.15, 50e-6),
    replace(STILL, ps_shards=2, ps_stall_ns=20e3),
    (128, 256, 1024),
)
"""Workers skewed by up to 1.5 ms: the early ones park their windows."""
LARGE_BDP = Case(
    "large BDP", _jobs(8000, 5e-3, 0.15, 50e-6), replace(MS_SKEW.net, hop_ns=5000.0), (512, 2048)
)
"""5 us hops: a window of 686 packets (1,372 under ATP), pools below and above it."""
LAG = Case("2 us lag", MS_SKEW.jobs, replace(MS_SKEW.net, lag_ns=2000.0), (256, 1024))
"""MS_SKEW with each worker's link up to 2 us slower than its peers'."""
SPREAD = Case(
    "2 us lag, 1 us spread",
    MS_SKEW.jobs,
    Net(ps_shards=2, ps_stall_ns=20e3, lag_ns=2000.0),
    (256, 1024),
)
"""LAG as the sweep runs it: each contribution spread (``Net.jitter_ns``'s
default) and the workers' retransmission timeout on."""
REGIME = tuple(
    Case(
        f"spread, {n} PS, homes",
        SPREAD.jobs,
        replace(SPREAD.net, ps_shards=n, esa_homes=True),
        (256, 1024),
    )
    for n in (1, 2, 8)
)
"""SPREAD as ``make sim`` judges it: 1 and 2 PS hosts per job (8 shown),
ESA with the controller's homes."""
LENDING = Case(
    "lending, 1 PS",
    tuple(
        JobSpec(i + 1, w, 96_000, 4, p, 40e-6 * i, 60e-6, 0.02)
        for i, (w, p) in enumerate(((8, 10), (8, 200), (4, 100), (4, 50)))
    ),
    replace(SPREAD.net, ps_shards=1, esa_homes=True),
    (256, 1024),
)
"""Rule L's case: four jobs of 3,000 chunks, 4 iterations of 60 us of
compute, arriving 40 us apart, so that some stream while others compute;
one PS host per job; homes of 64 and 256 slots, less than a job holds at
line rate (314) and than its window (461), so a streaming job's home is
busy and the computing jobs' homes are idle."""
CASES = (US_SKEW, MS_SKEW, LARGE_BDP, LAG, SPREAD, *REGIME, LENDING)


def compare(case: Case, pool: int, scheme: Scheme, barrier: bool) -> tuple[float, float]:
    """(packet, fluid) mean time beyond compute in seconds."""
    net = replace(case.net, barrier=barrier)
    jobs = list(case.jobs)
    exact = packet.simulate(jobs, pool, scheme, net)
    coarse = fluid.simulate(jobs, pool, scheme, net)
    return beyond_compute(case.jobs, exact), beyond_compute(case.jobs, coarse)


CALIBRATED = [s for s in SIM_SCHEMES if s is not Scheme.STATIC_EQUAL]
"""STATIC_EQUAL recuts the partitions under running jobs, which strands
chunks until a timeout in the packet model (``packet.Deadlock``); the fluid
model recuts for free, so the two are not compared."""


def stall_table(stalls_us: list[float], pool: int = 1024) -> None:
    """ESA-equal on ``SPREAD`` with the barrier, per PS stall, then with the
    stall the PS learns (``Net.ps_stall_adapts``, from one round trip of the
    PS path): where the fluid model's optimism for ESA under spread comes
    from (docs/simulator.md, "Calibration"), and the PULLs the packet
    model's PS hosts sent."""
    print("| PS stall us | packet us | fluid us | fluid's error | PS pulls |")
    print("|---|---|---|---|---|")
    nets = [(f"{s:g}", replace(SPREAD.net, ps_stall_ns=s * 1e3)) for s in stalls_us]
    nets.append(("learnt", replace(SPREAD.net, ps_stall_ns=0.0, ps_stall_adapts=True)))
    for name, net in nets:
        net = replace(net, barrier=True)
        jobs = list(SPREAD.jobs)
        sim = packet.PacketSim(jobs, pool, Scheme.ESA_EQUAL, net)
        exact = beyond_compute(SPREAD.jobs, sim.run())
        coarse = beyond_compute(SPREAD.jobs, fluid.simulate(jobs, pool, Scheme.ESA_EQUAL, net))
        pulls = sum(ps.pulls for job in sim.jobs.values() for ps in job.shards)
        print(
            f"| {name} | {exact * 1e6:.0f} | {coarse * 1e6:.0f} | {coarse / exact - 1:+.0%} "
            f"| {pulls} |",
            flush=True,
        )


@dataclass(frozen=True)
class Lent:
    """One ESA run of ``LENDING``: time beyond compute (s) in both models,
    and the packet model's chunks in all, lent (``Event.LENT``) and guests
    evicted (``Event.GUEST_EVICTED``)."""

    exact: float
    coarse: float
    chunks: int
    lent: int
    evicted: int


def lending(pool: int, scheme: Scheme) -> Lent:
    """``LENDING`` with the barrier in both models, counting the switch's
    lending."""
    net = replace(LENDING.net, barrier=True)
    jobs = list(LENDING.jobs)
    sim = packet.PacketSim(jobs, pool, scheme, net)
    exact = beyond_compute(LENDING.jobs, sim.run())
    coarse = beyond_compute(LENDING.jobs, fluid.simulate(jobs, pool, scheme, net))
    events = [sim.switch.events(w) for w in range(1, wire.MAX_JOB_ID + 1)]
    return Lent(
        exact,
        coarse,
        sum(j.chunks * j.iterations for j in jobs),
        sum(e[Event.LENT] for e in events),
        sum(e[Event.GUEST_EVICTED] for e in events),
    )


def lending_table() -> None:
    """Per ESA scheme and pool of ``LENDING``: time beyond compute in the
    packet model / the fluid model (the fluid model's error), and the
    share of the packet model's chunks lent and of its guests evicted."""
    print("| scheme | pool | packet us | fluid us | fluid's error | chunks lent | guests evicted |")
    print("|---" * 7 + "|")
    for scheme in ESA_SCHEMES:
        for pool in LENDING.pools:
            r = lending(pool, scheme)
            print(
                f"| {scheme.value} | {pool} | {r.exact * 1e6:.0f} | {r.coarse * 1e6:.0f} "
                f"| {r.coarse / r.exact - 1:+.1%} | {r.lent / r.chunks:.1%} "
                f"| {r.evicted / max(1, r.lent):.1%} |",
                flush=True,
            )


LOSS_SCHEMES = (Scheme.ATP, Scheme.STATIC_FB, Scheme.ESA_EQUAL, Scheme.ESA_SRPT)
"""The schemes the loss table compares: the baselines ``make sim`` judges
ESA against, and ESA with one priority and with its ranks."""


def loss_table(losses_pct: list[float], pool: int = 256) -> None:
    """``SPREAD`` with the barrier at each loss rate of every host link
    (``Net.loss``), the PS's stall learnt: per scheme, time beyond compute
    in the packet model / the fluid model (the fluid model's error)."""
    print("| loss % | " + " | ".join(s.value for s in LOSS_SCHEMES) + " |")
    print("|---" * (1 + len(LOSS_SCHEMES)) + "|")
    for loss in losses_pct:
        net = replace(SPREAD.net, loss=loss / 100, ps_stall_ns=0.0, ps_stall_adapts=True)
        cells = []
        for scheme in LOSS_SCHEMES:
            exact, coarse = compare(replace(SPREAD, net=net), pool, scheme, barrier=True)
            cells.append(f"{exact * 1e6:.0f} / {coarse * 1e6:.0f} ({coarse / exact - 1:+.0%})")
        print(f"| {loss:g} | " + " | ".join(cells) + " |", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.calibrate", description=__doc__)
    ap.add_argument("--case", choices=[c.name for c in CASES], action="append")
    ap.add_argument(
        "--stall-us",
        type=float,
        nargs="+",
        help="instead: ESA-equal on the spread case with the barrier, one row per PS stall "
        "and one for the stall the PS learns",
    )
    ap.add_argument(
        "--loss-pct",
        type=float,
        nargs="+",
        help="instead: the spread case with the barrier, 256 slots, one row per loss rate",
    )
    ap.add_argument(
        "--barrier",
        choices=("on", "off", "both"),
        default="both",
        help="with the host barrier (make sim's), without, or both (default)",
    )
    ap.add_argument(
        "--lending",
        action="store_true",
        help="instead: the lending case with the barrier, every ESA scheme, with the packet "
        "model's chunks lent and guests evicted",
    )
    args = ap.parse_args(argv)
    if args.lending:
        lending_table()
        return 0
    if args.stall_us:
        stall_table(args.stall_us)
        return 0
    if args.loss_pct:
        loss_table(args.loss_pct)
        return 0
    cases = [c for c in CASES if not args.case or c.name in args.case]
    print("| case | barrier | pool | " + " | ".join(s.value for s in CALIBRATED) + " |")
    print("|---" * (3 + len(CALIBRATED)) + "|")
    for case in cases:
        for barrier in {"off": (False,), "on": (True,), "both": (False, True)}[args.barrier]:
            for pool in case.pools:
                cells = []
                for scheme in CALIBRATED:
                    exact, coarse = compare(case, pool, scheme, barrier)
                    cells.append(
                        f"{exact * 1e6:.0f} / {coarse * 1e6:.0f} ({coarse / exact - 1:+.0%})"
                    )
                row = f"| {case.name} | {'yes' if barrier else 'no'} | {pool} | "
                print(row + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
