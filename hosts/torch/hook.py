"""A PyTorch DistributedDataParallel communication hook that sums gradients
through the switch::

    register(model)  # a DDP model; configured from the environment (EsaConfig.from_env)

which is ``model.register_comm_hook(EsaHookState.from_env(), esa_hook)``
and lets the state hash the model's parameters into its report.

Each gradient bucket DDP hands to the hook is all-reduced by this process's
``hosts.worker.agent.Worker`` on a background thread, so the sum of one bucket
overlaps the backward computation of the next; the hook returns a future
that the thread completes with the bucket's average (DDP does not
pre-divide).

Agreement.  The worker's sequence numbers are a per-job counter over calls,
so every worker must all-reduce the same buckets, in the same order, with
the same sizes.  DDP guarantees that for the same model and settings: it
launches a backward pass's buckets in index order and, when it rebuilds
them after the first iteration, every rank takes rank 0's layout.  Both
are checked: the hook refuses a bucket out of index order
(``BucketMismatch``), and the worker agrees each call with the job's PS
hosts before it sends a value (``hosts.agreement``), so workers whose buckets
differ in length, or that run with another bound or fan-in, all fail with
``CallRejected`` naming the difference.  A call with no sum within
``config.timeout`` fails with ``AllreduceTimeout`` naming the workers the
PS hosts miss.  Either reaches ``backward()`` through the bucket's future, and
every later bucket fails too: the worker is out of step with its job.

DDP compares the hook's annotations with ``dist.GradBucket`` and
``Future[Tensor]`` when it is registered, so this module keeps them
evaluated (no postponed annotations); ``GradBucket`` is imported from where
``torch.distributed`` takes it, which re-exports it untyped.

Report.  With ``ESA_REPORT`` set, the state writes what a run needs to
know of this worker to that file at exit (``EsaHookState.report``): the
DDP steps and all-reduces it summed, the seconds from the first all-reduce's
start to the last one's end, the worker's counters and a SHA-256 of the
model's parameters (of the last step's summed gradients when it was
registered without ``register``), the same on every worker of a job whose
sums were exact.  With ``ESA_PROGRESS_FD`` it writes each finished step's
number to that descriptor, a line each.
"""

import atexit
import hashlib
import json
import os
import queue
import socket
import threading
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt
import torch
from torch._C._distributed_c10d import GradBucket
from torch.nn.parallel import DistributedDataParallel

from hosts.net.transport import UdpTransport
from hosts.torch.config import EsaConfig
from hosts.worker.agent import Worker

SUMMED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
"""Bucket dtypes the hook accepts; the switch sums float32 (others are converted)."""
IDLE_POLL = 0.005
"""Seconds between polls of the worker while no bucket waits (answers PULLs)."""


class Bucket(Protocol):
    """What the hook uses of ``torch.distributed.GradBucket``."""

    def index(self) -> int: ...

    def buffer(self) -> torch.Tensor: ...

    def is_last(self) -> bool: ...


@dataclass
class TensorBucket:
    """A bucket made by hand, for all-reduces outside DDP (benchmarks, tests)."""

    idx: int
    grad: torch.Tensor
    last: bool

    def index(self) -> int:
        return self.idx

    def buffer(self) -> torch.Tensor:
        return self.grad

    def is_last(self) -> bool:
        return self.last


class BucketMismatch(RuntimeError):
    """A bucket arrived out of DDP's index order."""


@dataclass
class _Call:
    grad: torch.Tensor
    future: torch.futures.Future[torch.Tensor]
    index: int = 0
    last: bool = False
    average: bool = True
    """the sum divided by the fan-in (a DDP bucket's); False: the sum."""


