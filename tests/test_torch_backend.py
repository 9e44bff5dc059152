"""The ``esa`` torch.distributed backend on loopback: the switch model behind
a UDP socket and PS threads (``testbed.loopjob``), the two ranks as process
groups in this process (each made on its own thread, as Gloo's rendezvous
needs) or as processes running the examples."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, TypeVar

import numpy as np
import pytest

pytest.importorskip("torch", reason="needs torch: pip install -e '.[torch]'")
pytest.importorskip("sklearn", reason="needs scikit-learn: pip install -e '.[torch]'")

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (
    AllgatherOptions,
    AllreduceCoalescedOptions,
    AllreduceOptions,
    BroadcastOptions,
    HashStore,
    _DistributedBackendOptions,
)

from hosts.net import quant
from hosts.torch.backend import (
    BACKEND,
    EsaGroupError,
    EsaProcessGroup,
    UnsupportedAllreduce,
    make_group,
)
from hosts.torch.config import EsaConfig, EsaConfigError
from hosts.worker.errors import AllreduceTimeout, CallRejected
from testbed.loopjob import LoopJob
from tests.test_hosts_e2e import expected
from tests.test_torch_hook import EXAMPLE, ROOT, finish, launch, reports

JOB = 3
SCALE = quant.job_scale(1.0, 2)
GLOO_TIMEOUT = timedelta(seconds=60)
T = TypeVar("T")


@pytest.fixture(autouse=True)
def gloo_on_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")


def config(bed: LoopJob, rank: int, timeout: float = 10.0) -> EsaConfig:
    """Worker ``rank`` of ``bed``'s job (bound 1.0) on the socket ``bed`` holds for it."""
    return EsaConfig(
        JOB, rank, 2, bed.ps_addrs, bind_fd=os.dup(bed.worker_fd(rank)), timeout=timeout,
        linger=0.1, control=bed.control_addrs, key=bed.key,
    )  # fmt: skip


def both(groups: list[EsaProcessGroup], act: Callable[[int, EsaProcessGroup], T]) -> list[T]:
    """``act(rank, group)`` for both ranks at once (a collective blocks until both join)."""
    with ThreadPoolExecutor(len(groups)) as pool:
        return list(pool.map(act, range(len(groups)), groups))


def make_pair(bed: LoopJob, timeout: float = 10.0) -> list[EsaProcessGroup]:
    store = HashStore()
    configs = [config(bed, rank, timeout) for rank in range(2)]
    with ThreadPoolExecutor(2) as pool:
        return list(
            pool.map(lambda c: EsaProcessGroup(store, c.index, 2, GLOO_TIMEOUT, c), configs)
        )


@pytest.fixture(params=[1, 2], ids=["one PS", "two PS shards"])
def pair(request: pytest.FixtureRequest) -> Iterator[list[EsaProcessGroup]]:
    """Two ranks of job JOB through the loopback switch, with one PS or two."""
    with LoopJob(JOB, 2, shards=request.param) as bed:
        groups = make_pair(bed)
        yield groups
        for g in groups:
            g.close()


def op(reduce_op: Any) -> AllreduceOptions:
    opts = AllreduceOptions()
    opts.reduceOp = reduce_op
    return opts


def all_reduce(
    groups: list[EsaProcessGroup], tensors: list[torch.Tensor], reduce_op: Any = dist.ReduceOp.SUM
) -> None:
    """``dist.all_reduce(tensors[rank], op, group)`` on each rank, in place."""

    def act(rank: int, group: EsaProcessGroup) -> None:
        dist.all_reduce(tensors[rank], op=reduce_op, group=group)

    both(groups, act)


def test_the_backend_is_registered_for_the_cpu_on_import() -> None:
    assert BACKEND == "esa" and dist.Backend.ESA == "esa"  # type: ignore[attr-defined]
    assert "esa" in dist.Backend.backend_list
    assert dist.Backend.backend_capability["esa"] == ["cpu"]
    assert dist.Backend.default_device_backend_map["cpu"] == "gloo", "gloo stays the default"
    for name in ("esa", "cpu:esa"):
        assert dist.distributed_c10d.BackendConfig(dist.Backend(name)).get_device_backend_map() == {
            "cpu": "esa"
        }


