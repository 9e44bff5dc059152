"""What a job's workers see when the job is broken, on 127.0.0.1 through the
switch model: a dead peer, a peer that dies mid-call, two processes with
one index, and peers that disagree on a call all end in an exception that
says what happened, never in a hang or a wrong sum."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from hosts.errors import AllreduceTimeout, CallRejected
from testbed.looprig import LoopRig, in_threads
from tests.wait import LIMIT_S

JOB = 5


def bed(shards: int = 1) -> LoopRig:
    """A two-worker job's switch model and PS hosts on loopback, and its
    workers' sockets."""
    return LoopRig(2, job=JOB, shards=shards, pool=16)


def ones(n: int) -> npt.NDArray[np.float32]:
    return np.full(n, 0.25, np.float32)


def test_a_dead_peer_is_named() -> None:
    with bed() as b:
        w = b.worker(0, rto=0.02)
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
        w0, w1 = b.worker(0, window=4, rto=0.02), b.worker(1, window=4, rto=0.02)
        x = ones(32 * 20)
        in_threads(lambda: w0.allreduce(x), lambda: w1.allreduce(x), timeout=LIMIT_S)

        def start_and_die() -> None:
            w1.begin(x)
            while w1.cur is not None and w1.cur.next_send == 0:
                w1.poll(w1.clock())
                w1.wait(0.01)

        [e, _] = in_threads(lambda: w0.allreduce(x, timeout=1.0), start_and_die, timeout=LIMIT_S)
    assert isinstance(e, AllreduceTimeout), e
    assert (e.call, e.missing) == (1, [1])
    assert "the PS's partial sums of" in str(e) and "miss workers [1]" in str(e)


def test_two_processes_with_one_index_are_both_rejected() -> None:
    with bed() as b:
        first, second = b.worker(0, 0, rto=0.02), b.worker(1, 0, rto=0.02)
        out = in_threads(
            lambda: first.allreduce(ones(64)), lambda: second.allreduce(ones(64)), timeout=LIMIT_S
        )
    assert all(isinstance(e, CallRejected) and e.reason == "duplicate" for e in out), out
    assert b.loop.pses[0].counters.calls_agreed == 0


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
        ws = [b.worker(i, bound=bounds[i], rto=0.02) for i in range(2)]
        out = in_threads(
            *[lambda i=i: ws[i].allreduce(ones(sizes[i])) for i in range(2)], timeout=LIMIT_S
        )
        assert b.loop.switch.forwarded == 0
    for i, e in enumerate(out):
        assert isinstance(e, CallRejected), out
        assert (e.reason, e.peer) == (reason, 1 - i)
    assert all(w.counters.sent == 0 for w in ws)


def test_a_dead_peer_is_named_by_every_ps_shard() -> None:
    with bed(shards=2) as b:
        w = b.worker(0, rto=0.02)
        with pytest.raises(AllreduceTimeout) as e:
            w.allreduce(ones(100), timeout=0.5)
    assert e.value.missing == [1]
    assert str(e.value) == (
        "job 5 call 0: no sum after 0.5 s (waiting for the GO of PS shards 0, 1 of 2); "
        "PS shard 0: workers [1] have not started it (started: [0]); "
        "PS shard 1: workers [1] have not started it (started: [0])"
    )


def test_workers_that_disagree_fail_at_every_ps_shard_before_sending() -> None:
    with bed(shards=2) as b:
        ws = [b.worker(i, rto=0.02) for i in range(2)]
        out = in_threads(
            *[lambda i=i: ws[i].allreduce(ones(100 + i)) for i in range(2)], timeout=LIMIT_S
        )
        assert b.loop.switch.forwarded == 0
    for i, e in enumerate(out):
        assert isinstance(e, CallRejected), out
        assert (e.reason, e.peer) == ("length", 1 - i)
        assert str(e).startswith(f"job 5 call 0 rejected by PS shard {e.shard} of 2: ")
    assert all(w.counters.sent == 0 for w in ws)
