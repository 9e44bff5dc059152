"""A small convolutional net on scikit-learn's digits, trained with PyTorch
DistributedDataParallel and Adam: a plain DDP script, started by torchrun,
that sums its gradients through the ESA switch when its environment names
an ESA job (ESA_JOB, ESA_PS, ...) and with Gloo otherwise.

    torchrun --nproc-per-node 2 examples/ddp_user_script.py --epochs 3
    make run RUN_ARGS="--train torch --script examples/ddp_user_script.py"
"""

import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from hosts.torch.hook import register


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 8, kernel_size=3, padding=1)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        logits: torch.Tensor = self.fc(x.flatten(1))
        return logits


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)

    x, y = load_digits(return_X_y=True)
    images = torch.tensor(x / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    labels = torch.tensor(y)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))
    train_idx, test_idx = order[:1500], order[1500:]
    train = TensorDataset(images[train_idx], labels[train_idx])
    sampler: DistributedSampler[tuple[torch.Tensor, ...]] = DistributedSampler(train)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)

    model = DDP(Net())
    if "ESA_JOB" in os.environ:
        register(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        total = 0.0
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.step()
            total += loss.item()
        print(f"rank {rank} epoch {epoch}: loss {total / len(loader):.4f}", flush=True)

    model.eval()
    with torch.no_grad():
        predicted = model.module(images[test_idx]).argmax(dim=1)
    accuracy = (predicted == labels[test_idx]).float().mean().item()
    print(json.dumps({"rank": rank, "accuracy": accuracy}), flush=True)

    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
