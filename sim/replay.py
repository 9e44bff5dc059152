"""``python -m sim.replay [RUN_DIR]``: the packet model against a Mininet run.

Reads ``RUN_DIR/scenario.json`` and ``RUN_DIR/jobs.json`` (what ``make run``
writes), simulates the same jobs under each of the run's schemes with the
packet-level model on a ``Net`` calibrated to BMv2 and the Python hosts, and
compares average JCTs.  The verdict is on what the simulator is for, the
comparison of schemes: every ratio of a scheme's average JCT to ESA's must
be within ``RATIO_TOLERANCE`` of the measured one, and ESA must beat ATP in
the simulation exactly when it does in the run.  A scheme the simulator has
not is simulated as the one ``SIMULATED_AS`` names, and the output says so.
Absolute JCTs are printed, not judged (see docs/simulator.md, "Validation
against the Mininet run").  Exits 1 when the simulator disagrees, 0 when it agrees.
"""

from __future__ import annotations

import argparse
import itertools
import json
import socket
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from esa.job import JobSpec, Workers
from esa.schemes import RUN_SCHEMES, SIM_SCHEMES, Scheme
from esa.spec import Policy, default_squat_us
from runner import scenario as scn
from sim import packet
from sim.entry import mean_jct
from sim.params import Net

DEFAULT_RUN = Path("results/run")
REFERENCE_RUN = Path(__file__).resolve().parent / "data" / "default_run"
"""A committed ``make run`` of mininet/scenarios/default.json (the test's input)."""

RATIO_TOLERANCE = 0.25
"""Largest relative error allowed on a scheme's average JCT over ESA's."""

SWITCH_PKT_PER_S = 6_000.0
"""BMv2 running the ESA program, all ports together: ``python -m
bench.dataplane_rate`` sustained 5,800-7,900 ESA packets/s on the 2-core
machine of the runs (L2 forwarding: 22,000-28,000).  The low end: in a run
BMv2 shares the two cores with nine Python hosts."""

PS_PKT_NS = 25_000.0
"""The Python PS per packet it acts on: ``measure_ps_pkt_ns`` (UDP socket
receive, merge, and for every second packet a PS_RESULT sent; ``--measure-ps``)
gave medians of 17-35 us in six calls on the runs' 2-core machine under
other load; 25 us is the middle.  The PS is far from the bottleneck: 17 or
45 us changes no simulated average JCT."""

HOP_NS = 50_000.0
"""One way host <-> BMv2 over a veth: kernel UDP send, veth, BMv2's packet
socket, and the receiving Python process's wake-up (an estimate; a tenth of
the switch's service time, so it barely matters)."""

HOST_GBPS = 10.0
"""The veth has no rate limit (the default run sets no ``bw``); any rate far
above 6,000 packets x 183 bytes (9 Mbit/s) gives the same result."""

PS_STALL_S = 0.2
"""``hosts.programs.ps_cli --stall`` default: the PS pulls a chunk untouched
this long."""

SIMULATED_AS = {s.value: s if s in SIM_SCHEMES else Scheme.STATIC_EQUAL for s in RUN_SCHEMES}
"""The run's schemes and the scheme that simulates each: itself where the
simulator has it.  ``esa`` ranks each job as the run declares it: its
static priority, or (None) the controller's automatic rank with aging and
progress reported at each iteration (``make run``).  ``static`` (SwitchML's
partitions of the run's ``part_size``) is simulated as ``static-equal``, the
controller's equal split of the pool among the jobs: the packet model's
fixed partitions are one bandwidth-delay product of its own ``Net``, not
the run's ``part_size``."""


@dataclass(frozen=True)
class Run:
    pool: int
    jobs: list[JobSpec]
    net: Net
    schemes: list[str]
    measured: dict[str, dict[int, float]]
    """scheme -> job -> JCT (s) of the run."""


def net_for(scenario: dict[str, Any]) -> Net:
    """The calibrated ``Net`` of a scenario (sources: the constants above)."""
    link = scenario.get("link") or {}
    if link.get("loss_pct"):
        raise ValueError("the simulator has no packet loss; cannot validate a lossy run")
    bw = link.get("bw_mbps")
    # squat_us absent: a run older than the squat rule; null: the controller's default
    squat = scenario.get("squat_us", 0)
    return Net(
        gbps=bw / 1000 if bw else HOST_GBPS,
        hop_ns=HOP_NS + float(link.get("delay_ms") or 0.0) * 1e6,
        ps_pkt_ns=PS_PKT_NS,
        switch_pkt_ns=1e9 / SWITCH_PKT_PER_S,
        window=int(scenario["window"]),
        rto_ns=float(scenario["rto_s"]) * 1e9,
        ps_stall_ns=PS_STALL_S * 1e9,
        stale_us=int(scenario["stale_us"]),
        squat_us=default_squat_us(Policy.ESA) if squat is None else int(squat),
        static_fit_window=False,
    )


