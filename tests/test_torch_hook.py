"""The DDP communication hook on loopback: the switch model behind a UDP
socket and PS threads (``testbed.loopjob``), workers as hook states in this
process or as DDP processes running the example script."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pytest

pytest.importorskip("torch", reason="needs torch: pip install -e '.[torch]'")
pytest.importorskip("sklearn", reason="needs scikit-learn: pip install -e '.[torch]'")

import torch
from torch._C._distributed_c10d import TCPStore

from esa import wire
from hosts.net import quant
from hosts.net.transport import UdpTransport
from hosts.torch.config import EsaConfig, EsaConfigError
from hosts.torch.hook import BucketMismatch, EsaHookState, TensorBucket
from hosts.worker.errors import AllreduceTimeout, CallRejected
from testbed.loopjob import LOCAL, LoopJob, ddp_env, local_socket
from tests.test_hosts_e2e import expected

ROOT = Path(__file__).resolve().parent.parent
JOB = 3
SCALE = quant.job_scale(1.0, 2)


def states(bed: LoopJob, timeout: float = 10.0) -> list[EsaHookState]:
    """The two workers of ``bed``'s job (bound 1.0), on the sockets ``bed``
    holds for them, agreeing calls with its PS hosts."""
    return [
        EsaHookState(
            EsaConfig(
                JOB, i, 2, bed.ps_addrs, bind_fd=os.dup(bed.worker_fd(i)), timeout=timeout,
                linger=0.1, control=bed.control_addrs, key=bed.key,
            )
        )
        for i in range(2)
    ]  # fmt: skip


@pytest.fixture
def silent() -> Iterator[list[UdpTransport]]:
    """Three sockets nothing reads: a PS, its control port and a worker's
    socket that never hear an answer."""
    socks = [local_socket() for _ in range(3)]
    yield socks
    for s in socks:
        s.close()


@pytest.fixture(params=[1, 2], ids=["one PS", "two PS shards"])
def pair(request: pytest.FixtureRequest) -> Iterator[list[EsaHookState]]:
    """Two workers of job JOB through the loopback switch, with one PS or two."""
    with LoopJob(JOB, 2, shards=request.param) as bed:
        both = states(bed)
        yield both
        for s in both:
            s.close()


def average(grads: list[npt.NDArray[np.float32]]) -> npt.NDArray[np.float32]:
    """What the hook must return: the switch's sum of the workers' buckets, halved."""
    return expected(grads, SCALE) / np.float32(2)


def test_buckets_are_averaged_through_the_switch_across_a_rebuild(
    pair: list[EsaHookState],
) -> None:
    # One bucket in the first iteration, two after DDP's rebuild.
    layouts = [[100], [30, 70], [30, 70]]
    rng = np.random.default_rng(5)
    grads = {
        (it, b, w): rng.uniform(-1, 1, n).astype(np.float32)
        for it, sizes in enumerate(layouts)
        for b, n in enumerate(sizes)
        for w in range(2)
    }
    grads[1, 1, 0][40] = 3.0  # out of bound: its chunk is summed in float
    futures = {}
    for it, sizes in enumerate(layouts):
        for b in range(len(sizes)):
            for w, state in enumerate(pair):
                bucket = TensorBucket(b, torch.from_numpy(grads[it, b, w]), b == len(sizes) - 1)
                futures[it, b, w] = state.submit(bucket)
    for (it, b, w), fut in futures.items():
        got = fut.wait()
        assert got.dtype == torch.float32
        want = average([grads[it, b, 0], grads[it, b, 1]])
        assert np.array_equal(got.numpy(), want), (it, b, w)
    assert 2 * futures[1, 1, 0].wait()[40] == np.float32(3.0) + grads[1, 1, 1][40], "not clipped"
    for state in pair:
        assert (state.iteration, state.next_index) == (3, 0)
        assert state.worker.counters.calls_sent >= 5, "every call is announced to the PS"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_buckets_come_back_in_their_dtype(
    pair: list[EsaHookState], dtype: str
) -> None:
    rng = np.random.default_rng(6)
    half = getattr(torch, dtype)
    grads = [torch.from_numpy(rng.uniform(-1, 1, 50).astype(np.float32)).to(half) for _ in pair]
    futures = [s.submit(TensorBucket(0, g, True)) for s, g in zip(pair, grads, strict=True)]
    want = average([g.float().numpy() for g in grads])
    for fut in futures:
        got = fut.wait()
        assert got.dtype == half
        assert torch.equal(got, torch.from_numpy(want).to(half))


def test_other_dtypes_and_out_of_order_buckets_are_refused(silent: list[UdpTransport]) -> None:
    ps, control, _ = silent
    config = EsaConfig(
        JOB, 0, 2, (ps.addr,), bind=(LOCAL, 0), control=(control.addr,), timeout=0.2
    )  # the bucket queued below times out at close: nothing answers it
    state = EsaHookState(config)
    try:
        with pytest.raises(TypeError, match=r"bucket 0 holds torch\.float64"):
            state.submit(TensorBucket(0, torch.zeros(8, dtype=torch.float64), True))
        with pytest.raises(BucketMismatch, match="bucket 1 arrived when bucket 0 of iteration 0"):
            state.submit(TensorBucket(1, torch.zeros(8), True))
        state.submit(TensorBucket(0, torch.zeros(8), False))
        with pytest.raises(BucketMismatch) as info:
            state.allreduce(torch.zeros(8), average=False)
        assert str(info.value) == (
            "an all-reduce outside DDP's buckets arrived when bucket 1 of iteration 0 was due"
        )
    finally:
        state.close()


def test_workers_disagreeing_on_a_bucket_fail_on_both(pair: list[EsaHookState]) -> None:
    futures = [
        s.submit(TensorBucket(0, torch.zeros(n), True)) for s, n in zip(pair, [40, 50], strict=True)
    ]
    for fut, (n, peer, m) in zip(futures, [(40, 1, 50), (50, 0, 40)], strict=True):
        with pytest.raises(CallRejected) as info:
            fut.wait()
        by = "the PS" if len(pair[0].config.ps) == 1 else f"PS shard {info.value.shard} of 2"
        assert str(info.value) == (
            f"job 3 call 0 rejected by {by}: this worker has {n} values, worker {peer} has {m}"
        )
        assert (info.value.reason, info.value.peer) == ("length", peer)
    later = pair[0].submit(TensorBucket(0, torch.zeros(40), True))
    with pytest.raises(RuntimeError, match="an earlier ESA all-reduce failed: job 3 call 0 rej"):
        later.wait()


def test_an_allreduce_a_peer_never_starts_times_out_naming_it() -> None:
    with LoopJob(JOB, 2) as bed:
        both = states(bed, timeout=0.3)
        try:
            fut = both[0].submit(TensorBucket(0, torch.zeros(40), True))
            assert not fut.done(), "the hook returns before the all-reduce ends"
            with pytest.raises(AllreduceTimeout) as info:
                fut.wait()
        finally:
            for s in both:
                s.close()
    assert str(info.value) == (
        "job 3 call 0: no sum after 0.3 s (waiting for the PS's GO); "
        "workers [1] have not started it (started: [0])"
    )
    assert info.value.missing == [1]


TORCHRUN_ENV = {
    "RANK": "1",
    "WORLD_SIZE": "4",
    "ESA_JOB": "7",
    "ESA_PS": "10.0.0.3",
    "ESA_BOUND": "0.5",
    "ESA_TIMEOUT": "5",
    "ESA_BIND": "10.0.0.2:4000",
}


def test_config_from_torchrun_environment() -> None:
    config = EsaConfig.from_env(TORCHRUN_ENV)
    assert config == EsaConfig(
        7, 1, 4, (("10.0.0.3", 0xE5A0),), bound=0.5, timeout=5.0, bind=("10.0.0.2", 4000),
        control=(("10.0.0.3", wire.CONTROL_PORT),),
    )  # fmt: skip
    moved = EsaConfig.from_env({**TORCHRUN_ENV, "ESA_CONTROL": "10.0.0.9"})
    assert moved.control_addrs == (("10.0.0.9", 0xE5A1),)
    assert EsaConfig(7, 1, 4, (("10.0.0.3", 9),)).control_addrs == (("10.0.0.3", 0xE5A1),)


def test_a_worker_takes_over_the_socket_its_launcher_bound(silent: list[UdpTransport]) -> None:
    _, _, worker = silent
    config = EsaConfig.from_env({**TORCHRUN_ENV, "ESA_BIND_FD": str(os.dup(worker.sock.fileno()))})
    assert config.bind_fd is not None and config.bind == ("10.0.0.2", 4000)
    state = EsaHookState(config)
    try:
        assert state.transport.addr == worker.addr
        assert state.control.addr[0] == "127.0.0.1" and state.control.addr != worker.addr
    finally:
        state.close()


def test_a_socket_that_is_not_udp_is_refused() -> None:
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with pytest.raises(OSError, match="not an IPv4 UDP socket"):
        UdpTransport(tcp)
    assert tcp.fileno() == -1, "the refused socket is closed"


def test_config_lists_one_address_per_ps_shard() -> None:
    env = {**TORCHRUN_ENV, "ESA_PS": "10.0.0.3, 10.0.0.4:9"}
    config = EsaConfig.from_env(env)
    assert config.ps == (("10.0.0.3", 0xE5A0), ("10.0.0.4", 9))
    assert config.control_addrs == (("10.0.0.3", 0xE5A1), ("10.0.0.4", 0xE5A1))
    moved = EsaConfig.from_env({**env, "ESA_CONTROL": "10.0.0.8,10.0.0.9:7"})
    assert moved.control_addrs == (("10.0.0.8", 0xE5A1), ("10.0.0.9", 7))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"ESA_JOB": None}, "ESA_JOB is not set: the job id"),
        ({"RANK": ""}, "RANK is not set: this worker's index"),
        ({"WORLD_SIZE": "two"}, "WORLD_SIZE='two' is not valid"),
        ({"ESA_PS": "10.0.0.3:70000"}, "ESA_PS='10.0.0.3:70000' is not valid"),
        (
            {"ESA_CONTROL": "10.0.0.3:x"},
            "ESA_CONTROL='10.0.0.3:x' is not valid: the PS hosts' control",
        ),
        ({"ESA_PS": "10.0.0.3,10.0.0.4,10.0.0.5"}, "a job has 1, 2, 4 or 8 PS hosts"),
        ({"ESA_PS": "10.0.0.3,"}, "ESA_PS='10.0.0.3,' is not valid"),
        (
            {"ESA_PS": "10.0.0.3,10.0.0.4", "ESA_CONTROL": "10.0.0.3"},
            "one control address per PS host",
        ),
        ({"RANK": "4"}, "worker index must be 0..fan-in - 1"),
        ({"ESA_JOB": "256"}, "job must be 1..255"),
        ({"ESA_BOUND": "nan"}, "bound must be positive and finite"),
        ({"ESA_TIMEOUT": "0"}, "timeout must be positive"),
        ({"ESA_BIND_FD": "three"}, "ESA_BIND_FD='three' is not valid: instead of ESA_BIND"),
        ({"ESA_BIND_FD": "-1"}, r"bind_fd must be a descriptor \(>= 0\)"),
    ],
)
def test_config_names_a_missing_or_bad_variable(
    change: dict[str, str | None], message: str
) -> None:
    env = {k: v for k, v in {**TORCHRUN_ENV, **change}.items() if v is not None}
    with pytest.raises(EsaConfigError, match=message):
        EsaConfig.from_env(env)


# -- the example script as DDP processes -------------------------------------

EXAMPLE = ROOT / "examples" / "torch_digits.py"
TRAIN_ARGS = ["--epochs", "3", "--hidden", "32", "--bucket-cap-mb", "0.001"]
"""3 epochs of 23 steps; the 0.001 MB cap makes DDP rebuild its one first
bucket into two (330 and 2,080 values) after the first step."""


class Ddp(NamedTuple):
    """DDP processes and the rendezvous store they meet at, held here."""

    store: TCPStore
    procs: list[subprocess.Popen[str]]


def launch(
    world: int, args: list[str], esa: Callable[[int], dict[str, str]], script: Path = EXAMPLE
) -> Ddp:
    """``world`` processes of ``script`` (the example), as torchrun would start
    them, each with the ``ESA_*`` variables ``esa(rank)`` and the socket
    ``ESA_BIND_FD`` names, if any."""
    store = TCPStore(LOCAL, 0, world, is_master=True, wait_for_workers=False)
    procs = []
    for rank in range(world):
        extra = esa(rank)
        env = {**os.environ, "PYTHONPATH": str(ROOT), **ddp_env(rank, world, store.port), **extra}
        fds = [int(extra["ESA_BIND_FD"])] if "ESA_BIND_FD" in extra else []
        cmd = [sys.executable, str(script), *args]
        procs.append(
            subprocess.Popen(
                cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                pass_fds=fds,
            )
        )  # fmt: skip
    return Ddp(store, procs)


def finish(*runs: Ddp) -> list[tuple[int, str, str]]:
    """(exit code, stdout, stderr) of each process; kills those still running on an error."""
    procs = [p for run in runs for p in run.procs]
    try:
        outs = [p.communicate(timeout=600) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [(p.returncode, out, err) for p, (out, err) in zip(procs, outs, strict=True)]


def reports(done: list[tuple[int, str, str]]) -> list[dict[str, Any]]:
    """The JSON line each finished process printed; all must have succeeded."""
    for code, _, err in done:
        assert code == 0, err
    return [json.loads(out.strip().splitlines()[-1]) for _, out, _ in done]


def test_ddp_training_through_the_switch_matches_gloo() -> None:
    with LoopJob(JOB, 2) as bed:
        gloo = launch(2, TRAIN_ARGS, lambda rank: {})
        through = launch(
            2, [*TRAIN_ARGS, "--esa"], lambda rank: {**bed.esa_env(rank), "ESA_LINGER": "0.2"}
        )
        done = finish(gloo, through)
    ref, got = reports(done[:2]), reports(done[2:])
    assert [r["rank"] for r in got] == [0, 1]
    assert got[0]["params_sha256"] == got[1]["params_sha256"]
    assert got[0]["accuracy"] == got[1]["accuracy"]
    assert ref[0]["accuracy"] > 0.9, "the task is learnable"
    assert abs(got[0]["accuracy"] - ref[0]["accuracy"]) <= 0.01
    steps = 3 * 23
    chunks = quant.chunks(2410) + (steps - 1) * (quant.chunks(330) + quant.chunks(2080))
    [ps] = bed.pses
    assert ps.counters.switch_results + ps.counters.completed == chunks
    assert ps.counters.calls_agreed == 1 + (steps - 1) * 2


def test_training_stops_with_a_clear_error_when_nothing_answers(
    silent: list[UdpTransport],
) -> None:
    ps, control, worker = silent

    def esa(rank: int) -> dict[str, str]:
        return {
            "ESA_JOB": str(JOB),
            "ESA_PS": "{}:{}".format(*ps.addr),
            "ESA_CONTROL": "{}:{}".format(*control.addr),
            "ESA_BIND_FD": str(worker.sock.fileno()),
            "ESA_TIMEOUT": "0.5",
        }

    [(code, _, err)] = finish(launch(1, [*TRAIN_ARGS, "--esa"], esa))
    assert code != 0
    assert (
        "AllreduceTimeout: job 3 call 0: no sum after 0.5 s (waiting for the PS's GO); "
        "missing workers unknown (the PS did not answer)"
    ) in err


# -- the window, the report at exit, a user's script -------------------------


@pytest.mark.parametrize(
    ("env", "window"),
    [
        ({}, 64),
        ({"ESA_PART_SIZE": "32"}, 32),
        ({"ESA_PART_SIZE": "1"}, 1),
        ({"ESA_PART_SIZE": "128"}, 64),
        ({"ESA_PART_SIZE": "0"}, 64),
        ({"ESA_PART_SIZE": "32", "ESA_WINDOW": "48"}, 48),
        ({"ESA_WINDOW": "8"}, 8),
    ],
)
def test_the_window_is_the_jobs_partition_unless_set(env: dict[str, str], window: int) -> None:
    assert EsaConfig.from_env({**TORCHRUN_ENV, **env}).window == window


def test_a_negative_partition_is_refused() -> None:
    with pytest.raises(EsaConfigError) as info:
        EsaConfig.from_env({**TORCHRUN_ENV, "ESA_PART_SIZE": "-1"})
    assert str(info.value) == (
        "ESA_PART_SIZE='-1' is not valid: the slots of the job's partition of the switch's "
        "pool (esa-ctl jobs shows it): the window unless ESA_WINDOW is set (0: no partition)"
    )


def test_the_hook_reports_its_steps_and_last_sums_at_exit(tmp_path: Path) -> None:
    layouts = [[100], [30, 70]]  # DDP's rebuild after the first step
    rng = np.random.default_rng(7)
    grads = {
        (it, b, w): rng.uniform(-1, 1, n).astype(np.float32)
        for it, sizes in enumerate(layouts)
        for b, n in enumerate(sizes)
        for w in range(2)
    }
    reads, writes = zip(*(os.pipe() for _ in range(2)), strict=True)
    with LoopJob(JOB, 2) as bed:
        pair = [
            EsaHookState(
                EsaConfig(
                    JOB, i, 2, bed.ps_addrs, bind_fd=os.dup(bed.worker_fd(i)), linger=0.1,
                    control=bed.control_addrs, key=bed.key, report=str(tmp_path / f"w{i}.json"),
                    progress_fd=writes[i],
                )
            )
            for i in range(2)
        ]  # fmt: skip
        futures = [
            state.submit(TensorBucket(b, torch.from_numpy(grads[it, b, w]), b == len(sizes) - 1))
            for it, sizes in enumerate(layouts)
            for b in range(len(sizes))
            for w, state in enumerate(pair)
        ]
        for fut in futures:
            fut.wait()
        for state in pair:
            state.close()
    last = b"".join(expected([grads[1, b, 0], grads[1, b, 1]], SCALE).tobytes() for b in (0, 1))
    for w in range(2):
        os.close(writes[w])
        with os.fdopen(reads[w]) as progress:
            assert progress.read() == "1\n2\n", "each step's number as it finishes"
        got = json.loads((tmp_path / f"w{w}.json").read_text())
        assert 0 < got.pop("seconds") < 60
        counters = got.pop("counters")
        assert counters == pair[w].worker.counters.as_dict()
        assert counters["delivered"] == quant.chunks(100) + quant.chunks(30) + quant.chunks(70)
        assert got == {
            "job": JOB, "rank": w, "steps": 2, "allreduces": 3, "values": 100, "window": 64,
            "grads_sha256": hashlib.sha256(last).hexdigest(),
        }  # fmt: skip


USER_SCRIPT = ROOT / "examples" / "ddp_user_script.py"


def test_a_users_script_reports_through_the_runs_worker(tmp_path: Path) -> None:
    """examples/ddp_user_script.py (one epoch) under runner.torchworker,
    as make run starts it, with the job's partition (32 slots) for a window."""
    store = TCPStore(LOCAL, 0, 2, is_master=True, wait_for_workers=False)
    with LoopJob(JOB, 2) as bed:
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "runner.torchworker", "--",
                 sys.executable, str(USER_SCRIPT), "--epochs", "1"],
                env={**os.environ, **ddp_env(rank, 2, store.port), **bed.esa_env(rank),
                     "ESA_LINGER": "0.2", "ESA_PART_SIZE": "32"},
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                pass_fds=[bed.worker_fd(rank)],
            )
            for rank in range(2)
        ]  # fmt: skip
        done = finish(Ddp(store, procs))
    steps = 24  # 750 images per worker, 32 a step
    relayed = []
    for rank, (code, out, err) in enumerate(done):
        assert code == 0, err
        lines = out.splitlines()
        assert lines[:-1] == [f"step {n}" for n in range(1, steps + 1)]
        relayed.append(json.loads(lines[-1]))
        assert f"rank {rank} epoch 0: loss " in err, "the script's output goes to the log"
    for rank, got in enumerate(relayed):
        assert (got["rank"], got["steps"], got["allreduces"], got["values"], got["window"]) == (
            rank, steps, steps, 1370, 32
        )  # fmt: skip
        assert got["counters"]["delivered"] == steps * quant.chunks(1370)
        assert "grads_sha256" not in got
        assert 0 < got["accuracy"] <= 1
    assert relayed[0]["params_sha256"] == relayed[1]["params_sha256"]
    assert relayed[0]["accuracy"] == relayed[1]["accuracy"]


def test_the_examples_parameters_hash_as_the_hooks(tmp_path: Path) -> None:
    """The example's own report and its hook's (ESA_REPORT) name the same
    parameters: the run may read either."""
    with LoopJob(JOB, 2) as bed:
        run = launch(
            2,
            ["--epochs", "1", "--hidden", "8", "--esa"],
            lambda rank: {
                **bed.esa_env(rank), "ESA_LINGER": "0.2",
                "ESA_REPORT": str(tmp_path / f"w{rank}.json"),
            },
        )  # fmt: skip
        printed = reports(finish(run))
    for rank, own in enumerate(printed):
        hooks = json.loads((tmp_path / f"w{rank}.json").read_text())
        assert hooks["params_sha256"] == own["params_sha256"]
        assert hooks["steps"] == own["steps"] == 23
        assert hooks["counters"]["delivered"] == own["counters"]["delivered"]
    assert printed[0]["params_sha256"] == printed[1]["params_sha256"]
