"""A user's DDP script as a new user writes one: a small conv net on
scikit-learn's digits, the ESA hook registered by hand
(``model.register_comm_hook(EsaHookState.from_env(), esa_hook)``), as many
steps as its epochs take, whatever the run's scenario says.  With
``--hang-after K`` it stops doing anything after K steps, as a script that
hangs does (its hook idle, its process alive)::

    python tests/data/ddp_steps.py --epochs 1 [--hang-after 3]
"""

import argparse
import json
import threading

import torch
import torch.distributed as dist
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from hosts.torch.hook import EsaHookState, esa_hook


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
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--hang-after", type=int, default=0, help="steps, then hang (0: never)")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    x, y = load_digits(return_X_y=True)
    images = torch.tensor(x / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    train = TensorDataset(images[:1500], torch.tensor(y[:1500]))
    sampler: DistributedSampler[tuple[torch.Tensor, ...]] = DistributedSampler(train)
    loader = DataLoader(train, batch_size=32, sampler=sampler)

    model = DDP(Net())
    model.register_comm_hook(EsaHookState.from_env(), esa_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        total = 0.0
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            torch.autograd.backward(loss)
            optimizer.step()
            total += loss.item()
            steps += 1
            if steps == args.hang_after:
                print(f"rank {rank}: hanging after {steps} steps", flush=True)
                threading.Event().wait()
        print(f"rank {rank} epoch {epoch}: loss {total / len(loader):.4f}", flush=True)
    print(json.dumps({"rank": rank, "steps": steps}), flush=True)


if __name__ == "__main__":
    main()
