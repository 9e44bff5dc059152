"""What call agreement costs: the time of one allreduce call on 127.0.0.1
(switch model between the workers and the PS), with and without the
CALL / GO exchange before each call.

    .venv/bin/python -m bench.call_latency --calls 200 --size 32

Each mode runs the same calls; the difference of the per-call medians is
the agreement's extra latency (about one worker-PS round trip).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from functools import partial

import numpy as np

from testbed.looprig import LoopRig, in_threads

JOB = 3


def per_call(calls: int, size: int, agree: bool, fan_in: int = 2) -> list[float]:
    """Seconds per call, as worker 0 measured each."""
    times: list[float] = []
    x = np.full(size, 0.5, np.float32)
    with LoopRig(fan_in, job=JOB, agree=agree) as rig:

        def work(i: int) -> None:
            w = rig.worker(i, rto=0.05)
            for _ in range(calls):
                t0 = time.perf_counter()
                w.allreduce(x, timeout=10.0)
                if i == 0:
                    times.append(time.perf_counter() - t0)
            w.linger(0.1)

        in_threads(*[partial(work, i) for i in range(fan_in)], reraise=True)
    return times


def extra_latency(calls: int, size: int) -> tuple[float, float]:
    """Median seconds per call without and with agreement."""
    without = statistics.median(per_call(calls, size, agree=False))
    with_agreement = statistics.median(per_call(calls, size, agree=True))
    return without, with_agreement


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.call_latency", description=__doc__.splitlines()[0]
    )
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--size", type=int, nargs="+", default=[32, 3200, 100_000])
    a = p.parse_args(argv)
    for size in a.size:
        without, agreed = extra_latency(a.calls, size)
        print(
            f"{size:7d} values: {without * 1e3:8.3f} ms per call without agreement, "
            f"{agreed * 1e3:8.3f} ms with; agreement adds {(agreed - without) * 1e3:+.3f} ms",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
