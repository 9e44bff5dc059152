"""esa-ctl: run the ESA controller, and talk to a running one.

`esa-ctl serve` connects to every switch of the topology and serves the
admin API; every other command is a client of that API.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

import grpc

from controller.api import codec
from controller.api.address import admin_address, check_admin_addr, metrics_address
from controller.api.admin import DEFAULT_ADDR, AdminClient, AdminError
from controller.api.formats import (
    format_jobs,
    format_policy,
    format_slots,
    format_stats,
    format_status,
)
from controller.api.messages import (
    AdmitRequest,
    DeviceRef,
    JobRef,
    PolicyRequest,
    PrioRequest,
    ProgressRequest,
    Status,
)
from controller.api.serve import ThriftCli, run_serve
from controller.api.validate import MAX_PART_SIZE, check_volume, devices
from controller.errors import ControllerError, InvalidRequest
from controller.world.partition import HOME_CAP, HOME_FLOOR, LAYOUT_NAMES
from controller.world.priority import DEFAULT_AGING_PERIOD_S
from esa import arguments, wire
from esa.arguments import (
    Parser,
    checked,
    command_line,
    host_list,
    integer,
    nonempty,
    seconds,
    usage_line,
)
from esa.job import MAX_PRIORITY, PS_COUNTS, valid_shards
from esa.schemes import POLICY_NAMES
from esa.spec import DEFAULT_SQUAT_US

MAX_INTERVAL_S = 3600.0
"""The longest interval a watching command takes."""
_FOR_DEVICE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,63})=(.*)$", re.DOTALL)


def thrift_cli(text: str) -> ThriftCli:
    """``[DEVICE=]CMD``: the command that runs ``simple_switch_CLI`` for one switch."""
    m = _FOR_DEVICE.match(text)
    return (m[1], command_line(m[2])) if m else (None, command_line(text))


def _add_device(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--device", metavar="NAME", help=f"only this switch's {what}")


def _add_priority(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument(
        "--priority",
        type=arguments.PRIORITY,
        help=f"static priority 0..{MAX_PRIORITY} (higher = more urgent)",
    )
    g.add_argument(
        "--size",
        type=checked("size", partial(check_volume, "size")),
        help="auto priority (SRPT with aging) from the bytes the job still has to aggregate",
    )


def _add_serve(sub: argparse._SubParsersAction[Parser]) -> None:
    """``serve``: the controller's daemon, its switch, program and state."""
    p = sub.add_parser("serve", help="run the controller", description="Run the controller.")
    p.add_argument(
        "--switch",
        type=nonempty("switch address"),
        help="P4Runtime address of the switch of a one-switch topology (default 127.0.0.1:9559)",
    )
    p.add_argument(
        "--device-id",
        type=arguments.DEVICE_ID,
        help="device id of the switch of a one-switch topology (default 0)",
    )
    p.add_argument(
        "--election-id",
        type=integer("election id", 1, 2**64 - 1, "1..2^64-1"),
        default=1,
        help="election id (low 64 bits)",
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--p4json",
        type=Path,
        default=Path("build/esa.json"),
        help="BMv2 JSON, pushed as the device config (default build/esa.json)",
    )
    g.add_argument(
        "--no-p4json",
        action="store_true",
        help="no BMv2 JSON: push the P4Info with a device config that states the pool "
        "size alone, which the reference switch (esa-refswitch) takes and BMv2 refuses",
    )
    p.add_argument(
        "--p4info", type=Path, default=Path("build/esa.p4info.txtpb"), help="P4Info (text)"
    )
    p.add_argument(
        "--topology",
        type=Path,
        help="topology JSON, of one switch or a fabric of several (default: saved in --db)",
    )
    p.add_argument(
        "--pool-size",
        type=arguments.POOL_SIZE,
        help="slot pool size (default: from --p4json or the topology's pool_size)",
    )
    p.add_argument("--db", type=Path, default=Path("esa-ctl.db"), help="sqlite3 state file")
    p.add_argument(
        "--aging-period",
        type=seconds("aging period", zero=True),
        default=DEFAULT_AGING_PERIOD_S,
        help="seconds per halving of an auto job's remaining volume in its ranking (0: no aging)",
    )
    p.add_argument(
        "--interval",
        type=seconds("interval", hi=MAX_INTERVAL_S),
        default=1.0,
        help="seconds between switch checks",
    )
    p.add_argument(
        "--p4rt-log",
        type=Path,
        help="append every P4Runtime request sent to the switch to this file",
    )
    p.add_argument(
        "--thrift-cli",
        type=thrift_cli,
        action="append",
        metavar="[DEVICE=]CMD",
        help="command that runs simple_switch_CLI for a switch, for the slots view of a "
        "BMv2, which serves no register reads over P4Runtime "
        "(e.g. 'ip netns exec sw simple_switch_CLI --thrift-port 9090'); once per switch, "
        "each prefixed with its name and '=' when the topology has several",
    )
    p.add_argument(
        "--metrics",
        type=metrics_address,
        metavar="HOST:PORT",
        help="serve the switches' counters in Prometheus' text format on "
        "http://HOST:PORT/metrics (port 0: a free one, which it logs; default: not served)",
    )


