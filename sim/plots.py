"""PNG figures of the sweep (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from esa.schemes import SIM_SCHEMES
from sim.params import BASELINES, ESA_SCHEMES
from sim.summary import Summary
from sim.sweep import Row


def jct_cdf(rows: list[Row], path: Path) -> None:
    """JCT CDF per scheme over every job of every point and seed."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for scheme in SIM_SCHEMES:
        v = np.sort([float(str(r["jct_s"])) for r in rows if r["scheme"] == scheme.value])
        ax.plot(v, np.arange(1, len(v) + 1) / len(v), label=scheme.value)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s)")
    ax.set_ylabel("fraction of jobs")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def gain(summaries: list[Summary], path: Path) -> None:
    """Per point: the best baseline's mean JCT over each ESA variant's."""
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(summaries) + 1.5))
    y = np.arange(len(summaries))
    height = 0.8 / len(ESA_SCHEMES)
    for k, sc in enumerate(ESA_SCHEMES):
        ratios = [s.ratio(s.best(BASELINES), sc) for s in summaries]
        ax.barh(y + k * height, ratios, height, label=sc.value)
    ax.axvline(1.0, color="grey", lw=0.8)
    ax.set_yticks(y + 0.4 - height / 2)
    ax.set_yticklabels([s.point.name for s in summaries], fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("best baseline mean JCT / ESA variant mean JCT (> 1: ESA ahead)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
