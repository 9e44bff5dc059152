"""The reports of ``make run`` on synthetic results (no Mininet): one
vocabulary of columns in the table, its legend, jobs.csv, jobs.json,
rounds.json and jct.png; a failed job makes its scheme's result incomplete
everywhere, and the run's exit status non-zero."""

from __future__ import annotations

import csv
import json
from dataclasses import fields
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from matplotlib.patches import Rectangle
from matplotlib.text import Annotation

from esa.job import JobSpec
from runner import batch, report
from runner import scenario as scn
from runner.jobs import SchemeRun
from runner.switches import BMV2, MODEL

WHY = "no iteration summed and no chunk through the switch for 60 s after 1 iteration; stopped"
SCENARIO = scn.from_json(
    {
        "pool_size": 4,
        "schemes": ["esa", "atp", "static"],
        "jobs": [
            {"job": 1, "workers": 2, "values": 1024, "iterations": 4, "priority": 10},
            {"job": 2, "workers": 2, "values": 2048, "iterations": 4, "priority": 20},
        ],
    }
)
J1, J2 = (j.spec for j in SCENARIO.jobs)
EVENTS = {"completed": 16, "fallback": 2, "preempt_won": 1, "preempt_suffered": 3}
HEAD = (
    " job status   values iterations    jct_s iter_per_s in_switch fallback    won   lost   retx"
    "  early dropped exact"
)
LEGEND = [
    "  job         the job's id in the scenario",
    "  status      done, or failed: stopped (why: under the table)",
    "  values      gradient values per iteration",
    "  iterations  iterations every worker finished (--train torch: DDP steps summed)",
    "  jct_s       job completion time, s (failed: until it was stopped)",
    "  iter_per_s  iterations per second",
    "  in_switch   share of its chunks summed in the switch",
    "  fallback    contributions the switch passed to the PS: no slot for them",
    "  won         partials it took a slot from: of jobs of lower priority, or of guests in its"
    " home (rule L)",
    "  lost        partials taken from it: its slots taken by jobs of higher priority, or its"
    " chunks evicted from another job's home by the owner (rule L)",
    "  retx        retransmissions by its workers",
    "  early       retransmissions too early: the first sent were summed after all",
    "  dropped     frames its hosts' links dropped (loss rules, full queues)",
    "  exact       every worker received every exact sum, bit for bit",
]


def done(spec: JobSpec, jct: float, early: int = 0) -> report.JobResult:
    """Two workers, the slower taking ``jct``; 3 retransmissions each, 7 frames dropped."""
    workers = {
        (spec.job, w): {"jct_s": jct - w, "counters": {"retransmitted": 3, "spurious": early}}
        for w in range(2)
    }
    return report.JobResult.build(spec, workers, EVENTS, exact=True, dropped=7)


def failed(spec: JobSpec) -> report.JobResult:
    events = {"completed": 4, "fallback": 9}
    return report.JobResult.failure(spec, 61.5, WHY, events, dropped=2, ran=1)


def results() -> dict[str, dict[int, report.JobResult]]:
    """ATP's job 1 failed; ESA's and static's jobs finished."""
    return {
        "esa": {1: done(J1, 2.0), 2: done(J2, 4.0, early=1)},
        "atp": {1: failed(J1), 2: done(J2, 5.0)},
        "static": {1: done(J1, 3.0), 2: done(J2, 5.0)},
    }


def test_lost_counts_preemptions_suffered_and_guest_evictions() -> None:
    events = {"completed": 4, "preempt_won": 2, "preempt_suffered": 3, "guest_evicted": 5}
    workers = {(J1.job, 0): {"jct_s": 1.0, "counters": {"retransmitted": 0, "spurious": 0}}}
    row = report.JobResult.build(J1, workers, events, exact=True)
    assert (row.won, row.lost) == (2, 8)
    assert report.JobResult.failure(J1, 2.0, WHY, events).lost == 8


