"""The Mininet run's scenario parsing and result tables (no network needed)."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.api.admin import AdminClient
from controller.api.messages import AdmitRequest, PolicyRequest, ProgressRequest
from esa.job import EQUAL_PRIORITY, JobSpec, Placement
from runner import scenario as scn
from runner.ctl import Ctl
from runner.faults import Fault, FaultKind

DEFAULT = scn.DEFAULT
PRIORITY = scn.SCENARIOS / "priority.json"
SHARDS = scn.SCENARIOS / "shards.json"


def test_default_scenario_is_the_contest() -> None:
    """Jobs arriving over time, computing between iterations, on links that
    bound the run; memory scarce: more jobs than the pool has homes for,
    and fewer SwitchML partitions than jobs."""
    s = scn.load(DEFAULT)
    assert s.schemes == ("esa", "atp", "static", "static-equal")
    assert len(s.jobs) >= 4
    specs = [j.spec for j in s.jobs]
    assert len({j.values for j in specs}) > 1, "the default run mixes job sizes"
    assert all(j.priority is None for j in specs)
    assert len({j.arrival_s for j in specs}) == len(specs), "jobs arrive one by one"
    assert all(j.compute_s > 0 and 0 < j.jitter < 1 for j in specs)
    assert all(j.placement is None for j in s.jobs)
    assert s.link == {"bw_mbps": 0.25}
    assert s.pool_size < len(s.jobs), "fewer homes than jobs"
    assert s.pool_size // s.part_size < len(s.jobs), "fewer partitions than jobs"


def test_priority_scenario_is_fixed_priority_contention() -> None:
    s = scn.load(PRIORITY)
    assert [j.spec.workers for j in s.jobs] == [2, 3, 4]
    assert [j.spec.priority for j in s.jobs] == [20, 100, 200]
    assert len({j.spec.values for j in s.jobs}) == 1
    assert s.pool_size < len(s.jobs) and s.link == {"bw_mbps": 0.25}


def test_esas_layout_is_homes_unless_the_scenario_or_the_command_line_says() -> None:
    s = scn.load(PRIORITY)
    assert s.layout == "homes"
    hashed = scn.from_json({**scn.as_json(s), "layout": "hashed"})
    assert hashed.layout == "hashed"
    with pytest.raises(ValueError) as err:
        scn.from_json({**scn.as_json(s), "layout": "striped"})
    assert str(err.value) == ("scenario: layout: unknown layout 'striped' (expected homes|hashed)")
    ap = argparse.ArgumentParser()
    scn.add_overrides(ap)
    assert scn.apply_overrides(s, ap.parse_args(["--layout", "hashed"])).layout == "hashed"
    assert scn.apply_overrides(s, ap.parse_args([])).layout == "homes"
    with pytest.raises(SystemExit):
        ap.parse_args(["--layout", "striped"])
    assert [scn.layout_note(hashed, p) for p in ("esa", "esa-equal", "atp")] == [
        ", layout hashed",
        ", layout hashed",
        "",
    ]
    assert scn.layout_note(s, "esa") == ""


def test_esa_equal_admits_every_job_at_one_priority_and_reports_no_progress() -> None:
    """The run's ``esa-equal``: static and automatic jobs alike at
    ``EQUAL_PRIORITY`` (no size, so no SRPT rank); ``esa`` keeps theirs."""
    sent: list[object] = []

    class Client:
        def policy(self, req: object) -> None:
            sent.append(req)

        def admit(self, req: object) -> None:
            sent.append(req)

        def progress(self, req: object) -> None:
            sent.append(req)

    place = Placement(("h1", "h2"), ("h3",))
    jobs = [JobSpec(1, 2, 100, 1, priority=20), JobSpec(2, 2, 100, 1)]
    for scheme, want in (("esa-equal", [(EQUAL_PRIORITY, None)] * 2), ("esa", [(20, None)])):
        ctl = Ctl(cast(AdminClient, Client()))
        sent.clear()
        ctl.set_scheme(scheme, 1000, None, 0, "homes")
        for j in jobs:
            ctl.admit(j, place)
        ctl.progress(2, 50)
        ctl.flush()
        admits = [r for r in sent if isinstance(r, AdmitRequest)]
        assert [(a.priority, a.size) for a in admits][: len(want)] == want
        assert isinstance(sent[0], PolicyRequest) and sent[0].policy == "esa"
        reports = [r for r in sent if isinstance(r, ProgressRequest)]
        assert reports == ([] if scheme == "esa-equal" else [ProgressRequest(2, 50)])


JOB_TIMES = r"job 1: arrival_s and compute_s must be >= 0, jitter in \[0, 1\)"


def _job(**extra: Any) -> dict[str, Any]:
    return {"job": 1, "workers": 2, "values": 1, "iterations": 1, **extra}


def test_job_timing_fields() -> None:
    j = scn.parse_job(_job(arrival_s=2.5, compute_s=0.1, jitter=0.25, priority=7))
    assert j == scn.RunJob(JobSpec(1, 2, 1, 1, 7, arrival_s=2.5, compute_s=0.1, jitter=0.25))
    j = scn.parse_job(_job(size_hint=True))
    assert j == scn.RunJob(JobSpec(1, 2, 1, 1, None))


@pytest.mark.parametrize(
    ("job", "message"),
    [
        (_job(job=0), r"job id 0 is out of range \(1\.\.255\)"),
        (_job(job=256), r"job id 256 is out of range \(1\.\.255\)"),
        (_job(workers=1), r"job 1: workers must be 2\.\.32"),
        (_job(workers=33), r"job 1: workers must be 2\.\.32"),
        (_job(values=0), "job 1: values and iterations must be >= 1"),
        (_job(iterations=0), "job 1: values and iterations must be >= 1"),
        (_job(priority=256), r"job 1: priority 256 is out of range \(0\.\.255\)"),
        (_job(colour=1), r"job entry has unknown field\(s\): colour"),
        (_job(arrival_s=-1), JOB_TIMES),
        (_job(compute_s=-0.1), JOB_TIMES),
        (_job(jitter=1.0), JOB_TIMES),
        (_job(jitter=-0.1), JOB_TIMES),
        ({"job": 3, "workers": 2}, r"job 3: missing field\(s\) iterations, values"),
        ({"workers": 2, "values": 1, "iterations": 1}, r"job \(no id\): missing field\(s\) job"),
    ],
)
def test_bad_job_entries_are_rejected(job: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=f"^scenario: {message}$"):
        scn.parse_job(job)


def test_a_scenario_reads_back_what_it_writes() -> None:
    """``as_json`` writes what a scenario file gives (scenario.json of a run)."""
    for path in sorted(scn.SCENARIOS.glob("*.json")):
        s = scn.load(path)
        assert scn.from_json(json.loads(json.dumps(scn.as_json(s)))) == s, path.name


def test_the_shards_scenario_puts_a_job_on_two_ps_hosts() -> None:
    s = scn.load(SHARDS)
    placed = {j.spec.job: j.placement for j in s.jobs}
    assert placed[1] == Placement(("h1", "h2", "h3", "h4"), ("h5", "h6"))
    assert placed[2] is None


def _write(tmp_path: Path, **changes: Any) -> Path:
    raw = json.loads(DEFAULT.read_text())
    raw.update(changes)
    path = tmp_path / "s.json"
    path.write_text(json.dumps(raw))
    return path


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"schemes": ["esa", "fifo"]}, "unknown scheme 'fifo'"),
        ({"schemes": ["esa"], "policies": ["esa"]}, 'give "schemes" or its old name "policies"'),
        ({"part_size": 3}, r"part_size must be 0..pool_size \(2\)"),
        ({"part_size": -1}, "part_size must be"),
        ({"timeout_s": 0}, "timeout_s, sample_s and rto_s must be positive"),
        ({"stall_s": 0}, r"^scenario: stall_s must be positive \(absent: timeout_s \+ 30 s\)$"),
        ({"link": {"loss_pct": 100}}, r"loss must be a percentage in \[0, 100\)"),
        ({"link": {"delay": 1}}, "link has unknown field"),
        ({"colour": 1}, "unknown field"),
        ({"faults": ["kill-worker=9:0@1"]}, "no job 9"),
        ({"faults": ["kill-worker=1:2@1"]}, "job 1 has workers 0..1"),
        ({"faults": ["explode@1"]}, "unknown kind 'explode'"),
    ],
)
def test_bad_scenarios_are_rejected(tmp_path: Path, changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        scn.load(_write(tmp_path, **changes))


def test_part_size_and_faults_load(tmp_path: Path) -> None:
    s = scn.load(_write(tmp_path, part_size=0, faults=["bmv2-restart@3"]))
    assert s.part_size == 0
    assert s.faults == (Fault(FaultKind.BMV2_RESTART, 3.0),)
    assert scn.as_json(s)["faults"] == ["bmv2-restart@3"]


def test_topology_and_link_fields(tmp_path: Path) -> None:
    """No topology means the single switch; ``link`` keeps only what it sets,
    null bandwidth (unlimited) included, and the flags add to it."""
    raw = json.loads(DEFAULT.read_text())
    del raw["topology"], raw["link"]
    path = tmp_path / "plain.json"
    path.write_text(json.dumps(raw))
    assert (scn.load(path).topology, scn.load(path).link) == ("single", {})
    s = scn.load(_write(tmp_path, topology="mine", link={"bw_mbps": None, "loss_pct": 2}))
    assert (s.topology, s.link) == ("mine", {"bw_mbps": None, "loss_pct": 2.0})
    s = scn.apply_overrides(s, _overrides("--topology", "other", "--delay", "1.5"))
    assert (s.topology, s.link) == ("other", {"bw_mbps": None, "loss_pct": 2.0, "delay_ms": 1.5})
    assert scn.as_json(s)["link"] == {"bw_mbps": None, "loss_pct": 2.0, "delay_ms": 1.5}
    with pytest.raises(ValueError, match="link delay_ms must be a number"):
        scn.load(_write(tmp_path, link={"delay_ms": None}))


def _overrides(*argv: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    scn.add_overrides(ap)
    return ap.parse_args(list(argv))


def test_overrides() -> None:
    args = _overrides(
        "--pool", "16", "--schemes", "esa,atp", "--scale", "0.5", "--loss", "5",
        "--part-size", "4", "--fault", "controller-restart@2", "--fault", "kill-worker=2:1@4",
        "--timeout", "5", "--stall", "12",
    )  # fmt: skip
    s = scn.apply_overrides(scn.load(DEFAULT), args)
    base = scn.load(DEFAULT)
    assert (s.pool_size, s.schemes, s.link, s.part_size) == (
        16,
        ("esa", "atp"),
        {"bw_mbps": 0.25, "loss_pct": 5.0},
        4,
    )
    assert (s.timeout_s, s.stall_s, base.stall_s) == (5.0, 12.0, None)
    assert [j.spec.values for j in s.jobs] == [j.spec.values // 2 for j in base.jobs]
    assert [j.placement for j in s.jobs] == [j.placement for j in base.jobs]
    assert s.faults == (
        Fault(FaultKind.CONTROLLER_RESTART, 2.0),
        Fault(FaultKind.KILL_WORKER, 4.0, job=2, index=1),
    )


DEPRECATED = (
    "scenario: {} is deprecated, read as {}: a run compares schemes (esa.schemes); "
    "a policy is the switch's rule set (esa-ctl policy)\n"
)


def test_the_old_word_for_schemes_is_read_and_said_to_be_deprecated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A scenario's ``"policies"`` and ``--policies`` are the old names of
    ``"schemes"`` and ``--schemes``: read as those, each with one line on
    stderr; the new names say nothing."""
    raw = json.loads(DEFAULT.read_text())
    raw["policies"] = raw.pop("schemes")[:2]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(raw))
    assert scn.load(old) == replace(scn.load(DEFAULT), schemes=("esa", "atp"))
    assert capsys.readouterr().err == DEPRECATED.format('"policies"', '"schemes"')
    s = scn.apply_overrides(scn.load(DEFAULT), _overrides("--policies", "atp,esa"))
    assert s.schemes == ("atp", "esa")
    assert capsys.readouterr().err == DEPRECATED.format("--policies", "--schemes")
    assert scn.apply_overrides(scn.load(DEFAULT), _overrides("--schemes", "atp")).schemes == (
        "atp",
    )
    assert capsys.readouterr().err == ""
    with pytest.raises(ValueError, match="give --schemes or its old name --policies, not both"):
        scn.apply_overrides(scn.load(DEFAULT), _overrides("--schemes", "esa", "--policies", "esa"))


