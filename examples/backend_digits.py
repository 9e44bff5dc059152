"""Train the digits MLP of ``examples/torch_digits.py`` through the ``esa``
process-group backend: a script that names the backend and changes
nothing else.  By default it all-reduces each gradient itself, a plain
loop of ``dist.all_reduce`` (SUM, then divided by the world size); with
``--ddp`` it wraps the model in DistributedDataParallel, without a hook.

    ESA_JOB=1 ESA_PS=10.0.0.3 torchrun --nproc-per-node 2 examples/backend_digits.py --ddp
    torchrun --nproc-per-node 2 examples/backend_digits.py --backend gloo

The ``esa`` backend takes its settings from ``ESA_*`` as the DDP hook does
(``hosts.torch.backend``).  Prints each epoch's mean training loss, then one
JSON line: rank, test accuracy, training seconds and steps, the SHA-256 of
the final parameters (the same on every worker) and, with ``esa``, the
worker agent's counters.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from examples.torch_digits import accuracy, digest, load, make_model
from hosts.torch import backend


def all_reduce_gradients(model: nn.Module) -> None:
    """What DDP does for a model, by hand: every gradient summed over the
    workers, then divided by their number."""
    world = dist.get_world_size()
    for p in model.parameters():
        assert p.grad is not None
        dist.all_reduce(p.grad)
        p.grad /= world


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default=backend.BACKEND, help="esa (default) or gloo")
    p.add_argument("--ddp", action="store_true", help="DistributedDataParallel, without a hook")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch", type=int, default=32, help="samples per worker and step")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP's bucket size")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    dist.init_process_group(args.backend)
    torch.manual_seed(args.seed)
    train, test = load(args.seed)
    net = make_model(args.hidden)
    model = DistributedDataParallel(net, bucket_cap_mb=args.bucket_cap_mb) if args.ddp else net
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    sampler: DistributedSampler[tuple[torch.Tensor, ...]] = DistributedSampler(
        train, seed=args.seed
    )
    loader = DataLoader(train, batch_size=args.batch, sampler=sampler)

    start, steps = time.monotonic(), 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        losses = []
        for x, y in loader:
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            if not args.ddp:
                all_reduce_gradients(model)
            opt.step()
            losses.append(loss.item())
        steps += len(losses)
        print(f"epoch {epoch + 1}/{args.epochs}: loss {np.mean(losses):.4f}", flush=True)
    seconds = time.monotonic() - start

    report = {"rank": dist.get_rank(), "accuracy": accuracy(net, test), "seconds": seconds,
              "steps": steps, "params_sha256": digest(net)}  # fmt: skip
    if args.backend == backend.BACKEND:
        report["counters"] = backend.world().state.worker.counters.as_dict()
    print(json.dumps(report), flush=True)
    dist.barrier()  # over Gloo: both ranks reach the teardown together
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
