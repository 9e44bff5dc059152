"""Synthetic training steps anyone can recompute: gradients, compute times,
and a fingerprint of a result.

The worker CLI streams these gradients; a run that started workers checks
what they received against numpy's sum of the same gradients, so both sides
must draw them the same way: they share this module.
"""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt


def synthetic_gradient(
    seed: int, job: int, index: int, it: int, bound: float, size: int
) -> npt.NDArray[np.float32]:
    """Worker ``index``'s gradient of iteration ``it``: anyone can recompute it."""
    rng = np.random.default_rng([seed, job, index, it])
    return rng.uniform(-bound, bound, size).astype(np.float32)


def digest(result: npt.NDArray[np.float32]) -> str:
    """A fingerprint of an all-reduce result, to check it bit for bit elsewhere."""
    return hashlib.sha256(np.ascontiguousarray(result, dtype=np.float32).tobytes()).hexdigest()


def compute_time(
    seed: int, job: int, index: int, it: int, compute_s: float, jitter: float
) -> float:
    """Seconds worker ``index`` computes before iteration ``it``: ``compute_s``
    give or take ``jitter`` (a fraction), uniformly, the same on every run."""
    rng = np.random.default_rng([seed, job, index, it, 1])
    return compute_s * (1.0 + jitter * float(rng.uniform(-1.0, 1.0)))
