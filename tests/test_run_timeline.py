"""The slot timeline of ``make run``: register parsing, per-job holdings,
counters carried across a switch restart, and the files it writes."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import grpc

from controller.api.admin import AdminError
from controller.api.messages import Stats
from esa.p4names import SLOT_OWNER
from esa.spec import owner_key
from runner.devices.thrift import parse_register
from runner.timeline import (
    SLOT_COUNT,
    Sample,
    Timeline,
    Totals,
    held,
    plot,
    write_csv,
)


def test_parse_register_reads_the_whole_array() -> None:
    out = (
        "Obtaining JSON from switch...\nDone\nRuntimeCmd: "
        "EsaIngress.pool.slot_owner= 0, 4294967297, 0\nRuntimeCmd: "
        "EsaIngress.pool.slot_count= 0, 2, 0\nRuntimeCmd: "
    )
    assert parse_register(out, "EsaIngress.pool.slot_owner") == [0, 4294967297, 0]
    assert parse_register(out, "EsaIngress.pool.slot_count") == [0, 2, 0]
    assert parse_register(out, "EsaIngress.pool.slot_prio") is None


def test_held_counts_slots_and_contributions_per_job() -> None:
    owners = [0, owner_key(1, 5), owner_key(2, 0), owner_key(1, 9), 0]
    counts = [0, 2, 1, 1, 0]
    assert held(owners, counts) == {1: (2, 3), 2: (1, 1)}


def test_totals_survive_a_counter_restart() -> None:
    t = Totals()
    assert [t.update(1, "fallback", v) for v in (3, 10, 2, 6)] == [3, 10, 12, 16]
    assert t.get(1, "fallback") == 16
    assert t.get(2, "fallback") == 0


def test_csv_and_plot(tmp_path: Path) -> None:
    samples = [
        Sample(p, 1, t, job, slots, slots, 0, int(2 * t), 0, 0)
        for p in ("esa", "atp")
        for t in (0.0, 0.5, 1.0)
        for job, slots in ((1, 3), (2, 5))
    ]
    samples.append(Sample("esa", 1, 1.5, 1, -1, -1, 0, 2, 0, 0))
    path = write_csv(tmp_path / "slots.csv", samples)
    with path.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 13
    assert rows[0] == {
        "scheme": "esa", "round": "1", "t_s": "0.0", "job": "1", "slots": "3",
        "contributions": "3", "completed": "0", "fallback": "0", "preempt_won": "0",
        "preempt_suffered": "0",
    }  # fmt: skip
    png = plot(tmp_path / "slots.png", samples, ["esa", "atp"], 16, "BMv2 (simple_switch_grpc)")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    no_slots = [replace(s, slots=-1, contributions=-1) for s in samples]
    png = plot(tmp_path / "model.png", no_slots, ["esa", "atp"], 16, "reference switch")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


class FakeReader:
    """Register reads from a script: one dict (or None: switch down) per call."""

    def __init__(self, script: list[dict[str, list[int]] | None]) -> None:
        self.script = script

    def read(self, *names: str) -> dict[str, list[int]] | None:
        return self.script.pop(0)

    def close(self) -> None:
        pass


def test_samples_keep_going_while_either_side_restarts() -> None:
    """Slots are -1 while the switch is down; counters keep their totals
    while the controller is down and carry across the switch's restart."""
    pool = {SLOT_OWNER: [owner_key(1, 0), owner_key(1, 1), 0], SLOT_COUNT: [1, 2, 0]}
    reads: list[dict[str, list[int]] | None] = [pool, None, pool]
    stats: list[Stats | None] = [
        Stats(jobs={1: {"fallback": 4}}, drops={}, switches={}),
        Stats(jobs={1: {"fallback": 1}}, drops={}, switches={}),
        None,
    ]

    def read_stats() -> Stats:
        s = stats.pop(0)
        if s is None:
            raise AdminError(grpc.StatusCode.UNAVAILABLE, "controller down")
        return s

    tl = Timeline("esa", 1, FakeReader(reads), read_stats, 0.25, t0=0.0)
    for _ in range(3):
        tl.sample()
    rows = [(s.job, s.slots, s.contributions, s.fallback) for s in tl.samples]
    assert rows == [(1, 2, 3, 4), (1, -1, -1, 5), (1, 2, 3, 5)]
    assert tl.slots_now == {1: 2}


def test_a_switch_whose_registers_are_never_read_gives_counters_and_no_slots() -> None:
    """A switch down or without a pipeline while the run samples: every
    sample has slots -1, the counters go on, and the live line is told there
    is nothing to show (``slots_seen``)."""

    def read_stats() -> Stats:
        return Stats(jobs={1: {"fallback": 2, "completed": 7}}, drops={}, switches={})

    tl = Timeline("esa", 1, FakeReader([None, None]), read_stats, 0.25, t0=0.0)
    tl.sample()
    tl.sample()
    rows = [(s.job, s.slots, s.contributions, s.completed, s.fallback) for s in tl.samples]
    assert rows == [(1, -1, -1, 7, 2), (1, -1, -1, 7, 2)]
    assert (tl.slots_now, tl.slots_seen) == ({}, False)
