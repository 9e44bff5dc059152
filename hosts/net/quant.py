"""float32 <-> int32 fixed point with a scale every worker of a job agrees on.

A job fixes a bound ``B`` (largest |gradient value| it expects) and its
fan-in ``F``.  The scale is the largest power of two ``s`` with
``F * (B*s + 1/2) <= 2**31 - 1``: a rounded in-bound value is at most
``B*s + 1/2`` in magnitude, so the sum of ``F`` of them cannot overflow
int32.  A power of two (rather than ``floor((2**31-1)/(F*B))``) makes both
``x * s`` and ``sum / s`` exact in binary floating point, so rounding to the
nearest integer is the only error: at most ``1/(2s)`` per value, ``F/(2s)``
per summed element, plus the final float32 rounding of the result.

Values beyond ``B`` (and NaN/inf) are clipped and their chunk is flagged:
its exact sum is then recovered through FLOAT packets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from esa import wire

INT32_MAX = 2**31 - 1


def job_scale(bound: float, fan_in: int) -> float:
    """The power-of-two scale for bound ``B`` and fan-in ``F`` (see module doc)."""
    if not bound > 0 or not math.isfinite(bound):
        raise ValueError(f"bound must be positive and finite, got {bound}")
    if not 1 <= fan_in <= wire.MAX_WORKERS:
        raise ValueError(f"fan-in must be 1..{wire.MAX_WORKERS}, got {fan_in}")
    limit = (INT32_MAX / fan_in - 0.5) / bound
    if limit <= 0:
        raise ValueError(f"bound {bound} too large for fan-in {fan_in}")
    exp = math.floor(math.log2(limit))
    while fan_in * (bound * 2.0**exp + 0.5) > INT32_MAX:
        exp -= 1
    return 2.0**exp


@dataclass(frozen=True)
class Quantised:
    """A tensor cut into K-value chunks: int32 values and per-chunk overflow flags."""

    values: npt.NDArray[np.int32]
    """shape (chunks, K)"""
    floats: npt.NDArray[np.float32]
    """the original values, zero-padded, shape (chunks, K)"""
    clipped: npt.NDArray[np.bool_]
    """shape (chunks,): a value was out of bound (or not finite)"""


def chunks(n: int) -> int:
    return -(-n // wire.K)


def quantise(tensor: npt.NDArray[np.float32], bound: float, scale: float) -> Quantised:
    flat = np.asarray(tensor, dtype=np.float32).ravel()
    padded = np.zeros(chunks(flat.size) * wire.K, dtype=np.float32)
    padded[: flat.size] = flat
    rows = padded.reshape(-1, wire.K)
    bad = ~(np.abs(rows) <= bound)
    safe = np.nan_to_num(np.clip(rows, -bound, bound), nan=0.0)
    q = np.rint(safe.astype(np.float64) * scale).astype(np.int32)
    return Quantised(values=q, floats=rows, clipped=np.asarray(bad.any(axis=1)))


def dequantise(total: npt.ArrayLike, scale: float) -> npt.NDArray[np.float32]:
    """A sum of quantised values back to float32 (exact division, one rounding)."""
    return (np.asarray(total, dtype=np.float64) / scale).astype(np.float32)


def float_bits(values: npt.ArrayLike) -> npt.NDArray[np.int32]:
    """float32 values as the int32 bit patterns FLOAT packets carry."""
    return np.asarray(values, dtype=np.float32).view(np.int32)


def from_bits(bits: npt.ArrayLike) -> npt.NDArray[np.float32]:
    return np.asarray(bits, dtype=np.int32).view(np.float32)