def test_one_vocabulary_defined_once() -> None:
    names = [c.name for c in report.COLUMNS]
    assert names == [
        "job", "status", "values", "iterations", "jct_s", "iter_per_s", "in_switch", "fallback",
        "won", "lost", "retx", "early", "dropped", "exact", "accuracy", "chunks", "reason",
    ]  # fmt: skip
    assert sorted([f.name for f in fields(report.JobResult)] + ["status"]) == sorted(names)
    assert [c.name for c in report.WHERE] == ["scheme", "switch", "round"]
    r = done(J1, 2.0, early=1)
    assert (r.won, r.lost, r.retx, r.early, r.dropped) == (1, 3, 6, 2, 7)
    assert (r.values, r.iterations, r.chunks, r.in_switch) == (1024, 4, 128, 0.125)
    assert (r.status, r.reason) == ("done", "")


def test_table_rows_and_legend_use_the_columns() -> None:
    assert report.job_table("esa", results()["esa"], BMV2.label).splitlines() == [
        "scheme esa; switch: BMv2 (simple_switch_grpc)",
        HEAD,
        "   1   done     1024          4     2.00       2.00       12%        2      1      3"
        "      6      0       7   yes",
        "   2   done     2048          4     4.00       1.00        6%        2      1      3"
        "      6      2       7   yes",
        "average JCT 3.00 s",
        *LEGEND,
    ]


def test_a_failed_job_leaves_its_policy_without_an_average() -> None:
    atp = results()["atp"]
    assert report.average_jct(atp) is None
    assert report.incomplete(atp) == f"incomplete: job 1 failed: {WHY}"
    assert report.job_table("atp", atp, MODEL.label).splitlines() == [
        "scheme atp; switch: reference switch (esa.model)",
        HEAD,
        "   1 failed     1024          1    61.50       0.00        3%        9      0      0"
        "      0      0       2    NO",
        "   2   done     2048          4     5.00       0.80        6%        2      1      3"
        "      6      0       7   yes",
        f"job 1 FAILED: {WHY}",
        f"average JCT: incomplete: job 1 failed: {WHY}",
        *LEGEND,
    ]


def test_the_comparison_prints_no_ratio_for_a_policy_with_a_failed_job() -> None:
    assert report.comparison_table(SCENARIO, results(), BMV2.label).splitlines() == [
        "",
        "JCT per job (s); switch: BMv2 (simple_switch_grpc)",
        " job        esa        atp     static",
        "   1       2.00     failed       3.00",
        "   2       4.00       5.00       5.00",
        " avg       3.00 incomplete       4.00",
        f"average JCT atp / esa: incomplete: job 1 failed: {WHY}",
        "average JCT static / esa: 1.33",
    ]


def test_no_policy_is_compared_with_an_esa_that_failed() -> None:
    both = {"esa": results()["atp"], "static": results()["static"]}
    assert report.comparison_table(SCENARIO, both, BMV2.label).splitlines()[-2:] == [
        " avg incomplete       4.00",
        f"average JCT static / esa: incomplete: job 1 failed under esa: {WHY}",
    ]


def test_rounds_with_a_failed_job_get_no_mean() -> None:
    r = results()
    assert report.rounds_table(
        {"esa": [r["esa"], r["static"]], "atp": [r["static"], r["atp"]]}
    ) == (
        "\naverage JCT per round (s)\n"
        "         esa:   3.00   4.00   mean 3.50  spread 1.00  sd 0.71\n"
        f"         atp:   4.00 failed   incomplete: job 1 failed: {WHY} (round 2)"
    )


def test_a_mean_over_rounds_fails_with_any_round() -> None:
    mean = report.mean_of([{1: done(J1, 2.0, early=1)}, {1: failed(J1)}])[1]
    assert (mean.status, mean.reason, mean.exact) == ("failed", WHY, False)
    assert (mean.jct_s, mean.fallback, mean.retx, mean.early, mean.dropped) == (31.75, 6, 3, 1, 4)
    again = report.mean_of([{1: done(J1, 2.0)}, {1: done(J1, 5.0)}])[1]
    assert (again.status, again.jct_s, again.exact) == ("done", 3.5, True)


