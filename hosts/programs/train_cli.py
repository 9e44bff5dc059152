"""Train the example MLP as one data-parallel worker, gradients summed through the switch.

    esa-train --job 1 --index 0 --workers 2 --ps 10.0.0.3 --steps 150

Every worker of the job runs this with its own ``--index``; each prints its
test accuracy and the accuracy of the same training with a float all-reduce.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from functools import partial

from esa import arguments
from hosts.programs import program, training
from hosts.worker.agent import DEFAULT_TIMEOUT, Worker

PROG = "esa-train"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = arguments.Parser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--job", type=arguments.JOB_ID, required=True)
    p.add_argument("--index", type=arguments.WORKER_INDEX, required=True, help="this worker's bit")
    p.add_argument(
        "--workers", type=arguments.FAN_IN, required=True, help="workers of the job (fan-in)"
    )
    arguments.add_worker_addresses(p)
    p.add_argument("--key-file", type=program.key_file, help="the job's control key (hex)")
    p.add_argument("--steps", type=arguments.COUNT, default=150)
    p.add_argument(
        "--seed", type=arguments.SEED, default=0, help="data set seed (same on every worker)"
    )
    p.add_argument(
        "--timeout",
        type=arguments.seconds("timeout"),
        default=DEFAULT_TIMEOUT,
        help="seconds per allreduce",
    )
    args = p.parse_args(argv)
    if args.index >= args.workers:
        p.error(f"argument --index: {args.index} is not below --workers {args.workers}")
    arguments.check_worker_addresses(p, args)
    return args


def train(args: argparse.Namespace) -> int:
    data = training.make_dataset(args.seed)
    x, y = data.shard(args.index, args.workers)
    trainer = training.Trainer(training.new_model(data), x, y, args.workers)
    transport, control = program.bind_pair(args.bind)
    try:
        worker = Worker(
            args.job, args.index, args.workers, args.ps, transport, bound=training.GRAD_BOUND,
            control=control, control_addrs=args.control, key=args.key_file,
        )  # fmt: skip
        start = time.monotonic()
        training.train_blocking(
            trainer, partial(worker.allreduce, timeout=args.timeout), args.steps
        )
        elapsed = time.monotonic() - start
        worker.linger(1.0)
        worker.leave()
    finally:
        transport.close()
        control.close()
    acc = trainer.model.accuracy(data.x_test, data.y_test)
    ref = training.train_with_float_allreduce(data, args.workers, args.steps)
    print(json.dumps({"job": args.job, "worker": args.index, "accuracy": acc,
                      "float_accuracy": ref, "seconds": elapsed}))  # fmt: skip
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return program.run(PROG, lambda: train(args))


if __name__ == "__main__":
    sys.exit(main())
