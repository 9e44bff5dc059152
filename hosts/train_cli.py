"""Train the example MLP as one data-parallel worker, gradients summed through the switch.

    python -m hosts.train_cli --job 1 --index 0 --workers 2 --ps 10.0.0.3 --steps 150

Every worker of the job runs this with its own ``--index``; each prints its
test accuracy and the accuracy of the same training with a float all-reduce.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from esa import wire
from hosts import training
from hosts.transport import UdpTransport, parse_addr
from hosts.worker import Worker


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="hosts.train_cli", description=__doc__.splitlines()[0])
    p.add_argument("--job", type=int, required=True)
    p.add_argument("--index", type=int, required=True, help="this worker's bit")
    p.add_argument("--workers", type=int, required=True, help="workers of the job (fan-in)")
    p.add_argument("--ps", required=True, help="PS address HOST[:PORT]")
    p.add_argument("--bind", default=f"0.0.0.0:{wire.UDP_PORT}", help="HOST[:PORT] to listen on")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--seed", type=int, default=0, help="data set seed (same on every worker)")
    args = p.parse_args(argv)
    data = training.make_dataset(args.seed)
    x, y = data.shard(args.index, args.workers)
    trainer = training.Trainer(training.new_model(data), x, y, args.workers)
    transport = UdpTransport(parse_addr(args.bind, wire.UDP_PORT))
    worker = Worker(
        args.job,
        args.index,
        args.workers,
        parse_addr(args.ps, wire.UDP_PORT),
        transport,
        bound=training.GRAD_BOUND,
    )
    start = time.monotonic()
    training.train_blocking(trainer, worker.allreduce, args.steps)
    elapsed = time.monotonic() - start
    worker.linger(1.0)
    transport.close()
    acc = trainer.model.accuracy(data.x_test, data.y_test)
    ref = training.train_with_float_allreduce(data, args.workers, args.steps)
    print(json.dumps({"job": args.job, "worker": args.index, "accuracy": acc,
                      "float_accuracy": ref, "seconds": elapsed}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