def test_sums_and_averages_come_back_in_place_exact_and_the_same_on_both_ranks(
    pair: list[EsaProcessGroup],
) -> None:
    rng = np.random.default_rng(11)
    grads = [rng.uniform(-1, 1, (7, 30)).astype(np.float32) for _ in pair]
    grads[0][3, 4] = 3.5  # out of bound: its chunk is summed in float
    tensors = [torch.from_numpy(g.copy()) for g in grads]
    all_reduce(pair, tensors)
    want = expected([g.ravel() for g in grads], SCALE).reshape(7, 30)
    for t in tensors:
        assert t.dtype == torch.float32 and t.shape == (7, 30)
        assert np.array_equal(t.numpy(), want)
    assert tensors[0][3, 4] == np.float32(3.5) + grads[1][3, 4], "not clipped"

    columns = [torch.from_numpy(g.copy()).t() for g in grads]  # not contiguous
    all_reduce(pair, columns, dist.ReduceOp.AVG)
    for t in columns:
        assert np.array_equal(t.numpy(), (want / np.float32(2)).T)
    for g in pair:
        assert g.state.steps == g.state.allreduces == 2, "each all-reduce is a step"
        assert g.state.values == 7 * 30


def test_a_coalesced_all_reduce_sums_each_tensor_as_a_call(pair: list[EsaProcessGroup]) -> None:
    rng = np.random.default_rng(13)
    grads = [[rng.uniform(-1, 1, n).astype(np.float32) for n in (20, 300)] for _ in pair]
    tensors = [[torch.from_numpy(g.copy()) for g in mine] for mine in grads]
    opts = AllreduceCoalescedOptions()
    opts.reduceOp = dist.ReduceOp(dist.ReduceOp.SUM)
    both(pair, lambda rank, group: group.allreduce_coalesced(tensors[rank], opts).wait())
    for mine in tensors:
        for t, i in zip(mine, (0, 1), strict=True):
            assert np.array_equal(t.numpy(), expected([grads[0][i], grads[1][i]], SCALE))
    assert [g.state.allreduces for g in pair] == [2, 2]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("reduce_op", ["SUM", "AVG"])
def test_half_precision_comes_back_in_its_dtype(
    pair: list[EsaProcessGroup], dtype: str, reduce_op: str
) -> None:
    rng = np.random.default_rng(12)
    half = getattr(torch, dtype)
    tensors = [torch.from_numpy(rng.uniform(-1, 1, 50).astype(np.float32)).to(half) for _ in pair]
    total = expected([t.float().numpy() for t in tensors], SCALE)
    want = torch.from_numpy(total / np.float32(2) if reduce_op == "AVG" else total).to(half)
    all_reduce(pair, tensors, getattr(dist.ReduceOp, reduce_op))
    for t in tensors:
        assert t.dtype == half
        assert torch.equal(t, want)


@pytest.mark.parametrize("name", ["MAX", "MIN", "PRODUCT", "BAND", "BOR", "BXOR"])
def test_an_op_the_switch_does_not_do_is_refused_by_name(
    pair: list[EsaProcessGroup], name: str
) -> None:
    with pytest.raises(UnsupportedAllreduce) as info:
        pair[0].allreduce([torch.ones(4)], op(getattr(dist.ReduceOp, name)))
    assert str(info.value) == (
        f"the ESA backend's all_reduce sums (SUM) or averages (AVG); ReduceOp.{name} is not "
        "supported (use a Gloo group for it: dist.new_group(backend='gloo'))"
    )
    assert pair[0].state.worker.counters.calls_sent == 0, "nothing reached the PS"


@pytest.mark.parametrize(
    "dtype", [torch.float64, torch.int64, torch.int32, torch.uint8, torch.bool, torch.complex64]
)
def test_a_dtype_the_switch_does_not_sum_is_refused_by_name(
    pair: list[EsaProcessGroup], dtype: torch.dtype
) -> None:
    tensors = [torch.ones(4), torch.ones(4, dtype=dtype)]
    with pytest.raises(UnsupportedAllreduce) as info:
        pair[0].allreduce(tensors, op(dist.ReduceOp.SUM))
    assert str(info.value) == (
        f"the ESA backend's all_reduce sums float32, float16 and bfloat16 tensors; {dtype} is "
        "not supported (use a Gloo group for it: dist.new_group(backend='gloo'))"
    )
    assert (pair[0].state.iteration, pair[0].state.worker.counters.calls_sent) == (0, 0), (
        "no tensor of the collective was queued"
    )


