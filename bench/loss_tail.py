"""Where a lossy iteration's time goes: workers, a PS and the switch model on
127.0.0.1, with random loss on every hop (host -> switch and switch -> host).

    .venv/bin/python -m bench.loss_tail --loss 0 0.2 --iters 3 --size 100000

For each loss rate it prints the mean and worst iteration time, when the
median, 99th-percentile and last chunk of an iteration got their sums, the
worker's retransmissions, the largest RTO it reached and the PS's pulls.
"""

from __future__ import annotations

import argparse
import itertools
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from hosts.net.transport import Addr, Bytes, UdpTransport
from hosts.worker.agent import Worker
from testbed.looprig import LoopRig, in_threads

LOCAL: Addr = ("127.0.0.1", 0)
JOB = 1
TIMEOUT = 120.0


class LossyTransport(UdpTransport):
    """A UDP socket that drops each datagram it sends with probability ``loss``."""

    def __init__(self, loss: float, seed: int) -> None:
        super().__init__(LOCAL)
        self.loss, self.rng, self.lost = loss, random.Random(seed), 0

    def send(self, data: Bytes, addr: Addr) -> None:
        if self.rng.random() < self.loss:
            self.lost += 1
            return
        super().send(data, addr)


@dataclass
class Trace:
    """One worker's view of its iterations."""

    iter_s: list[float] = field(default_factory=list)
    p50_s: list[float] = field(default_factory=list)
    p99_s: list[float] = field(default_factory=list)
    max_rto: float = 0.0


def drive(w: Worker, x: np.ndarray, trace: Trace) -> None:
    """One allreduce through the steppable API, noting when chunks complete."""
    t0 = time.monotonic()
    w.begin(x)
    c = w.cur
    assert c is not None
    marks = {int(0.5 * c.n): trace.p50_s, int(0.99 * c.n): trace.p99_s}
    while not w.done:
        if time.monotonic() - t0 > TIMEOUT:
            raise TimeoutError(f"worker {w.index}: no sum after {TIMEOUT} s")
        nxt = w.poll(time.monotonic())
        trace.max_rto = max(trace.max_rto, w.timeout.value)
        for k in [k for k in marks if c.delivered >= k]:
            marks.pop(k).append(time.monotonic() - t0)
        if not w.done:
            wake = nxt if nxt is not None else time.monotonic() + w.timeout.value
            w.wait(wake - time.monotonic())
    for k in list(marks):
        marks.pop(k).append(time.monotonic() - t0)
    trace.iter_s.append(time.monotonic() - t0)


def run(
    loss: float, iters: int, size: int, fan_in: int, window: int, rto: float, stall: float
) -> str:  # fmt: skip
    seeds = itertools.count(100)
    traces = [Trace() for _ in range(fan_in)]
    with LoopRig(
        fan_in, job=JOB, loss=loss, stall=stall,
        sockets=lambda: LossyTransport(loss, next(seeds)),
    ) as rig:  # fmt: skip
        workers = [rig.worker(i, window=window, rto=rto) for i in range(fan_in)]

        def body(i: int) -> None:
            rng = np.random.default_rng(i)
            for _ in range(iters):
                drive(workers[i], rng.uniform(-1, 1, size).astype(np.float32), traces[i])
            workers[i].linger(0.5)

        in_threads(*[partial(body, i) for i in range(fan_in)], reraise=True)
    [ps] = rig.loop.pses
    tr = traces[0]
    retx = sum(w.counters.retransmitted for w in workers) / fan_in / iters
    return (
        f"loss {loss:4.0%}: iteration mean {np.mean(tr.iter_s):6.2f} s,"
        f" worst {max(tr.iter_s):6.2f} s;"
        f" 50% of chunks at {np.mean(tr.p50_s):5.2f} s, 99% at {np.mean(tr.p99_s):5.2f} s;"
        f" retransmissions/iter {retx:7.0f}; max RTO {tr.max_rto:.3f} s;"
        f" PS pulls/iter {ps.counters.pulls_sent / iters:6.0f},"
        f" answers from cache/iter {ps.counters.answered_from_cache / iters:6.0f},"
        f" replies over budget {ps.counters.suppressed}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.loss_tail", description=__doc__.splitlines()[0]
    )
    p.add_argument("--loss", type=float, nargs="+", default=[0.0, 0.2])
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--size", type=int, default=100_000)
    p.add_argument("--fan-in", type=int, default=2)
    p.add_argument("--window", type=int, default=64)
    p.add_argument("--rto", type=float, default=0.05)
    p.add_argument("--stall", type=float, default=0.2)
    a = p.parse_args(argv)
    for loss in a.loss:
        line = run(loss, a.iters, a.size, a.fan_in, a.window, a.rto, a.stall)
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
