"""What a job's workers see when the job is broken, on 127.0.0.1 through the
switch model: a dead peer, a peer that dies mid-call (and the survivors,
one of which gave up and left before the other asked), two processes with
one index, and peers that disagree on a call all end in an exception that
says what happened, never in a hang or a wrong sum; a PS killed while it
holds part of a call is resumed with its successor, exact."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from esa import model
from esa.spec import Policy
from esa.wire import LIVE_TTL
from hosts.agreement import auth
from hosts.net import quant
from hosts.net.transport import Addr, wait_any
from hosts.programs.program import shown
from hosts.worker.agent import Worker
from hosts.worker.errors import AllreduceTimeout, CallRejected
from testbed.loopjob import local_socket
from testbed.looprig import LoopRig, in_threads
from testbed.loopswitch import LoopSwitch
from tests.test_hosts_e2e import expected, junk
from tests.wait import LIMIT_S

ROOT = Path(__file__).resolve().parent.parent
Tensors = list[npt.NDArray[np.float32]]

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


def test_a_worker_told_of_a_different_peer_fails_even_if_the_peer_left_at_once() -> None:
    """Worker 1 announces 50 values; worker 0 then announces 40, is refused
    and leaves (BYE) at once, as a process that fails does.  Worker 1 is
    refused too, naming worker 0, not left waiting for its deadline to
    report a worker that has not started the call."""
    with bed() as b:
        w0, w1 = b.worker(0, rto=0.02), b.worker(1, rto=0.02)
        book = b.loop.pses[0].books[JOB]
        w1.begin(ones(50), timeout=600.0)
        until_polled(lambda: 1 in book.pending, w1, what="worker 1's announcement")
        with pytest.raises(CallRejected) as e0:
            w0.allreduce(ones(40), timeout=600.0)
        w0.leave()
        with pytest.raises(CallRejected) as e1:
            until_polled(lambda: False, w1, what="worker 1's REJECT")
    assert (e0.value.reason, e0.value.peer, e1.value.reason, e1.value.peer) == (
        "length", 1, "length", 0,
    )  # fmt: skip


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


def until_polled(check: Callable[[], bool], *ws: Worker, what: str = "the event") -> None:
    """Poll ``ws`` on this thread until ``check()``; fails naming ``what``
    after ``LIMIT_S``."""
    deadline = time.monotonic() + LIMIT_S
    sockets = [t for w in ws for t in (w.transport, w.control) if t is not None]
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {LIMIT_S:g} s"
        for w in ws:
            w.poll(w.clock())
        wait_any(sockets, 0.01)


class Ahead:
    """A worker's clock the test moves forward: the worker's deadline comes
    when the test says, whatever the machine's load."""

    def __init__(self) -> None:
        self.by = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.by


def poll_until_it_fails(w: Worker, *others: Worker) -> AllreduceTimeout:
    """Poll ``w`` (and keep ``others`` streaming) until its call fails."""
    deadline = time.monotonic() + LIMIT_S
    while time.monotonic() < deadline:
        for o in others:
            o.poll(o.clock())
        try:
            w.poll(w.clock())
        except AllreduceTimeout as e:
            return e
        w.wait(0.01)
    raise AssertionError(f"worker {w.index}'s call did not fail within {LIMIT_S:g} s")


def test_the_second_survivor_names_the_dead_worker_and_the_one_that_left() -> None:
    """Issue 37: worker 2 of three dies mid-call; worker 0 gives up, is told
    worker 2 is silent and leaves (BYE, as the CLIs do at exit); worker 1
    gives up a moment later.  Its error names worker 2 as silent and worker
    0 as gone with a BYE, not both as silent."""
    with LoopRig(3, job=JOB, pool=16) as b:
        clocks = [Ahead(), Ahead()]
        w0, w1 = (b.worker(i, window=4, rto=0.02, clock=clocks[i]) for i in range(2))
        w2 = b.worker(2, window=4, rto=0.02)
        x = ones(32 * 20)
        for w in (w0, w1, w2):
            w.begin(x, timeout=60.0)
        until_polled(
            lambda: w2.cur is not None and w2.cur.next_send > 0, w0, w1, w2,
            what="worker 2's first chunks",
        )  # fmt: skip
        dead = time.monotonic()  # worker 2 is polled no more: it sends nothing
        until_polled(
            lambda: time.monotonic() - dead > LIVE_TTL, w0, w1, what="worker 2 silent for LIVE_TTL"
        )
        clocks[0].by = 60.0
        e0 = poll_until_it_fails(w0, w1)
        w0.leave()
        clocks[1].by = 60.0
        e1 = poll_until_it_fails(w1)
        undone = [c.n - c.delivered for c in (w0.cur, w1.cur) if c is not None]
    head = "job 5 call 0: no sum after 60 s ({} of 20 chunks without a sum); "
    quiet = r"worker 2 silent for (\d+\.\d) s"
    m0 = re.fullmatch(re.escape(head.format(undone[0])) + quiet, str(e0))
    assert m0 is not None, str(e0)
    m1 = re.fullmatch(re.escape(head.format(undone[1])) + quiet + ", worker 0 said BYE", str(e1))
    assert m1 is not None, str(e1)
    assert float(m0[1]) >= LIVE_TTL and float(m1[1]) >= LIVE_TTL
    assert (e0.missing, e0.left, e1.missing, e1.left) == ([2], [], [2], [0])


