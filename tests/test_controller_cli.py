"""The esa-ctl command line: help, output and exit codes (no switch needed)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.admin import serve
from controller.cli import build_parser, main
from controller.memswitch import MemorySwitch
from tests.test_controller_service import Clock, make_controller

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = [
    "serve", "admit", "jobs", "prio", "progress", "remove", "policy", "status", "stats", "slots"
]  # fmt: skip


def test_every_command_has_help() -> None:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert sorted(sub.choices) == sorted(COMMANDS)  # type: ignore[arg-type]
    for cmd in ["", *COMMANDS]:
        res = subprocess.run(
            [sys.executable, "-m", "controller.cli", *([cmd] if cmd else []), "--help"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=False,
        )
        assert res.returncode == 0, res.stderr
        assert res.stdout.startswith(f"usage: esa-ctl {cmd}".rstrip())


@pytest.fixture
def admin(tmp_path: Path) -> Iterator[str]:
    ctl = make_controller(tmp_path / "state.db", MemorySwitch(), Clock())
    ctl.sync()
    addr = f"unix:{tmp_path}/admin.sock"
    server = serve(ctl, addr)
    yield addr
    server.stop(None)


def run(addr: str, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["--admin", addr, *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_session(admin: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        admin, capsys, "admit", "3", "--workers", "h1,h2", "h3", "--ps", "h4", "--priority", "7"
    )
    assert code == 0
    assert out.splitlines() == [
        "JOB  PRIO  MODE    PARTITION  PS  WORKERS",
        "3    7     static  0+64       h4  h1,h2,h3",
    ]
    code, out, _ = run(
        admin, capsys, "admit", "4", "--workers", "h5", "h6", "--ps", "h7", "--size", "1024"
    )
    assert out.splitlines()[1] == "4    222   auto (1024 B left)  32+32      h7  h5,h6"
    code, out, _ = run(admin, capsys, "jobs", "--json")
    assert [j["job"] for j in json.loads(out)] == [3, 4]
    assert run(admin, capsys, "prio", "3", "--priority", "9")[1].splitlines()[1].split()[1] == "9"
    assert run(admin, capsys, "policy", "atp", "--stale-us", "900") == (
        0,
        "policy atp, stale timeout 900 us\n",
        "",
    )
    code, out, _ = run(admin, capsys, "stats", "--json", "--job", "3")
    assert json.loads(out)["jobs"]["3"]["aggregated"] == 0
    code, out, _ = run(admin, capsys, "status")
    assert "policy:   atp (stale timeout 900 us)" in out.splitlines()
    assert run(admin, capsys, "remove", "4") == (0, "job 4 removed\n", "")
    assert run(admin, capsys, "jobs")[1].splitlines()[1].startswith("3    9     static  0+64")


def test_cli_errors_exit_nonzero(admin: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(admin, capsys, "remove", "9") == (1, "", "esa-ctl: error: unknown job 9\n")
    assert run(admin, capsys, "admit", "1", "--workers", "h1", "--ps", "h2", "--priority", "1") == (
        1,
        "",
        "esa-ctl: error: job 1 has 1 worker(s); at least 2 are needed: a one-worker job has "
        "nothing to aggregate, run it without the switch\n",
    )
    assert run(admin, capsys, "stats", "--job", "9") == (1, "", "esa-ctl: error: unknown job 9\n")


def test_cli_without_controller(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    addr = f"unix:{tmp_path}/none.sock"
    assert run(addr, capsys, "jobs") == (
        1,
        "",
        f"esa-ctl: error: cannot reach the controller at {addr}: is `esa-ctl serve` running?\n",
    )


def _serve(tmp_path: Path, admin: str) -> int:
    topo = tmp_path / "topo.json"
    topo.write_text('{"hosts": {"h1": {"port": 1, "mac": "02:00:00:00:00:01", "ip": "10.0.0.1"}}}')
    argv = ["--admin", admin, "serve", "--switch", f"unix:{tmp_path}/no.sock"]
    argv += ["--topology", str(topo), "--db", str(tmp_path / "s.db")]
    argv += ["--p4json", str(tmp_path / "missing.json")]
    return main(argv)


def test_serve_refuses_non_local_admin_address(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _serve(tmp_path, "0.0.0.0:5000") == 1
    assert capsys.readouterr().err == (
        "esa-ctl: error: admin address '0.0.0.0:5000': use unix:PATH or 127.0.0.1:PORT\n"
    )


def test_serve_needs_the_bmv2_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _serve(tmp_path, f"unix:{tmp_path}/a.sock") == 1
    assert capsys.readouterr().err == (
        f"esa-ctl: error: cannot read the BMv2 JSON {tmp_path}/missing.json: "
        f"[Errno 2] No such file or directory: '{tmp_path}/missing.json'\n"
    )