def _add_job_commands(sub: argparse._SubParsersAction[Parser]) -> None:
    """``admit``, ``jobs``, ``prio``, ``progress``, ``remove``: a job's life."""
    p = sub.add_parser("admit", help="admit a job", description="Admit a job.")
    p.add_argument("job", type=arguments.JOB_ID, help=f"job id, 1..{wire.MAX_JOB_ID}")
    p.add_argument(
        "--workers",
        nargs="+",
        required=True,
        help="2..32 workers: host names, IPv4 or MAC addresses, or port:N (commas work too)",
    )
    p.add_argument(
        "--ps",
        nargs="+",
        required=True,
        help="the job's parameter servers, 1, 2, 4 or 8 hosts (same forms): chunk SEQ goes "
        "to the (SEQ mod count)-th",
    )
    _add_priority(p)

    p = sub.add_parser("jobs", help="list jobs", description="List the admitted jobs.")
    p.add_argument("--json", action="store_true", help="print JSON")
    _add_device(p, "jobs")

    p = sub.add_parser("prio", help="change a job's priority", description="Re-prioritise a job.")
    p.add_argument("job", type=arguments.JOB_ID)
    _add_priority(p)

    p = sub.add_parser(
        "progress",
        help="report an auto job's remaining bytes",
        description="Report the bytes an auto-priority job still has to aggregate.",
    )
    p.add_argument("job", type=arguments.JOB_ID)
    p.add_argument(
        "remaining",
        type=checked("remaining", partial(check_volume, "remaining")),
        help="bytes still to aggregate",
    )

    p = sub.add_parser(
        "remove", help="remove a job", description="Remove a job: its entries and groups are freed."
    )
    p.add_argument("job", type=arguments.JOB_ID)


