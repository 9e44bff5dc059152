"""A small model trained by data-parallel workers whose gradients are summed
through the switch: the end-to-end check that quantised in-network
aggregation trains as well as a float all-reduce.

The model is a one-hidden-layer MLP (numpy, CPU) on a synthetic, seeded
classification task; each worker holds a shard of the training set.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from hosts.worker.agent import Worker
from hosts.worker.drivers import StepDriver

F32 = npt.NDArray[np.float32]
GRAD_BOUND = 1.0
"""Gradient entries are clipped to this bound before they are summed (the
job's quantisation bound, so nothing is flagged for float recovery)."""


@dataclass(frozen=True)
class Dataset:
    x_train: F32
    y_train: npt.NDArray[np.int64]
    x_test: F32
    y_test: npt.NDArray[np.int64]

    def shard(self, index: int, count: int) -> tuple[F32, npt.NDArray[np.int64]]:
        return self.x_train[index::count], self.y_train[index::count]


def make_dataset(seed: int = 0, classes: int = 6, dim: int = 20, n: int = 3000) -> Dataset:
    """Gaussian classes whose centres overlap enough that accuracy is not trivial."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 1.0, (classes, dim))
    y = rng.integers(0, classes, n)
    x = (centres[y] + rng.normal(0.0, 1.2, (n, dim))).astype(np.float32)
    cut = int(0.8 * n)
    return Dataset(x[:cut], y[:cut], x[cut:], y[cut:])


@dataclass
class Mlp:
    dim: int
    hidden: int
    classes: int
    params: F32 = field(init=False)

    def __post_init__(self) -> None:
        rng = np.random.default_rng(1)
        w1 = rng.normal(0, 1 / np.sqrt(self.dim), (self.dim, self.hidden))
        w2 = rng.normal(0, 1 / np.sqrt(self.hidden), (self.hidden, self.classes))
        zeros = np.zeros(self.hidden + self.classes)
        self.params = np.concatenate([w1.ravel(), w2.ravel(), zeros]).astype(np.float32)

    def _split(self, p: F32) -> tuple[F32, F32, F32, F32]:
        d, h, c = self.dim, self.hidden, self.classes
        w1 = p[: d * h].reshape(d, h)
        w2 = p[d * h : d * h + h * c].reshape(h, c)
        b1 = p[d * h + h * c : d * h + h * c + h]
        b2 = p[d * h + h * c + h :]
        return w1, w2, b1, b2

    def logits(self, x: F32) -> tuple[F32, F32]:
        w1, w2, b1, b2 = self._split(self.params)
        hid = np.maximum(x @ w1 + b1, 0)
        return hid, hid @ w2 + b2

    def gradient(self, x: F32, y: npt.NDArray[np.int64]) -> F32:
        """Gradient of the summed cross-entropy over the batch."""
        _, w2, _, _ = self._split(self.params)
        hid, z = self.logits(x)
        prob = np.exp(z - z.max(axis=1, keepdims=True))
        prob /= prob.sum(axis=1, keepdims=True)
        dz = prob
        dz[np.arange(len(y)), y] -= 1
        dw2 = hid.T @ dz
        dh = (dz @ w2.T) * (hid > 0)
        dw1 = x.T @ dh
        grad = np.concatenate([dw1.ravel(), dw2.ravel(), dh.sum(0), dz.sum(0)])
        clipped: F32 = np.clip(grad, -GRAD_BOUND, GRAD_BOUND).astype(np.float32)
        return clipped

    def accuracy(self, x: F32, y: npt.NDArray[np.int64]) -> float:
        return float(np.mean(self.logits(x)[1].argmax(axis=1) == y))


@dataclass
class Trainer:
    """One worker's training loop, one mini-batch step per all-reduce."""

    model: Mlp
    x: F32
    y: npt.NDArray[np.int64]
    workers: int
    lr: float = 0.05
    batch: int = 32
    step: int = 0

    def next_gradient(self) -> F32:
        n = len(self.y)
        idx = (np.arange(self.batch) + self.step * self.batch) % n
        return self.model.gradient(self.x[idx], self.y[idx])

    def apply(self, summed: F32) -> None:
        self.model.params -= self.lr * summed / (self.workers * self.batch)
        self.step += 1


def new_model(data: Dataset) -> Mlp:
    return Mlp(dim=data.x_train.shape[1], hidden=32, classes=int(data.y_train.max()) + 1)


def train_with_float_allreduce(data: Dataset, workers: int, steps: int) -> float:
    """The reference: the same training with an exact float32 sum."""
    trainers = []
    for i in range(workers):
        x, y = data.shard(i, workers)
        trainers.append(Trainer(new_model(data), x, y, workers))
    for _ in range(steps):
        summed: F32 = np.stack([t.next_gradient() for t in trainers]).sum(axis=0, dtype=np.float32)
        for t in trainers:
            t.apply(summed)
    return trainers[0].model.accuracy(data.x_test, data.y_test)


class TrainDriver(StepDriver):
    """Drives a Trainer through a steppable Worker (for poll-based networks)."""

    def __init__(self, trainer: Trainer, worker: Worker, steps: int) -> None:
        self.trainer, self.steps = trainer, steps
        super().__init__(worker)

    @property
    def finished(self) -> bool:
        return self.trainer.step == self.steps

    def next_tensor(self) -> F32:
        return self.trainer.next_gradient()

    def deliver(self, result: F32) -> None:
        self.trainer.apply(result)


def train_blocking(trainer: Trainer, allreduce: Callable[[F32], F32], steps: int) -> None:
    """The same loop over a blocking all-reduce (real sockets)."""
    while trainer.step < steps:
        trainer.apply(allreduce(trainer.next_gradient()))
