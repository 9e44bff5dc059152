"""The slot timeline: who holds the pool, and each job's fallbacks and
preemptions, sampled at a fixed interval while a scheme runs.

Slots come from the switches' registers (``slot_owner`` and ``slot_count``:
BMv2's through one long-lived runtime CLI per switch, ``runner.devices.thrift``;
the reference switch's over one read-only P4Runtime session per switch,
``P4RuntimeRegisters``; with several switches a job's slots are counted on
all of them together), counters from the controller (``Stats``).  A switch
restart zeroes its counters; ``Totals`` carries each job's count across such
a drop, so a job's numbers are what it saw over the whole run (less what
happened between the last sample and the crash).  ``slots.csv`` holds every
sample; ``slots.png`` draws, one column per scheme on shared axes, the slots
each job held and its cumulative fallbacks and preemptions over time.
"""

from __future__ import annotations

import csv
import itertools
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Protocol

from controller.api.admin import AdminError
from controller.api.messages import Stats
from controller.device.switch import P4RuntimeSwitch
from controller.errors import ControllerError
from controller.world.fabric import Device
from esa.p4names import SLOT_OWNER, register

SLOT_COUNT = register("slot_count")
EVENTS = ("completed", "fallback", "preempt_won", "preempt_suffered")
"""the per-job counters the timeline keeps (names of ``esa-ctl stats --json``)."""


class Registers(Protocol):
    """Whole-array register reads (``runner.devices.thrift.RegisterReader``)."""

    def read(self, *names: str) -> dict[str, list[int]] | None: ...

    def close(self) -> None: ...


class P4RuntimeRegisters:
    """Whole-array register reads over P4Runtime, from a switch that serves
    them (the reference switch), through a read-only session (a backup with
    ``election_id``, below the controller's) opened at the first read and
    again after a read failed (the switch restarted, or had no pipeline yet)."""

    def __init__(self, device: Device, election_id: tuple[int, int]) -> None:
        self.device = device
        self.election_id = election_id
        self.switch: P4RuntimeSwitch | None = None

    def read(self, *names: str) -> dict[str, list[int]] | None:
        """Each register's values, or None when the switch can not be read now."""
        try:
            if self.switch is None:
                self.switch = P4RuntimeSwitch.connect(
                    self.device.p4runtime,
                    self.device.device_id,
                    self.election_id,
                    require_primary=False,
                )
            return self.switch.read_registers(*names)
        except ControllerError:
            self.close()
            return None

    def close(self) -> None:
        if self.switch is not None:
            self.switch.close()
        self.switch = None


class FabricRegisters:
    """The registers of several switches read as one: each array is the
    switches' arrays end to end, so a job's slots count on every switch it
    holds some on.  A read fails when any switch's does."""

    def __init__(self, readers: list[Registers]) -> None:
        self.readers = readers

    def read(self, *names: str) -> dict[str, list[int]] | None:
        out: dict[str, list[int]] = {n: [] for n in names}
        for reader in self.readers:
            got = reader.read(*names)
            if got is None:
                return None
            for n in names:
                out[n] += got[n]
        return out

    def close(self) -> None:
        for reader in self.readers:
            reader.close()


ReadStats = Callable[[], Stats]
"""Reads the controller's per-job counters; raises ``AdminError`` when the
controller or the switch can not answer."""


@dataclass(frozen=True)
class Sample:
    scheme: str
    round: int
    t_s: float
    job: int
    slots: int
    """slots whose owner is a chunk of this job."""
    contributions: int
    """sum of those slots' counts: contributions waiting in the switch."""
    completed: int
    fallback: int
    preempt_won: int
    preempt_suffered: int


def held(owners: list[int], counts: list[int]) -> dict[int, tuple[int, int]]:
    """Per job (``owner >> 32``): slots held and contributions in them."""
    out: dict[int, tuple[int, int]] = {}
    for owner, count in zip(owners, counts, strict=True):
        if owner:
            slots, contribs = out.get(owner >> 32, (0, 0))
            out[owner >> 32] = (slots + 1, contribs + count)
    return out


class Totals:
    """Counters that survive a switch restart: a value below the last one
    seen means the counter started again from 0."""

    def __init__(self) -> None:
        self.base: dict[tuple[int, str], int] = {}
        self.last: dict[tuple[int, str], int] = {}

    def update(self, job: int, name: str, value: int) -> int:
        key = (job, name)
        last = self.last.get(key, 0)
        if value < last:
            self.base[key] = self.base.get(key, 0) + last
        self.last[key] = value
        return self.get(job, name)

    def get(self, job: int, name: str) -> int:
        key = (job, name)
        return self.base.get(key, 0) + self.last.get(key, 0)


