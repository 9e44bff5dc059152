"""What call agreement costs: the time of one allreduce call on 127.0.0.1
(switch model between the workers and the PS), and of that the time from
the first CALL to the PS's GO, before which nothing is sent.

    .venv/bin/python -m bench.call_latency --calls 200 --size 32

The median call without its wait for the GO, against the median call, is
the agreement's extra latency (about one worker-PS round trip).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from functools import partial

import numpy as np
import numpy.typing as npt

from hosts.worker.agent import Worker
from hosts.worker.calls import ANNOUNCING
from testbed.looprig import LoopRig, in_threads

JOB = 3


def timed_call(w: Worker, x: npt.NDArray[np.float32]) -> tuple[float, float]:
    """Seconds from the start of one call to its GO and to its sum."""
    t0 = time.perf_counter()
    w.begin(x, 10.0)
    go = None
    while not w.done:
        wake = w.poll(w.clock())
        if go is None and w.cur is not None and w.cur.phase != ANNOUNCING:
            go = time.perf_counter()
        if not w.done:
            w.wait((w.clock() + w.timeout.value if wake is None else wake) - w.clock())
    end = time.perf_counter()
    return (end if go is None else go) - t0, end - t0


def per_call(calls: int, size: int, fan_in: int = 2) -> list[tuple[float, float]]:
    """Seconds to the GO and to the sum per call, as worker 0 measured each."""
    times: list[tuple[float, float]] = []
    x = np.full(size, 0.5, np.float32)
    with LoopRig(fan_in, job=JOB) as rig:

        def work(i: int) -> None:
            w = rig.worker(i, rto=0.05)
            for _ in range(calls):
                t = timed_call(w, x)
                if i == 0:
                    times.append(t)
            w.linger(0.1)
            w.leave()

        in_threads(*[partial(work, i) for i in range(fan_in)], reraise=True)
    return times


def extra_latency(calls: int, size: int) -> tuple[float, float]:
    """Median seconds per call without its wait for the GO, and with it."""
    times = per_call(calls, size)
    without = statistics.median(total - go for go, total in times)
    return without, statistics.median(total for _, total in times)


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
            f"{size:7d} values: {without * 1e3:8.3f} ms per call without the wait for the GO, "
            f"{agreed * 1e3:8.3f} ms with; agreement adds {(agreed - without) * 1e3:+.3f} ms",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
