"""A trace's slice as a point of the sweep: every scheme, several seeds, the
links of ``make sim``'s moderate point."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from esa.job import JobSpec
from sim import sweep
from sim.traces.rules import Slice, to_specs

MODERATE = next(p for p in sweep.REGIMES if p.name == "moderate")


@dataclass(frozen=True, kw_only=True)
class TracePoint(sweep.Point):
    """Its jobs come from a trace, not from ``make_jobs`` (``load`` is not
    set: a trace's offered load is what it is)."""

    slice: Slice
    speedup: float = 1.0

    def specs(self, seed: int) -> list[JobSpec]:
        return to_specs(self.slice, self.net(), seed, self.mix, self.speedup)


def point(name: str, sl: Slice, pool: int, mix: str, speedup: float) -> TracePoint:
    like: dict[str, Any] = {f.name: getattr(MODERATE, f.name) for f in fields(sweep.Point)}
    like |= {"name": name, "mix": mix, "load": math.nan, "pool": pool, "jobs": len(sl.jobs)}
    return TracePoint(**like, slice=sl, speedup=speedup)
