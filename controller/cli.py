"""esa-ctl: run the ESA controller, and talk to a running one.

`esa-ctl serve` connects to the switch and serves the admin API; every other
command is a client of that API.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import grpc

from controller.admin import DEFAULT_ADDR, AdminClient, AdminError, check_listen_addr, serve
from controller.errors import ControllerError, SwitchUnavailable
from controller.pipeline import pool_size_of, resolve_pool_size
from controller.priority import DEFAULT_AGING_PERIOD_S
from controller.service import Controller
from controller.state import Store
from controller.switch import P4RuntimeSwitch, Switch
from controller.topology import Topology
from esa.spec import MAX_PRIORITY

log = logging.getLogger("esa.controller")


def _add_priority(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument(
        "--priority", type=int, help=f"static priority 0..{MAX_PRIORITY} (higher = more urgent)"
    )
    g.add_argument(
        "--size",
        type=int,
        help="auto priority (SRPT with aging) from the bytes the job still has to aggregate",
    )


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="esa-ctl", description=__doc__)
    ap.add_argument(
        "--admin",
        default=os.environ.get("ESA_CTL_ADDR", DEFAULT_ADDR),
        help="admin API address, unix:PATH or 127.0.0.1:PORT (env ESA_CTL_ADDR; "
        f"default {DEFAULT_ADDR})",
    )
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("serve", help="run the controller", description="Run the controller.")
    p.add_argument("--switch", default="127.0.0.1:9559", help="P4Runtime address of the switch")
    p.add_argument("--device-id", type=int, default=0)
    p.add_argument("--election-id", type=int, default=1, help="election id (low 64 bits)")
    p.add_argument("--p4json", type=Path, default=Path("build/esa.json"), help="BMv2 JSON")
    p.add_argument(
        "--p4info", type=Path, default=Path("build/esa.p4info.txtpb"), help="P4Info (text)"
    )
    p.add_argument("--topology", type=Path, help="topology JSON (default: hosts saved in --db)")
    p.add_argument("--pool-size", type=int, help="slot pool size (default: from --p4json)")
    p.add_argument("--db", type=Path, default=Path("esa-ctl.db"), help="sqlite3 state file")
    p.add_argument(
        "--aging-period",
        type=float,
        default=DEFAULT_AGING_PERIOD_S,
        help="seconds per priority level gained by auto jobs (0: no aging)",
    )
    p.add_argument(
        "--interval", type=float, default=1.0, help="seconds between switch checks and aging"
    )
    p.add_argument(
        "--thrift-cli",
        help="command that runs simple_switch_CLI for the switch, for the slots view "
        "(e.g. 'ip netns exec sw simple_switch_CLI --thrift-port 9090')",
    )

    p = sub.add_parser("admit", help="admit a job", description="Admit a job.")
    p.add_argument("job", type=int, help="job id, 1..255")
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
    p.add_argument("job", type=int)
    _add_priority(p)

    p = sub.add_parser(
        "progress",
        help="report an auto job's remaining bytes",
        description="Report the bytes an auto-priority job still has to aggregate.",
    )
    p.add_argument("job", type=int)
    p.add_argument("remaining", type=int, help="bytes still to aggregate")

    p = sub.add_parser(
        "remove", help="remove a job", description="Remove a job: its entries and groups are freed."
    )
    p.add_argument("job", type=int)

    p = sub.add_parser(
        "policy", help="switch the slot policy", description="Switch the slot policy at run time."
    )
    p.add_argument("policy", choices=["esa", "atp", "static"])
    p.add_argument("--stale-us", type=int, help="stale-slot timeout in microseconds")

    sub.add_parser(
        "status", help="controller and switch status", description="Show the status."
    ).add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser(
        "stats", help="per-job switch counters", description="Per-job counters from the switch."
    )
    p.add_argument("--job", type=int, help="only this job")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--watch", action="store_true", help="refresh until interrupted")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes")

    sub.add_parser(
        "slots",
        help="slot pool occupancy per job",
        description="Slots held per job, read from the switch's registers over Thrift "
        "(needs serve --thrift-cli).",
    ).add_argument("--json", action="store_true", help="print JSON")
    return ap


# -- serve --


def run_serve(args: argparse.Namespace) -> int:
    check_listen_addr(args.admin)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    store = Store(args.db)
    topology = Topology.load(args.topology) if args.topology else Topology(store.hosts())
    if not topology.hosts:
        raise ControllerError("no hosts: give --topology (the state file has none saved)")
    from_json = pool_size_of(args.p4json)
    pool = resolve_pool_size(
        ("--pool-size", args.pool_size),
        (str(args.p4json), from_json),
        ("the topology", topology.pool_size),
    )

    def connect() -> Switch:
        sw = P4RuntimeSwitch.connect(args.switch, args.device_id, (0, args.election_id))
        try:
            if sw.ensure_pipeline(args.p4json, args.p4info):
                log.info("pushed the pipeline to %s", args.switch)
        except ControllerError:
            sw.close()
            raise
        return sw

    ctl = Controller(
        store,
        topology,
        pool,
        connect,
        args.aging_period,
        switch_addr=args.switch,
        thrift_cli=shlex.split(args.thrift_cli) if args.thrift_cli else None,
    )
    try:
        log.info("switch in sync (%d changes)", ctl.sync())
    except SwitchUnavailable as e:
        log.warning("%s; retrying every %.1f s", e, args.interval)
    server = serve(ctl, args.admin)
    log.info("admin API on %s", args.admin)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    was_connected = ctl.connected
    while not stop.wait(args.interval):
        try:
            if ctl.connected:
                ctl.tick()
            else:
                log.info("switch re-synced (%d changes)", ctl.sync())
        except ControllerError as e:
            if was_connected:
                log.warning("%s", e)
        was_connected = ctl.connected
    server.stop(grace=1.0)
    if ctl.switch is not None:
        ctl.switch.close()
    store.close()
    return 0


# -- client commands --


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def format_jobs(jobs: list[dict[str, Any]]) -> str:
    if not jobs:
        return "no jobs"
    rows = [["JOB", "PRIO", "MODE", "PARTITION", "PS", "WORKERS"]]
    for j in jobs:
        part = j["partition"]
        rows.append(
            [
                str(j["job"]),
                str(j["priority"]),
                j["mode"] if j["mode"] == "static" else f"auto ({j['remaining']} B left)",
                f"{part[0]}+{part[1]}" if part else "-",
                j["ps"],
                ",".join(j["workers"]),
            ]
        )
    return _table(rows)


def format_stats(stats: dict[str, Any], job: int | None) -> str:
    jobs = {k: v for k, v in stats["jobs"].items() if job is None or k == str(job)}
    lines = []
    if jobs:
        events = list(next(iter(jobs.values())))
        rows = [["JOB", *(e.upper() for e in events)]]
        rows += [[k, *(str(v[e]) for e in events)] for k, v in jobs.items()]
        lines.append(_table(rows))
    else:
        lines.append("no jobs")
    lines.append("drops: " + ", ".join(f"{k}={v}" for k, v in stats["drops"].items()))
    return "\n".join(lines)


def format_status(s: dict[str, Any]) -> str:
    sw = s["switch"]
    return "\n".join(
        [
            f"switch:   {sw['address']} ({'connected' if sw['connected'] else 'NOT connected'})",
            f"policy:   {s['policy']} (stale timeout {s['stale_us']} us)",
            f"pool:     {s['pool_size']} slots",
            f"jobs:     {s['jobs']}",
            f"entries:  {s['entries']}",
            f"aging:    {s['aging_period_s']} s per level",
            f"hosts:    {', '.join(s['hosts'])}",
        ]
    )


def format_slots(s: dict[str, Any]) -> str:
    held = ", ".join(f"job {j}: {n}" for j, n in s["by_job"].items())
    return f"{s['used']} of {s['pool_size']} slots held" + (f" ({held})" if held else "")


def _workers(raw: list[str]) -> list[str]:
    return [w for item in raw for w in item.split(",") if w]


def run_client(args: argparse.Namespace) -> int:
    client = AdminClient(args.admin)
    try:
        cmd = args.command
        if cmd == "admit":
            req = {
                "job": args.job,
                "workers": _workers(args.workers),
                "ps": args.ps,
                "priority": args.priority,
                "size": args.size,
            }
            print(format_jobs([client.call("Admit", req)]))
        elif cmd == "jobs":
            jobs = client.call("Jobs")["jobs"]
            print(json.dumps(jobs, indent=2) if args.json else format_jobs(jobs))
        elif cmd == "prio":
            req = {"job": args.job, "priority": args.priority, "size": args.size}
            print(format_jobs([client.call("Prio", req)]))
        elif cmd == "progress":
            req = {"job": args.job, "remaining": args.remaining}
            print(format_jobs([client.call("Progress", req)]))
        elif cmd == "remove":
            client.call("Remove", {"job": args.job})
            print(f"job {args.job} removed")
        elif cmd == "policy":
            rep = client.call("Policy", {"policy": args.policy, "stale_us": args.stale_us})
            print(f"policy {rep['policy']}, stale timeout {rep['stale_us']} us")
        elif cmd == "status":
            rep = client.call("Status")
            print(json.dumps(rep, indent=2) if args.json else format_status(rep))
        elif cmd == "stats":
            return _stats(client, args)
        elif cmd == "slots":
            rep = client.call("Slots")
            print(json.dumps(rep) if args.json else format_slots(rep))
        return 0
    finally:
        client.close()


def _stats(client: AdminClient, args: argparse.Namespace) -> int:
    while True:
        rep = client.call("Stats")
        if args.job is not None and str(args.job) not in rep["jobs"]:
            raise AdminError(grpc.StatusCode.NOT_FOUND, f"unknown job {args.job}")
        if args.json:
            print(json.dumps(rep), flush=True)
        else:
            if args.watch:
                print("\x1b[2J\x1b[H" + time.strftime("%H:%M:%S"))
            print(format_stats(rep, args.job), flush=True)
        if not args.watch:
            return 0
        time.sleep(args.interval)


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


if __name__ == "__main__":
    sys.exit(main())
