"""``esa-ctl serve``: check, claim, then run the controller.

Order matters, so that a refused ``serve`` leaves no trace:

1. ``preflight`` checks every argument and input file (admin address,
   directories, topology, BMv2 JSON, P4Info, pool size) and creates nothing;
2. the state file's lock and the admin address are claimed
   (``controller.instance``, ``controller.admin.AdminServer``): a second
   controller on either is refused, naming the running one;
3. only then is the state file opened (or created), the admin API started
   and the switch synced.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing, contextmanager
from pathlib import Path

from controller.address import check_socket_path
from controller.admin import AdminServer
from controller.errors import ControllerError, InvalidRequest, StateError, SwitchUnavailable
from controller.instance import claim, holder, lock_path
from controller.p4rt import Session
from controller.pipeline import check_p4info, pool_size_of, resolve_pool_size
from controller.service import Controller
from controller.state import Store
from controller.switch import P4RuntimeSwitch, Switch
from controller.topology import Topology

log = logging.getLogger("esa.controller")

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def check_state_path(db: Path) -> None:
    """The state file's directory exists; the file, if there, is a file."""
    if not db.parent.is_dir():
        raise StateError(f"state file {db}: no directory {db.parent}")
    if db.exists() and not db.is_file():
        raise StateError(f"state file {db} is not a regular file")


def preflight(args: argparse.Namespace) -> tuple[Topology | None, int]:
    """Every check that needs no change: the topology (if given) and the pool size."""
    check_socket_path(args.admin)
    check_state_path(args.db)
    if args.p4rt_log is not None and not args.p4rt_log.parent.is_dir():
        raise InvalidRequest(f"P4Runtime request log {args.p4rt_log}: no directory")
    topology = Topology.load(args.topology) if args.topology else None
    if topology is None and not args.db.exists():
        raise InvalidRequest(f"no hosts: give --topology (there is no state file {args.db})")
    if topology is not None and not topology.hosts:
        raise InvalidRequest(f"topology: {args.topology} has no hosts")
    pool = resolve_pool_size(
        ("--pool-size", args.pool_size),
        (str(args.p4json), pool_size_of(args.p4json)),
        ("the topology", topology.pool_size if topology else None),
    )
    check_p4info(args.p4info)
    return topology, pool


def _connector(args: argparse.Namespace) -> Callable[[], Switch]:
    def connect() -> Switch:
        session = Session(args.switch, args.device_id, (0, args.election_id), True, args.p4rt_log)
        sw = P4RuntimeSwitch(session)
        try:
            if sw.ensure_pipeline(args.p4json, args.p4info):
                log.info("pushed the pipeline to %s", args.switch)
        except OSError as e:
            sw.close()
            raise InvalidRequest(f"cannot read the pipeline: {e}") from None
        except ControllerError:
            sw.close()
            raise
        return sw

    return connect


def run_serve(args: argparse.Namespace) -> int:
    topology, pool = preflight(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    db = args.db.resolve()
    name = holder(os.getpid(), db, args.admin)
    with ExitStack() as stack:
        stop = stack.enter_context(_stop_on_signals())
        stack.callback(claim(lock_path(db), name, f"state file {db}").release)
        server = AdminServer(args.admin, name)
        stack.callback(server.stop)
        store = stack.enter_context(closing(Store(db)))
        if topology is None:
            topology = Topology(store.hosts())
            if not topology.hosts:
                raise InvalidRequest("no hosts: give --topology (the state file has none saved)")
        ctl = Controller(
            store,
            topology,
            pool,
            _connector(args),
            args.aging_period,
            switch_addr=args.switch,
            thrift_cli=args.thrift_cli,
        )
        stack.callback(ctl.session.drop)
        server.start(ctl)
        stack.callback(server.stop, 1.0)
        log.info("admin API on %s", args.admin)
        _run(ctl, args.interval, stop)
    return 0


@contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    """An event SIGTERM and SIGINT set, for as long as the context lasts."""
    stop = threading.Event()
    before = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in _STOP_SIGNALS}
    try:
        yield stop
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _run(ctl: Controller, interval: float, stop: threading.Event) -> None:
    """Sync, then check the switch every ``interval`` until ``stop``; re-sync
    a switch that came back."""
    try:
        log.info("switch in sync (%d changes)", ctl.sync())
    except SwitchUnavailable as e:
        log.warning("%s; retrying every %.1f s", e, interval)
    was_connected = ctl.connected
    while not stop.wait(interval):
        try:
            if not ctl.connected:
                log.info("switch re-synced (%d changes)", ctl.sync())
        except ControllerError as e:
            if was_connected:
                log.warning("%s", e)
        was_connected = ctl.connected
