"""Run the parameter server for one or more jobs until interrupted.

python -m hosts.ps_cli --job 1:2 --job 2:4 --switch-addr 10.0.0.254
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType

from esa import wire
from hosts.ps import JobSpec, ParameterServer
from hosts.transport import UdpTransport, parse_addr


def job_arg(text: str) -> tuple[int, JobSpec]:
    """``JOB:FANIN`` or ``JOB:FANIN:MASK``."""
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise argparse.ArgumentTypeError(f"expected JOB:FANIN[:MASK], got {text!r}")
    mask = int(parts[2], 0) if len(parts) == 3 else None
    return int(parts[0]), JobSpec.of(int(parts[1]), mask)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="hosts.ps_cli", description=__doc__.splitlines()[0])
    p.add_argument("--bind", default=f"0.0.0.0:{wire.UDP_PORT}", help="HOST[:PORT] to listen on")
    p.add_argument("--job", type=job_arg, action="append", required=True, help="JOB:FANIN[:MASK]")
    p.add_argument("--switch-addr", required=True, help="HOST[:PORT] PS results are sent to")
    p.add_argument(
        "--stall", type=float, default=0.2, help="seconds before a stalled chunk is pulled"
    )
    p.add_argument("--cache", type=int, default=1 << 16, help="finished chunks kept for resends")
    p.add_argument("--duration", type=float, help="stop after this many seconds")
    p.add_argument("--json", action="store_true", help="print counters as JSON on exit")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    transport = UdpTransport(parse_addr(args.bind, wire.UDP_PORT))
    ps = ParameterServer(
        transport,
        parse_addr(args.switch_addr, wire.UDP_PORT),
        dict(args.job),
        stall=args.stall,
        cache_size=args.cache,
    )
    stopping = False

    def on_signal(_sig: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    end = None if args.duration is None else time.monotonic() + args.duration
    print(f"PS on {transport.addr}, jobs {sorted(ps.jobs)}", flush=True)
    ps.serve(lambda: stopping or (end is not None and time.monotonic() >= end))
    transport.close()
    counters = ps.counters.as_dict()
    print(json.dumps({"ps": counters}) if args.json else counters, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
