"""``make run --train torch``: each job trains with DistributedDataParallel
on its Mininet hosts, its gradients summed through the switch by the ESA
hook: the PyTorch example (``examples/torch_digits.py``, an MLP on
scikit-learn's digits), or the scenario's ``script`` (``--script FILE|MODULE
--script-args ARGS``), any DDP script that registers the hook
(``hosts.torch.hook.register(model)``), or any script that trains on the
``esa`` process group (``hosts.torch.backend``), whose every all-reduce is
a step.

Each worker host runs the script under ``runner.torchworker``, as
``torchrun`` would start it (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``MASTER_ADDR`` and ``MASTER_PORT`` on worker 0's host), with
``GLOO_SOCKET_IFNAME`` its Mininet interface (DDP's Gloo process group, its
start-up broadcast, runs over the hosts' links) and the job's ``ESA_*``
settings (``ddp_env``).  The job's result comes from the hook's reports
(``ESA_REPORT``), whatever the script prints: a job's JCT is its slowest
worker's time from its first all-reduce to its last, and it is ``exact``
when every worker's hook hashed the same parameters, bit for bit (the same
last sums, for a hook registered without ``register``).  ``accuracy`` is
the last ``{"accuracy": ...}`` JSON line worker 0's script printed, if any.

A job's fields map onto the example:

- ``iterations``: epochs (the example prints a line per epoch, which the
  run counts against them; the table shows the steps);
- ``values``: the size of the gradient, which sets the MLP's hidden width
  (the width whose parameter count comes closest; ``prepare`` sets
  ``values`` to that count);
- ``compute_s`` and ``jitter``: unused, the computation is the training's.

DDP gets one bucket per layer (``BUCKET_CAP_MB``), so the sum of one layer's
gradient overlaps the backward pass of the next.

Onto a script: the script's arguments are its own, and the job's
``iterations`` are DDP steps.  ``values`` and ``iterations`` need not match
the script: they only size a job without a static priority for the
controller (its automatic priority's size hint, ``4 * values *
iterations`` bytes, less ``4 * values`` per step summed, never below
zero).  The table shows the gradient values and the steps the hook really
summed.  For the example and a script alike the run follows every step
each worker's hook sums, and stops a job only when it stalls
(``runner.stall``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from esa.job import JobSpec
from runner.network import HostRole, JobHosts
from runner.report import JobResult, partials_lost
from runner.scenario import TORCH, Scenario, is_script_file, with_specs
from runner.world import PY

SCRIPT = "examples.torch_digits"
"""the example, run when the scenario names no script."""
WORKER = "runner.torchworker"
"""what runs the script on a worker host, between it and the run."""
DIGESTS = ("params_sha256", "grads_sha256")
"""what a hook's report hashes: the model's parameters, or its last sums."""
MASTER_PORT = 29500
"""Gloo's rendezvous port on worker 0's host."""
BUCKET_CAP_MB = 0.001
"""below a layer's gradient: DDP makes a bucket of each layer."""
SEED = 0


def mlp_values(hidden: int) -> int:
    """Parameters of the example's MLP (64 inputs, ``hidden`` units, 10 classes)."""
    return 64 * hidden + hidden + hidden * 10 + 10


def hidden_for(values: int) -> int:
    """The hidden width whose MLP has about ``values`` parameters (at least 1)."""
    return max(1, round((values - 10) / 75))


def prepare(s: Scenario) -> Scenario:
    """A torch scenario's jobs with ``values`` set to their MLP's parameter
    count (the example's; a script's jobs are left as they are)."""
    if s.train != TORCH or s.script:
        return s
    return with_specs(s, lambda j: replace(j, values=mlp_values(hidden_for(j.values))))


def train_args(job: JobSpec) -> list[str]:
    """The example's arguments for ``job`` (add ``--esa`` to sum through the switch)."""
    return [
        "--epochs", str(job.iterations), "--hidden", str(hidden_for(job.values)),
        "--bucket-cap-mb", f"{BUCKET_CAP_MB:g}", "--seed", str(SEED),
    ]  # fmt: skip


def ddp_env(s: Scenario, job: JobSpec, hosts: JobHosts, me: HostRole) -> dict[str, str]:
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


def script_command(s: Scenario, job: JobSpec) -> list[str]:
    """What each worker of ``job`` trains with: the scenario's script with its
    arguments, or the example with ``train_args``."""
    if not s.script:
        return [PY, "-m", SCRIPT, "--esa", *train_args(job)]
    if is_script_file(s.script):
        return [PY, s.script, *s.script_args]
    return [PY, "-m", s.script, *s.script_args]


def counts_epochs(s: Scenario) -> bool:
    """Whether a job's ``iterations`` are epochs (the example's) rather than steps."""
    return s.train == TORCH and not s.script


def worker_command(s: Scenario, job: JobSpec, hosts: JobHosts, me: HostRole) -> list[str]:
    """``script_command`` under ``WORKER`` with ``ddp_env``, relaying every
    step, and the example's epochs."""
    epochs = ["--epochs"] if counts_epochs(s) else []
    return command(ddp_env(s, job, hosts, me), WORKER, [*epochs, "--", *script_command(s, job)])


def digest(report: dict[str, Any]) -> tuple[str, str] | None:
    """What a worker's report hashed, and the hash."""
    return next(((k, str(report[k])) for k in DIGESTS if k in report), None)


def result(
    job: JobSpec,
    reports: dict[tuple[int, int], dict[str, Any]],
    events: dict[str, int],
    dropped: int,
) -> JobResult:
    """From the workers' hook reports and the job's switch counters."""
    mine = [r for (j, _), r in sorted(reports.items()) if j == job.job]
    jct = max(float(r["seconds"]) for r in mine)
    steps = min(int(r["steps"]) for r in mine)
    chunks = int(mine[0]["counters"]["delivered"])
    digests = {digest(r) for r in mine}
    same = len(mine) == job.workers and len(digests) == 1 and None not in digests
    accuracy = mine[0].get("accuracy")
    return JobResult(
        job=job.job,
        values=int(mine[0].get("values", job.values)),
        iterations=steps,
        jct_s=jct,
        iter_per_s=steps / jct if jct > 0 else 0.0,
        chunks=chunks,
        in_switch=min(1.0, events.get("completed", 0) / max(1, chunks)),
        fallback=int(events.get("fallback", 0)),
        won=int(events.get("preempt_won", 0)),
        lost=partials_lost(events),
        retx=sum(int(r["counters"]["retransmitted"]) for r in mine),
        early=sum(int(r["counters"]["spurious"]) for r in mine),
        dropped=dropped,
        exact=same,
        accuracy=None if accuracy is None else float(accuracy),
    )
