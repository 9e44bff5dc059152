"""The soak's host programs (``bench.soak``): a training worker and a PS
shard, each on sockets the soak bound and holds, so that a process killed
and started again is found where the last one was.

    python -m bench.soak_hosts worker --job 1 --index 0 --fan-in 2 ...
    python -m bench.soak_hosts ps --job 1:2 --shard 0 --shards 1 ...

The worker trains: call after call, from call 0, each its synthetic
gradient (``hosts.programs.gradients``, seeded by ``--seed``, which the soak draws per
run of the job), until the call the stop file names.  It prints one JSON
line per event on stdout: ``begin`` (a call starts, after its compute
time), ``go`` (every PS shard agreed it: it streams, in flight until its
sum), ``done`` (its sum's digest, its seconds, the PS shards that
restarted during it and those it resumed the call with), ``fail`` (the
error, its type, the workers it names, its seconds and deadline) and
``end``.  A failed call ends the process, status 1, after a BYE: a worker
out of step with its job can not go on (docs/hosts.md, Worker); the soak
starts its job again, every worker in a new epoch (docs/agreement.md).

The PS serves its jobs until SIGTERM (status 0) or SIGKILL.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

import numpy as np
import numpy.typing as npt

from esa import arguments
from hosts.net.transport import Addr, UdpTransport
from hosts.programs import program
from hosts.programs.gradients import compute_time, digest, synthetic_gradient
from hosts.programs.ps_cli import job_arg, key_arg
from hosts.ps.parameter_server import ParameterServer
from hosts.worker.agent import Worker
from hosts.worker.calls import STREAMING
from hosts.worker.errors import AllreduceError, AllreduceTimeout, CallRejected
from runner.verify import BOUND


def held_socket(fd: int) -> UdpTransport:
    """The bound UDP socket inherited as ``fd``."""
    return UdpTransport(socket.socket(fileno=fd))


def addrs(text: str) -> tuple[Addr, ...]:
    out = []
    for part in text.split(","):
        host, _, port = part.rpartition(":")
        out.append((host, int(port)))
    return tuple(out)


def emit(event: str, **fields: object) -> None:
    print(json.dumps({"ev": event, "t": time.time(), **fields}), flush=True)


def stop_call(path: Path) -> int | None:
    """The call before which the worker stops, once the soak wrote it."""
    try:
        return int(path.read_text().strip() or "-1")
    except (OSError, ValueError):
        return None


def restarts(worker: Worker) -> dict[str, int]:
    """The PS shards that restarted during the current call (bitmaps), and
    those whose restart met the call streaming and resumed it (RESUME, then
    the new PS's GO: the call was in flight there)."""
    c = worker.cur
    return {"restarted": 0 if c is None else c.restarted, "resumed": 0 if c is None else c.regained}


def allreduce(
    worker: Worker, call: int, grad: npt.NDArray[np.float32], timeout: float
) -> npt.NDArray[np.float32]:
    """``Worker.allreduce``, saying ``go`` when the call streams (every PS
    shard agreed it): from then on until its ``done`` the call is in flight."""
    worker.begin(grad, timeout)
    streaming = False
    while not worker.done:
        now = time.monotonic()
        wake = worker.poll(now)
        c = worker.cur
        if not streaming and c is not None and c.phase == STREAMING:
            streaming = True
            emit("go", call=call)
        if not worker.done:
            worker.wait((now + worker.timeout.value if wake is None else wake) - time.monotonic())
    return worker.result()


def work(args: argparse.Namespace) -> int:
    transport, control = held_socket(args.data_fd), held_socket(args.control_fd)
    worker = Worker(
        args.job, args.index, args.fan_in, addrs(args.ps), transport,
        bound=BOUND, rto=0.05, control=control, control_addrs=addrs(args.control),
        key=args.key_file,
    )  # fmt: skip
    call = 0
    try:
        while (stop := stop_call(args.stop_file)) is None or stop < 0 or call < stop:
            worker.linger(compute_time(args.seed, args.job, args.index, call, args.compute, 0.5))
            grad = synthetic_gradient(args.seed, args.job, args.index, call, BOUND, args.size)
            emit("begin", call=call)
            t0 = time.monotonic()
            try:
                got = allreduce(worker, call, grad, args.timeout)
            except AllreduceError as e:
                named = e.missing if isinstance(e, AllreduceTimeout) else None
                left = e.left if isinstance(e, AllreduceTimeout) else []
                peer = e.peer if isinstance(e, CallRejected) else None
                emit(
                    "fail", call=call, error=str(e), type=type(e).__name__, missing=named,
                    left=left, peer=peer, s=time.monotonic() - t0, timeout=args.timeout,
                    **restarts(worker),
                )  # fmt: skip
                return 1
            emit("done", call=call, digest=digest(got), s=time.monotonic() - t0,
                 **restarts(worker))  # fmt: skip
            call += 1
        worker.linger(0.5)
        emit("end", calls=call)
        return 0
    finally:
        worker.leave()


def serve_ps(args: argparse.Namespace) -> int:
    ps = ParameterServer(
        held_socket(args.data_fd), addrs(args.switch)[0], dict(args.job),
        control=held_socket(args.control_fd), shard=args.shard, shards=args.shards,
        keys=dict(args.key_file), cache_size=args.cache,
    )  # fmt: skip
    stopping = False

    def on_signal(_sig: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(json.dumps({"ev": "ready", "pid": os.getpid()}), flush=True)
    ps.serve(lambda: stopping)
    return 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = arguments.Parser(prog="python -m bench.soak_hosts", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="role", required=True)
    w = sub.add_parser("worker")
    w.add_argument("--job", type=arguments.JOB_ID, required=True)
    w.add_argument("--index", type=arguments.WORKER_INDEX, required=True)
    w.add_argument("--fan-in", type=arguments.FAN_IN, required=True)
    w.add_argument("--ps", required=True, help="HOST:PORT per shard (the switch)")
    w.add_argument("--control", required=True, help="HOST:PORT of each shard's PS control")
    w.add_argument("--key-file", type=program.key_file, required=True)
    w.add_argument("--size", type=arguments.COUNT, required=True)
    w.add_argument("--seed", type=int, required=True)
    w.add_argument("--timeout", type=float, required=True)
    w.add_argument("--compute", type=float, default=0.0)
    w.add_argument("--stop-file", type=Path, required=True)
    ps = sub.add_parser("ps")
    ps.add_argument("--job", type=job_arg, action="append", required=True)
    ps.add_argument("--key-file", type=key_arg, action="append", default=[])
    ps.add_argument("--switch", required=True, help="HOST:PORT")
    ps.add_argument("--shard", type=int, default=0)
    ps.add_argument("--shards", type=int, default=1)
    ps.add_argument("--cache", type=arguments.COUNT, default=1 << 16, help="finished chunks kept")
    for q in (w, ps):
        q.add_argument("--data-fd", type=int, required=True)
        q.add_argument("--control-fd", type=int, required=True)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.role == "worker":
        return program.run("soak worker", lambda: work(args))
    return program.run("soak ps", lambda: serve_ps(args))


if __name__ == "__main__":
    sys.exit(main())
