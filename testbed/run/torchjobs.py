"""``make run --train torch``: each job trains the PyTorch example
(``examples/torch_digits.py``, an MLP on scikit-learn's digits) with
DistributedDataParallel on its Mininet hosts, its gradients summed through
the switch by the ESA hook.

A job's fields map onto the example:

- ``workers``: DDP processes, one per worker host, started as ``torchrun``
  would (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` on
  worker 0's host) plus the job's ``ESA_*`` settings; DDP's Gloo process
  group (its start-up broadcast) runs over the hosts' Mininet links;
- ``iterations``: epochs;
- ``values``: the size of the gradient, which sets the MLP's hidden width
  (the width whose parameter count comes closest; ``prepare`` sets
  ``values`` to that count);
- ``compute_s`` and ``jitter``: unused, the computation is the training's.

DDP gets one bucket per layer (``BUCKET_CAP_MB``), so the sum of one layer's
gradient overlaps the backward pass of the next.  Each worker prints a line
per epoch (the run's progress) and a JSON report at the end.  A job's JCT is
its slowest worker's training time; it is ``exact`` when every worker ended
with the same parameters, bit for bit.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from esa.job import JobSpec
from testbed.run.report import JobResult
from testbed.run.scenario import TORCH, Scenario, with_specs
from testbed.run.topology import JobHosts, Member
from testbed.run.world import PY

SCRIPT = "examples.torch_digits"
MASTER_PORT = 29500
"""Gloo's rendezvous port on worker 0's host."""
BUCKET_CAP_MB = 0.001
"""below a layer's gradient: DDP makes a bucket of each layer."""
SEED = 0
PROGRESS = "epoch "
"""how the example's per-epoch lines start."""


def mlp_values(hidden: int) -> int:
    """Parameters of the example's MLP (64 inputs, ``hidden`` units, 10 classes)."""
    return 64 * hidden + hidden + hidden * 10 + 10


def hidden_for(values: int) -> int:
    """The hidden width whose MLP has about ``values`` parameters (at least 1)."""
    return max(1, round((values - 10) / 75))


def prepare(s: Scenario) -> Scenario:
    """A torch scenario's jobs with ``values`` set to their MLP's parameter count."""
    if s.train != TORCH:
        return s
    return with_specs(s, lambda j: replace(j, values=mlp_values(hidden_for(j.values))))


def train_args(job: JobSpec) -> list[str]:
    """The example's arguments for ``job`` (add ``--esa`` to sum through the switch)."""
    return [
        "--epochs", str(job.iterations), "--hidden", str(hidden_for(job.values)),
        "--bucket-cap-mb", f"{BUCKET_CAP_MB:g}", "--seed", str(SEED),
    ]  # fmt: skip


def ddp_env(s: Scenario, job: JobSpec, hosts: JobHosts, me: Member) -> dict[str, str]:
    """What ``torchrun`` would set for worker ``me`` of ``job``, and its ``ESA_*`` settings."""
    return {
        "RANK": str(me.index),
        "LOCAL_RANK": "0",
        "WORLD_SIZE": str(job.workers),
        "MASTER_ADDR": hosts.workers[0].ip,
        "MASTER_PORT": str(MASTER_PORT),
        "GLOO_SOCKET_IFNAME": f"{me.name}-eth0",
        "OMP_NUM_THREADS": "1",
        "ESA_JOB": str(job.job),
        "ESA_PS": hosts.ps_addresses,
        "ESA_BIND": f"{me.ip}:{me.udp_port}",
        "ESA_WINDOW": str(s.window),
        "ESA_RTO": f"{s.rto_s:g}",
        "ESA_TIMEOUT": f"{s.timeout_s:g}",
    }


def command(env: dict[str, str], module: str, args: list[str]) -> list[str]:
    """``python -m module args`` with ``env`` added to the environment."""
    return ["env", *(f"{k}={v}" for k, v in env.items()), PY, "-m", module, *args]


def worker_command(s: Scenario, job: JobSpec, hosts: JobHosts, me: Member) -> list[str]:
    return command(ddp_env(s, job, hosts, me), SCRIPT, ["--esa", *train_args(job)])


def result(
    job: JobSpec,
    reports: dict[tuple[int, int], dict[str, Any]],
    events: dict[str, int],
    lost: int,
) -> JobResult:
    """From the workers' JSON reports and the job's switch counters."""
    mine = [r for (j, _), r in sorted(reports.items()) if j == job.job]
    jct = max(float(r["seconds"]) for r in mine)
    chunks = int(mine[0]["counters"]["delivered"])
    same = len(mine) == job.workers and len({r["params_sha256"] for r in mine}) == 1
    return JobResult(
        job=job.job,
        jct_s=jct,
        iters_per_s=int(mine[0]["steps"]) / jct,
        chunks=chunks,
        switch_share=min(1.0, events.get("completed", 0) / max(1, chunks)),
        fallbacks=int(events.get("fallback", 0)),
        preempt_won=int(events.get("preempt_won", 0)),
        preempt_suffered=int(events.get("preempt_suffered", 0)),
        retransmits=sum(int(r["counters"]["retransmitted"]) for r in mine),
        lost=lost,
        exact=same,
        accuracy=float(mine[0]["accuracy"]),
        spurious=sum(int(r["counters"]["spurious"]) for r in mine),
    )