def test_a_tensor_off_the_cpu_is_refused_by_its_device(pair: list[EsaProcessGroup]) -> None:
    with pytest.raises(UnsupportedAllreduce) as info:
        pair[0].allreduce([torch.ones(4, device="meta")], op(dist.ReduceOp.SUM))
    assert str(info.value) == (
        "the ESA backend's all_reduce sums CPU tensors; a tensor on meta is not supported"
    )


def test_ranks_disagreeing_on_a_length_fail_on_both(pair: list[EsaProcessGroup]) -> None:
    works = [
        g.allreduce([torch.zeros(n)], op(dist.ReduceOp.SUM))
        for g, n in zip(pair, [40, 50], strict=True)
    ]
    for work, (n, peer, m) in zip(works, [(40, 1, 50), (50, 0, 40)], strict=True):
        with pytest.raises(CallRejected) as info:
            work.wait()
        by = "the PS" if len(pair[0].config.ps) == 1 else f"PS shard {info.value.shard} of 2"
        assert str(info.value) == (
            f"job 3 call 0 rejected by {by}: this worker has {n} values, worker {peer} has {m}"
        )
        with pytest.raises(RuntimeError, match="job 3 call 0 rejected by"):
            work.get_future().wait()  # what DDP reads
    later = pair[0].allreduce([torch.zeros(40)], op(dist.ReduceOp.SUM))
    with pytest.raises(RuntimeError, match="an earlier ESA all-reduce failed: job 3 call 0 rej"):
        later.wait()


def test_an_all_reduce_a_peer_never_starts_times_out_naming_it() -> None:
    with LoopJob(JOB, 2) as bed:
        groups = make_pair(bed, timeout=0.3)
        try:
            work = groups[0].allreduce([torch.zeros(40)], op(dist.ReduceOp.SUM))
            with pytest.raises(AllreduceTimeout) as info:
                work.wait()
        finally:
            for g in groups:
                g.close()
    assert str(info.value) == (
        "job 3 call 0: no sum after 0.3 s (waiting for the PS's GO); "
        "workers [1] have not started it (started: [0])"
    )


def test_the_other_collectives_go_through_gloo(pair: list[EsaProcessGroup]) -> None:
    """Broadcast and all-gather, each rank a thread of this process.  A
    barrier is left out here: two ranks' Gloo barriers in one process have
    hung past Gloo's own timeout (2026-12-06, fresh-clone suite), which a
    wait bounded by ``GLOO_TIMEOUT`` turns into a failure, not a hang.

    Every tensor and work handed to Gloo stays referenced here until both
    ranks are done: a tensor whose last Python reference goes while a Gloo
    thread still holds it is freed on that thread, which then needs the
    GIL, while the other rank's thread holds the GIL waiting for that
    group's queue (a deadlock, 2026-12-07, fresh-clone suite: one rank in
    ``ProcessGroupGloo::enqueue`` of the all-gather, a Gloo run loop
    waiting for the GIL)."""

    def act(rank: int, group: EsaProcessGroup) -> tuple[list[torch.Tensor], list[object]]:
        x = torch.full((3,), float(rank + 1))
        opts = BroadcastOptions()
        opts.rootRank = 1
        sent = [x]
        cast = group.broadcast(sent, opts)
        assert cast.wait(GLOO_TIMEOUT)
        gathered = [[torch.zeros(2), torch.zeros(2)]]
        mine = [torch.full((2,), 10.0 * rank)]
        work = group.allgather(gathered, mine, AllgatherOptions())
        assert work.wait(GLOO_TIMEOUT)
        return [x, *gathered[0]], [sent, cast, mine, work, gathered]

    held = both(pair, act)
    for got, _ in held:
        assert [t.tolist() for t in got] == [[2.0] * 3, [0.0, 0.0], [10.0, 10.0]]
    for g in pair:
        assert g.state.worker.counters.calls_sent == 0, "none of them is an all-reduce"


def test_the_settings_name_the_groups_rank_and_size() -> None:
    with LoopJob(JOB, 2) as bed:
        wrong = config(bed, 1)
        with pytest.raises(EsaConfigError) as info:
            EsaProcessGroup(HashStore(), 0, 2, GLOO_TIMEOUT, wrong)
        os.close(wrong.bind_fd or -1)
    assert str(info.value) == (
        "the ESA settings name worker 1 of 2; the process group is rank 0 of 2"
    )
    opts = _DistributedBackendOptions()
    opts.store, opts.group_rank, opts.group_size = HashStore(), 0, 1
    with pytest.raises(EsaConfigError, match="the ESA backend's pg_options is an EsaConfig, not"):
        make_group(opts, "10.0.0.3")  # type: ignore[arg-type]


