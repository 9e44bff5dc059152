"""A ``torch.distributed`` backend named ``esa``, registered when this module
is imported::

    import hosts.torch.backend  # registers "esa"

    dist.init_process_group("esa")  # or "cpu:esa"; settings from RANK, WORLD_SIZE, ESA_*
    dist.all_reduce(grad)  # summed through the switch

The process group's ``all_reduce`` of a CPU float32, float16 or bfloat16
tensor, with ``ReduceOp.SUM`` or ``ReduceOp.AVG``, goes through the switch:
the same worker agent, call agreement, key and errors as the DDP hook
(``hosts.torch.hook``), whose state (``EsaHookState``) the group holds, so a
DDP model without a hook, or a loop of ``dist.all_reduce``, sums through
the switch.  Every other collective (broadcast, all_gather, barrier,
reduce, gather, scatter, send/recv, ...) goes through a Gloo process group
this one makes on the same store, under its own prefix (``GLOO_PREFIX``).
An all-reduce with another op (MAX, PRODUCT, ...), another dtype or a
tensor off the CPU raises ``UnsupportedAllreduce`` naming it, before
anything is sent; an integer sum belongs on a Gloo group
(``dist.new_group(backend="gloo")``).

Settings come as the hook's do: from ``EsaConfig.from_env()`` (``ESA_*``),
with the group's rank and size as ``RANK`` and ``WORLD_SIZE``; or an
``EsaConfig`` passed as ``pg_options`` to ``init_process_group``, whose
index and fan-in must be the group's rank and size.  The environment
configures one group per process (its worker's socket is bound once): a
second group, ``dist.new_group()`` under ``esa``, takes an ``EsaConfig`` of
its own as ``pg_options`` or is a Gloo group (``backend="gloo"``).

The group's all-reduces are the state's calls, one step each: its report
(``ESA_REPORT``) counts them as steps and hashes the last one's sum
(``grads_sha256``), and ``ESA_PROGRESS_FD`` hears of each.  A DDP model
through this group sums what the hook would: DDP all-reduces each bucket
with SUM and divides by the world size afterwards, as the hook does.

Functional collectives (``torch.distributed._functional_collectives``, used
by DTensor and FSDP2) address the group's device backend directly, which
is the Gloo one: they do not reach the switch.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (
    AllreduceCoalescedOptions,
    AllreduceOptions,
    PrefixStore,
    ProcessGroupGloo,
    Store,
    Work,
    _DistributedBackendOptions,
)

from hosts.torch.config import EsaConfig, EsaConfigError
from hosts.torch.hook import SUMMED_DTYPES, EsaHookState

BACKEND = "esa"
"""the name ``init_process_group`` takes."""
GLOO_PREFIX = "esa-gloo/"
"""where the group's Gloo process group keeps its keys in the group's store."""
AVERAGES = {dist.ReduceOp.SUM: False, dist.ReduceOp.AVG: True}
"""the ops summed through the switch: whether each divides by the world size."""
CPU = torch.device("cpu")


class UnsupportedAllreduce(ValueError):
    """An all-reduce the switch does not do, named in the message."""


class EsaGroupError(RuntimeError):
    """A second process group configured from the environment."""


_from_env: list[EsaProcessGroup] = []
"""the process group the environment configured, while it lives."""


class EsaProcessGroup(dist.ProcessGroup):
    """One worker of an ESA job as a process group: all-reduces through the
    switch, the rest through Gloo (``Backend.register_backend`` makes it
    from the store ``init_process_group`` rendezvoused at)."""

    def __init__(
        self, store: Store, rank: int, size: int, timeout: timedelta, config: EsaConfig
    ) -> None:
        if (config.index, config.fan_in) != (rank, size):
            raise EsaConfigError(
                f"the ESA settings name worker {config.index} of {config.fan_in}; "
                f"the process group is rank {rank} of {size}"
            )
        # torch 2.13 makes a Python subclass from (rank, size) only; the stubs list (store, ...)
        super().__init__(rank, size)  # type: ignore[call-arg]
        self.config = config
        self.gloo = ProcessGroupGloo(PrefixStore(GLOO_PREFIX, store), rank, size, timeout)
        self._register_backend(CPU, dist.ProcessGroup.BackendType.GLOO, self.gloo)
        self.state = EsaHookState(config)

    def getBackendName(self) -> str:
        return BACKEND

    # The overrides take what torch's PyProcessGroup passes, not every overload
    # ProcessGroup's Python binding accepts.
    def allreduce(  # type: ignore[override]
        self, tensors: list[torch.Tensor], opts: AllreduceOptions
    ) -> Work:
        """Each of ``tensors`` replaced by its sum (or average) over the job's workers."""
        return self._allreduce(tensors, opts.reduceOp, "all_reduce")

    def allreduce_coalesced(  # type: ignore[override]
        self, tensors: list[torch.Tensor], opts: AllreduceCoalescedOptions
    ) -> Work:
        return self._allreduce(tensors, opts.reduceOp, "all_reduce_coalesced")

    def _allreduce(self, tensors: list[torch.Tensor], op: Any, name: str) -> Work:
        average = averages(op, name)
        for t in tensors:
            check_tensor(t, name)
        return EsaWork(tensors, [self.state.allreduce(t, average) for t in tensors])

    def shutdown(self) -> None:
        """``destroy_process_group`` calls it: ``close``."""
        self.close()

    def close(self) -> None:
        """Finish queued all-reduces, answer peers for ``config.linger`` s, close the
        worker's sockets and write its report (``ESA_REPORT``)."""
        self.state.close()
        if self in _from_env:
            _from_env.remove(self)


