"""Workers in this process around a ``LoopJob`` on 127.0.0.1: their data and
control sockets, ``Worker`` objects on them, and threads to run them on, all
torn down with the job (the loopback benchmarks and tests)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from esa.spec import Policy
from hosts.worker.agent import Worker
from testbed.loopjob import LoopJob, Sockets, local_socket


class LoopRig:
    """Job ``job``'s ``fan_in`` workers' sockets and its ``LoopJob`` (see
    there for the other arguments)."""

    def __init__(
        self,
        fan_in: int,
        job: int = 1,
        shards: int = 1,
        pool: int = 64,
        policy: Policy = Policy.ESA,
        loss: float = 0.0,
        stall: float = 0.05,
        sockets: Sockets = local_socket,
    ) -> None:
        self.fan_in = fan_in
        self.data = [sockets() for _ in range(fan_in)]
        self.control = [sockets() for _ in range(fan_in)]
        self.loop = LoopJob(
            job, fan_in, shards, pool, policy, loss, stall,
            workers=[t.addr for t in self.data], sockets=sockets,
        )  # fmt: skip

    def worker(self, slot: int, index: int | None = None, **options: Any) -> Worker:
        """A worker on the sockets of ``slot``, with bit ``index`` (default:
        ``slot``); ``options`` go to ``Worker``."""
        return Worker(
            self.loop.job, slot if index is None else index, self.fan_in, self.loop.ps_addrs,
            self.data[slot], control=self.control[slot], control_addrs=self.loop.control_addrs,
            key=self.loop.key, **options,
        )  # fmt: skip

    def __enter__(self) -> LoopRig:
        self.loop.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.loop.__exit__(exc_type, exc, tb)
        for s in [*self.data, *self.control]:
            s.close()


def in_threads(
    *bodies: Callable[[], object], timeout: float | None = None, reraise: bool = False
) -> list[object]:
    """Run each body on its own thread; what each returned or raised.  Raises
    ``TimeoutError`` if one still runs after ``timeout`` seconds (None: wait
    for all) and, with ``reraise``, the first exception a body raised."""
    out: list[object] = [None] * len(bodies)

    def run(i: int) -> None:
        try:
            out[i] = bodies[i]()
        except Exception as e:
            out[i] = e

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(bodies))]
    for t in threads:
        t.start()
    end = None if timeout is None else time.monotonic() + timeout
    for t in threads:
        t.join(None if end is None else max(0.0, end - time.monotonic()))
    if any(t.is_alive() for t in threads):
        raise TimeoutError(f"a thread still runs after {timeout:g} s")
    errors = [e for e in out if isinstance(e, Exception)]
    if reraise and errors:
        raise errors[0]
    return out