def test_overrides_are_checked() -> None:
    with pytest.raises(ValueError, match="part_size must be"):
        scn.apply_overrides(scn.load(DEFAULT), _overrides("--pool", "1"))
    with pytest.raises(ValueError, match="no job 9"):
        scn.apply_overrides(scn.load(DEFAULT), _overrides("--fault", "kill-worker=9:0@1"))


def test_bad_fault_flag_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        _overrides("--fault", "bmv2-restart")
    assert exit_.value.code == 2
    assert (
        "bmv2-restart[=SWITCH]@T, controller-restart@T or kill-worker=JOB:IDX@T"
        in capsys.readouterr().err
    )


@st.composite
def run_jobs(draw: st.DrawFn) -> scn.RunJob:
    workers = draw(st.integers(2, 32))
    spec = JobSpec(
        job=draw(st.integers(1, 255)),
        workers=workers,
        values=draw(st.integers(1, 10**6)),
        iterations=draw(st.integers(1, 100)),
        priority=draw(st.one_of(st.none(), st.integers(0, 255))),
        arrival_s=draw(st.floats(0, 100)),
        compute_s=draw(st.floats(0, 10)),
        jitter=draw(st.floats(0, 0.99)),
    )
    if not draw(st.booleans()):
        return scn.RunJob(spec)
    shards = draw(st.sampled_from([1, 2, 4, 8]))
    hosts = draw(st.permutations([f"h{i}" for i in range(1, 41)]))
    return scn.RunJob(spec, Placement(tuple(hosts[:workers]), tuple(hosts[40 - shards :])))


@given(job=run_jobs())
def test_a_job_reads_back_what_it_writes(job: scn.RunJob) -> None:
    assert scn.parse_job(json.loads(json.dumps(scn.job_json(job)))) == job