def averages(op: Any, name: str) -> bool:
    """Whether ``op`` divides the sum by the world size; refuses an op the switch does not do."""
    for known, average in AVERAGES.items():
        if op == known:
            return average
    kind = getattr(op, "op", op)
    raise UnsupportedAllreduce(
        f"the ESA backend's {name} sums (SUM) or averages (AVG); {op_name(kind)} is not "
        "supported (use a Gloo group for it: dist.new_group(backend='gloo'))"
    )


def op_name(op: Any) -> str:
    """``ReduceOp.MAX`` for ``RedOpType.MAX``."""
    name = getattr(op, "name", None)
    return f"ReduceOp.{name}" if name else str(op)


def check_tensor(t: torch.Tensor, name: str) -> None:
    """Refuse a tensor the switch does not sum, naming its dtype or device."""
    if t.dtype not in SUMMED_DTYPES:
        raise UnsupportedAllreduce(
            f"the ESA backend's {name} sums float32, float16 and bfloat16 tensors; {t.dtype} "
            "is not supported (use a Gloo group for it: dist.new_group(backend='gloo'))"
        )
    if t.device != CPU:
        raise UnsupportedAllreduce(
            f"the ESA backend's {name} sums CPU tensors; a tensor on {t.device} is not supported"
        )


class EsaWork(Work):
    """The all-reduces of one collective: each sum is copied into its tensor,
    in place, as ``all_reduce`` promises, on the thread that finished it.
    ``wait`` raises a failed call's own error (``CallRejected``,
    ``AllreduceTimeout``); the future (DDP's) fails with its message."""

    def __init__(
        self, tensors: list[torch.Tensor], calls: list[torch.futures.Future[torch.Tensor]]
    ) -> None:
        super().__init__()
        self._calls = calls
        self._done = torch.futures.collect_all(calls).then(lambda _: _copy_back(tensors, calls))

    def wait(self, timeout: timedelta | None = None) -> bool:
        """Until every tensor holds its sum (the calls' own timeout applies)."""
        for call in self._calls:
            call.wait()
        self._done.wait()
        return True

    def get_future(self) -> torch.futures.Future[list[torch.Tensor]]:
        return self._done


def _copy_back(
    tensors: list[torch.Tensor], calls: list[torch.futures.Future[torch.Tensor]]
) -> list[torch.Tensor]:
    for t, call in zip(tensors, calls, strict=True):
        t.copy_(call.wait())
    return tensors


def make_group(opts: _DistributedBackendOptions, config: EsaConfig | None) -> EsaProcessGroup:
    """What ``init_process_group`` calls: the group of ``opts``'s rank and size,
    configured by ``config`` (its ``pg_options``) or from the environment."""
    rank, size = opts.group_rank, opts.group_size
    if config is not None and not isinstance(config, EsaConfig):
        raise EsaConfigError(f"the ESA backend's pg_options is an EsaConfig, not {config!r}")
    if config is not None:
        return EsaProcessGroup(opts.store, rank, size, opts.timeout, config)
    if _from_env:
        raise EsaGroupError(
            f"the ESA settings of this process (ESA_*) serve one process group, job "
            f"{_from_env[0].config.job}'s: give another ESA group an EsaConfig of its own "
            "(pg_options), or make it with backend='gloo'"
        )
    config = EsaConfig.from_env({**os.environ, "RANK": str(rank), "WORLD_SIZE": str(size)})
    group = EsaProcessGroup(opts.store, rank, size, opts.timeout, config)
    _from_env.append(group)
    return group


def world() -> EsaProcessGroup:
    """The default process group, which ``init_process_group("esa")`` made (its
    worker's counters: ``world().state.worker.counters``)."""
    group = dist.group.WORLD
    if not isinstance(group, EsaProcessGroup):
        raise EsaGroupError(f"the default process group is not the ESA backend's: {group!r}")
    return group


dist.Backend.register_backend(BACKEND, make_group, extended_api=True, devices=["cpu"])
