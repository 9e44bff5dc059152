"""Synthetic training steps: the same on every run, within their bounds."""

from __future__ import annotations

import numpy as np

from hosts.programs.gradients import compute_time, digest, synthetic_gradient


def test_gradients_are_reproducible_and_bounded() -> None:
    g = synthetic_gradient(1, 2, 0, 3, 0.5, 1000)
    assert g.dtype == np.float32 and g.shape == (1000,)
    assert np.array_equal(g, synthetic_gradient(1, 2, 0, 3, 0.5, 1000))
    assert float(np.abs(g).max()) <= 0.5
    assert digest(g) != digest(synthetic_gradient(1, 2, 1, 3, 0.5, 1000))


def test_compute_time_jitters_within_its_fraction() -> None:
    times = [compute_time(1, 4, w, it, 0.1, 0.3) for w in range(3) for it in range(50)]
    assert all(0.07 <= t <= 0.13 for t in times)
    assert len(set(times)) == len(times)
    assert times == [compute_time(1, 4, w, it, 0.1, 0.3) for w in range(3) for it in range(50)]
    assert compute_time(1, 4, 0, 0, 0.1, 0.0) == 0.1