def test_files_carry_the_columns_and_each_jobs_status(tmp_path: Path) -> None:
    r = results()
    runs = {p: [per_job, per_job] for p, per_job in r.items()}
    written = report.write(tmp_path, SCENARIO, r, runs, MODEL)
    assert [p.name for p in written] == ["jobs.csv", "jobs.json", "rounds.json", "jct.png"]
    header = ["scheme", "switch", *(c.name for c in report.COLUMNS)]
    with (tmp_path / "jobs.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == header
    assert [(x["scheme"], x["job"], x["status"], x["reason"]) for x in rows] == [
        ("esa", "1", "done", ""), ("esa", "2", "done", ""),
        ("atp", "1", "failed", WHY), ("atp", "2", "done", ""),
        ("static", "1", "done", ""), ("static", "2", "done", ""),
    ]  # fmt: skip
    assert (rows[0]["lost"], rows[0]["dropped"], rows[1]["early"]) == ("3", "7", "2")
    as_json = json.loads((tmp_path / "jobs.json").read_text())
    assert as_json[2] == {
        "scheme": "atp", "switch": "model", "job": 1, "status": "failed", "values": 1024,
        "iterations": 1, "jct_s": 61.5, "iter_per_s": 0.0, "in_switch": 4 / 128, "fallback": 9,
        "won": 0, "lost": 0, "retx": 0, "early": 0, "dropped": 2, "exact": False,
        "accuracy": None, "chunks": 128, "reason": WHY,
    }  # fmt: skip
    assert [list(x) for x in as_json] == [header] * 6
    rounds = json.loads((tmp_path / "rounds.json").read_text())
    assert [(x["scheme"], x["round"], x["job"], x["status"]) for x in rounds[:6]] == [
        ("esa", 1, 1, "done"), ("esa", 1, 2, "done"), ("esa", 2, 1, "done"),
        ("esa", 2, 2, "done"), ("atp", 1, 1, "failed"), ("atp", 1, 2, "done"),
    ]  # fmt: skip
    assert list(rounds[0]) == ["scheme", "switch", "round", *header[2:]]


def test_jct_png_hatches_and_labels_a_failed_jobs_bar() -> None:
    fig = report.jct_figure(SCENARIO, results(), MODEL.label)
    try:
        [ax] = fig.axes
        bars = [p for p in ax.patches if isinstance(p, Rectangle)]
        assert [(round(b.get_height(), 2), b.get_hatch()) for b in bars] == [
            (2.0, None), (4.0, None),  # esa
            (61.5, "//"), (5.0, None),  # atp: job 1 failed
            (3.0, None), (5.0, None),  # static
        ]  # fmt: skip
        failed_bar = bars[2]
        [label] = [t for t in ax.texts if isinstance(t, Annotation) and t.get_text() == "failed"]
        assert label.xy == (failed_bar.get_x() + failed_bar.get_width() / 2, 61.5)
        assert len(ax.texts) == 1
        legend = ax.get_legend()
        assert legend is not None
        assert [t.get_text() for t in legend.get_texts()] == ["esa", "atp", "static", "failed"]
        assert ax.get_ylabel() == "jct_s (job completion time, s)"
    finally:
        plt.close(fig)


def test_a_run_with_a_failed_job_exits_non_zero(capsys: pytest.CaptureFixture[str]) -> None:
    r = results()
    trouble = [
        line for p in ("esa", "atp") for line in batch.problems(p, SchemeRun(r[p], [], [], set()))
    ]
    assert trouble == [f"atp: job 1 failed: {WHY}"]
    assert batch.verdict(scn.SYNTHETIC, r, trouble) == 1
    assert capsys.readouterr() == ("", f"run: atp: job 1 failed: {WHY}\n")
    assert batch.verdict(scn.SYNTHETIC, {"esa": r["esa"]}, []) == 0
    assert capsys.readouterr() == ("every worker received every exact sum (bit for bit)\n", "")


def test_a_job_a_fault_killed_is_expected_to_fail(capsys: pytest.CaptureFixture[str]) -> None:
    r = results()
    assert batch.problems("atp", SchemeRun(r["atp"], [], [], {1})) == []
    assert batch.verdict(scn.SYNTHETIC, r, []) == 0
    assert capsys.readouterr().out == (
        "every worker of every job no fault broke received every exact sum (bit for bit)\n"
    )