def _add_policy(sub: argparse._SubParsersAction[Parser]) -> None:
    """``policy``: the slot policy and its timeouts, at run time."""
    p = sub.add_parser(
        "policy", help="switch the slot policy", description="Switch the slot policy at run time."
    )
    p.add_argument("policy", choices=POLICY_NAMES)
    p.add_argument(
        "--stale-us",
        type=arguments.STALE_US,
        help="stale-slot timeout in microseconds",
    )
    p.add_argument(
        "--squat-us",
        type=arguments.SQUAT_US,
        help="idle timeout of an incomplete partial in microseconds, 0 = off "
        f"(default: {DEFAULT_SQUAT_US} under esa, 0 under atp and static)",
    )
    p.add_argument(
        "--part-size",
        type=integer("partition size", 0, MAX_PART_SIZE, f"0..{MAX_PART_SIZE}"),
        help="static: partitions of this many slots (a job's bandwidth-delay "
        "product in chunks, as SwitchML sizes them), given to jobs in admission "
        "order; esa: the least home, the pool split equally among as many of the "
        f"highest-ranked jobs as it gives {HOME_FLOOR:g} x this or more, each home at most "
        f"{HOME_CAP:g} x this, the others hashed over the pool; 0 = an equal split among "
        "the jobs, under static and esa "
        "alike (default: unchanged)",
    )
    p.add_argument(
        "--layout",
        choices=LAYOUT_NAMES,
        help="where esa places chunks: homes (partitions, as --part-size cuts them; "
        "the default, for hosts milliseconds apart, as around a software switch) or "
        "hashed (every job over the whole pool, for hosts microseconds apart) "
        "(default: unchanged)",
    )


