"""The reference switch: p4src/esa.p4 executed by ``esa.model`` on real
interfaces, configured over P4Runtime.

It stands where ``simple_switch_grpc`` stands, for machines without p4c or
BMv2: the same command-line shape (``--iface PORT@IFACE`` like BMv2's
``-i``), the same P4Runtime subset the controller uses, and byte for byte the
frames BMv2 emits (``tests/test_refswitch.py`` holds it to that where both
exist).  Beyond BMv2, it serves P4Runtime reads of the slot registers.
``esa.model`` is the executable statement of the slot rules that
``tests/test_differential.py`` holds equal to BMv2; ``refswitch.frames``
does the parsing and forwarding around it.

    esa-refswitch --iface 1@s1-eth1 --iface 2@s1-eth2 \\
        --grpc 127.0.0.1:9559 --pool 1024 [--p4info p4src/esa.p4info.txtpb]

(or ``python -m refswitch.main``).  It prints the address it serves
P4Runtime on, with the port the kernel chose for ``--grpc HOST:0``, and
stops with status 0 on SIGINT or SIGTERM.  Without ``--p4info`` it starts
with no program, as ``simple_switch_grpc --no-p4`` does, and drops every
frame until a controller pushes one (``esa-ctl serve --no-p4json``).

Modules of ``refswitch``: ``main`` (this command), ``datapath`` (the ports
and the loop that moves frames through them), ``frames`` (one frame in,
the frames out), ``tables`` (the tables as written, checked against the
P4Info), ``entities`` and ``server`` (P4Runtime), ``arbiter``
(mastership); ``runner.devices.refproc`` starts and stops the process.
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

from google.protobuf import text_format
from p4.v1 import p4runtime_pb2

from esa.arguments import DEVICE_ID, POOL_SIZE, Parser
from refswitch.datapath import DataPath
from refswitch.server import ServedDevice, serve
from refswitch.tables import Refused

log = logging.getLogger("refswitch")
DROP_PORT = 511
"""BMv2's drop port: not a port a frame can leave by."""


def parse_iface(text: str) -> tuple[int, str]:
    port, sep, iface = text.partition("@")
    if not sep or not port.isdigit() or not iface or not 0 <= int(port) < DROP_PORT:
        raise argparse.ArgumentTypeError(
            f"expected PORT@IFACE with PORT 0..{DROP_PORT - 1}, got {text!r}"
        )
    return int(port), iface


def parse_grpc(text: str) -> str:
    """A P4Runtime address to listen on: ``HOST:PORT`` (PORT 0..65535, 0: any
    free port) or ``unix:PATH``."""
    if text.startswith("unix:"):
        if text == "unix:":
            raise argparse.ArgumentTypeError("unix: needs a PATH")
        return text
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(
            f"expected HOST:PORT with PORT 0..65535 (0: any free port) or unix:PATH, got {text!r}"
        )
    return text


def parser() -> argparse.ArgumentParser:
    ap = Parser(
        prog="esa-refswitch",
        description="The reference switch: esa.model on real interfaces, configured over "
        "P4Runtime like simple_switch_grpc, for machines without p4c or BMv2.  Prints the "
        "address it serves P4Runtime on (the port chosen for port 0) on stdout; stops, "
        "status 0, on SIGINT or SIGTERM.",
    )
    ap.add_argument(
        "-i", "--iface", action="append", type=parse_iface, required=True,
        metavar="PORT@IFACE", help="switch port PORT is interface IFACE (repeat per port)",
    )  # fmt: skip
    ap.add_argument(
        "--grpc",
        type=parse_grpc,
        default="127.0.0.1:9559",
        metavar="ADDR",
        help="P4Runtime address, HOST:PORT (port 0: any free port) or unix:PATH "
        "(default 127.0.0.1:9559)",
    )
    ap.add_argument(
        "--device-id",
        type=DEVICE_ID,
        default=0,
        metavar="N",
        help="P4Runtime device id (default 0)",
    )
    ap.add_argument(
        "--pool", type=POOL_SIZE, required=True, metavar="N", help="slot pool size (POOL_SIZE)"
    )
    ap.add_argument(
        "--p4info",
        type=Path,
        metavar="FILE",
        help="start with this P4Info (text) installed; default: no program",
    )
    return ap


def checked_ports(ap: argparse.ArgumentParser, given: list[tuple[int, str]]) -> dict[int, str]:
    """Switch port -> interface: each port and interface once, each interface there."""
    ifaces = dict(given)
    if len(ifaces) != len(given) or len(set(ifaces.values())) != len(ifaces):
        ap.error("a port or interface is given twice")
    for port, iface in sorted(ifaces.items()):
        try:
            socket.if_nametoindex(iface)
        except OSError:
            ap.error(f"port {port}: no interface {iface!r} in this network namespace")
    return ifaces


def main(argv: Sequence[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    ifaces = checked_ports(ap, args.iface)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s refswitch %(message)s")
    device = ServedDevice(args.device_id, args.pool)
    if args.p4info is not None:
        config = p4runtime_pb2.ForwardingPipelineConfig()
        try:
            text_format.Merge(args.p4info.read_text(), config.p4info, allow_unknown_field=True)
            device.install(config)
        except (OSError, text_format.ParseError) as e:
            return _fail(f"{args.p4info}: {e}")
        except Refused as e:
            return _fail(f"{args.p4info}: {e.message}")
    try:
        datapath = DataPath(device, ifaces)
    except OSError as e:
        return _fail(f"opening the ports: {e}")
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: datapath.stop())
    try:
        server, bound = serve(device, args.grpc)
    except (OSError, RuntimeError) as e:
        datapath.close()
        return _fail(f"P4Runtime on {args.grpc}: {e}")
    log.info(
        "ports %s, pool %d, P4Runtime on %s (device %d)",
        " ".join(f"{p}@{i}" for p, i in sorted(ifaces.items())),
        args.pool,
        bound,
        args.device_id,
    )
    print(bound, flush=True)
    try:
        datapath.run()
    finally:
        server.stop(grace=1).wait()
        datapath.close()
        log.info(
            "stopped: %d frames in, %d out, %d not sent (port full or down)",
            datapath.frames_in,
            datapath.frames_out,
            datapath.send_errors,
        )
    return 0


def _fail(message: str) -> int:
    print(f"esa-refswitch: error: {message}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
