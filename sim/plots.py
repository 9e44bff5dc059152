"""PNG figures of the sweep (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from sim.params import Scheme
from sim.sweep import HEADLINE


def jct_cdf(rows: list[dict[str, object]], path: Path) -> None:
    """JCT CDF per scheme over every job of every point."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for scheme in Scheme:
        v = np.sort([float(str(r["jct_s"])) for r in rows if r["scheme"] == scheme.value])
        ax.plot(v, np.arange(1, len(v) + 1) / len(v), label=scheme.value)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s)")
    ax.set_ylabel("fraction of jobs")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def ratio_vs_pool(summary: list[dict[str, object]], path: Path) -> None:
    """ATP/ESA mean-JCT ratio against pool size, one line per (mix, load)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    keys = sorted({(str(r["mix"]), float(str(r["load"]))) for r in summary})
    for mix, load in keys:
        pts = sorted(
            (int(str(r["pool"])), float(str(r[f"atp/{HEADLINE.value}"])))
            for r in summary
            if r["mix"] == mix and float(str(r["load"])) == load
        )
        ax.plot([p for p, _ in pts], [q for _, q in pts], marker="o", label=f"{mix}, load {load:g}")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.axhline(1.35, color="grey", lw=0.8, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("switch pool (slots)")
    ax.set_ylabel(f"mean JCT ATP / {HEADLINE.value}")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