def recorded_job(job: dict[str, Any]) -> JobSpec:
    """A job of a run's ``scenario.json``, read by the scenario reader
    (``runner.scenario.parse_job``).  A job without a priority, or with
    ``priority: null`` as runs before ``size_hint`` wrote it, ran at the
    controller's automatic rank: ``size_hint``."""
    if job.get("priority") is None:
        job = {k: v for k, v in job.items() if k != "priority"} | {"size_hint": True}
    return scn.parse_job(job).spec


def scheme_of(row: dict[str, Any]) -> str:
    """The scheme a row of ``jobs.json`` ran under (``policy`` in older runs)."""
    return str(row["scheme"] if "scheme" in row else row["policy"])


def load(run_dir: Path) -> Run:
    scenario = json.loads((run_dir / "scenario.json").read_text())
    rows = json.loads((run_dir / "jobs.json").read_text())
    jobs = [recorded_job(j) for j in scenario["jobs"]]
    bad = [f"{scheme_of(r)} job {r['job']}" for r in rows if r.get("status", "done") != "done"]
    if bad:
        raise ValueError(f"the run has failed jobs, whose times compare with nothing: {bad}")
    measured: dict[str, dict[int, float]] = {}
    for r in rows:
        measured.setdefault(scheme_of(r), {})[int(r["job"])] = float(r["jct_s"])
    schemes = [p for p in scn.listed_schemes(scenario) if p in measured]
    if "esa" not in schemes:
        raise ValueError("the run has no esa scheme to compare with")
    return Run(int(scenario["pool_size"]), jobs, net_for(scenario), schemes, measured)


def simulated_as(schemes: list[str]) -> list[str]:
    """A line for each of the run's ``schemes`` the simulator has not,
    naming the one that simulates it (``SIMULATED_AS``)."""
    return [
        f"{p}: simulated as {SIMULATED_AS[p].value} (the simulator has no {p})"
        for p in schemes
        if SIMULATED_AS[p].value != p
    ]


def simulate(run: Run) -> dict[str, dict[int, float]]:
    """scheme -> job -> simulated JCT (s), packet model."""
    return {p: packet.simulate(run.jobs, run.pool, SIMULATED_AS[p], run.net) for p in run.schemes}


@dataclass(frozen=True)
class Comparison:
    lines: list[str]
    failures: list[str]

    @property
    def ok(self) -> bool:
        return not self.failures


def ordering(avg: dict[str, float]) -> str:
    """Schemes by average JCT, best first; ``=`` for averages within 0.1 %."""
    ranked = sorted(avg, key=avg.__getitem__)
    out = ranked[0]
    for prev, p in itertools.pairwise(ranked):
        out += (" = " if avg[p] <= 1.001 * avg[prev] else " < ") + p
    return out


def compare(
    schemes: list[str],
    measured: dict[str, dict[int, float]],
    simulated: dict[str, dict[int, float]],
) -> Comparison:
    meas = {p: mean_jct(measured[p]) for p in schemes}
    sim = {p: mean_jct(simulated[p]) for p in schemes}
    lines = [f"{'scheme':<8}{'measured s':>12}{'simulated s':>13}{'error':>8}"]
    for p in schemes:
        lines.append(f"{p:<8}{meas[p]:>12.2f}{sim[p]:>13.2f}{sim[p] / meas[p] - 1:>+8.0%}")
    lines.append(f"{'ratio':<12}{'measured':>10}{'simulated':>11}{'error':>8}")
    failures = []
    for p in schemes:
        if p == "esa":
            continue
        m, s = meas[p] / meas["esa"], sim[p] / sim["esa"]
        err = s / m - 1
        lines.append(f"{p + '/esa':<12}{m:>10.3f}{s:>11.3f}{err:>+8.0%}")
        if abs(err) > RATIO_TOLERANCE:
            failures.append(f"{p}/esa off by {err:+.0%} (tolerance {RATIO_TOLERANCE:.0%})")
    lines.append(f"ordering measured:  {ordering(meas)}")
    lines.append(f"ordering simulated: {ordering(sim)}")
    if "atp" in schemes and (meas["esa"] < meas["atp"]) != (sim["esa"] < sim["atp"]):
        failures.append("ESA and ATP are ordered differently")
    return Comparison(lines, failures)


