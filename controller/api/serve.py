"""``esa-ctl serve``: check, claim, then run the controller.

Order matters, so that a refused ``serve`` leaves no trace:

1. ``preflight`` checks every argument and input file (admin address,
   directories, topology, BMv2 JSON unless ``--no-p4json``, P4Info, pool
   size) and creates nothing;
2. the state file's lock and the admin address are claimed
   (``controller.api.instance``, ``controller.api.admin.AdminServer``): a second
   controller on either is refused, naming the running one;
3. only then is the state file opened (or created), the admin API started
   and every switch synced.

With ``--metrics HOST:PORT`` the metrics address is bound in step 2, after
the admin address (a refused bind leaves no state file either), and
serves the controller's counters once the controller exists
(``controller.api.metrics``).

The topology is a fabric of switches (``controller.world.fabric``), each with its
own P4Runtime address and device id; a one-switch topology file is a fabric
of one switch, ``s1``, at ``--switch`` with ``--device-id``.  After the first
sync the loop checks each switch every ``--interval`` and re-syncs only those
whose session dropped.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import ExitStack, closing, contextmanager
from pathlib import Path

from controller.api.address import check_socket_path
from controller.api.admin import AdminServer
from controller.api.instance import claim, holder, lock_path
from controller.api.metrics import MetricsServer
from controller.api.service import Controller
from controller.device.p4rt import Session
from controller.device.pipeline import check_p4info, pool_size_of, resolve_pool_size
from controller.device.session import Connector
from controller.device.switch import P4RuntimeSwitch, Switch
from controller.errors import (
    ControllerError,
    InvalidRequest,
    StateError,
    SwitchError,
    SwitchUnavailable,
)
from controller.world.fabric import DEFAULT_DEVICE, Device, Fabric, one_switch
from controller.world.state import Store
from controller.world.topology import Topology
from esa.target import device_config

log = logging.getLogger("esa.controller")

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def check_state_path(db: Path) -> None:
    """The state file's directory exists; the file, if there, is a file."""
    if not db.parent.is_dir():
        raise StateError(f"state file {db}: no directory {db.parent}")
    if db.exists() and not db.is_file():
        raise StateError(f"state file {db} is not a regular file")


ThriftCli = tuple[str | None, list[str]]
"""``--thrift-cli [DEVICE=]CMD``: the switch it is for (None: the only one), the command."""


def single_device(args: argparse.Namespace) -> Device:
    """The switch of a one-switch topology: ``--switch`` and ``--device-id``."""
    return Device(
        DEFAULT_DEVICE.name,
        DEFAULT_DEVICE.device_id if args.device_id is None else args.device_id,
        args.switch or DEFAULT_DEVICE.p4runtime,
    )


def check_fabric(args: argparse.Namespace, fabric: Fabric) -> dict[str, list[str]]:
    """The flags that name one switch fit the fabric; each switch's Thrift CLI command."""
    several = len(fabric.devices) > 1
    if several and (args.switch is not None or args.device_id is not None):
        raise InvalidRequest(
            "--switch and --device-id are for a one-switch topology; the fabric gives "
            f"each switch's address and device id ({', '.join(fabric.devices)})"
        )
    commands: dict[str, list[str]] = {}
    for device, argv in args.thrift_cli or []:
        if device is None and several:
            raise InvalidRequest(
                f"--thrift-cli: name the switch, DEVICE=CMD ({', '.join(fabric.devices)})"
            )
        name = device or next(iter(fabric.devices))
        fabric.device(name)
        if name in commands:
            raise InvalidRequest(f"--thrift-cli: switch {name} is given twice")
        commands[name] = argv
    return commands