class EsaHookState:
    """One worker of an ESA job for DDP: the worker agent, its data and control
    sockets and the thread that runs the all-reduces.  Register it with one
    DDP model, before the first backward pass; or call ``allreduce`` (the
    ``esa`` process group's calls, ``hosts.torch.backend``).

    At interpreter exit (or ``close()``) it keeps answering its peers for
    ``config.linger`` seconds, then closes its sockets.
    """

    def __init__(self, config: EsaConfig) -> None:
        self.config = config
        bind = config.bind if config.bind_fd is None else socket.socket(fileno=config.bind_fd)
        self.transport = UdpTransport(bind)
        try:
            self.control = UdpTransport((self.transport.addr[0], 0))
        except OSError:
            self.transport.close()
            raise
        self.worker = Worker(
            config.job,
            config.index,
            config.fan_in,
            config.ps,
            self.transport,
            bound=config.bound,
            window=config.window,
            rto=config.rto,
            control=self.control,
            control_addrs=config.control_addrs,
            key=config.key,
        )
        self.iteration = 0
        self.next_index = 0
        self.model: torch.nn.Module | None = None
        """the model whose parameters the report hashes (``register`` sets it)."""
        self.steps = 0
        """DDP steps summed: backward passes whose every bucket has its sum."""
        self.allreduces = 0
        self.values = 0
        """gradient values of one step (its buckets' sizes in the first)."""
        self._born = time.monotonic()
        self._first: float | None = None
        self._last = 0.0
        self._sums: dict[int, npt.NDArray[np.float32]] = {}
        self._progress_fd = config.progress_fd
        self._calls: queue.Queue[_Call | None] = queue.Queue()
        self._failure: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="esa-hook", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    @classmethod
    def from_env(cls) -> "EsaHookState":
        """Configured from ``RANK``, ``WORLD_SIZE`` and ``ESA_*`` (see ``EsaConfig.from_env``)."""
        return cls(EsaConfig.from_env())

    def submit(self, bucket: Bucket) -> torch.futures.Future[torch.Tensor]:
        """Queue ``bucket`` for the all-reduce thread (called on the backward thread)."""
        if self._closed:
            raise RuntimeError("the ESA hook state is closed")
        grad = bucket.buffer()
        if grad.dtype not in SUMMED_DTYPES:
            raise TypeError(
                f"ESA sums float32, float16 and bfloat16 gradients; bucket {bucket.index()} "
                f"holds {grad.dtype} (train in one of those dtypes)"
            )
        if bucket.index() != self.next_index:
            raise BucketMismatch(
                f"bucket {bucket.index()} arrived when bucket {self.next_index} of iteration "
                f"{self.iteration} was due: register the state with one DDP model only"
            )
        call = _Call(grad, torch.futures.Future(), bucket.index(), bucket.is_last())
        if self.iteration == 0:
            self.values += grad.numel()
        if bucket.is_last():
            self.iteration, self.next_index = self.iteration + 1, 0
        else:
            self.next_index += 1
        return self._queue(call)

    def allreduce(self, tensor: torch.Tensor, average: bool) -> torch.futures.Future[torch.Tensor]:
        """Queue one all-reduce of ``tensor`` (float32, float16 or bfloat16)
        outside DDP's buckets: a step of its own.  The future's value is the
        sum over the job's workers, divided by the fan-in with ``average``,
        in ``tensor``'s dtype and shape; ``tensor`` itself is left as it is."""
        if self._closed:
            raise RuntimeError("the ESA hook state is closed")
        if self.next_index != 0:
            raise BucketMismatch(
                f"an all-reduce outside DDP's buckets arrived when bucket {self.next_index} of "
                f"iteration {self.iteration} was due"
            )
        if self.iteration == 0:
            self.values = tensor.numel()
        self.iteration += 1
        return self._queue(_Call(tensor, torch.futures.Future(), 0, True, average))

    def _queue(self, call: _Call) -> torch.futures.Future[torch.Tensor]:
        self._calls.put(call)
        return call.future

    def close(self) -> None:
        """Finish queued buckets, answer peers for ``config.linger`` s, close the sockets."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        self._calls.put(None)
        self._thread.join()
        if self._failure is None:
            self.worker.linger(self.config.linger)
        self.worker.leave()
        self.transport.close()
        self.control.close()
        if self.config.report is not None:
            tmp = f"{self.config.report}.tmp"
            with open(tmp, "w") as f:
                json.dump(self.report(), f)
            os.replace(tmp, self.config.report)

    @property
    def seconds(self) -> float:
        """From the first all-reduce's start to the last one's end; without
        any, the state's lifetime so far."""
        if self._first is None:
            return time.monotonic() - self._born
        return self._last - self._first

    def report(self) -> dict[str, object]:
        """What a run reads of this worker (written to ``ESA_REPORT`` at exit)."""
        out: dict[str, object] = {
            "job": self.config.job,
            "rank": self.config.index,
            "steps": self.steps,
            "allreduces": self.allreduces,
            "values": self.values,
            "seconds": self.seconds,
            "window": self.config.window,
            "counters": self.worker.counters.as_dict(),
        }
        if self.model is not None:
            out["params_sha256"] = params_sha256(self.model)
        else:
            sums = hashlib.sha256()
            for _, total in sorted(self._sums.items()):
                sums.update(total.tobytes())
            out["grads_sha256"] = sums.hexdigest()
        if self._failure is not None:
            out["failure"] = str(self._failure)
        return out

    # -- the all-reduce thread --------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                call = self._calls.get(timeout=IDLE_POLL)
            except queue.Empty:
                if self._failure is None:
                    self.worker.poll(self.worker.clock())
                continue
            if call is None:
                return
            if self._failure is not None:
                _fail(
                    call.future, RuntimeError(f"an earlier ESA all-reduce failed: {self._failure}")
                )
                continue
            try:
                result = self._reduce(call)
            except Exception as e:
                self._failure = e
                _fail(call.future, e)
                continue
            self.allreduces += 1  # counted before whoever waits for the sum hears of it
            if call.last:
                self.steps += 1
                self._progress()
            call.future.set_result(result)

    def _progress(self) -> None:
        if self._progress_fd is None:
            return
        try:
            os.write(self._progress_fd, f"{self.steps}\n".encode())
        except OSError:  # nobody reads any more: training goes on
            self._progress_fd = None

    def _reduce(self, call: _Call) -> torch.Tensor:
        flat = call.grad.detach().reshape(-1).to("cpu", torch.float32)
        if self._first is None:
            self._first = time.monotonic()
        total = self.worker.allreduce(flat.numpy(), timeout=self.config.timeout)
        self._last = time.monotonic()
        if self.model is None:  # the report hashes the last step's sums instead
            if call.index == 0:
                self._sums = {}
            self._sums[call.index] = total
        out = torch.from_numpy(total / np.float32(self.config.fan_in) if call.average else total)
        return out.to(call.grad.device, call.grad.dtype).reshape(call.grad.shape)


def _fail(future: torch.futures.Future[torch.Tensor], error: Exception) -> None:
    # torch annotates set_exception's argument with the future's result type.
    future.set_exception(error)  # type: ignore[arg-type]


def _value(future: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
    return future.wait()


def esa_hook(state: EsaHookState, bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The DDP communication hook: the average of ``bucket`` over the job's workers.

    DDP reads a future's value in C++, where an exception stored by
    ``set_exception`` is only a value; chained through ``then`` it is an
    error, which DDP raises from ``backward`` with the original message.
    """
    return state.submit(bucket).then(_value)


def register(model: DistributedDataParallel, state: EsaHookState | None = None) -> EsaHookState:
    """Sum ``model``'s gradients through the switch: register the ESA hook
    with ``state`` (default: ``EsaHookState.from_env()``), which keeps the
    model to hash its parameters into its report.  Call it once, before
    the first backward pass; returns the state."""
    state = EsaHookState.from_env() if state is None else state
    model.register_comm_hook(state, esa_hook)
    state.model = model
    return state


def params_sha256(model: torch.nn.Module) -> str:
    """SHA-256 of the bytes of ``model``'s parameters, in their order."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()
