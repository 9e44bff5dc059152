"""Jobs: DNN models with published sizes, Poisson arrivals, compute jitter."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from esa.job import JobSpec
from sim.params import Net


@dataclass(frozen=True)
class DnnModel:
    name: str
    params_m: float
    """parameters, millions (one int32 value each on the wire)."""
    compute_ms: float
    """one training iteration on one V100 (mixed precision) at ``batch``."""
    batch: int


# Parameter counts: torchvision model summaries (AlexNet 61.1M, VGG-16 138.4M,
# ResNet-50 25.6M, ResNet-152 60.2M) and Devlin et al. 2019 (BERT-base 110M).
# Compute: NVIDIA DeepLearningExamples ResNet-50 v1.5 on one V100 with mixed
# precision trains about 1,270 images/s, so 64 images take 50 ms; the CNNs are
# scaled from it by forward GFLOPs per image (AlexNet 0.72 with a 4x
# efficiency penalty for its small kernels, VGG-16 15.5, ResNet-152 11.5,
# ResNet-50 4.1).  BERT-base (sequence 128, batch 32): about 400 sequences/s on
# a V100 with mixed precision in the same repository's fine-tuning tables.
# docs/simulator.md ("Workload") explains the choices.
MODELS: dict[str, DnnModel] = {
    m.name: m
    for m in (
        DnnModel("alexnet", 61.1, 16.0, 64),
        DnnModel("vgg16", 138.4, 190.0, 64),
        DnnModel("resnet50", 25.6, 50.0, 64),
        DnnModel("resnet152", 60.2, 141.0, 64),
        DnnModel("bert-base", 110.0, 80.0, 32),
    )
}

MIXES: dict[str, tuple[str, ...]] = {
    "cnn": ("alexnet", "vgg16", "resnet50", "resnet152"),
    "mixed": ("alexnet", "vgg16", "resnet50", "resnet152", "bert-base"),
    "comm-heavy": ("alexnet", "vgg16", "bert-base"),
}


@dataclass(frozen=True)
class WorkloadSpec:
    mix: str = "mixed"
    jobs: int = 24
    load: float = 6.0
    """offered load: mean number of jobs in the system if each ran alone
    (arrival rate times mean uncontended JCT)."""
    workers: tuple[int, ...] = (4, 8, 16)
    iterations: tuple[int, int] = (5, 100)
    """log-uniform range of iterations per job (heavy spread, as in clusters)."""
    burst: int = 1
    """jobs per arrival: arrivals come in groups of this many at one instant
    (a batch of jobs submitted together), the groups Poisson."""
    jitter: float = 0.01
    """every job's ``JobSpec.jitter``: a worker's compute time is within 1 %
    of ``compute_s`` (a spread of 2 % between a job's workers)."""
    scale: float = 1.0
    """every model's values and compute time times this: below 1 a reduced
    workload (``sim.check``) whose jobs stream and compute in the same
    proportion, at the same load, in fewer packets."""


def make_jobs(spec: WorkloadSpec, net: Net, seed: int) -> list[JobSpec]:
    """Poisson arrivals at the rate that gives ``spec.load``."""
    rng = np.random.default_rng(seed)
    names = MIXES[spec.mix]
    shapes = []
    for _ in range(spec.jobs):
        model = MODELS[names[int(rng.integers(len(names)))]]
        lo, hi = np.log(spec.iterations[0]), np.log(spec.iterations[1])
        iters = round(float(np.exp(rng.uniform(lo, hi))))
        workers = spec.workers[int(rng.integers(len(spec.workers)))]
        shapes.append((model, iters, workers, int(rng.integers(1, 256))))
    alone = [
        it * spec.scale * (m.compute_ms * 1e-3 + m.params_m * 1e6 / 32 * net.pkt_ns * 1e-9)
        for m, it, _, _ in shapes
    ]
    rate = spec.load / float(np.mean(alone))
    groups = -(-spec.jobs // spec.burst)
    starts = np.cumsum(rng.exponential(spec.burst / rate, groups))
    arrivals = np.repeat(starts - starts[0], spec.burst)[: spec.jobs]
    return [
        JobSpec(
            job=i + 1,
            workers=w,
            values=round(m.params_m * 1e6 * spec.scale),
            iterations=it,
            priority=prio,
            arrival_s=float(arrivals[i]),
            compute_s=m.compute_ms * 1e-3 * spec.scale,
            jitter=spec.jitter,
            name=m.name,
        )
        for i, (m, it, w, prio) in enumerate(shapes)
    ]


def ideal_iteration_s(job: JobSpec, net: Net) -> float:
    """Compute plus streaming the gradient at line rate, no contention."""
    return job.compute_s + job.chunks * net.pkt_ns * 1e-9


def compute_times(job: JobSpec, seed: int) -> np.ndarray:
    """Compute time (s) of each (iteration, worker), uniform within
    ``job.jitter`` of ``compute_s`` as the hosts draw it
    (``hosts.programs.gradients.compute_time``); the same draw in both
    models."""
    rng = np.random.default_rng([seed, job.job])
    u = rng.random((job.iterations, job.workers))
    return job.compute_s * (1.0 + job.jitter * (2.0 * u - 1.0))


def beyond_compute(jobs: Sequence[JobSpec], jct: dict[int, float], seed: int = 0) -> float:
    """Mean over the jobs of JCT less the compute of the slowest worker of
    every iteration (seconds): what aggregation costs."""
    compute = {j.job: float(compute_times(j, seed).max(axis=1).sum()) for j in jobs}
    return float(np.mean([jct[j.job] - compute[j.job] for j in jobs]))


def lags(job: JobSpec, net: Net, seed: int) -> np.ndarray:
    """Extra one-way delay (ns) of each worker's packets to the switch; the
    same draw in both models."""
    rng = np.random.default_rng([seed, job.job, 1])
    return net.lag_ns * rng.random(job.workers)


def concurrency(jobs: list[JobSpec], net: Net) -> float:
    """Jobs running at once, as a running job sees it (itself included), if
    each ran alone from its arrival: the time average of n(t) weighted by
    n(t), so a burst counts as the crowd its jobs meet."""
    edges = sorted(
        [(j.arrival_s, 1) for j in jobs]
        + [(j.arrival_s + j.iterations * ideal_iteration_s(j, net), -1) for j in jobs]
    )
    n, last, seen, weight = 0, edges[0][0], 0.0, 0.0
    for t, step in edges:
        seen += n * n * (t - last)
        weight += n * (t - last)
        n, last = n + step, t
    return seen / weight
