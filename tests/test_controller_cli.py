"""The esa-ctl command line: help, output and exit codes (no switch needed)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest

from controller.api.admin import serve
from controller.api.cli import build_parser, main
from controller.device.memswitch import MemorySwitch
from controller.world.state import JobRecord, Store
from esa.job import Placement, Priority
from tests.test_controller_service import Clock, make_controller

ROOT = Path(__file__).resolve().parent.parent
TWO_TIER = ROOT / "tests" / "data" / "two-racks.json"
COMMANDS = [
    "serve", "admit", "jobs", "prio", "progress", "remove", "policy", "status", "stats", "slots"
]  # fmt: skip


def test_every_command_has_help() -> None:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert sorted(sub.choices) == sorted(COMMANDS)  # type: ignore[arg-type]
    for cmd in ["", *COMMANDS]:
        res = subprocess.run(
            [sys.executable, "-m", "controller", *([cmd] if cmd else []), "--help"],
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
    assert out.splitlines()[1] == "4    191   auto (1024 B left)  32+32      h7  h5,h6"
    code, out, _ = run(
        admin, capsys, "admit", "5", "--workers", "h1", "h2", "--ps", "h8,10.0.0.9", "--size", "1"
    )
    assert (code, out.splitlines()[1]) == (0, "5    191   auto (1 B left)  42+22      h8,h9  h1,h2")
    assert run(admin, capsys, "remove", "5") == (0, "job 5 removed\n", "")
    code, out, _ = run(admin, capsys, "jobs", "--json")
    assert [j["job"] for j in json.loads(out)] == [3, 4]
    assert run(admin, capsys, "prio", "3", "--priority", "9")[1].splitlines()[1].split()[1] == "9"
    assert run(admin, capsys, "policy", "atp", "--stale-us", "900") == (
        0,
        "policy atp, stale timeout 900 us, squat timeout 0 us, static partitions: equal split\n",
        "",
    )
    assert run(admin, capsys, "policy", "static", "--part-size", "16")[1] == (
        "policy static, stale timeout 900 us, squat timeout 0 us, static partitions of 16 slots\n"
    )
    assert run(admin, capsys, "jobs")[1].splitlines()[1].split()[:4] == ["3", "9", "static", "0+16"]
    run(admin, capsys, "policy", "atp", "--part-size", "0")
    code, out, _ = run(admin, capsys, "stats", "--json", "--job", "3")
    assert json.loads(out)["jobs"]["3"]["aggregated"] == 0
    code, out, _ = run(admin, capsys, "status")
    assert (
        "policy:   atp (stale timeout 900 us, squat timeout 0 us, static partitions: equal split)"
        in out.splitlines()
    )
    assert run(admin, capsys, "remove", "4") == (0, "job 4 removed\n", "")
    assert run(admin, capsys, "jobs")[1].splitlines()[1].startswith("3    9     static  0+64")
    assert run(admin, capsys, "policy", "esa")[1] == (
        "policy esa, stale timeout 900 us, squat timeout 5000 us, "
        "homes: equal split, by priority; a job without one hashed over the pool\n"
    )
    assert run(admin, capsys, "jobs")[1].splitlines()[1].startswith("3    9     static  0+64")
    assert run(admin, capsys, "policy", "esa", "--layout", "hashed")[1] == (
        "policy esa, stale timeout 900 us, squat timeout 5000 us, "
        "every job hashed over the pool (layout hashed)\n"
    )
    assert run(admin, capsys, "jobs")[1].splitlines()[1].startswith("3    9     static  0+0")


def test_cli_errors_exit_nonzero(admin: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(admin, capsys, "remove", "9") == (1, "", "esa-ctl: error: unknown job 9\n")
    assert run(admin, capsys, "admit", "1", "--workers", "h1", "--ps", "h2", "--priority", "1") == (
        1,
        "",
        "esa-ctl: error: job 1 has 1 worker(s); at least 2 are needed: a one-worker job has "
        "nothing to aggregate, run it without the switch\n",
    )
    assert run(admin, capsys, "stats", "--job", "9") == (1, "", "esa-ctl: error: unknown job 9\n")


def test_closed_stdout_ends_quietly(admin: str) -> None:
    """`esa-ctl jobs | head -0`: no traceback about the broken pipe."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "controller", "--admin", admin, "jobs"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    assert (proc.wait(timeout=60), proc.stderr.read()) == (1, b"")
    proc.stderr.close()