def preflight(args: argparse.Namespace) -> tuple[Fabric | None, int]:
    """Every check that needs no change: the topology (if given) and the pool size."""
    check_socket_path(args.admin)
    check_state_path(args.db)
    if args.p4rt_log is not None and not args.p4rt_log.parent.is_dir():
        raise InvalidRequest(f"P4Runtime request log {args.p4rt_log}: no directory")
    fabric = Fabric.load(args.topology, single_device(args)) if args.topology else None
    if fabric is None and not args.db.exists():
        raise InvalidRequest(f"no hosts: give --topology (there is no state file {args.db})")
    if fabric is not None and not fabric.hosts:
        raise InvalidRequest(f"topology: {args.topology} has no hosts")
    if fabric is not None:
        check_fabric(args, fabric)
    pool = resolve_pool_size(
        ("--pool-size", args.pool_size),
        *([] if args.no_p4json else [(str(args.p4json), pool_size_of(args.p4json))]),
        ("the topology", fabric.pool_size if fabric else None),
    )
    check_p4info(args.p4info)
    return fabric, pool


def _connector(args: argparse.Namespace, device: Device, pool: int) -> Connector:
    """Opens the session with ``device`` and pushes the pipeline unless it
    runs it: the BMv2 JSON and the P4Info, or, with ``--no-p4json``, the
    P4Info and ``device_config(pool)``."""

    def connect() -> Switch:
        session = Session(
            device.p4runtime, device.device_id, (0, args.election_id), True, args.p4rt_log
        )
        sw = P4RuntimeSwitch(session)
        try:
            config = device_config(pool) if args.no_p4json else args.p4json.read_bytes()
            if sw.ensure_config(config, args.p4info.read_text()):
                log.info("pushed the pipeline to %s at %s", device.name, device.p4runtime)
        except OSError as e:
            sw.close()
            raise InvalidRequest(f"cannot read the pipeline: {e}") from None
        except SwitchError as e:
            sw.close()
            if not args.no_p4json:
                raise
            raise SwitchError(
                f"{device.name} at {device.p4runtime} refused the pipeline without a BMv2 "
                f"JSON (--no-p4json, for the reference switch; a BMv2 needs --p4json): {e}"
            ) from None
        except ControllerError:
            sw.close()
            raise
        return sw

    return connect


def _saved_fabric(store: Store, args: argparse.Namespace) -> Fabric:
    """The fabric the state file holds, or its hosts on the one switch."""
    fabric = store.fabric() or one_switch(Topology(store.hosts()), single_device(args))
    if not fabric.hosts:
        raise InvalidRequest("no hosts: give --topology (the state file has none saved)")
    return fabric


def run_serve(args: argparse.Namespace) -> int:
    fabric, pool = preflight(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    db = args.db.resolve()
    name = holder(os.getpid(), db, args.admin)
    with ExitStack() as stack:
        stop = stack.enter_context(_stop_on_signals())
        stack.callback(claim(lock_path(db), name, f"state file {db}").release)
        server = AdminServer(args.admin, name)
        stack.callback(server.stop)
        metrics = None
        if args.metrics is not None:
            metrics = MetricsServer(*args.metrics)
            stack.callback(metrics.stop)
        store = stack.enter_context(closing(Store(db)))
        if fabric is None:
            fabric = _saved_fabric(store, args)
        ctl = Controller(
            store,
            fabric,
            pool,
            {n: _connector(args, d, pool) for n, d in fabric.devices.items()},
            args.aging_period,
            thrift_cli=check_fabric(args, fabric),
        )
        for session in ctl.sessions.values():
            stack.callback(session.drop)
        if metrics is not None:
            metrics.attach(ctl.sample)
            stack.callback(metrics.stop)
            log.info("metrics on %s", metrics.url)
        server.start(ctl)
        stack.callback(server.stop, 1.0)
        log.info("admin API on %s", server.addr)
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
    """Sync every switch, then check each every ``interval`` until ``stop``;
    re-sync a switch that came back, and only that one."""
    was_connected = {}
    for name in ctl.sessions:
        try:
            log.info("switch %s in sync (%d changes)", name, ctl.sync(name))
        except SwitchUnavailable as e:
            log.warning("switch %s: %s; retrying every %.1f s", name, e, interval)
        was_connected[name] = ctl.sessions[name].connected
    while not stop.wait(interval):
        for name in ctl.disconnected():
            try:
                log.info("switch %s re-synced (%d changes)", name, ctl.sync(name))
            except ControllerError as e:
                if was_connected[name]:
                    log.warning("switch %s: %s", name, e)
        was_connected = {name: s.connected for name, s in ctl.sessions.items()}
