"""Cluster traces in (sim.traces): each format's loader on files written
here, the replay's rules, refused inputs, and one replay through the CLI."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from esa.schemes import SIM_SCHEMES
from sim.traces import ALL, load, pai, philly
from sim.traces.__main__ import main
from sim.traces.point import MODERATE
from sim.traces.record import TraceError, TraceJob
from sim.traces.rules import (
    MAX_ITERATIONS,
    DropReason,
    Window,
    draw,
    drop,
    parse_window,
    select,
    to_specs,
)
from sim.traces.synth import GPUS
from sim.traces.synth import philly as synth_philly

NET = MODERATE.net()


def attempt(start: str | None, end: str | None, *gpus: int) -> dict[str, Any]:
    """One Philly attempt, ``gpus[i]`` GPUs on server ``m{i}``."""
    detail = [{"ip": f"m{i}", "gpus": [f"gpu{g}" for g in range(n)]} for i, n in enumerate(gpus)]
    return {"start_time": start, "end_time": end, "detail": detail}


def entry(jobid: str, submitted: str, *attempts: dict[str, Any], status: str = "Pass") -> Any:
    return {
        "status": status,
        "vc": "vc1",
        "jobid": jobid,
        "attempts": list(attempts),
        "submitted_time": submitted,
        "user": "u1",
    }


DAY = "2017-10-01 "

PHILLY = [
    entry("app_1", DAY + "00:00:00", attempt(DAY + "00:01:00", DAY + "00:11:00", 8, 8)),
    entry("app_2", DAY + "00:00:30", attempt(DAY + "00:01:00", DAY + "00:02:00", 1)),
    entry("app_3", DAY + "00:02:00"),
    entry(
        "app_4",
        DAY + "00:01:00",
        attempt(DAY + "00:05:00", DAY + "00:06:00", 4),
        attempt(DAY + "00:07:00", DAY + "00:20:00", 4),
        status="Failed",
    ),
    entry("app_5", DAY + "00:03:00", attempt(DAY + "00:03:00", None, 2)),
    entry("app_6", DAY + "00:04:00", attempt(DAY + "00:05:00", DAY + "00:06:00", *[8] * 8)),
]
"""16 GPUs for 600 s; a single GPU; no attempt; 4 GPUs from the first
attempt's start to the second's end (900 s), failed; no end; 64 GPUs for 60 s."""


def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data))
    return path


def write_csv(path: Path, rows: list[list[str]]) -> Path:
    with path.open("w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    return path


def test_philly_jobs_become_specs(tmp_path: Path) -> None:
    sl = load("philly", write_json(tmp_path / "cluster_job_log", PHILLY))
    assert [j.trace_id for j in sl.jobs] == ["app_1", "app_4", "app_6"]
    assert sl.submitted == 6
    assert sl.dropped == {DropReason.SINGLE_GPU: 1, DropReason.NO_GPU: 1, DropReason.NO_TIME: 1}
    assert sl.capped == 1
    specs = to_specs(sl, NET, seed=0, speedup=60.0)
    assert [s.job for s in specs] == [1, 2, 3]
    assert [s.arrival_s for s in specs] == [0.0, 1.0, 4.0]
    assert [s.workers for s in specs] == [16, 4, 32]
    # seed 0 draws bert-base for all three: 0.130 s an iteration alone
    assert [s.name for s in specs] == ["bert-base"] * 3
    assert [s.iterations for s in specs] == [77, 115, 8]
    assert [s.priority for s in specs] == [108, 201, 38]
    assert [s.values for s in specs] == [110_000_000] * 3
    assert [s.compute_s for s in specs] == [0.08] * 3
    other = to_specs(sl, NET, seed=1, speedup=60.0)
    assert [(s.name, s.iterations) for s in other] == [
        ("alexnet", 228),
        ("resnet152", 89),
        ("alexnet", 23),
    ]
    assert [s.iterations for s in to_specs(sl, NET, seed=0)] == [MAX_ITERATIONS] * 2 + [460]


def test_a_window_selects_by_submission_and_arrives_from_its_start(tmp_path: Path) -> None:
    path = write_json(tmp_path / "log", PHILLY)
    sl = load("philly", path, parse_window("30:240"))
    assert [j.trace_id for j in sl.jobs] == ["app_4"]
    assert sl.submitted == 4
    assert sl.dropped == {DropReason.SINGLE_GPU: 1, DropReason.NO_GPU: 1, DropReason.NO_TIME: 1}
    assert [s.arrival_s for s in to_specs(sl, NET, 0)] == [30.0]


def test_the_model_draw_is_a_hash_of_seed_and_id() -> None:
    model, priority = draw(0, "b", "mixed")
    assert (model.name, priority) == ("resnet152", 175)
    assert draw(1, "b", "mixed")[0].name == "alexnet"
    assert draw(1, "a", "cnn")[0].name in ("alexnet", "vgg16", "resnet50", "resnet152")


HELIOS_HEAD = (
    "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue"
)


def helios_row(job: str, gpus: int, submit: str, start: str, end: str, state: str) -> str:
    return f"{job},uA,vcB,{gpus},4,1,{state},{submit},{start},{end},0,0"


def test_helios_jobs(tmp_path: Path) -> None:
    t = "2020-06-09 18:"
    lines = [
        HELIOS_HEAD,
        helios_row("11", 8, t + "41:01", t + "41:01", t + "51:01", "COMPLETED"),
        helios_row("12", 1, t + "41:27", t + "41:27", t + "45:36", "FAILED"),
        helios_row("13", 0, t + "41:28", t + "41:28", t + "42:28", "COMPLETED"),
        helios_row("14", 2, t + "42:00", "", "", "CANCELLED"),
        helios_row("15", 16, t + "43:00", t + "45:00", t + "44:00", "COMPLETED"),
        helios_row("16", 4, t + "41:00", t + "41:30", t + "42:00", "CANCELLED"),
    ]
    path = tmp_path / "cluster_log.csv"
    path.write_text("\n".join(lines) + "\n")
    sl = load("helios", path)
    assert [(j.trace_id, j.gpus, j.run_s) for j in sl.jobs] == [("16", 4, 30.0), ("11", 8, 600.0)]
    assert [j.submit_s - sl.start_s for j in sl.jobs] == [0.0, 1.0]
    assert sl.submitted == 6
    assert sl.dropped == {
        DropReason.SINGLE_GPU: 1,
        DropReason.NO_GPU: 1,
        DropReason.NO_TIME: 1,
        DropReason.BACKWARDS: 1,
    }


def task(job: str, name: str, inst: str, start: str, end: str, gpu: str) -> list[str]:
    return [job, name, inst, "Terminated", start, end, "600.0", "29.3", gpu, "V100"]


def test_pai_jobs_join_their_tasks(tmp_path: Path) -> None:
    jobs = [
        ["j1", "i1", "u", "Terminated", "1000.0", "2000.0"],
        ["j2", "i2", "u", "Terminated", "1010.0", "1100.0"],
        ["j3", "i3", "u", "Failed", "1020.0", "1100.0"],
        ["j4", "i4", "u", "Running", "1030.0", ""],
        ["j5", "i5", "u", "Terminated", "1005.0", "1500.0"],
    ]
    tasks = [
        task("j1", "ps", "2.0", "1050.0", "1900.0", ""),
        task("j1", "worker", "4.0", "1060.0", "1800.0", "100.0"),
        task("j1", "evaluator", "1.0", "1070.0", "1950.0", "50.0"),
        task("j2", "worker", "2.0", "1020.0", "1090.0", "50.0"),
        task("j4", "worker", "2.0", "0.0", "", "100.0"),
        task("j5", "tensorflow", "1.0", "1010.0", "1410.0", "800.0"),
        task("elsewhere", "worker", "8.0", "1.0", "2.0", "100.0"),
    ]
    path = write_csv(tmp_path / "pai_job_table.csv", [list(pai.JOB_COLUMNS), *jobs])
    write_csv(tmp_path / "pai_task_table.csv", tasks)
    sl = load("pai", path)
    assert [(j.trace_id, j.gpus, j.run_s) for j in sl.jobs] == [("j1", 5, 890.0), ("j5", 8, 400.0)]
    assert [j.submit_s - sl.start_s for j in sl.jobs] == [0.0, 5.0]
    assert sl.dropped == {DropReason.SINGLE_GPU: 1, DropReason.NO_GPU: 1, DropReason.NO_TIME: 1}


def refused(fmt: str, path: Path, message: str, window: Window = ALL) -> None:
    with pytest.raises(TraceError) as e:
        load(fmt, path, window)
    assert str(e.value) == message


def test_helios_refuses_a_missing_column_a_bad_time_and_a_short_row(tmp_path: Path) -> None:
    path = tmp_path / "c.csv"
    path.write_text("job_id,submit_time,start_time,end_time\n1,2020-06-09 18:41:01,,\n")
    refused(
        "helios",
        path,
        f"{path}: no column 'gpu_num' (needs job_id, gpu_num, submit_time, start_time, end_time)",
    )
    t = "2020-06-09 18:41:01"
    path.write_text(
        f"{HELIOS_HEAD}\n{helios_row('1', 2, t, t, t, 'COMPLETED')}\n"
        f"{helios_row('2', 2, '2020-06-31 00:00:00', t, t, 'COMPLETED')}\n"
    )
    refused(
        "helios",
        path,
        f"{path}: line 3: submit_time '2020-06-31 00:00:00' is not a time YYYY-MM-DD HH:MM:SS",
    )
    path.write_text(f"{HELIOS_HEAD}\n1,uA,vcB,2,4\n")
    refused("helios", path, f"{path}: line 2: 5 fields, the header names 12")
    path.write_text(f"{HELIOS_HEAD}\n{helios_row('1', -2, t, t, t, 'COMPLETED')}\n")
    refused("helios", path, f"{path}: line 2: gpu_num '-2' is negative")


def test_philly_refuses_what_is_not_its_log(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_text("[{")
    refused(
        "philly",
        path,
        f"{path}: not JSON: Expecting property name enclosed in double quotes at line 1",
    )
    write_json(path, {"jobs": []})
    refused("philly", path, f"{path}: not a JSON list of jobs")
    write_json(path, [PHILLY[0], {k: v for k, v in PHILLY[1].items() if k != "attempts"}])
    refused("philly", path, f"{path}: job 2 (app_2): no 'attempts'")
    bad = entry("app_9", DAY + "00:00:00", attempt("2017-10-01T00:01:00", None, 2))
    write_json(path, [bad])
    refused(
        "philly",
        path,
        f"{path}: job 1 (app_9): attempt 1: start_time '2017-10-01T00:01:00' is not a time "
        "YYYY-MM-DD HH:MM:SS",
    )
    write_json(path, [{**PHILLY[0], "attempts": [{**PHILLY[0]["attempts"][0], "detail": "m1"}]}])
    refused("philly", path, f"{path}: job 1 (app_1): attempt 1: detail is not a list")
    write_json(path, [entry("app_9", "None")])
    refused("philly", path, f"{path}: job 1 (app_9): no submitted_time")
    write_json(path, [])
    refused("philly", path, f"{path}: no jobs")
    refused("philly", tmp_path / "nowhere", f"{tmp_path / 'nowhere'}: no such file")


def test_pai_refuses_bad_rows_and_a_missing_task_table(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "pai_job_table.csv", [["j1", "i1", "u", "Terminated", "1e3", ""]])
    refused(
        "pai",
        path,
        f"{path}: no pai_task_table.csv beside it (the task table holds the GPU counts)",
    )
    tasks = write_csv(
        tmp_path / "pai_task_table.csv", [task("j1", "w", "2.0", "1.0", "9.0", "lots")]
    )
    refused("pai", path, f"{tasks}: line 1: plan_gpu 'lots' is not a number")
    write_csv(tasks, [task("j1", "w", "2.0", "1.0", "9.0", "100")[:9]])
    refused("pai", path, f"{tasks}: line 1: 9 fields, expected 10")
    write_csv(tasks, [])
    write_csv(path, [["j1", "i1", "u", "Terminated", "", ""]])
    refused("pai", path, f"{path}: line 1: no start_time (the submission)")


def test_an_empty_window_is_refused(tmp_path: Path) -> None:
    path = write_json(tmp_path / "log", PHILLY)
    refused(
        "philly",
        path,
        f"{path}: no job to replay in window 1000:2000 (0 submitted; dropped: none)",
        parse_window("1000:2000"),
    )
    refused(
        "philly",
        path,
        f"{path}: no job to replay in window 30:31 (1 submitted; dropped: single GPU 1)",
        parse_window("30:31"),
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("20:10", "window '20:10': needs 0 <= START < END"),
        ("10:10", "window '10:10': needs 0 <= START < END"),
        ("-5:10", "window '-5:10': needs 0 <= START < END"),
        ("0:inf", "window '0:inf': needs 0 <= START < END"),
        ("10", "window '10' is not START:END (seconds)"),
        ("a:b", "window 'a:b' is not START:END (seconds)"),
    ],
)
def test_bad_windows_are_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError) as e:
        parse_window(text)
    assert str(e.value) == message


def test_the_cli_names_a_bad_window(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["replay", "--format", "philly", "--trace", "x", "--window", "20:10"])
    assert e.value.code == 2
    assert "argument --window: window '20:10': needs 0 <= START < END" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("speedup", "message"),
    [
        ("0", "speedup 0: give more than 0"),
        ("inf", "speedup 'inf' is not a finite number"),
        ("x", "speedup 'x' is not a number"),
    ],
)
def test_the_cli_names_a_bad_speedup(
    speedup: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        main(["replay", "--format", "philly", "--trace", "x", "--speedup", speedup])
    assert e.value.code == 2
    assert f"argument --speedup: {message}" in capsys.readouterr().err


def test_the_cli_names_a_refused_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cluster_log.csv"
    path.write_text("job_id,gpu_num\n")
    assert main(["replay", "--format", "helios", "--trace", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"python -m sim.traces: error: {path}: no column 'submit_time' "
        "(needs job_id, gpu_num, submit_time, start_time, end_time)\n"
    )


trace_jobs = st.lists(
    st.builds(
        TraceJob,
        trace_id=st.text(min_size=1, max_size=4),
        submit_s=st.integers(0, 1000).map(float),
        gpus=st.integers(0, 40),
        run_s=st.one_of(st.none(), st.integers(-5, 5000).map(float)),
    ),
    min_size=1,
    max_size=60,
)


@given(jobs=trace_jobs, start=st.integers(0, 1000), length=st.integers(1, 1000))
def test_any_window_replays_its_jobs_in_order_and_counts_the_rest(
    jobs: list[TraceJob], start: int, length: int
) -> None:
    window = Window(float(start), float(start + length))
    sl = select(jobs, window)
    first = min(j.submit_s for j in jobs)
    inside = [j for j in jobs if start <= j.submit_s - first < start + length]
    assert sl.submitted == len(inside)
    assert sorted(sl.jobs, key=lambda j: j.submit_s) == list(sl.jobs)
    assert sorted(map(id, sl.jobs)) == sorted(id(j) for j in inside if drop(j) is None)
    for reason in DropReason:
        assert sl.dropped.get(reason, 0) == sum(drop(j) is reason for j in inside)
    assert len(sl.jobs) + sum(sl.dropped.values()) == sl.submitted
    specs = to_specs(sl, NET, seed=3, speedup=10.0)
    assert [s.job for s in specs] == list(range(1, len(specs) + 1))
    arrivals = [s.arrival_s for s in specs]
    assert arrivals == sorted(arrivals) and all(0 <= a < length / 10 for a in arrivals)
    assert all(2 <= s.workers <= 32 and 1 <= s.iterations <= MAX_ITERATIONS for s in specs)


def test_the_synthetic_trace_reads_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["synth", "--jobs", "200", "--seed", "4", "--out", str(tmp_path / "t")]) == 0
    jobs = philly.read(tmp_path / "t")
    assert sum(j.gpus > 1 for j in jobs) == 200
    assert capsys.readouterr().out == (
        f"{len(jobs)} jobs (200 on more than one GPU) in Philly's format written to "
        f"{tmp_path / 't'}\n"
    )
    assert synth_philly(200, 4) == json.loads((tmp_path / "t").read_text())
    assert {j.gpus for j in jobs} <= set(GPUS)
    assert all(j.run_s is not None and j.run_s >= 0 for j in jobs)
    submits = [j.submit_s for j in jobs]
    assert submits == sorted(submits)


def test_a_tiny_trace_replays_under_every_scheme(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_json(tmp_path / "log", PHILLY)
    out = tmp_path / "out"
    argv = ["replay", "--format", "philly", "--trace", str(path), "--window", "0:200"]
    argv += ["--seeds", "1", "--procs", "1", "--speedup", "600", "--out", str(out)]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        f"philly trace {path}, window 0:200 (seconds from its first submission), speedup 600: "
        "5 jobs submitted, 2 replayed; dropped: single GPU 1, no GPU 1, no start or end time 1; "
        "on more than 32 GPUs (run with 32 workers): 0"
    )
    assert lines[1] == (
        "fluid model, pool 1024 slots, 100G/1us links, 8 PS shards per job, 10 schemes, seeds 1 "
        "(each its own draw of models from mixed); jobs at the 1,000-iteration cap per seed: 0"
    )
    assert lines[4].startswith("philly 0:200 ")
    with (out / "jobs.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 * len(SIM_SCHEMES)
    assert {(r["job"], r["workers"], r["iterations"]) for r in rows} == {
        ("1", "16", "8"),
        ("2", "4", "12"),
    }
    assert (out / "summary.csv").is_file() and (out / "jct_cdf.png").is_file()
