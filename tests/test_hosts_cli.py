"""The host CLIs check every argument before they create anything and end
with one line: exit status 2 for a usage error, 1 for a failure at run time."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from hosts.programs import program, ps_cli, train_cli, worker_cli

ROOT = Path(__file__).resolve().parent.parent
Main = Callable[[Sequence[str] | None], int]
WORKER = ["--job", "1", "--index", "0", "--fan-in", "2", "--ps", "127.0.0.1"]
SW = ["--switch-addr", "127.0.0.1"]
PS = ["--job", "1:2", *SW]


@pytest.fixture
def no_sockets(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object) -> None:
        raise AssertionError("a socket was opened before the arguments were checked")

    monkeypatch.setattr(program, "UdpTransport", refuse)


def usage_error(main: Main, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1, err
    return err.strip()


@pytest.mark.usefixtures("no_sockets")
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--job", "1:40", *SW], "argument --job: fan-in 40 is out of range (1..32)"),
        (["--job", "0:2", *SW], "argument --job: job id 0 is out of range (1..255)"),
        (["--job", "256:2", *SW], "argument --job: job id 256 is out of range (1..255)"),
        (["--job", "1:2:0x7", *SW],
         "argument --job: 1:2:0x7: mask 0x7 has 3 workers, fan-in is 2"),
        (["--job", "1:2", "--job", "1:3", *SW], "argument --job: job 1 given twice"),
        (["--job", "1", *SW], "argument --job: expected JOB:FANIN[:MASK], got '1'"),
        ([*PS, "--stall", "0"], "argument --stall: stall 0 s: give more than 0 seconds"),
        ([*PS, "--bind", "0.0.0.0:70000"], "argument --bind: bad port '70000' in '0.0.0.0:70000'"),
        (["--job", "1:2"], "the following arguments are required: --switch-addr"),
        ([*PS, "--shards", "3"], "argument --shards: shards 3 is not 1, 2, 4 or 8 "
         "(a power of two up to 8)"),
        ([*PS, "--shards", "16"], "argument --shards: shards 16 is out of range (1..8)"),
        ([*PS, "--shard", "2", "--shards", "2"], "argument --shard: 2 is not below --shards 2"),
        ([*PS, "--shard", "1"], "argument --shard: 1 is not below --shards 1"),
    ],
)  # fmt: skip
def test_ps_usage_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert usage_error(ps_cli.main, argv, capsys) == f"esa-ps: error: {message} (see esa-ps --help)"


@pytest.mark.usefixtures("no_sockets")
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"--index": "2"}, "argument --index: 2 is not below fan-in 2"),
        ({"--fan-in": "0"}, "argument --fan-in: fan-in 0 is out of range (1..32)"),
        ({"--fan-in": "33"}, "argument --fan-in: fan-in 33 is out of range (1..32)"),
        ({"--job": "0"}, "argument --job: job id 0 is out of range (1..255)"),
        ({"--bound": "0"}, "argument --bound: bound 0: give more than 0"),
        ({"--bound": "inf"}, "argument --bound: bound 'inf' is not a finite number"),
        ({"--grad": "/nonexistent.npy"},
         "argument --grad: can not read /nonexistent.npy: No such file or directory"),
        ({"--mask": "0x5", "--index": "1"}, "argument --index: worker 1 is not in mask 0x5"),
        ({"--mask": "0x7"}, "argument --mask: 0x7 holds 3 workers, not 2"),
        ({"--jitter": "1"}, "argument --jitter: jitter 1: give 0 or more and below 1"),
        ({"--timeout": "-1"}, "argument --timeout: timeout -1 s: give more than 0 seconds"),
        ({"--ps": "no.such.host.invalid"}, "argument --ps: can not resolve 'no.such.host.invalid'"),
        ({"--ps": "127.0.0.1,127.0.0.2,127.0.0.3"},
         "argument --ps: 3 addresses in '127.0.0.1,127.0.0.2,127.0.0.3': a job has 1, 2, 4 or 8 "
         "(a power of two up to 8) PS hosts"),
        ({"--ps": "127.0.0.1,"}, "argument --ps: an empty address in '127.0.0.1,'"),
        ({"--ps": "127.0.0.1,127.0.0.1:70000"},
         "argument --ps: bad port '70000' in '127.0.0.1:70000'"),
        ({"--ps": "127.0.0.1,127.0.0.2", "--control": "127.0.0.1"},
         "argument --control: 1 address for 2 PS hosts (one per --ps address)"),
    ],
)  # fmt: skip
def test_worker_usage_errors(
    change: dict[str, str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = list(WORKER)
    for flag, value in change.items():
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    assert usage_error(worker_cli.main, argv, capsys).startswith(f"esa-worker: error: {message}")


@pytest.mark.usefixtures("no_sockets")
def test_grad_file_must_hold_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = tmp_path / "g.npy"
    text.write_text("not numpy")
    objects = tmp_path / "o.npy"
    np.save(objects, np.zeros((2, 2, 2)))
    for path, why in ((text, "is not a .npy array"), (objects, "holds float64 of shape (2, 2, 2)")):
        err = usage_error(worker_cli.main, [*WORKER, "--grad", str(path)], capsys)
        assert err.startswith(f"esa-worker: error: argument --grad: {path} {why}")


@pytest.mark.usefixtures("no_sockets")
def test_train_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--job", "1", "--index", "2", "--workers", "2", "--ps", "127.0.0.1"]
    err = usage_error(train_cli.main, argv, capsys)
    assert err == (
        "esa-train: error: argument --index: 2 is not below --workers 2 (see esa-train --help)"
    )
    argv = ["--job", "1", "--index", "0", "--workers", "2", "--ps", "127.0.0.1,127.0.0.2"]
    err = usage_error(train_cli.main, [*argv, "--control", "127.0.0.1:9"], capsys)
    assert err == (
        "esa-train: error: argument --control: 1 address for 2 PS hosts (one per --ps address)"
        " (see esa-train --help)"
    )


def test_worker_addresses_one_per_ps_shard() -> None:
    args = worker_cli.parse_args([*WORKER[:-1], "127.0.0.1,127.0.0.2:9"])
    assert args.ps == (("127.0.0.1", 0xE5A0), ("127.0.0.2", 9))
    assert args.control == (("127.0.0.1", 0xE5A1), ("127.0.0.2", 0xE5A1))
    args = worker_cli.parse_args(
        [*WORKER[:-1], "127.0.0.1,127.0.0.2", "--control", "127.0.0.3:7,127.0.0.4"]
    )
    assert args.control == (("127.0.0.3", 7), ("127.0.0.4", 0xE5A1))
    assert worker_cli.parse_args(WORKER).control == (("127.0.0.1", 0xE5A1),)
    args = ps_cli.parse_args([*PS, "--shard", "3", "--shards", "4"])
    assert (args.shard, args.shards) == (3, 4)
    assert (ps_cli.parse_args(PS).shard, ps_cli.parse_args(PS).shards) == (0, 1)


def taken_port() -> tuple[socket.socket, str]:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    return s, f"127.0.0.1:{s.getsockname()[1]}"


def test_a_port_in_use_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    holder, addr = taken_port()
    with holder:
        assert ps_cli.main([*PS, "--bind", addr]) == 1
        assert capsys.readouterr().err == (
            f"esa-ps: error: can not listen on {addr} (ESA): Address already in use\n"
        )
        assert ps_cli.main([*PS, "--bind", "127.0.0.1:0", "--control-bind", addr]) == 1
        assert capsys.readouterr().err == (
            f"esa-ps: error: can not listen on {addr} (control): Address already in use\n"
        )
        argv = ["--job", "1", "--index", "0", "--workers", "2", "--ps", "127.0.0.1", "--bind", addr]
        assert train_cli.main(argv) == 1
        assert capsys.readouterr().err.count("\n") == 1


def test_a_worker_without_its_ps_times_out_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    holder, ps = taken_port()
    with holder:
        argv = [*WORKER[:-1], ps, "--control", ps, "--bind", "127.0.0.1:0", "--timeout", "0.3"]
        assert worker_cli.main(argv) == 1
    assert capsys.readouterr().err == (
        "esa-worker: job 1 call 0: no sum after 0.3 s (waiting for the PS's GO); "
        "missing workers unknown (the PS did not answer)\n"
    )


def test_the_installed_commands_print_no_traceback() -> None:
    holder, addr = taken_port()
    with holder:
        for module, argv, code in (
            ("hosts.programs.ps_cli", [*PS, "--bind", addr], 1),
            ("hosts.programs.worker_cli", [*WORKER[:-2], "--ps", "127.0.0.1", "--fan-in", "33"], 2),
        ):
            res = subprocess.run(
                [sys.executable, "-m", module, *argv], capture_output=True, text=True, cwd=ROOT
            )
            assert res.returncode == code and res.stdout == ""
            assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