def measure_ps_pkt_ns(pairs: int = 1000, rounds: int = 5) -> float:
    """Median cost of ``hosts.ps.parameter_server.ParameterServer`` per
    FALLBACK on a loopback UDP socket: ``2 * pairs`` contributions of a
    two-worker job are queued on its socket, then one ``poll`` drains them
    (every second one completes a chunk and sends its PS_RESULT)."""
    from esa import wire
    from hosts.net import payload
    from hosts.net.transport import UdpTransport
    from hosts.ps.parameter_server import ParameterServer

    ps_sock, sink = UdpTransport(("127.0.0.1", 0)), UdpTransport(("127.0.0.1", 0))
    ps = ParameterServer(ps_sock, sink.addr, {1: Workers.of(2)})
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    frame, values = payload.Frame(), np.arange(wire.K, dtype=np.int32)
    costs = []
    for r in range(rounds):
        for i in range(2 * pairs):
            h = payload.Header(wire.PacketType.FALLBACK, 0, 1, r * pairs + i // 2, 1 << (i % 2), 1)
            sender.sendto(frame.pack(h, values), ps_sock.addr)
        t0 = time.perf_counter()
        ps.poll(time.monotonic())
        costs.append((time.perf_counter() - t0) / (2 * pairs) * 1e9)
        while sink.recv_into(bytearray(wire.PAYLOAD_BYTES + 1)) is not None:
            pass
    for s in (ps_sock, sink):
        s.close()
    sender.close()
    return float(np.median(costs))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.replay", description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", nargs="?", type=Path, default=DEFAULT_RUN)
    ap.add_argument(
        "--measure-ps",
        action="store_true",
        help="measure the PS's per-packet cost on this machine instead of the recorded one",
    )
    ap.add_argument(
        "--switch-rate", type=float, default=SWITCH_PKT_PER_S, metavar="PKT_PER_S",
        help="ESA packets a second BMv2 sums on the run's machine (bench.dataplane_rate)",
    )  # fmt: skip
    ap.add_argument(
        "--forward-ratio", type=float, default=1.0, metavar="R",
        help="how many packets BMv2 forwards to a PS in the time it sums one "
        "('esa to the PS / esa summed' of bench.dataplane_rate --only summed); "
        "1: every packet costs the same",
    )  # fmt: skip
    args = ap.parse_args(argv)
    if not (args.switch_rate > 0 and args.forward_ratio >= 1):
        print("validate: --switch-rate must be > 0 and --forward-ratio >= 1", file=sys.stderr)
        return 2
    try:
        run = load(args.run_dir)
    except (OSError, ValueError, KeyError) as e:
        print(f"validate: {args.run_dir}: {e}", file=sys.stderr)
        return 2
    if args.measure_ps:
        ps_ns = measure_ps_pkt_ns()
        print(f"PS: {ps_ns / 1e3:.1f} us per packet (measured)")
        run = replace(run, net=replace(run.net, ps_pkt_ns=ps_ns))
    sum_ns = 1e9 / args.switch_rate
    run = replace(
        run, net=replace(run.net, switch_sum_ns=sum_ns, switch_pkt_ns=sum_ns / args.forward_ratio)
    )
    n = run.net
    print(
        f"{args.run_dir}: {len(run.jobs)} jobs, {run.pool} slots; switch "
        f"{n.switch_sum_ns / 1e3:.0f} us/packet summed, {n.switch_pkt_ns / 1e3:.0f} us forwarded, "
        f"PS {n.ps_pkt_ns / 1e3:.0f} us/packet, "
        f"hop {n.hop_ns / 1e3:.0f} us, window {n.window}, rto {n.rto_for() / 1e6:.0f} ms"
    )
    result = compare(run.schemes, run.measured, simulate(run))
    print("\n".join([*simulated_as(run.schemes), *result.lines]))
    if result.ok:
        print(f"agree: ratios within {RATIO_TOLERANCE:.0%}, same ESA-vs-ATP ordering")
        return 0
    print("DISAGREE: " + "; ".join(result.failures))
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
