"""Sweeps on Dask: the same rows serially and on a cluster, each task's rows
stored as it finishes, a rerun resuming from them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from esa.schemes import SIM_SCHEMES, Scheme
from sim import summary, sweep, taskfile
from sim.__main__ import main as sim_main
from sim.engine import Engine
from sim.taskfile import StaleFile, fingerprint

POINT = replace(next(p for p in sweep.REGIMES if p.name == "overload-small-pool"), jobs=4)
SEEDS = 2
TASKS = [(POINT, s, sc) for s in range(SEEDS) for sc in SIM_SCHEMES]
RUN_ONE = sweep.run_one


def count_tasks(monkeypatch: pytest.MonkeyPatch) -> list[sweep.Task]:
    """The tasks the sweep runs from now on, in order (serial engine only:
    a cluster's workers would not see the patch)."""
    ran: list[sweep.Task] = []

    def counted(task: sweep.Task) -> list[sweep.Row]:
        ran.append(task)
        return RUN_ONE(task)

    monkeypatch.setattr(sweep, "run_one", counted)
    return ran


"""the task itself, for the stand-ins below to call once they replace it."""


def fails_on_esa(task: sweep.Task) -> list[sweep.Row]:
    """``run_one``, but the seed-1 ESA task raises as an unconverged solve does.
    (At module level: a cluster's workers import it by name.)"""
    pt, seed, scheme = task
    if (seed, scheme) == (1, Scheme.ESA):
        raise sweep.SolveFailed(f"point {pt.name!r}, seed {seed}, scheme {scheme.value}: made to")
    return RUN_ONE(task)


def test_a_cluster_gives_the_rows_and_summary_run_one_gives_serially(tmp_path: Path) -> None:
    with Engine(0) as serial:
        one = sweep.run([POINT], SEEDS, tmp_path / "serial.csv", serial)
    with Engine(2) as cluster:
        two = sweep.run([POINT], SEEDS, tmp_path / "cluster.csv", cluster)
    assert one == [r for t in TASKS for r in RUN_ONE(t)]
    assert two == one
    assert summary.summarise([POINT], two, SEEDS) == summary.summarise([POINT], one, SEEDS)
    lines = (tmp_path / "cluster.csv").read_text().splitlines()
    assert sorted(lines) == sorted((tmp_path / "serial.csv").read_text().splitlines())


def test_a_rerun_runs_only_the_tasks_a_kill_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tasks.csv"
    with Engine(0) as engine:
        whole = sweep.run([POINT], SEEDS, path, engine)
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    assert len(lines) == 2 + len(TASKS) * POINT.jobs
    kept = 2 + 3 * POINT.jobs
    path.write_text("".join(lines[: kept + 2]) + lines[kept + 2][:9])
    ran = count_tasks(monkeypatch)
    with Engine(0) as engine:
        resumed = sweep.run([POINT], SEEDS, path, engine)
    assert len(ran) == len(TASKS) - 3
    assert {sweep.key(t) for t in ran}.isdisjoint(
        sweep.key((POINT, int(str(c[1])), Scheme(c[2])))
        for c in (line.split(",") for line in lines[2:kept])
    )
    assert resumed == whole
    assert sorted(path.read_text().splitlines()) == sorted(text.splitlines())
    with Engine(0) as engine:
        assert sweep.run([POINT], SEEDS, path, engine) == whole
    assert len(ran) == len(TASKS) - 3


def test_a_file_from_another_sweep_is_refused_until_fresh(tmp_path: Path) -> None:
    path = tmp_path / "tasks.csv"
    with Engine(0) as engine:
        sweep.run([POINT], 1, path, engine)
        first = path.read_text().splitlines()[0]
        assert first == f"# sweep {fingerprint(TASKS[: len(SIM_SCHEMES)], sweep.COLUMNS)}"
        with pytest.raises(StaleFile) as e:
            sweep.run([POINT], SEEDS, path, engine)
        assert str(e.value) == (
            f"{path} holds another sweep, or one run by other code (its first line "
            f"{first!r}, this sweep's fingerprint {fingerprint(TASKS, sweep.COLUMNS)}): "
            "--fresh starts it over"
        )
        rows = sweep.run([POINT], SEEDS, path, engine, fresh=True)
    assert len(rows) == len(TASKS) * POINT.jobs
    assert path.read_text().splitlines()[0] == f"# sweep {fingerprint(TASKS, sweep.COLUMNS)}"


def test_a_task_that_raises_stops_the_serial_sweep_keeping_the_tasks_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tasks.csv"
    monkeypatch.setattr(sweep, "run_one", fails_on_esa)
    with Engine(0) as engine, pytest.raises(sweep.SolveFailed) as e:
        sweep.run([POINT], SEEDS, path, engine)
    assert str(e.value) == "point 'overload-small-pool', seed 1, scheme esa: made to"
    order = sorted(TASKS, key=lambda t: t[2] is not Scheme.ATP)
    before = order[: order.index((POINT, 1, Scheme.ESA))]
    body = path.read_text().splitlines()[2:]
    assert [tuple(line.split(",")[:3]) for line in body[:: POINT.jobs]] == [
        (t[0].name, str(t[1]), t[2].value) for t in before
    ]
    assert len(body) == len(before) * POINT.jobs


def test_a_task_that_raises_on_the_cluster_stops_the_sweep_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tasks.csv"
    monkeypatch.setattr(sweep, "run_one", fails_on_esa)
    with Engine(2) as engine, pytest.raises(sweep.SolveFailed) as e:
        sweep.run([POINT], SEEDS, path, engine)
    assert str(e.value) == "point 'overload-small-pool', seed 1, scheme esa: made to"
    body = path.read_text().splitlines()[2:]
    kept = {(c[0], int(c[1]), c[2]) for c in (line.split(",") for line in body)}
    assert kept and sweep.key((POINT, 1, Scheme.ESA)) not in kept
    assert len(body) == len(kept) * POINT.jobs
    ran = count_tasks(monkeypatch)
    with Engine(0) as engine:
        rows = sweep.run([POINT], SEEDS, path, engine)
    assert sorted(sweep.key(t) for t in ran) == sorted({sweep.key(t) for t in TASKS} - kept)
    assert rows == [r for t in TASKS for r in RUN_ONE(t)]


def test_python_m_sim_refuses_a_stale_file_before_running_a_task(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "tasks-sweep.csv").write_text("# sweep 0123456789abcdef\n")
    with pytest.raises(SystemExit) as e:
        sim_main(["--out", str(tmp_path), "--procs", "0"])
    assert e.value.code == 2
    tasks = [
        (pt, s, sc) for pt in sweep.SUBSET for s in range(sweep.SEEDS_SUBSET) for sc in SIM_SCHEMES
    ]
    assert capsys.readouterr().err.endswith(
        f"python -m sim: {tmp_path / 'tasks-sweep.csv'} holds another sweep, or one run by "
        f"other code (its first line '# sweep 0123456789abcdef', this sweep's fingerprint "
        f"{fingerprint(tasks, sweep.COLUMNS)}): --fresh starts it over\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tasks-sweep.csv"]


def test_a_file_written_by_other_code_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same sweep at another commit is another sweep: its numbers are
    not resumed into this one's."""
    path = tmp_path / "tasks.csv"
    with Engine(0) as engine:
        sweep.run([POINT], 1, path, engine)
        monkeypatch.setattr(taskfile, "code_fingerprint", lambda: "other code")
        with pytest.raises(StaleFile, match="holds another sweep, or one run by other code"):
            sweep.run([POINT], 1, path, engine)


def test_the_code_fingerprint_follows_every_source_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = tmp_path / "modelpkg"
    (pkg / "rules").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "rules" / "slot.py").write_text("LIMIT = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(taskfile, "MODEL_PACKAGES", ("modelpkg",))
    prints = []
    for text in ("LIMIT = 1\n", "LIMIT = 2\n", "LIMIT = 1\n"):
        (pkg / "rules" / "slot.py").write_text(text)
        taskfile.code_fingerprint.cache_clear()
        prints.append(taskfile.code_fingerprint())
    taskfile.code_fingerprint.cache_clear()
    assert prints[0] != prints[1]
    assert prints[0] == prints[2]
