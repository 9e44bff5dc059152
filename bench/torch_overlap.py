"""Time per training step of the digits example (``examples/torch_digits.py``)
with the ESA hook and with Gloo's all-reduce, and the share of the
communication hidden behind the backward pass.

With ``--switch bmv2`` (the default) it builds one job on Mininet hosts
around BMv2 as ``make run`` does (``bench.mininet_job``: controller, PS) and
runs two DDP worker processes of this module on the job's worker hosts, so
Gloo and ESA use the same links through the same switch; ``--switch
loopback`` puts the switch model and the PS on 127.0.0.1 (``testbed.loopjob``)
instead.  Each worker measures, in turn:

- compute: a step whose hook communicates nothing (``T_c``);
- gloo: a step with DDP's built-in Gloo all-reduce (``T``), then the same
  buckets all-reduced by Gloo alone (``A``);
- esa: a step with the ESA hook (``T``), then the same buckets summed
  through the hook alone (``A``).

Hidden share = ``(T_c + A - T) / A``, clamped to [0, 1]: 1 when a step
costs no more than its computation, 0 when the all-reduces add their whole
time.  Every number is a median over the steps, averaged over the two
workers.

    .venv/bin/python -m bench.torch_overlap [--switch loopback] [--steps 100] [--hidden 64]

DDP compares the hooks' annotations with ``GradBucket`` and
``Future[Tensor]`` when they are registered: no postponed annotations here.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch._C._distributed_c10d import GradBucket, TCPStore
from torch.nn.parallel import DistributedDataParallel

from bench import mininet_job
from esa.job import JobSpec
from examples.torch_digits import load, make_model
from hosts.torch.hook import EsaHookState, TensorBucket, esa_hook
from runner import torchjobs
from runner.paths import ROOT
from testbed.loopjob import LOCAL, LoopJob, ddp_env

JOB = 1
WORKERS = 2
LOGS = ROOT / "results" / "torch_overlap" / "logs"
"""the switch's, controller's, PS's and workers' logs of a BMv2 run."""
SWITCHES = {"bmv2": "BMv2 on Mininet links", "loopback": "switch model on loopback"}
WARMUP = 5
MODES = ("gloo", "esa")
Hook = Callable[..., torch.futures.Future[torch.Tensor]]


def _record(sizes: list[list[int]], bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
    """A hook that communicates nothing and notes each step's bucket sizes."""
    if bucket.index() == 0:
        sizes.append([])
    sizes[-1].append(bucket.buffer().numel())
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def per_step_ms(run: Callable[[int], None], steps: int) -> float:
    """The median time of ``steps`` calls of ``run``, ms (the median: the
    cores are shared, and a step the scheduler held up says nothing)."""
    for i in range(WARMUP):
        run(i)
    dist.barrier()
    times = []
    for i in range(steps):
        start = time.perf_counter()
        run(i)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def worker(args: argparse.Namespace) -> dict[str, float]:
    """One DDP process: the three step timings and the two all-reduce timings."""
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    x, y = load(0)[0].tensors
    starts = range(rank * args.batch, len(y) - args.batch + 1, WORKERS * args.batch)
    batches = [(x[s : s + args.batch], y[s : s + args.batch]) for s in starts]

    def ddp(state: object = None, hook: Hook | None = None) -> float:
        """ms per step of a fresh model, with ``hook`` or Gloo's all-reduce."""
        torch.manual_seed(0)
        model = DistributedDataParallel(make_model(args.hidden), bucket_cap_mb=args.bucket_cap_mb)
        if hook is not None:
            model.register_comm_hook(state, hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def step(i: int) -> None:
            xb, yb = batches[i % len(batches)]
            opt.zero_grad()
            torch.autograd.backward(F.cross_entropy(model(xb), yb))
            opt.step()

        return per_step_ms(step, args.steps)

    sizes: list[list[int]] = []
    out = {"compute": ddp(sizes, _record)}
    buffers = [torch.zeros(n) for n in sizes[-1]]

    def gloo_alone(_: int) -> None:
        for b in buffers:
            dist.all_reduce(b)

    out["gloo"] = ddp()
    out["gloo_alone"] = per_step_ms(gloo_alone, args.steps)

    state = EsaHookState.from_env()

    def esa_alone(_: int) -> None:
        last = len(buffers) - 1
        futures = [state.submit(TensorBucket(i, b, i == last)) for i, b in enumerate(buffers)]
        for f in futures:
            f.wait()

    out["esa"] = ddp(state, esa_hook)
    out["esa_alone"] = per_step_ms(esa_alone, args.steps)
    out["buckets"] = len(buffers)
    state.close()
    dist.destroy_process_group()
    return out


def hidden_share(compute: float, step: float, alone: float) -> float:
    return min(1.0, max(0.0, (compute + alone - step) / alone))


def collect(procs: list[subprocess.Popen[str]]) -> list[dict[str, float]]:
    """Each worker's JSON line; raises SystemExit when one fails."""
    try:
        outs = [p.communicate(timeout=600)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if any(p.returncode for p in procs):
        raise SystemExit("a worker failed (see its error above, or its log in results/)")
    return [json.loads(out.strip().splitlines()[-1]) for out in outs]


def run_loopback(argv: Sequence[str]) -> list[dict[str, float]]:
    """The workers on this machine, meeting at a rendezvous store held here;
    each inherits the socket the loopback job bound for it."""
    store = TCPStore(LOCAL, 0, WORKERS, is_master=True, wait_for_workers=False)
    with LoopJob(JOB, WORKERS) as bed:
        procs = []
        for rank in range(WORKERS):
            env = {**os.environ, **ddp_env(rank, WORKERS, store.port)}
            env.update({**bed.esa_env(rank), "ESA_LINGER": "0.2"})
            cmd = [sys.executable, "-m", "bench.torch_overlap", "--worker", *argv]
            procs.append(
                subprocess.Popen(
                    cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True,
                    pass_fds=[bed.worker_fd(rank)],
                )
            )  # fmt: skip
        return collect(procs)


def run_mininet(args: argparse.Namespace, argv: Sequence[str]) -> list[dict[str, float]]:
    """The workers on the hosts of a job admitted on BMv2 (inside a private world)."""
    spec = JobSpec(JOB, WORKERS, torchjobs.mlp_values(args.hidden), 1, priority=100)
    with mininet_job.mininet_job(spec, args.window, LOGS) as (world, scenario, hosts):
        procs = []
        for m in hosts.workers:
            env = {**torchjobs.ddp_env(scenario, spec, hosts, m), "ESA_LINGER": "0.2"}
            cmd = torchjobs.command(env, "bench.torch_overlap", ["--worker", *argv])
            procs.append(world.popen(m.name, cmd, f"{m.role}.log"))
        return collect(procs)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.torch_overlap", description=__doc__.splitlines()[0])
    p.add_argument("--switch", choices=sorted(SWITCHES), default="bmv2", help="where to sum")
    p.add_argument("--steps", type=int, default=100, help="timed steps per measurement")
    p.add_argument("--hidden", type=int, default=64, help="hidden units of the example MLP")
    p.add_argument("--batch", type=int, default=32, help="samples per worker and step")
    p.add_argument("--bucket-cap-mb", type=float, default=0.001, help="DDP's bucket size")
    p.add_argument("--window", type=int, default=16, help="chunks in flight per worker (bmv2)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON line")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)), flush=True)
        return 0
    given = list(sys.argv[1:] if argv is None else argv)
    if args.switch == "bmv2" and not mininet_job.inside():
        why = mininet_job.missing()
        if why:
            raise SystemExit(f"bench.torch_overlap: {why} (--switch loopback runs without)")
        return mininet_job.in_private_world("bench.torch_overlap", given)
    passed = [a for a in given if a != "--json"]
    results = run_mininet(args, passed) if args.switch == "bmv2" else run_loopback(passed)
    mean = {k: sum(r[k] for r in results) / len(results) for k in results[0]}
    rows = {
        m: {
            "step_ms": mean[m],
            "compute_ms": mean["compute"],
            "allreduce_alone_ms": mean[f"{m}_alone"],
            "hidden": hidden_share(mean["compute"], mean[m], mean[f"{m}_alone"]),
        }
        for m in MODES
    }
    if args.json:
        print(json.dumps({"switch": args.switch, "buckets": int(mean["buckets"]), **rows}))
        return 0
    print(
        f"{WORKERS} workers, {int(mean['buckets'])} buckets per step, {args.steps} steps, "
        f"{SWITCHES[args.switch]}"
    )
    print(f"{'':6}{'step ms':>10}{'compute ms':>12}{'all-reduce alone ms':>21}{'hidden':>8}")
    for m, r in rows.items():
        print(
            f"{m:6}{r['step_ms']:10.2f}{r['compute_ms']:12.2f}"
            f"{r['allreduce_alone_ms']:21.2f}{r['hidden']:8.0%}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
