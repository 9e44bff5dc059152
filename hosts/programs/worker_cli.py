"""Run a worker for N allreduce iterations and report times and JCT.

    esa-worker --job 1 --index 0 --fan-in 2 --ps 10.0.0.9 --iters 10 --size 100000 --json

``--ps`` lists the job's PS hosts, one per shard (1, 2, 4 or 8): chunk
``seq`` goes to the PS of shard ``esa.job.ps_shard(seq, shards)``.  Each
call is first agreed with every one of them over its control port (its
host, port ``CONTROL_PORT``, unless ``--control`` says otherwise), in messages
authenticated with the job's ``--key-file``; it says BYE when it exits.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from esa import arguments
from hosts.net import quant
from hosts.net.transport import UdpTransport
from hosts.programs import program
from hosts.programs.gradients import compute_time, digest, synthetic_gradient
from hosts.worker.agent import DEFAULT_TIMEOUT, LINGER, Worker

PROG = "esa-worker"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = arguments.Parser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--job", type=arguments.JOB_ID, required=True)
    p.add_argument("--index", type=arguments.WORKER_INDEX, required=True, help="this worker's bit")
    p.add_argument("--fan-in", type=arguments.FAN_IN, required=True)
    p.add_argument("--mask", type=arguments.MASK, help="worker bitmap (default: fan-in bits)")
    arguments.add_worker_addresses(p)
    p.add_argument(
        "--key-file",
        type=program.key_file,
        help="the job's control key (hex; default: the job's open key, which authenticates "
        "nothing)",
    )
    p.add_argument("--bound", type=program.bound, default=1.0, help="max |gradient| of the job")
    p.add_argument("--window", type=arguments.COUNT, default=64, help="chunks in flight")
    p.add_argument(
        "--rto", type=arguments.seconds("rto"), default=0.05, help="initial retransmission timeout"
    )
    p.add_argument(
        "--timeout",
        type=arguments.seconds("timeout"),
        default=DEFAULT_TIMEOUT,
        help="seconds per allreduce",
    )
    p.add_argument("--iters", type=arguments.COUNT, default=10)
    p.add_argument(
        "--size", type=arguments.COUNT, default=100_000, help="synthetic gradient length"
    )
    p.add_argument("--seed", type=arguments.SEED, default=0)
    p.add_argument("--grad", help=".npy gradients: 1-D (each iteration) or 2-D (row per iteration)")
    p.add_argument(
        "--compute",
        type=arguments.seconds("compute", zero=True),
        default=0.0,
        help="seconds of compute per iteration",
    )
    p.add_argument(
        "--jitter",
        type=arguments.fraction("jitter"),
        default=0.0,
        help="compute time varies by this fraction",
    )
    p.add_argument(
        "--linger",
        type=arguments.seconds("linger", zero=True),
        default=LINGER,
        help=f"seconds to answer PULLs after the last call ({LINGER:g})",
    )
    p.add_argument("--json", action="store_true", help="print a final JSON line")
    args = p.parse_args(argv)
    mask = args.mask if args.mask is not None else (1 << args.fan_in) - 1
    if bin(mask).count("1") != args.fan_in:
        p.error(
            f"argument --mask: {mask:#x} holds {bin(mask).count('1')} workers, not {args.fan_in}"
        )
    if args.mask is not None and not mask >> args.index & 1:
        p.error(f"argument --index: worker {args.index} is not in mask {mask:#x}")
    if args.mask is None and args.index >= args.fan_in:
        p.error(f"argument --index: {args.index} is not below fan-in {args.fan_in}")
    try:
        quant.job_scale(args.bound, args.fan_in)
    except ValueError as e:
        p.error(f"argument --bound: {e}")
    if args.grad is not None:
        args.grad = load_gradients(p, args.grad)
    arguments.check_worker_addresses(p, args)
    return args


def load_gradients(p: arguments.Parser, path: str) -> npt.NDArray[np.float32]:
    try:
        g = np.load(path, allow_pickle=False)
    except OSError as e:
        p.error(f"argument --grad: can not read {path}: {e.strerror or e}")
    except ValueError:
        p.error(f"argument --grad: {path} is not a .npy array")
    if g.ndim not in (1, 2) or g.size == 0 or not np.issubdtype(g.dtype, np.number):
        p.error(
            f"argument --grad: {path} holds {g.dtype} of shape {g.shape}, not 1-D or 2-D numbers"
        )
    return np.asarray(g, dtype=np.float32)


def gradient_of(args: argparse.Namespace, it: int) -> npt.NDArray[np.float32]:
    g = args.grad
    if g is not None:
        return np.asarray(g[it % len(g)] if g.ndim > 1 else g)
    return synthetic_gradient(args.seed, args.job, args.index, it, args.bound, args.size)


def run(args: argparse.Namespace) -> int:
    transport, control = program.bind_pair(args.bind)
    try:
        return iterate(args, transport, control)
    finally:
        transport.close()
        control.close()


def iterate(args: argparse.Namespace, transport: UdpTransport, control: UdpTransport) -> int:
    worker = Worker(
        job=args.job,
        index=args.index,
        fan_in=args.fan_in,
        ps=args.ps,
        transport=transport,
        bound=args.bound,
        window=args.window,
        rto=args.rto,
        worker_mask=args.mask,
        control=control,
        control_addrs=args.control,
        key=args.key_file,
    )
    print(
        f"worker on {program.shown(transport.addr)}, control on {program.shown(control.addr)}",
        flush=True,
    )
    try:
        times: list[float] = []
        digests: list[str] = []
        start = time.monotonic()
        for it in range(args.iters):
            if args.compute:
                compute = compute_time(
                    args.seed, args.job, args.index, it, args.compute, args.jitter
                )
                worker.linger(compute)
            grad = gradient_of(args, it)
            t0 = time.monotonic()
            digests.append(digest(worker.allreduce(grad, timeout=args.timeout)))
            times.append(time.monotonic() - t0)
            print(f"iter {it}: {times[-1] * 1e3:.3f} ms", flush=True)
        jct = time.monotonic() - start
        print(f"JCT: {jct:.3f} s", flush=True)
        worker.linger(args.linger)
        if args.json:
            report = {
                "job": args.job,
                "worker": args.index,
                "iters": args.iters,
                "jct_s": jct,
                "iter_s": times,
                "sha256": digests,
                "counters": worker.counters.as_dict(),
            }
            print(json.dumps(report), flush=True)
        return 0
    finally:
        worker.leave()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return program.run(PROG, lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