def test_cli_without_controller(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    addr = f"unix:{tmp_path}/none.sock"
    assert run(addr, capsys, "jobs") == (
        1,
        "",
        f"esa-ctl: error: cannot reach the controller at {addr}: is `esa-ctl serve` running?\n",
    )


HOSTS = {
    f"h{i}": {"port": i, "mac": f"02:00:00:00:00:0{i}", "ip": f"10.0.0.{i}"} for i in (1, 2, 3)
}
SLOT_OWNER = "EsaIngress.pool.slot_owner"


def serve_inputs(d: Path) -> None:
    """A topology, a BMv2 JSON with a 64-slot pool and a P4Info in ``d``."""
    (d / "topo.json").write_text(json.dumps({"hosts": HOSTS}))
    (d / "esa.json").write_text(json.dumps({"register_arrays": [{"name": SLOT_OWNER, "size": 64}]}))
    (d / "esa.p4info.txtpb").write_text("")


def serve_argv(d: Path, **opts: str | None) -> list[str]:
    """``esa-ctl serve`` on the inputs in ``d``; ``opts`` replace options
    (``admin`` is the global one; ``None`` leaves an option out)."""
    given: dict[str, str | None] = {
        "admin": f"unix:{d}/admin.sock",
        "switch": f"unix:{d}/no-switch.sock",
        "topology": str(d / "topo.json"),
        "db": str(d / "s.db"),
        "p4json": str(d / "esa.json"),
        "p4info": str(d / "esa.p4info.txtpb"),
        "interval": "0.2",
    }
    given.update(opts)
    argv = ["--admin", given.pop("admin") or "", "serve"]
    for key, value in given.items():
        if value is not None:
            argv += [f"--{key.replace('_', '-')}", value]
    return argv


def esa_ctl_here(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    """``esa-ctl ARGV`` in this process: exit status, stdout, stderr."""
    try:
        code = main(argv)
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def tree(d: Path) -> dict[str, bytes | str]:
    """Every path under ``d``: a file's bytes, else its kind."""
    return {
        str(p.relative_to(d)): p.read_bytes()
        if p.is_file()
        else "directory"
        if p.is_dir()
        else "socket"
        if p.is_socket()
        else "other"
        for p in sorted(d.rglob("*"))
    }


def _foreign_db(path: Path) -> None:
    with closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE foo (a)")
        db.commit()


def _bad_job_row(path: Path) -> None:
    store = Store(path)
    store.put_job(JobRecord(3, Placement(("h1", "h2"), ("h3",)), Priority.static(1), 0.0))
    store.db.execute("UPDATE jobs SET workers = 'h1 h2'")
    store.db.commit()
    store.close()


def _nothing(d: Path) -> None:
    pass


Setup = Callable[[Path], object]
# (what, prepare the directory, options, error line after "esa-ctl: error: "), with {d}
# standing for the directory in the options and the message
SERVE_REFUSALS: list[tuple[str, Setup, dict[str, str | None], str]] = [
    (
        "corrupt state file",
        lambda d: (d / "s.db").write_bytes(b"garbage\n"),
        {},
        "state file {d}/s.db is damaged or not sqlite: file is not a database",
    ),
    (
        "state file of another program",
        lambda d: _foreign_db(d / "s.db"),
        {},
        "{d}/s.db is not an esa-ctl state file: it has table(s) foo",
    ),
    (
        "state file in a missing directory",
        _nothing,
        {"db": "{d}/gone/s.db"},
        "state file {d}/gone/s.db: no directory {d}/gone",
    ),
    (
        "state file is a directory",
        lambda d: (d / "s.db").mkdir(),
        {},
        "state file {d}/s.db is not a regular file",
    ),
    (
        "state file with an undecodable job",
        lambda d: _bad_job_row(d / "s.db"),
        {},
        "state file {d}/s.db is corrupt: job 3: workers 'h1 h2' are not a JSON list of host names",
    ),
    (
        "state file without hosts",
        lambda d: Store(d / "s.db").close(),
        {"topology": None},
        "no hosts: give --topology (the state file has none saved)",
    ),
    (
        "no topology and no state file",
        _nothing,
        {"topology": None},
        "no hosts: give --topology (there is no state file {d}/s.db)",
    ),
    (
        "topology not UTF-8",
        lambda d: (d / "topo.json").write_bytes(b'{"hosts": "\xff"}'),
        {},
        "fabric: {d}/topo.json is not valid JSON: "
        "'utf-8' codec can't decode byte 0xff in position 11: invalid start byte",
    ),
    (
        "topology host on port 600",
        lambda d: (d / "topo.json").write_text(
            json.dumps({"hosts": {"h1": {**HOSTS["h1"], "port": 600}}})
        ),
        {},
        "host 'h1': port 600 is not a switch port (0..510)",
    ),
    (
        "topology without hosts",
        lambda d: (d / "topo.json").write_text('{"hosts": {}}'),
        {},
        "topology: {d}/topo.json has no hosts",
    ),
    (
        "fabric with --switch",
        lambda d: shutil.copy(TWO_TIER, d / "topo.json"),
        {},
        "--switch and --device-id are for a one-switch topology; the fabric gives each "
        "switch's address and device id (s1, t1, t2)",
    ),
    (
        "fabric with --thrift-cli for no switch",
        lambda d: shutil.copy(TWO_TIER, d / "topo.json"),
        {"switch": None, "thrift_cli": "simple_switch_CLI"},
        "--thrift-cli: name the switch, DEVICE=CMD (s1, t1, t2)",
    ),
    (
        "fabric with --thrift-cli for an unknown switch",
        lambda d: shutil.copy(TWO_TIER, d / "topo.json"),
        {"switch": None, "thrift_cli": "t9=simple_switch_CLI --thrift-port 9090"},
        "fabric: unknown switch 't9' (known switches: s1, t1, t2)",
    ),
    (
        "admin path is a regular file",
        lambda d: (d / "admin.sock").write_text(""),
        {},
        "admin address unix:{d}/admin.sock: {d}/admin.sock exists and is not a socket",
    ),
    (
        "admin path in a missing directory",
        _nothing,
        {"admin": "unix:{d}/gone/admin.sock"},
        "admin address unix:{d}/gone/admin.sock: no directory {d}/gone",
    ),
    (
        "pool size disagrees with the BMv2 JSON",
        _nothing,
        {"pool_size": "32"},
        "pool size 64 from {d}/esa.json differs from 32 from --pool-size",
    ),
    (
        "BMv2 JSON missing",
        _nothing,
        {"p4json": "{d}/missing.json"},
        "cannot read the BMv2 JSON {d}/missing.json: "
        "[Errno 2] No such file or directory: '{d}/missing.json' (`make build` compiles it; "
        "the reference switch needs none: serve --no-p4json)",
    ),
    (
        "BMv2 JSON of another program",
        lambda d: (d / "esa.json").write_text('{"register_arrays": []}'),
        {},
        "{d}/esa.json has no register " + SLOT_OWNER + ": not an ESA program",
    ),
    (
        "P4Info not text format",
        lambda d: (d / "esa.p4info.txtpb").write_text("garbage"),
        {},
        "the P4Info {d}/esa.p4info.txtpb is not P4Info text: 1:8 : '': Expected \"{{\".",
    ),
]


@pytest.mark.parametrize(
    ("setup", "opts", "message"),
    [c[1:] for c in SERVE_REFUSALS],
    ids=[c[0] for c in SERVE_REFUSALS],
)
def test_serve_refuses_bad_input_and_changes_nothing(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    setup: Setup,
    opts: dict[str, str | None],
    message: str,
) -> None:
    serve_inputs(tmp_path)
    setup(tmp_path)
    before = tree(tmp_path)
    argv = serve_argv(tmp_path, **{k: v and v.format(d=tmp_path) for k, v in opts.items()})
    assert esa_ctl_here(capsys, argv) == (1, "", f"esa-ctl: error: {message.format(d=tmp_path)}\n")
    assert tree(tmp_path) == before


def test_serve_without_a_bmv2_json_needs_the_pool_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--no-p4json``: no BMv2 JSON is read, so the pool size comes from
    ``--pool-size`` or the topology, and is refused when neither gives it."""
    serve_inputs(tmp_path)
    (tmp_path / "esa.json").unlink()
    before = tree(tmp_path)
    argv = [*serve_argv(tmp_path, p4json=None), "--no-p4json"]
    assert esa_ctl_here(capsys, argv) == (
        1,
        "",
        "esa-ctl: error: pool size unknown: give --pool-size or the topology's pool_size "
        "(no BMv2 JSON states it)\n",
    )
    argv = [*serve_argv(tmp_path, p4json=None, pool_size="32"), "--no-p4json"]
    topo = json.loads((tmp_path / "topo.json").read_text())
    (tmp_path / "topo.json").write_text(json.dumps({**topo, "pool_size": 16}))
    assert esa_ctl_here(capsys, argv) == (
        1,
        "",
        "esa-ctl: error: pool size 16 from the topology differs from 32 from --pool-size\n",
    )
    (tmp_path / "topo.json").write_text(json.dumps(topo))
    assert tree(tmp_path) == before


def test_serve_refuses_a_read_only_directory(tmp_path: Path) -> None:
    """Root writes anywhere: as root, serve runs without the capability to."""
    drop = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("needs setpriv (util-linux) to drop root's CAP_DAC_OVERRIDE")
        drop = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]
    serve_inputs(tmp_path)
    tmp_path.chmod(0o555)
    before = tree(tmp_path)
    try:
        res = subprocess.run(
            [*drop, sys.executable, "-m", "controller", *serve_argv(tmp_path)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=False,
            timeout=60,
        )
        assert tree(tmp_path) == before
    finally:
        tmp_path.chmod(0o755)
    assert (res.returncode, res.stdout, res.stderr) == (
        1,
        "",
        f"esa-ctl: error: state file {tmp_path}/s.db: cannot create the lock file "
        f"{tmp_path}/s.db.lock: Permission denied\n",
    )


ADMIT_HOST_ERRORS: list[tuple[list[str], str]] = [
    (["admit", "1", "--workers", "h1", "h2", "--ps", "h3,h4,h5", "--priority", "1"],
     "esa-ctl admit: error: argument --ps: 3 PS hosts given; a job has 1, 2, 4 or 8 PS hosts"),
    (["admit", "1", "--workers", "h1", "h2", "--ps", *(f"h{i}" for i in range(3, 12)),
      "--priority", "1"],
     "esa-ctl admit: error: argument --ps: 9 PS hosts given; a job has 1, 2, 4 or 8 PS hosts"),
    (["admit", "1", "--workers", "h1", "h2", "--ps", ",", "--priority", "1"],
     "esa-ctl admit: error: argument --ps: 0 PS hosts given; a job has 1, 2, 4 or 8 PS hosts"),
    (["admit", "1", "--workers", "h1", "h2", "--ps", "h3", "h3", "--priority", "1"],
     "esa-ctl admit: error: argument --ps: h3 given twice"),
    (["admit", "1", "--workers", "h1,h2", "h1", "--ps", "h3", "--priority", "1"],
     "esa-ctl admit: error: argument --workers: h1 given twice"),
    (["admit", "1", "--workers", "h1", "h2", "--ps", "h4,h2", "--size", "1"],
     "esa-ctl admit: error: argument --ps: h2 given as worker and PS"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "message"), ADMIT_HOST_ERRORS)
def test_admit_host_errors_reach_no_controller(
    admin: str, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    argv = ["--admin", admin, *argv]
    assert esa_ctl_here(capsys, argv) == (2, "", f"{message} (see esa-ctl admit --help)\n")
    assert run(admin, capsys, "jobs") == (0, "no jobs\n", "")


USAGE_ERRORS: list[tuple[list[str], str]] = [
    (["serve", "--interval", "0"], "esa-ctl serve: error: argument --interval: interval 0 s: "
     "give more than 0 and at most 3600 seconds"),
    (["serve", "--interval", "nan"], "esa-ctl serve: error: argument --interval: interval 'nan' "
     "is not a finite number"),
    (["serve", "--aging-period", "-1"], "esa-ctl serve: error: argument --aging-period: "
     "aging period -1 s: give 0 or more seconds"),
    (["serve", "--pool-size", "0"], "esa-ctl serve: error: argument --pool-size: pool size 0 is "
     "out of range (1..2^63-1)"),
    (["serve", "--device-id", "-1"], "esa-ctl serve: error: argument --device-id: device id -1 is "
     "out of range (0..2^64-1)"),
    (["serve", "--election-id", "0"], "esa-ctl serve: error: argument --election-id: election id "
     "0 is out of range (1..2^64-1)"),
    (["serve", "--thrift-cli", "ip netns exec 'sw"], "esa-ctl serve: error: argument --thrift-cli: "
     "\"ip netns exec 'sw\": No closing quotation"),
    (["serve", "--switch", " "], "esa-ctl serve: error: argument --switch: switch address is "
     "empty"),
    (["serve", "--p4json", "build/esa.json", "--no-p4json"], "esa-ctl serve: error: argument "
     "--no-p4json: not allowed with argument --p4json"),
    (["--admin", "0.0.0.0:5000", "jobs"], "esa-ctl: error: argument --admin: admin address "
     "'0.0.0.0:5000': use unix:PATH or 127.0.0.1:PORT"),
    (["--admin", "127.0.0.1:0", "jobs"], "esa-ctl: error: argument --admin: admin address "
     "'127.0.0.1:0': use unix:PATH or 127.0.0.1:PORT"),
    (["--admin", "", "jobs"], "esa-ctl: error: argument --admin: admin address '': "
     "use unix:PATH or 127.0.0.1:PORT"),
    (["--admin", "unix:/" + "x" * 107, "jobs"], "esa-ctl: error: argument --admin: admin address "
     f"'unix:/{'x' * 107}': a socket path has at most 107 bytes"),
    (["jobs", "--bogus"], "esa-ctl: error: unrecognized arguments: --bogus"),
    ([], "esa-ctl: error: the following arguments are required: COMMAND"),
    (["admit", "0", "--workers", "h1", "h2", "--ps", "h3", "--priority", "1"],
     "esa-ctl admit: error: argument job: job id 0 is out of range (1..255)"),
    (["admit", "x", "--workers", "h1", "h2", "--ps", "h3", "--priority", "1"],
     "esa-ctl admit: error: argument job: job id 'x' is not an integer"),
    (["admit", "1", "--workers", "h1", "h2", "--ps", "h3", "--priority", "256"],
     "esa-ctl admit: error: argument --priority: priority 256 is out of range (0..255)"),
    (["admit", "1", "--workers", "h1", "h2", "--ps", "h3", "--size", str(2**63)],
     "esa-ctl admit: error: argument --size: size 9223372036854775808 is out of range "
     "(0..2^63-1)"),
    (["admit", "1", "--workers", "h1", "h2", "--ps", "h3"], "esa-ctl admit: error: one of the "
     "arguments --priority --size is required"),
    (["admit", "1", "--workers", "h1", "h2", "--priority", "1"], "esa-ctl admit: error: the "
     "following arguments are required: --ps"),
    *ADMIT_HOST_ERRORS,
    (["prio", "1", "--priority", "1", "--size", "2"], "esa-ctl prio: error: argument --size: not "
     "allowed with argument --priority"),
    (["progress", "1", "-5"], "esa-ctl progress: error: argument remaining: remaining -5 is out "
     "of range (0..2^63-1)"),
    (["remove", "256"], "esa-ctl remove: error: argument job: job id 256 is out of range (1..255)"),
    (["policy", "fifo"], "esa-ctl policy: error: argument policy: invalid choice: 'fifo' (choose "
     "from 'esa', 'atp', 'static')"),
    (["policy", "esa", "--layout", "striped"], "esa-ctl policy: error: argument --layout: "
     "invalid choice: 'striped' (choose from 'homes', 'hashed')"),
    (["policy", "atp", "--stale-us", "0"], "esa-ctl policy: error: argument --stale-us: stale "
     "timeout 0 is out of range (1..2^48-1)"),
    (["policy", "atp", "--squat-us", str(2**48)], "esa-ctl policy: error: argument --squat-us: "
     f"squat timeout {2**48} is out of range (0..2^48-1)"),
    (["stats", "--job", "0"], "esa-ctl stats: error: argument --job: job id 0 is out of range "
     "(1..255)"),
    (["stats", "--interval", "-1"], "esa-ctl stats: error: argument --interval: interval -1 s: "
     "give more than 0 and at most 3600 seconds"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "message"), USAGE_ERRORS)
def test_usage_errors_are_one_line_with_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    if argv[:1] == ["serve"]:
        serve_inputs(tmp_path)
        argv = ["--admin", f"unix:{tmp_path}/admin.sock", *argv, "--db", f"{tmp_path}/s.db"]
    before = tree(tmp_path)
    prog = message.split(": error: ")[0]
    assert esa_ctl_here(capsys, argv) == (2, "", f"{message} (see {prog} --help)\n")
    assert tree(tmp_path) == before
