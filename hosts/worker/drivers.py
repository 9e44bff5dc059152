"""Drive a worker through one allreduce after another with its steppable API
(``begin`` / ``poll`` / ``result``), for networks that poll their hosts on
one thread, such as the simulator's (``testbed.simnet``)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from hosts.worker.agent import Worker


class StepDriver:
    """Runs a worker through one allreduce after another, starting the next
    the moment the last finishes (as a training loop would), and keeps it
    polled afterwards so it still answers PULLs.  Subclasses say what to
    reduce next and what to do with each sum."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.worker.begin(self.next_tensor())

    @property
    def finished(self) -> bool:
        raise NotImplementedError

    def next_tensor(self) -> npt.NDArray[np.float32]:
        raise NotImplementedError

    def deliver(self, result: npt.NDArray[np.float32]) -> None:
        raise NotImplementedError

    def poll(self, now: float) -> float | None:
        nxt = self.worker.poll(now)
        while self.worker.done and not self.finished:
            self.deliver(self.worker.result())
            if self.finished:
                break
            self.worker.begin(self.next_tensor())
            nxt = self.worker.poll(now)
        return nxt


class IterDriver(StepDriver):
    """Reduces a fixed list of tensors and keeps the sums."""

    def __init__(self, worker: Worker, tensors: list[npt.NDArray[np.float32]]) -> None:
        self.tensors = tensors
        self.results: list[npt.NDArray[np.float32]] = []
        super().__init__(worker)

    @property
    def finished(self) -> bool:
        return len(self.results) == len(self.tensors)

    def next_tensor(self) -> npt.NDArray[np.float32]:
        return self.tensors[len(self.results)]

    def deliver(self, result: npt.NDArray[np.float32]) -> None:
        self.results.append(result)
