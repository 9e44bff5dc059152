"""Run a worker for N allreduce iterations and report times and JCT.

    python -m hosts.worker_cli --job 1 --index 0 --fan-in 2 --ps 10.0.0.9 \\
        --iters 10 --size 100000 --json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from esa import wire
from hosts.transport import UdpTransport, parse_addr
from hosts.worker import Worker


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="hosts.worker_cli", description=__doc__.splitlines()[0])
    p.add_argument("--job", type=int, required=True)
    p.add_argument("--index", type=int, required=True, help="this worker's bit in the bitmap")
    p.add_argument("--fan-in", type=int, required=True)
    p.add_argument("--mask", type=lambda s: int(s, 0), help="worker bitmap (default: fan-in bits)")
    p.add_argument("--ps", required=True, help="PS address HOST[:PORT]")
    p.add_argument("--bind", default=f"0.0.0.0:{wire.UDP_PORT}", help="HOST[:PORT] to listen on")
    p.add_argument("--bound", type=float, default=1.0, help="max |gradient value| of the job")
    p.add_argument("--window", type=int, default=64, help="chunks in flight")
    p.add_argument("--rto", type=float, default=0.05, help="retransmission timeout, seconds")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--size", type=int, default=100_000, help="synthetic gradient length")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--grad", help=".npy gradients: 1-D (each iteration) or 2-D (row per iteration)")
    p.add_argument("--linger", type=float, default=1.0, help="seconds to keep answering PULLs")
    p.add_argument("--json", action="store_true", help="print a final JSON line")
    return p.parse_args(argv)


def synthetic_gradient(
    seed: int, job: int, index: int, it: int, bound: float, size: int
) -> npt.NDArray[np.float32]:
    """Worker ``index``'s gradient of iteration ``it``: anyone can recompute it."""
    rng = np.random.default_rng([seed, job, index, it])
    return rng.uniform(-bound, bound, size).astype(np.float32)


def digest(result: npt.NDArray[np.float32]) -> str:
    """A fingerprint of an all-reduce result, to check it bit for bit elsewhere."""
    return hashlib.sha256(np.ascontiguousarray(result, dtype=np.float32).tobytes()).hexdigest()


def gradients(args: argparse.Namespace, it: int) -> npt.NDArray[np.float32]:
    if args.grad:
        g: npt.NDArray[np.float32] = np.load(args.grad)
        return np.asarray(g[it % len(g)] if g.ndim > 1 else g, dtype=np.float32)
    return synthetic_gradient(args.seed, args.job, args.index, it, args.bound, args.size)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    transport = UdpTransport(parse_addr(args.bind, wire.UDP_PORT))
    worker = Worker(
        job=args.job,
        index=args.index,
        fan_in=args.fan_in,
        ps_addr=parse_addr(args.ps, wire.UDP_PORT),
        transport=transport,
        bound=args.bound,
        window=args.window,
        rto=args.rto,
        worker_mask=args.mask,
    )
    times: list[float] = []
    digests: list[str] = []
    start = time.monotonic()
    for it in range(args.iters):
        grad = gradients(args, it)
        t0 = time.monotonic()
        digests.append(digest(worker.allreduce(grad)))
        times.append(time.monotonic() - t0)
        print(f"iter {it}: {times[-1] * 1e3:.3f} ms", flush=True)
    jct = time.monotonic() - start
    print(f"JCT: {jct:.3f} s", flush=True)
    worker.linger(args.linger)
    transport.close()
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


if __name__ == "__main__":
    sys.exit(main())
