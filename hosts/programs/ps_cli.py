"""Run the parameter server for one or more jobs until interrupted.

    esa-ps --job 1:2 --job 2:4 --switch-addr 10.0.0.254

It listens for ESA datagrams on ``--bind`` and for the workers' control
messages (call agreement) on ``--control-bind``, authenticated with each
job's ``--key-file`` (docs/agreement.md).  A job whose chunks are
spread over several PS hosts runs one per shard: ``--shard I --shards N``
(every job of this PS has shard ``I`` here).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType

from esa import arguments, wire
from esa.job import Workers
from hosts.programs import program
from hosts.ps.parameter_server import ParameterServer

PROG = "esa-ps"


def job_arg(text: str) -> tuple[int, Workers]:
    """``JOB:FANIN`` or ``JOB:FANIN:MASK``."""
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise argparse.ArgumentTypeError(f"expected JOB:FANIN[:MASK], got {text!r}")
    job, fan_in = arguments.JOB_ID(parts[0]), arguments.FAN_IN(parts[1])
    mask = arguments.MASK(parts[2]) if len(parts) == 3 else None
    try:
        return job, Workers.of(fan_in, mask)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text}: {e}") from None


def key_arg(text: str) -> tuple[int, bytes]:
    """``JOB:PATH``: the key file of job ``JOB``."""
    job, sep, path = text.partition(":")
    if not sep or not path:
        raise argparse.ArgumentTypeError(f"expected JOB:PATH, got {text!r}")
    return arguments.JOB_ID(job), program.key_file(path)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = arguments.Parser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument(
        "--bind",
        type=arguments.address(wire.UDP_PORT),
        default=("0.0.0.0", wire.UDP_PORT),
        help=f"HOST[:PORT] to listen on (default 0.0.0.0:{wire.UDP_PORT})",
    )
    p.add_argument(
        "--control-bind",
        type=arguments.address(wire.CONTROL_PORT),
        help=f"HOST[:PORT] for control messages (default: the --bind host, {wire.CONTROL_PORT})",
    )
    p.add_argument("--job", type=job_arg, action="append", required=True, help="JOB:FANIN[:MASK]")
    p.add_argument(
        "--key-file",
        type=key_arg,
        action="append",
        default=[],
        help="JOB:PATH, the job's control key (hex; without one the job's open key, which "
        "authenticates nothing)",
    )
    p.add_argument(
        "--switch-addr",
        type=arguments.address(wire.UDP_PORT),
        required=True,
        help="HOST[:PORT] PS results are sent to",
    )
    p.add_argument(
        "--stall",
        type=arguments.seconds("stall"),
        default=0.2,
        help="seconds before a stalled chunk is pulled",
    )
    p.add_argument(
        "--cache", type=arguments.COUNT, default=1 << 16, help="finished chunks kept for resends"
    )
    p.add_argument(
        "--shard", type=arguments.SHARD, default=0, help="this PS's shard of its jobs' chunks (0)"
    )
    p.add_argument(
        "--shards", type=arguments.shards, default=1, help="PS hosts per job: 1, 2, 4 or 8 (1)"
    )
    p.add_argument(
        "--duration", type=arguments.seconds("duration"), help="stop after this many seconds"
    )
    p.add_argument("--json", action="store_true", help="print counters as JSON on exit")
    args = p.parse_args(argv)
    ids = [job for job, _ in args.job]
    if len(set(ids)) != len(ids):
        p.error(f"argument --job: job {max(ids, key=ids.count)} given twice")
    keyed = [job for job, _ in args.key_file]
    if len(set(keyed)) != len(keyed):
        p.error(f"argument --key-file: job {max(keyed, key=keyed.count)} given twice")
    if set(keyed) - set(ids):
        p.error(f"argument --key-file: job {min(set(keyed) - set(ids))} is not a --job")
    if args.shard >= args.shards:
        p.error(f"argument --shard: {args.shard} is not below --shards {args.shards}")
    if args.control_bind is None:
        args.control_bind = (args.bind[0], wire.CONTROL_PORT)
    return args


def serve(args: argparse.Namespace) -> int:
    try:
        transport, control = program.bind_pair(args.bind, args.control_bind)
    except program.Failure as e:
        raise program.Failure(f"error: {e}") from None
    ps = ParameterServer(
        transport,
        args.switch_addr,
        dict(args.job),
        stall=args.stall,
        cache_size=args.cache,
        control=control,
        shard=args.shard,
        shards=args.shards,
        keys=dict(args.key_file),
    )
    stopping = False

    def on_signal(_sig: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    end = None if args.duration is None else time.monotonic() + args.duration
    shard = f", shard {ps.shard} of {ps.shards}" if ps.shards > 1 else ""
    print(
        f"PS on {program.shown(transport.addr)}, control on {program.shown(control.addr)}, "
        f"jobs {sorted(ps.jobs)}{shard}",
        flush=True,
    )
    try:
        ps.serve(lambda: stopping or (end is not None and time.monotonic() >= end))
    finally:
        transport.close()
        control.close()
    counters = ps.counters.as_dict()
    print(json.dumps({"ps": counters}) if args.json else counters, flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return program.run(PROG, lambda: serve(args))


if __name__ == "__main__":
    sys.exit(main())
