"""The simulator's command lines refuse a count they can not run with
(``esa.arguments``): a usage error naming the argument, exit status 2,
before any task starts."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sim import evictions, ranks, tier_report
from sim.__main__ import main as sim_main
from sim.engine import Engine
from sim.traces.__main__ import main as traces_main

REPLAY = ["replay", "--format", "philly", "--trace", "x"]

CASES: list[tuple[Callable[[list[str]], int], list[str], str]] = [
    (sim_main, ["--procs", "-1"], "argument --procs: procs -1 is out of range (0 or more)"),
    (sim_main, ["--seeds", "0"], "argument --seeds: seeds 0 is out of range (1 or more)"),
    (sim_main, ["--seeds", "-2"], "argument --seeds: seeds -2 is out of range (1 or more)"),
    (sim_main, ["--seeds", "x"], "argument --seeds: seeds 'x' is not an integer"),
    (traces_main, [*REPLAY, "--procs", "-1"], "argument --procs: procs -1 is out of range"),
    (traces_main, [*REPLAY, "--seeds", "0"], "argument --seeds: seeds 0 is out of range"),
    (traces_main, [*REPLAY, "--pool", "0"], "argument --pool: pool size 0 is out of range"),
    (traces_main, [*REPLAY, "--pool", "-8"], "argument --pool: pool size -8 is out of range"),
    (ranks.main, ["--seeds", "0"], "argument --seeds: seeds 0 is out of range (1 or more)"),
    (evictions.main, ["--pools", "64", "0"], "argument --pools: pool size 0 is out of range"),
    (evictions.main, ["--shards", "3"], "argument --shards: shards 3 is not 1, 2, 4 or 8"),
    (evictions.main, ["--shards", "0"], "argument --shards: shards 0 is out of range"),
    (tier_report.main, ["--procs", "0"], "argument --procs: procs 0 is out of range (1 or more)"),
]


@pytest.mark.parametrize(("main", "argv", "message"), CASES)
def test_a_bad_count_is_a_usage_error_naming_its_argument(
    main: Callable[[list[str]], int],
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_procs_zero_and_seed_counts_of_one_parse() -> None:
    """0 processes is the serial engine, not an error; the parse stops at
    ``--help`` so nothing runs."""
    for main, argv in [
        (sim_main, ["--procs", "0", "--seeds", "1", "--help"]),
        (traces_main, [*REPLAY, "--procs", "0", "--seeds", "1", "--pool", "1", "--help"]),
    ]:
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 0


def test_the_engine_still_refuses_negative_procs_from_a_caller() -> None:
    with pytest.raises(ValueError, match=r"^procs -1: 0 \(no cluster\) or more$"):
        Engine(-1)