def _add_views(sub: argparse._SubParsersAction[Parser]) -> None:
    """``status``, ``stats``, ``slots``: what the controller and the switches show."""
    p = sub.add_parser(
        "status", help="controller and switch status", description="Show the status."
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    _add_device(p, "status")

    p = sub.add_parser(
        "stats", help="per-job switch counters", description="Per-job counters from the switch."
    )
    p.add_argument("--job", type=arguments.JOB_ID, help="only this job")
    _add_device(p, "counters")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--watch", action="store_true", help="refresh until interrupted")
    p.add_argument(
        "--interval",
        type=seconds("interval", hi=MAX_INTERVAL_S),
        default=1.0,
        help="seconds between refreshes",
    )

    p = sub.add_parser(
        "slots",
        help="slot pool occupancy per job",
        description="Slots held per job, read from each switch's slot_owner register: "
        "over P4Runtime where the switch serves register reads (the reference switch), "
        "else over BMv2's Thrift CLI (needs serve --thrift-cli).",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    _add_device(p, "slots")


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(prog="esa-ctl", description=__doc__)
    ap.add_argument(
        "--admin",
        type=admin_address,
        default=os.environ.get("ESA_CTL_ADDR", DEFAULT_ADDR),
        help="admin API address, unix:PATH or 127.0.0.1:PORT (serve takes 127.0.0.1:0: a "
        f"free port, which it logs; env ESA_CTL_ADDR; default {DEFAULT_ADDR})",
    )
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for add in (_add_serve, _add_job_commands, _add_policy, _add_views):
        add(sub)
    return ap


# -- client commands --


def _json(reply: object, indent: int | None = None) -> str:
    return json.dumps(codec.encode(reply), indent=indent)


def admit_hosts(workers: tuple[str, ...], ps: tuple[str, ...]) -> str | None:
    """Why ``admit``'s hosts are refused as written, or None.  The controller
    checks them again once resolved (``10.0.0.1`` may be ``h1``)."""
    if not valid_shards(len(ps)):
        return f"argument --ps: {len(ps)} PS hosts given; {PS_COUNTS}"
    for option, names in (("--workers", workers), ("--ps", ps)):
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            return f"argument {option}: {', '.join(twice)} given twice"
    both = sorted(set(workers) & set(ps))
    if both:
        return f"argument --ps: {', '.join(both)} given as worker and PS"
    return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.command != "serve":
        try:
            check_admin_addr(args.admin)
        except InvalidRequest as e:
            ap.error(f"argument --admin: {e}")
    if args.command == "admit":
        args.workers, args.ps = host_list(args.workers), host_list(args.ps)
        why = admit_hosts(args.workers, args.ps)
        if why is not None:
            ap.exit(2, usage_line(f"{ap.prog} admit", why))
    return args


def _rows_of(client: AdminClient, device: str | None = None) -> tuple[str, ...]:
    """The switches whose rows ``format_jobs`` shows: none when there is one
    switch (a row per job), else ``device`` or every one."""
    names = [s.name for s in client.status().switches]
    devices(device, names)
    if len(names) == 1:
        return ()
    return (device,) if device else tuple(names)


def status_of(rep: Status, device: str) -> Status:
    """The status of one switch: its link, jobs, entries and hosts."""
    (sw,) = [s for s in rep.switches if s.name == device]
    hosts = {n: h for n, h in rep.hosts.items() if h.switch == device}
    return replace(rep, switches=(sw,), jobs=sw.jobs, entries=sw.entries, hosts=hosts)


def _admit(client: AdminClient, args: argparse.Namespace) -> None:
    req = AdmitRequest(
        job=args.job,
        workers=args.workers,
        ps=args.ps,
        priority=args.priority,
        size=args.size,
    )
    print(format_jobs([client.admit(req)], _rows_of(client)))


def _jobs(client: AdminClient, args: argparse.Namespace) -> None:
    jobs = client.jobs().jobs
    rows = _rows_of(client, args.device)
    if args.device is not None:
        jobs = tuple(j for j in jobs if args.device in j.switches)
    print(_json(jobs, indent=2) if args.json else format_jobs(jobs, rows))


def _prio(client: AdminClient, args: argparse.Namespace) -> None:
    req = PrioRequest(job=args.job, priority=args.priority, size=args.size)
    print(format_jobs([client.prio(req)], _rows_of(client)))


def _progress(client: AdminClient, args: argparse.Namespace) -> None:
    req = ProgressRequest(job=args.job, remaining=args.remaining)
    print(format_jobs([client.progress(req)], _rows_of(client)))


def _remove(client: AdminClient, args: argparse.Namespace) -> None:
    client.remove(JobRef(job=args.job))
    print(f"job {args.job} removed")


def _policy(client: AdminClient, args: argparse.Namespace) -> None:
    req = PolicyRequest(
        policy=args.policy,
        stale_us=args.stale_us,
        squat_us=args.squat_us,
        part_size=args.part_size,
        layout=args.layout,
    )
    print(format_policy(client.policy(req)))


def _status(client: AdminClient, args: argparse.Namespace) -> None:
    rep = client.status()
    if args.device is not None:
        devices(args.device, [s.name for s in rep.switches])
        rep = status_of(rep, args.device)
    print(_json(rep, indent=2) if args.json else format_status(rep))


def _stats(client: AdminClient, args: argparse.Namespace) -> None:
    while True:
        rep = client.stats(DeviceRef(args.device))
        if args.job is not None and args.job not in rep.jobs:
            raise AdminError(grpc.StatusCode.NOT_FOUND, f"unknown job {args.job}")
        if args.json:
            print(_json(rep), flush=True)
        else:
            if args.watch:
                print("\x1b[2J\x1b[H" + time.strftime("%H:%M:%S"))
            print(format_stats(rep, args.job), flush=True)
        if not args.watch:
            return
        time.sleep(args.interval)


def _slots(client: AdminClient, args: argparse.Namespace) -> None:
    rep = client.slots(DeviceRef(args.device))
    print(_json(rep) if args.json else format_slots(rep))


CLIENT_COMMANDS: dict[str, Callable[[AdminClient, argparse.Namespace], None]] = {
    "admit": _admit,
    "jobs": _jobs,
    "prio": _prio,
    "progress": _progress,
    "remove": _remove,
    "policy": _policy,
    "status": _status,
    "stats": _stats,
    "slots": _slots,
}
"""Every command but ``serve``: one call of the admin API each, printed."""


def run_client(args: argparse.Namespace) -> int:
    client = AdminClient(args.admin)
    try:
        CLIENT_COMMANDS[args.command](client, args)
        return 0
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.command == "serve":
            return run_serve(args)
        return run_client(args)
    except (AdminError, ControllerError) as e:
        print(f"esa-ctl: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader went away (e.g. `| head`): stop quietly, as other CLI tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
