"""Train a small MLP on scikit-learn's digits with PyTorch DistributedDataParallel.

An ordinary DDP script: one process per worker, started by ``torchrun`` (or
with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set by hand).  With
``--esa`` the gradients are summed through the switch, which is the one line
``register(model)`` (``hosts.torch.hook``); without it, by Gloo's all-reduce.

    torchrun --nproc-per-node 2 examples/torch_digits.py
    ESA_JOB=1 ESA_PS=10.0.0.3 torchrun --nnodes 2 --node-rank 0 \\
        --master-addr 10.0.0.1 examples/torch_digits.py --esa

A job whose chunks are spread over several PS hosts lists them all, one per
shard in shard order: ``ESA_PS=10.0.0.3,10.0.0.4``.

Prints each epoch's mean training loss, then one JSON line: rank, test
accuracy, training seconds and steps, the SHA-256 of the final parameters
(the same on every worker) and, with ``--esa``, the worker agent's counters.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Sequence

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from hosts.torch.hook import register


def load(seed: int) -> tuple[TensorDataset, TensorDataset]:
    """The 1,797 8x8 digit images, scaled to [0, 1]; a seeded 80/20 split."""
    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(seed).permutation(len(y))
    images = torch.tensor(x[order] / 16.0, dtype=torch.float32)
    labels = torch.tensor(y[order], dtype=torch.int64)
    cut = int(0.8 * len(labels))
    return TensorDataset(images[:cut], labels[:cut]), TensorDataset(images[cut:], labels[cut:])


def make_model(hidden: int) -> nn.Module:
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))


def accuracy(model: nn.Module, data: TensorDataset) -> float:
    x, y = data.tensors
    model.eval()
    with torch.no_grad():
        return float((model(x).argmax(dim=1) == y).float().mean())


def digest(model: nn.Module) -> str:
    return hashlib.sha256(
        b"".join(p.detach().numpy().tobytes() for p in model.parameters())
    ).hexdigest()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--esa", action="store_true", help="sum gradients through the switch")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch", type=int, default=32, help="samples per worker and step")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP's bucket size")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    dist.init_process_group("gloo")
    torch.manual_seed(args.seed)
    train, test = load(args.seed)
    model = DistributedDataParallel(make_model(args.hidden), bucket_cap_mb=args.bucket_cap_mb)
    esa = register(model) if args.esa else None
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
            opt.step()
            losses.append(loss.item())
        steps += len(losses)
        print(f"epoch {epoch + 1}/{args.epochs}: loss {np.mean(losses):.4f}", flush=True)
    seconds = time.monotonic() - start

    report = {"rank": dist.get_rank(), "accuracy": accuracy(model, test), "seconds": seconds,
              "steps": steps, "params_sha256": digest(model)}  # fmt: skip
    if esa is not None:
        report["counters"] = esa.worker.counters.as_dict()
    print(json.dumps(report), flush=True)
    # Both ranks reach the teardown together: a rank that tears its Gloo
    # pairs down while its peer still uses them can abort at exit.
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
