"""Public cluster traces, replayed in the simulator: a loader per format
(``philly``, ``helios``, ``pai``), each reading one file into
``record.TraceJob``s, and the rules (``rules``) that turn a window of them
into ``esa.job.JobSpec``s.  The traces are not in the repository
(docs/simulator.md, "Replaying cluster traces", says where they are)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sim.traces import helios, pai, philly
from sim.traces.record import TraceError, TraceJob
from sim.traces.rules import Slice, Window, select

READERS: dict[str, Callable[[Path], list[TraceJob]]] = {
    "philly": philly.read,
    "helios": helios.read,
    "pai": pai.read,
}


ALL = Window()


def load(fmt: str, path: Path, window: Window = ALL) -> Slice:
    """The jobs of ``path`` (a trace in format ``fmt``) that ``window``
    replays, with what it dropped."""
    if not path.is_file():
        raise TraceError(f"{path}: no such file")
    jobs = READERS[fmt](path)
    if not jobs:
        raise TraceError(f"{path}: no jobs")
    sl = select(jobs, window)
    if not sl.jobs:
        dropped = ", ".join(f"{d.value} {n}" for d, n in sl.dropped.items()) or "none"
        raise TraceError(
            f"{path}: no job to replay in window {window} ({sl.submitted} submitted; "
            f"dropped: {dropped})"
        )
    return sl
