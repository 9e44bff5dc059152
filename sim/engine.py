"""Where a sweep's tasks run: on a Dask cluster of worker processes on this
machine (the default), on a running Dask cluster (``--scheduler``), or one
by one in this process (``--procs 0``: no Dask, for debugging).

Each result comes back to this process as its task finishes, whichever
engine ran it, so a sweep can store it at once.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable, Generator, Hashable, Sequence
from types import TracebackType
from typing import Generic, TypeVar

import dask
from distributed import Client, LocalCluster, as_completed

from esa import arguments
from esa.progress import Stage

T = TypeVar("T")
R = TypeVar("R")

CONNECT_S = 120
"""Seconds a worker or this process may take to reach the scheduler: the
local cluster's processes start slowly on a loaded machine."""


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """A sweep command's options of where its tasks run, and ``--fresh``."""
    ap.add_argument("--fresh", action="store_true", help="run every task again, not resume")
    where = ap.add_mutually_exclusive_group()
    where.add_argument(
        "--procs",
        type=arguments.at_least("procs", 0),
        default=2,
        help="worker processes of the Dask cluster started on this machine "
        "(default 2; 0: no cluster, the tasks run one by one in this process)",
    )
    where.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="run on the Dask cluster at ADDRESS (tcp://host:8786)",
    )


class Engine:
    """``procs`` worker processes (one thread each) of a cluster on the
    loopback, or, given ``scheduler`` (``tcp://host:8786``), the cluster it
    runs.  A context: a cluster is started or reached at the first task and
    closed (or left) at the end."""

    def __init__(self, procs: int = 2, scheduler: str | None = None) -> None:
        if procs < 0:
            raise ValueError(f"procs {procs}: 0 (no cluster) or more")
        self.procs, self.scheduler = procs, scheduler
        self._stack = contextlib.ExitStack()
        self._client: Client | None = None

    def __enter__(self) -> Engine:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stack.close()

    @property
    def serial(self) -> bool:
        return self.scheduler is None and self.procs == 0

    def client(self) -> Client:
        if self._client is None:
            with dask.config.set({"distributed.comm.timeouts.connect": f"{CONNECT_S}s"}):
                address = self.scheduler or self._stack.enter_context(
                    LocalCluster(
                        n_workers=self.procs,
                        threads_per_worker=1,
                        processes=True,
                        host="127.0.0.1",
                        dashboard_address=None,
                        # its HTTP server (health, metrics) on a port the system
                        # picks, not on 8787, which another cluster may hold
                        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
                    )
                )
                self._client = self._stack.enter_context(
                    Client(address, timeout=CONNECT_S, set_as_default=False)
                )
        return self._client

    def run(
        self,
        fn: Callable[[T], R],
        tasks: Sequence[T],
        done: Callable[[T, R], None],
        label: str,
        total: int,
        kind: Callable[[T], Hashable] = lambda _: None,
    ) -> None:
        """``fn`` on every task, each result handed to ``done`` (here) as its
        task finishes; a task that raises stops the rest and raises here.
        ``total`` counts the tasks done before too, and ``kind`` tells which
        tasks cost alike (a scheme), for the progress and its time left."""
        client = None if self.serial or not tasks else self.client()
        timed = Timed(fn)
        with Stage(label, total, [kind(t) for t in tasks]) as stage:
            if client is None:
                results: Generator[tuple[T, tuple[float, R]], None, None] = (
                    (t, timed(t)) for t in tasks
                )
            else:
                results = self._results(client, timed, tasks)
            with contextlib.closing(results):
                for task, (seconds, result) in results:
                    done(task, result)
                    stage.done(kind(task), seconds)

    @staticmethod
    def _results(
        client: Client, fn: Callable[[T], R], tasks: Sequence[T]
    ) -> Generator[tuple[T, R], None, None]:
        """Each task with its result, as they finish; the rest cancelled if one raises."""
        pending = dict(zip(client.map(fn, tasks, pure=False), tasks, strict=True))
        try:
            for future in as_completed(pending, loop=client.loop):
                yield pending.pop(future), future.result()
        finally:
            client.cancel(list(pending))


class Timed(Generic[T, R]):
    """``fn``, returning the seconds it took with its result (where it ran)."""

    def __init__(self, fn: Callable[[T], R]) -> None:
        self.fn = fn

    def __call__(self, task: T) -> tuple[float, R]:
        t0 = time.perf_counter()
        result = self.fn(task)
        return time.perf_counter() - t0, result