def test_the_environment_configures_one_group_per_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with LoopJob(JOB, 1) as bed:
        for name, value in bed.esa_env(0).items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("ESA_BIND_FD", str(os.dup(bed.worker_fd(0))))
        monkeypatch.setenv("ESA_LINGER", "0")
        opts = _DistributedBackendOptions()
        opts.store, opts.group_rank, opts.group_size = HashStore(), 0, 1
        opts.timeout = GLOO_TIMEOUT
        first = make_group(opts, None)
        try:
            assert (first.config.index, first.config.fan_in, first.config.job) == (0, 1, JOB)
            with pytest.raises(EsaGroupError) as info:
                make_group(opts, None)
            t = torch.arange(5, dtype=torch.float32)
            first.allreduce([t], op(dist.ReduceOp.AVG)).wait()
            assert t.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
        finally:
            first.shutdown()
    assert str(info.value) == (
        "the ESA settings of this process (ESA_*) serve one process group, job 3's: give "
        "another ESA group an EsaConfig of its own (pg_options), or make it with backend='gloo'"
    )
    assert first.state.allreduces == 1


# -- the examples as processes: a loop of dist.all_reduce, DDP without a hook --

BACKEND_EXAMPLE = ROOT / "examples" / "backend_digits.py"
TRAIN_ARGS = ["--epochs", "3", "--hidden", "32", "--bucket-cap-mb", "0.001"]
"""3 epochs of 23 steps; 4 parameter tensors (330 and 2,080 values a layer)."""
STEPS = 3 * 23


def esa_env(bed: LoopJob) -> Callable[[int], dict[str, str]]:
    return lambda rank: {**bed.esa_env(rank), "ESA_LINGER": "0.2"}


@pytest.fixture(scope="module")
def gloo() -> list[dict[str, Any]]:
    """The reference: the same training's reports with Gloo's all-reduce,
    DDP's (the loop's are the same, bit for bit)."""
    return reports(finish(launch(2, TRAIN_ARGS, lambda rank: {}, EXAMPLE)))


def test_a_loop_of_all_reduce_trains_bit_for_bit_as_the_hook_does(
    gloo: list[dict[str, Any]],
) -> None:
    """Each gradient summed by ``dist.all_reduce`` through the backend, then
    halved, ends with the parameters of DDP with the hook, which sums
    each layer's bucket and halves it: the same quantised sums, value by
    value (no chunk of either holds a value beyond the bound)."""
    with LoopJob(JOB, 2) as bed:
        loop = reports(finish(launch(2, TRAIN_ARGS, esa_env(bed), BACKEND_EXAMPLE)))
        [ps] = bed.pses
        agreed = ps.counters.calls_agreed
    with LoopJob(JOB, 2) as bed:
        hook = reports(finish(launch(2, [*TRAIN_ARGS, "--esa"], esa_env(bed), EXAMPLE)))
    assert agreed == 4 * STEPS, "one call per parameter tensor and step"
    assert [r["rank"] for r in loop] == [0, 1]
    assert loop[0]["params_sha256"] == loop[1]["params_sha256"] == hook[0]["params_sha256"]
    assert loop[0]["counters"]["results_float"] == hook[0]["counters"]["results_float"] == 0
    assert gloo[0]["accuracy"] > 0.9, "the task is learnable"
    assert abs(loop[0]["accuracy"] - gloo[0]["accuracy"]) <= 0.01


def test_ddp_without_a_hook_trains_through_the_backend(gloo: list[dict[str, Any]]) -> None:
    with LoopJob(JOB, 2) as bed:
        got = reports(finish(launch(2, [*TRAIN_ARGS, "--ddp"], esa_env(bed), BACKEND_EXAMPLE)))
        [ps] = bed.pses
        counters = ps.counters
    assert got[0]["params_sha256"] == got[1]["params_sha256"]
    assert got[0]["accuracy"] == got[1]["accuracy"]
    assert abs(got[0]["accuracy"] - gloo[0]["accuracy"]) <= 0.01
    # DDP's first step sums one bucket, later ones one per layer, as under the hook
    chunks = quant.chunks(2410) + (STEPS - 1) * (quant.chunks(330) + quant.chunks(2080))
    assert counters.switch_results + counters.completed == chunks
    assert counters.calls_agreed == 1 + (STEPS - 1) * 2
    assert got[0]["counters"]["delivered"] == chunks