class PsProcess:
    """``esa-ps`` (``python -m hosts.programs.ps_cli``, this tree's code) for job
    ``JOB`` of two workers on 127.0.0.1, started again on the ports it bound
    first, as a restarted PS host would be."""

    def __init__(self, switch: Addr, key_file: Path) -> None:
        self.switch, self.key_file = switch, key_file
        self.data: Addr = ("127.0.0.1", 0)
        self.control: Addr = ("127.0.0.1", 0)
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        args = ["--bind", shown(self.data), "--control-bind", shown(self.control)]
        args += ["--job", f"{JOB}:2", "--key-file", f"{JOB}:{self.key_file}", "--stall", "0.05"]
        args += ["--switch-addr", shown(self.switch), "--json"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hosts.programs.ps_cli", *args],
            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        m = re.match(r"PS on ([\d.]+):(\d+), control on ([\d.]+):(\d+)", line)
        assert m is not None, f"esa-ps: {line!r}"
        self.data, self.control = (m[1], int(m[2])), (m[3], int(m[4]))

    def kill(self) -> None:
        """SIGKILL, as a crash: the PS keeps nothing."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.communicate(timeout=LIMIT_S)

    def stop(self) -> dict[str, Any]:
        """SIGTERM; the counters the PS printed as it stopped."""
        assert self.proc is not None
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=LIMIT_S)
        counters: dict[str, Any] = json.loads(out.strip().splitlines()[-1])["ps"]
        return counters

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate(timeout=LIMIT_S)


def run_call(ws: list[Worker], xs: Tensors | None) -> Tensors:
    """Each worker's sum of a call: a new one of ``xs`` (None: the one in progress)."""
    if xs is not None:
        for w, x in zip(ws, xs, strict=True):
            w.begin(x, timeout=LIMIT_S)
    until_polled(lambda: all(w.done for w in ws), *ws, what=f"the sums of call {ws[0].calls - 1}")
    return [w.result() for w in ws]


def test_a_ps_killed_while_it_holds_part_of_a_call_resumes_it_exact(tmp_path: Path) -> None:
    """Issue 37: a PS killed "during" a call may in fact die between calls.
    Here the switch keeps no slot for the job (STATIC without a partition),
    so the PS sums every chunk, and the workers are polled on this thread:
    the call stands still from the moment the PS has answered some of its
    chunks (a worker has PS_RESULTs of call 1) while chunks of it were never
    sent (so the PS can not have them all).  The PS is killed then (SIGKILL)
    and started again on its ports; the documented outcome is that the call
    resumes with the new PS (RESUME; docs/agreement.md, Restarts): call 1
    and the call after it are exact, and the new PS adopted call 1."""
    key = auth.new_key()
    key_file = auth.write_key(tmp_path / "job.key", key)
    sw = model.SwitchModel(pool_size=16, policy=Policy.STATIC)
    sw.add_job(JOB, model.JobConfig(2, 0b11, priority=1, ps_ports=(1,)))
    data, control = [local_socket() for _ in range(2)], [local_socket() for _ in range(2)]
    pses: dict[int, tuple[Addr, ...]] = {}
    switch = LoopSwitch(sw, ps=pses, workers={JOB: [d.addr for d in data]})
    ps = PsProcess(switch.addr, key_file)
    try:
        ps.start()
        pses[JOB] = (ps.data,)
        switch.start()
        ws = [
            Worker(JOB, i, 2, (switch.addr,), data[i], window=4, rto=0.02, control=control[i],
                   control_addrs=(ps.control,), key=key)
            for i in range(2)
        ]  # fmt: skip
        rng = np.random.default_rng(37)
        xs = [[rng.uniform(-1, 1, 32 * 40).astype(np.float32) for _ in range(2)] for _ in range(3)]
        sums = [run_call(ws, xs[0])]
        for w, x in zip(ws, xs[1], strict=True):
            w.begin(x, timeout=LIMIT_S)
        answered = [w.counters.results_ps for w in ws]
        until_polled(
            lambda: [w.counters.results_ps for w in ws] != answered, *ws,
            what="a PS_RESULT of call 1",
        )  # fmt: skip
        calls = [w.cur for w in ws if w.cur is not None]
        sent = [c.next_send for c in calls]
        assert len(calls) == 2 and max(sent) < 40, f"call 1 not in flight: {sent} of 40 chunks sent"
        ps.kill()
        ps.start()
        sums.append(run_call(ws, None))
        resumed = [(c.restarted, c.go) for c in calls]
        sums.append(run_call(ws, xs[2]))
        counters = ps.stop()
    finally:
        ps.close()
        switch.stop()
        for t in [*data, *control]:
            t.close()
    scale = quant.job_scale(1.0, 2)
    for call in range(3):
        want = expected(xs[call], scale)
        assert all(np.array_equal(got, want) for got in sums[call]), f"call {call}"
    assert (1, 1) in resumed, "a worker saw the PS restart and had its GO again (RESUME)"
    assert (counters["calls_agreed"], counters["epochs_started"]) == (2, 1), (
        "the new PS adopted call 1 (its only epoch) and agreed call 2 after it"
    )
    assert counters["completed"] > 0 and junk(counters["dropped"]) == {}