class Timeline:
    """Samples the pool and the counters every ``interval`` s on a thread."""

    def __init__(
        self,
        scheme: str,
        round_no: int,
        reader: Registers,
        stats: ReadStats,
        interval: float,
        t0: float,
    ) -> None:
        self.scheme, self.round = scheme, round_no
        self.reader, self.stats = reader, stats
        self.interval, self.t0 = interval, t0
        self.samples: list[Sample] = []
        self.totals = Totals()
        self.slots_now: dict[int, int] = {}
        self.slots_seen = False
        """some read of the slot registers succeeded: ``slots_now`` means something."""
        self.seen: set[int] = set()
        self.lock = threading.Lock()
        self.reading = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="timeline", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.reader.close()

    def _loop(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.sample()
            next_at += self.interval
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def counters(self) -> dict[int, dict[str, int]]:
        """Read the counters now and fold them into the totals; {} if unreadable.
        One read at a time: an older read folded in after a newer one would
        look like a switch restart."""
        with self.reading:
            try:
                jobs = self.stats().jobs
            except AdminError:  # the controller or the switch is down: a gap
                return {}
            with self.lock:
                return {
                    j: {e: self.totals.update(j, e, c.get(e, 0)) for e in EVENTS}
                    for j, c in jobs.items()
                }

    def sample(self) -> None:
        """One row per job seen so far.  The registers come from the switch and
        the counters from the controller, so either may be missing while the
        other restarts: slots are -1 without the registers, counters stay at
        their last totals without the controller."""
        t = time.monotonic() - self.t0
        regs = self.reader.read(SLOT_OWNER, SLOT_COUNT)
        self.counters()
        pool = held(regs[SLOT_OWNER], regs[SLOT_COUNT]) if regs else {}
        with self.lock:
            if regs:
                self.slots_now = {j: s for j, (s, _) in pool.items()}
                self.slots_seen = True
            self.seen |= set(pool) | {j for j, _ in self.totals.last}
            for job in sorted(self.seen):
                slots, contribs = pool.get(job, (0, 0)) if regs else (-1, -1)
                totals = {e: self.totals.get(job, e) for e in EVENTS}
                self.samples.append(
                    Sample(self.scheme, self.round, t, job, slots, contribs, **totals)
                )

    def total(self, job: int, name: str) -> int:
        with self.lock:
            return self.totals.get(job, name)


def write_csv(path: Path, samples: list[Sample]) -> Path:
    """Every sample; ``slots`` and ``contributions`` are -1 where the registers
    could not be read (the switch was down)."""
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[fl.name for fl in fields(Sample)])
        w.writeheader()
        w.writerows(asdict(s) for s in samples)
    return path


def plot(
    path: Path, samples: list[Sample], schemes: list[str], pool_size: int, switch: str
) -> Path:
    """Slots held per job (stacked) and cumulative fallbacks / preemptions
    suffered per job, one column per scheme, first round only; the title
    names the ``switch`` they ran on."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    first = [s for s in samples if s.round == 1]
    jobs = sorted({s.job for s in first})
    colours = {j: f"C{k % 10}" for k, j in enumerate(jobs)}
    fig, axes = plt.subplots(
        2, len(schemes), figsize=(4.5 * len(schemes), 6), sharex=True, sharey="row", squeeze=False
    )
    for col, scheme in enumerate(schemes):
        mine = [s for s in first if s.scheme == scheme]
        top, bottom = axes[0][col], axes[1][col]
        # bars, not a filled area: a gap in the samples (a switch restart)
        # stays a gap instead of a line drawn across it
        times = sorted({s.t_s for s in mine if s.slots >= 0})
        gaps = [b - a for a, b in itertools.pairwise(times)]
        width = statistics.median(gaps) if gaps else 0.25
        base = [0] * len(times)
        for j in jobs if times else []:
            slots = {s.t_s: s.slots for s in mine if s.job == j and s.slots >= 0}
            heights = [slots.get(t, 0) for t in times]
            top.bar(times, heights, width, bottom=base, color=colours[j], align="edge", linewidth=0)
            base = [b + h for b, h in zip(base, heights, strict=True)]
        top.axhline(pool_size, color="black", linewidth=0.8, linestyle=":")
        if not times:
            top.set_ylim(0, pool_size * 1.1)
            top.text(0.5, 0.5, "slot registers not readable\non this switch",
                     ha="center", va="center", transform=top.transAxes)  # fmt: skip
        top.set_title(scheme)
        for j in jobs:
            pts = sorted((s.t_s, s.fallback, s.preempt_suffered) for s in mine if s.job == j)
            ts = [p[0] for p in pts]
            bottom.plot(ts, [p[1] for p in pts], color=colours[j])
            bottom.plot(ts, [p[2] for p in pts], color=colours[j], linestyle="--")
        bottom.set_xlabel("time since the run started (s)")
    axes[0][0].set_ylabel(f"slots held (pool {pool_size})")
    axes[1][0].set_ylabel("cumulative count")
    swatches = [Patch(color=colours[j]) for j in jobs]
    axes[0][-1].legend(swatches, [f"job {j}" for j in jobs], loc="upper right", fontsize="small")
    styles = [Line2D([], [], color="grey"), Line2D([], [], color="grey", linestyle="--")]
    # the columns of the job tables (runner.report.COLUMNS): preemptions suffered are lost
    axes[1][-1].legend(styles, ["fallback", "lost"], loc="upper left")
    fig.suptitle(f"slot pool over time; switch: {switch}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
