"""When the run stops a job for stalling (``runner.stall``): progress is any
step summed or any chunk through the switch, however many iterations the
scenario gave the job, and the reason names what stopped."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from runner import jobs, stall
from runner import scenario as scn
from runner.paths import ROOT

S = scn.load(scn.DEFAULT)
JOB = replace(S.jobs[0].spec, iterations=6, compute_s=2.0, jitter=0.5)


def test_the_limit_is_the_scenarios_or_the_jobs_deadlines() -> None:
    assert stall.limit_s(S, JOB) == 2.0 * 1.5 + 30 + 30
    assert stall.limit_s(replace(S, train=scn.TORCH), JOB) == 30 + 30, "a script's compute"
    assert stall.limit_s(replace(S, stall_s=7.5), JOB) == 7.5
    raw = {**scn.as_json(S), "stall_s": 7.5}
    assert scn.from_json(json.loads(json.dumps(raw))).stall_s == 7.5
    assert scn.from_json(scn.as_json(scn.from_json(raw))) == scn.from_json(raw)


def _watch(limit: float = 10.0, unit: str = "step") -> stall.Watch:
    return stall.Watch(limit, unit, since=100.0, marks=(0, 5))


def test_steps_beyond_the_jobs_iterations_keep_it_going() -> None:
    w = _watch()
    for n in range(1, 41):  # 40 steps of a job whose scenario says 6 iterations
        w.see(100.0 + 9 * n, steps=2 * n, chunks=5)
        assert w.stalled(100.0 + 9 * n + 9.5, done=n) == ""
    assert w.stalled(100.0 + 9 * 40 + 10.5, done=40) == (
        "no step summed and no chunk through the switch for 10 s after 40 steps; stopped"
    )


def test_chunks_through_the_switch_are_progress_within_a_long_step() -> None:
    w = _watch()
    w.see(101.0, steps=2, chunks=5)
    for t in (110.0, 119.0, 128.0):
        w.see(t, steps=2, chunks=int(t))
    assert w.stalled(137.5, done=1) == ""
    assert w.stalled(138.5, done=1) == (
        "no step summed and no chunk through the switch for 10 s after 1 step; stopped"
    )


def test_one_workers_step_is_progress() -> None:
    w = _watch(unit="iteration")
    w.see(101.0, steps=1, chunks=5)
    assert w.stalled(110.5, done=0) == ""
    assert w.stalled(111.5, done=0) == (
        "no iteration summed and no chunk through the switch for 10 s after 0 iterations; stopped"
    )


def test_a_job_has_at_least_START_S_for_its_first_progress() -> None:
    w = _watch()
    w.see(100.0 + stall.START_S, steps=0, chunks=5)  # the counters it arrived with
    assert w.stalled(100.0 + stall.START_S, done=0) == ""
    assert w.stalled(100.5 + stall.START_S, done=0) == (
        f"no step summed and no chunk through the switch in its first {stall.START_S:g} s; stopped"
    )
    longer = _watch(limit=stall.START_S + 60)
    assert longer.stalled(100.5 + stall.START_S, done=0) == ""
    assert longer.stalled(160.5 + stall.START_S, done=0).endswith(
        f"in its first {stall.START_S + 60:g} s; stopped"
    )


@pytest.mark.parametrize(("n", "text"), [(0, "0 steps"), (1, "1 step"), (48, "48 steps")])
def test_counts(n: int, text: str) -> None:
    assert stall.counted(n, "step") == text


class _Ctl:
    """The controller's end of the run: the remaining volumes reported."""

    def __init__(self) -> None:
        self.reported: list[int] = []

    def progress(self, job: int, remaining: int) -> None:
        self.reported.append(remaining)


def test_every_step_a_script_sums_counts_and_its_size_hint_ends_at_zero() -> None:
    s = scn.from_json(
        {"train": "torch", "script": str(ROOT / "tests" / "data" / "ddp_steps.py"),
         "jobs": [{"job": 1, "workers": 2, "values": 1370, "iterations": 6, "size_hint": True}]}
    )  # fmt: skip
    spec = s.jobs[0].spec
    ctl = _Ctl()
    world, timeline = SimpleNamespace(scenario=s), SimpleNamespace()
    runner = jobs.Runner(cast(Any, world), cast(Any, ctl), cast(Any, timeline), (spec,), 0.0, False)
    job = jobs.RunningJob(spec, 0.0, stall.Watch(60.0, "step", 0.0, (0, 0)))
    runner.jobs[spec.job] = job
    pipes = [os.pipe() for _ in (0, 1)]
    try:
        for w, (r, wr) in enumerate(pipes):
            job.workers[w] = jobs.RunningWorker(w, cast(Any, None), Path(f"j1w{w}.log"))
            runner.streams[r] = (1, w)
            os.write(wr, "".join(f"step {n}\n" for n in range(1, 25)).encode())
        for r, _ in pipes:  # all 24 lines in one read: each counted
            runner._read(r)
    finally:
        for fd in (fd for pipe in pipes for fd in pipe):
            os.close(fd)
    assert (job.steps, job.iters) == (24, 24)
    assert ctl.reported == [4 * 1370 * (6 - n) for n in range(1, 7)], "never below zero"
