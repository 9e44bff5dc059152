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
import threading
import time
from collections.abc import Sequence

import numpy as np

from esa import model
from esa.job import Workers
from esa.spec import Policy
from hosts.loopswitch import LoopSwitch
from hosts.ps import ParameterServer
from hosts.transport import Addr, UdpTransport
from hosts.worker import Worker

LOCAL: Addr = ("127.0.0.1", 0)
JOB = 3


def per_call(calls: int, size: int, agree: bool, fan_in: int = 2) -> list[float]:
    """Seconds per call, as worker 0 measured each."""
    data = [UdpTransport(LOCAL) for _ in range(fan_in)]
    control = [UdpTransport(LOCAL) for _ in range(fan_in)]
    ps_t, ps_c = UdpTransport(LOCAL), UdpTransport(LOCAL)
    sw = model.SwitchModel(pool_size=64, policy=Policy.ESA)
    sw.add_job(JOB, model.JobConfig(fan_in, (1 << fan_in) - 1, priority=1, ps_port=1))
    switch = LoopSwitch(sw, ps={JOB: ps_t.addr}, workers={JOB: [t.addr for t in data]}).start()
    ps = ParameterServer(
        ps_t, switch.addr, {JOB: Workers.of(fan_in)}, stall=0.05, control=ps_c if agree else None
    )
    stop = threading.Event()
    ps_thread = threading.Thread(target=ps.serve, args=(stop.is_set,))
    ps_thread.start()
    times: list[float] = []
    x = np.full(size, 0.5, np.float32)

    def work(i: int) -> None:
        w = Worker(
            JOB, i, fan_in, switch.addr, data[i], rto=0.05,
            control=control[i] if agree else None, control_addr=ps_c.addr,
        )  # fmt: skip
        for _ in range(calls):
            t0 = time.perf_counter()
            w.allreduce(x, timeout=10.0)
            if i == 0:
                times.append(time.perf_counter() - t0)
        w.linger(0.1)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(fan_in)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    ps_thread.join()
    switch.stop()
    for tr in [ps_t, ps_c, *data, *control]:
        tr.close()
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
