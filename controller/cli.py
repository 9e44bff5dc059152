"""esa-ctl: run the ESA controller, and talk to a running one.

`esa-ctl serve` connects to the switch and serves the admin API; every other
command is a client of that API.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from controller import codec
from controller.admin import DEFAULT_ADDR, AdminClient, AdminError
from controller.arguments import (
    MAX_INTERVAL_S,
    Parser,
    admin_address,
    command_line,
    integer,
    nonempty,
    seconds,
)
from controller.codec import MAX_INT
from controller.errors import ControllerError
from controller.formats import (
    format_jobs,
    format_policy,
    format_slots,
    format_stats,
    format_status,
)
from controller.messages import AdmitRequest, JobRef, PolicyRequest, PrioRequest, ProgressRequest
from controller.priority import DEFAULT_AGING_PERIOD_S
from controller.serve import run_serve
from controller.validate import MAX_PART_SIZE, MAX_STALE_US
from esa import wire
from esa.spec import DEFAULT_SQUAT_US, MAX_PRIORITY

JOB = integer("job id", 1, wire.MAX_JOB_ID)
BYTES = "0..2^63-1"


def _add_priority(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument(
        "--priority",
        type=integer("priority", 0, MAX_PRIORITY),
        help=f"static priority 0..{MAX_PRIORITY} (higher = more urgent)",
    )
    g.add_argument(
        "--size",
        type=integer("size", 0, MAX_INT, BYTES),
        help="auto priority (SRPT with aging) from the bytes the job still has to aggregate",
    )


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(prog="esa-ctl", description=__doc__)
    ap.add_argument(
        "--admin",
        type=admin_address,
        default=os.environ.get("ESA_CTL_ADDR", DEFAULT_ADDR),
        help="admin API address, unix:PATH or 127.0.0.1:PORT (env ESA_CTL_ADDR; "
        f"default {DEFAULT_ADDR})",
    )
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("serve", help="run the controller", description="Run the controller.")
    p.add_argument(
        "--switch",
        type=nonempty("switch address"),
        default="127.0.0.1:9559",
        help="P4Runtime address of the switch",
    )
    p.add_argument("--device-id", type=integer("device id", 0, 2**64 - 1, "0..2^64-1"), default=0)
    p.add_argument(
        "--election-id",
        type=integer("election id", 1, 2**64 - 1, "1..2^64-1"),
        default=1,
        help="election id (low 64 bits)",
    )
    p.add_argument("--p4json", type=Path, default=Path("build/esa.json"), help="BMv2 JSON")
    p.add_argument(
        "--p4info", type=Path, default=Path("build/esa.p4info.txtpb"), help="P4Info (text)"
    )
    p.add_argument("--topology", type=Path, help="topology JSON (default: hosts saved in --db)")
    p.add_argument(
        "--pool-size",
        type=integer("pool size", 1, MAX_INT, "1..2^63-1"),
        help="slot pool size (default: from --p4json)",
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
        type=command_line,
        help="command that runs simple_switch_CLI for the switch, for the slots view "
        "(e.g. 'ip netns exec sw simple_switch_CLI --thrift-port 9090')",
    )

    p = sub.add_parser("admit", help="admit a job", description="Admit a job.")
    p.add_argument("job", type=JOB, help="job id, 1..255")
    p.add_argument(
        "--workers",
        nargs="+",
        required=True,
        help="2..32 workers: host names, IPv4 or MAC addresses, or port:N (commas work too)",
    )
    p.add_argument("--ps", required=True, help="the job's parameter server (same forms)")
    _add_priority(p)

    sub.add_parser("jobs", help="list jobs", description="List the admitted jobs.").add_argument(
        "--json", action="store_true", help="print JSON"
    )

    p = sub.add_parser("prio", help="change a job's priority", description="Re-prioritise a job.")
    p.add_argument("job", type=JOB)
    _add_priority(p)

    p = sub.add_parser(
        "progress",
        help="report an auto job's remaining bytes",
        description="Report the bytes an auto-priority job still has to aggregate.",
    )
    p.add_argument("job", type=JOB)
    p.add_argument(
        "remaining", type=integer("remaining", 0, MAX_INT, BYTES), help="bytes still to aggregate"
    )

    p = sub.add_parser(
        "remove", help="remove a job", description="Remove a job: its entries and groups are freed."
    )
    p.add_argument("job", type=JOB)

    p = sub.add_parser(
        "policy", help="switch the slot policy", description="Switch the slot policy at run time."
    )
    p.add_argument("policy", choices=["esa", "atp", "static"])
    p.add_argument(
        "--stale-us",
        type=integer("stale timeout", 1, MAX_STALE_US, "1..2^48-1"),
        help="stale-slot timeout in microseconds",
    )
    p.add_argument(
        "--squat-us",
        type=integer("squat timeout", 0, MAX_STALE_US, "0..2^48-1"),
        help="idle timeout of an incomplete partial in microseconds, 0 = off "
        f"(default: {DEFAULT_SQUAT_US} under esa, 0 under atp and static)",
    )
    p.add_argument(
        "--part-size",
        type=integer("partition size", 0, MAX_PART_SIZE, f"0..{MAX_PART_SIZE}"),
        help="static partitions of this many slots, given to jobs in admission order "
        "(a job's bandwidth-delay product in chunks, as SwitchML sizes them); "
        "0 = an equal split among all jobs (default: unchanged)",
    )

    sub.add_parser(
        "status", help="controller and switch status", description="Show the status."
    ).add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser(
        "stats", help="per-job switch counters", description="Per-job counters from the switch."
    )
    p.add_argument("--job", type=JOB, help="only this job")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--watch", action="store_true", help="refresh until interrupted")
    p.add_argument(
        "--interval",
        type=seconds("interval", hi=MAX_INTERVAL_S),
        default=1.0,
        help="seconds between refreshes",
    )

    sub.add_parser(
        "slots",
        help="slot pool occupancy per job",
        description="Slots held per job, read from the switch's registers over Thrift "
        "(needs serve --thrift-cli).",
    ).add_argument("--json", action="store_true", help="print JSON")
    return ap


# -- client commands --


def _json(reply: object, indent: int | None = None) -> str:
    return json.dumps(codec.encode(reply), indent=indent)


def _workers(raw: list[str]) -> tuple[str, ...]:
    return tuple(w for item in raw for w in item.split(",") if w)


def _admit(client: AdminClient, args: argparse.Namespace) -> None:
    req = AdmitRequest(
        job=args.job,
        workers=_workers(args.workers),
        ps=args.ps,
        priority=args.priority,
        size=args.size,
    )
    print(format_jobs([client.admit(req)]))


def _jobs(client: AdminClient, args: argparse.Namespace) -> None:
    jobs = client.jobs().jobs
    print(_json(jobs, indent=2) if args.json else format_jobs(jobs))


def _prio(client: AdminClient, args: argparse.Namespace) -> None:
    req = PrioRequest(job=args.job, priority=args.priority, size=args.size)
    print(format_jobs([client.prio(req)]))


def _progress(client: AdminClient, args: argparse.Namespace) -> None:
    req = ProgressRequest(job=args.job, remaining=args.remaining)
    print(format_jobs([client.progress(req)]))


def _remove(client: AdminClient, args: argparse.Namespace) -> None:
    client.remove(JobRef(job=args.job))
    print(f"job {args.job} removed")


def _policy(client: AdminClient, args: argparse.Namespace) -> None:
    req = PolicyRequest(
        policy=args.policy,
        stale_us=args.stale_us,
        squat_us=args.squat_us,
        part_size=args.part_size,
    )
    print(format_policy(client.policy(req)))


def _status(client: AdminClient, args: argparse.Namespace) -> None:
    rep = client.status()
    print(_json(rep, indent=2) if args.json else format_status(rep))


def _stats(client: AdminClient, args: argparse.Namespace) -> None:
    while True:
        rep = client.stats()
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
    rep = client.slots()
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
    args = build_parser().parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
