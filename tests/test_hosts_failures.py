"""What a job's workers see when the job is broken, on 127.0.0.1 through the
switch model: a dead peer, a peer that dies mid-call, two processes with
one index, and peers that disagree on a call all end in an exception that
says what happened, never in a hang or a wrong sum."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pytest

from esa import model
from esa.job import Workers
from esa.spec import Policy
from hosts.errors import AllreduceTimeout, CallRejected
from hosts.loopswitch import LoopSwitch
from hosts.ps import ParameterServer
from hosts.transport import UdpTransport
from hosts.worker import Worker

LOCAL = ("127.0.0.1", 0)
JOB = 5


@dataclass
class Bed:
    """One job's switch model and PS on loopback, and its workers' sockets."""

    switch: LoopSwitch
    ps: ParameterServer
    ps_control: UdpTransport
    data: list[UdpTransport]
    control: list[UdpTransport]

    def worker(self, slot: int, index: int, **kw: float) -> Worker:
        return Worker(
            JOB, index, len(self.data), self.switch.addr, self.data[slot], rto=0.02,
            control=self.control[slot], control_addr=self.ps_control.addr, **kw,  # type: ignore[arg-type]
        )  # fmt: skip


@contextmanager
def bed(fan_in: int = 2, sockets: int | None = None) -> Iterator[Bed]:
    n = fan_in if sockets is None else sockets
    data = [UdpTransport(LOCAL) for _ in range(n)]
    control = [UdpTransport(LOCAL) for _ in range(n)]
    ps_t, ps_c = UdpTransport(LOCAL), UdpTransport(LOCAL)
    sw = model.SwitchModel(pool_size=16, policy=Policy.ESA)
    sw.add_job(JOB, model.JobConfig(fan_in, (1 << fan_in) - 1, priority=1, ps_port=1))
    switch = LoopSwitch(sw, ps={JOB: ps_t.addr}, workers={JOB: [t.addr for t in data]}).start()
    ps = ParameterServer(ps_t, switch.addr, {JOB: Workers.of(fan_in)}, stall=0.05, control=ps_c)
    stop = threading.Event()
    thread = threading.Thread(target=ps.serve, args=(stop.is_set,))
    thread.start()
    try:
        yield Bed(switch, ps, ps_c, data, control)
    finally:
        stop.set()
        thread.join()
        switch.stop()
        for t in [ps_t, ps_c, *data, *control]:
            t.close()


def in_threads(*bodies: Callable[[], object]) -> list[object]:
    """Run each body on its own thread; what each returned or raised."""
    out: list[object] = [None] * len(bodies)

    def run(i: int) -> None:
        try:
            out[i] = bodies[i]()
        except Exception as e:
            out[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a worker hung"
    return out


def ones(n: int) -> npt.NDArray[np.float32]:
    return np.full(n, 0.25, np.float32)


def test_a_dead_peer_is_named() -> None:
    with bed() as b:
        w = b.worker(0, 0)
        with pytest.raises(AllreduceTimeout) as e:
            w.allreduce(ones(100), timeout=0.5)
    assert (e.value.job, e.value.call, e.value.missing) == (JOB, 0, [1])
    assert isinstance(e.value, TimeoutError)
    assert str(e.value) == (
        "job 5 call 0: no sum after 0.5 s (waiting for the PS's GO); "
        "workers [1] have not started it (started: [0])"
    )


def test_a_peer_that_dies_mid_call_is_named() -> None:
    """Worker 1 sends its first window of call 1 and dies: worker 0's
    retransmissions bring the PS partial sums without worker 1."""
    with bed() as b:
        w0, w1 = b.worker(0, 0, window=4), b.worker(1, 1, window=4)
        x = ones(32 * 20)
        in_threads(lambda: w0.allreduce(x), lambda: w1.allreduce(x))

        def start_and_die() -> None:
            w1.begin(x)
            while w1.cur is not None and w1.cur.next_send == 0:
                w1.poll(w1.clock())
                w1.wait(0.01)

        [e, _] = in_threads(lambda: w0.allreduce(x, timeout=1.0), start_and_die)
    assert isinstance(e, AllreduceTimeout), e
    assert (e.call, e.missing) == (1, [1])
    assert "the PS's partial sums of" in str(e) and "miss workers [1]" in str(e)


def test_two_processes_with_one_index_are_both_rejected() -> None:
    with bed(sockets=2) as b:
        first, second = b.worker(0, 0), b.worker(1, 0)
        out = in_threads(lambda: first.allreduce(ones(64)), lambda: second.allreduce(ones(64)))
    assert all(isinstance(e, CallRejected) and e.reason == "duplicate" for e in out), out
    assert b.ps.counters.calls_agreed == 0


@pytest.mark.parametrize(
    ("sizes", "bounds", "reason"),
    [((100, 101), (1.0, 1.0), "length"), ((100, 100), (1.0, 2.0), "config")],
)
def test_workers_that_disagree_on_a_call_fail_before_sending(
    sizes: tuple[int, int], bounds: tuple[float, float], reason: str
) -> None:
    """Once, different tensor sizes returned a sum mixed with the peer's next
    call and different bounds a wrong sum; now both workers fail, naming the
    other, and the switch sees no contribution."""
    with bed() as b:
        ws = [b.worker(i, i, bound=bounds[i]) for i in range(2)]
        out = in_threads(*[lambda i=i: ws[i].allreduce(ones(sizes[i])) for i in range(2)])
        assert b.switch.forwarded == 0
    for i, e in enumerate(out):
        assert isinstance(e, CallRejected), out
        assert (e.reason, e.peer) == (reason, 1 - i)
    assert all(w.counters.sent == 0 for w in ws)
