"""Print the ESA packets of a capture, decoded by the Scapy layer.

    python -m hosts.net.pcap_dump results/run/pcaps/esa/s1-eth1_in.pcap [--values 4]

One line per ESA packet (UDP port ``esa.wire.UDP_PORT`` either way): frame
number in the file, seconds since its first frame, addresses, packet type,
job, seq, bitmap, count, flags and the first values (a datagram on that
port too short to be one says so); a last line counts frames and ESA
packets.  Other frames (ARP, the PS's control datagrams) are
counted, not shown.  This is the dissector for the run's ``--pcap`` files
(see docs/run.md): the fields come from ``esa.wire``, as the P4 program's do.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO, cast

from scapy.error import Scapy_Exception
from scapy.layers.inet import IP, UDP
from scapy.packet import Packet
from scapy.utils import PcapReader

from esa import wire
from hosts.net.scapy_layer import ESA

DEFAULT_VALUES = 4


def describe(number: int, t_s: float, pkt: Any, values: int) -> str | None:
    """The line for one frame, or None when it is no ESA packet."""
    if IP not in pkt or UDP not in pkt:
        return None
    ip, udp = pkt[IP], pkt[UDP]
    if wire.UDP_PORT not in (udp.sport, udp.dport):
        return None
    head = f"{number:>6} {t_s:10.6f}  {ip.src}:{udp.sport} > {ip.dst}:{udp.dport}  "
    payload = bytes(udp.payload)
    if len(payload) < wire.PAYLOAD_BYTES:
        return f"{head}short: {len(payload)} bytes, an ESA packet has {wire.PAYLOAD_BYTES}"
    esa = ESA(payload)
    try:
        ptype = wire.PacketType(esa.ptype).name
    except ValueError:
        ptype = f"type-{esa.ptype}"
    shown = " ".join(str(v) for v in esa.values[:values])
    more = " ..." if values < wire.K else ""
    return (
        f"{head}{ptype:<9} job {esa.job} seq {esa.seq} bitmap {esa.bitmap:#x} "
        f"count {esa.count} flags {esa.flags:#x}  values {shown}{more}"
    )


def dump(path: Path, values: int, out: TextIO) -> tuple[int, int]:
    """Write the lines for ``path`` to ``out``; returns (frames, ESA packets)."""
    frames = esa = 0
    t0: float | None = None
    with PcapReader(str(path)) as reader:
        # PcapReader yields packets; its stubs say (bytes, metadata), as RawPcapReader's
        for frames, pkt in enumerate(cast("Iterable[Packet]", reader), start=1):
            t = float(pkt.time)
            t0 = t if t0 is None else t0
            line = describe(frames, t - t0, pkt, values)
            if line is not None:
                esa += 1
                out.write(line + "\n")
    out.write(f"{frames} frames, {esa} ESA packets\n")
    return frames, esa


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m hosts.net.pcap_dump", description=__doc__.splitlines()[0]
    )
    ap.add_argument("pcap", type=Path, nargs="+", help="capture file(s)")
    ap.add_argument(
        "--values",
        type=int,
        default=DEFAULT_VALUES,
        choices=range(wire.K + 1),
        metavar=f"0..{wire.K}",
        help=f"values shown per packet (default {DEFAULT_VALUES})",
    )
    args = ap.parse_args(argv)
    for path in args.pcap:
        if len(args.pcap) > 1:
            print(f"== {path}")
        try:
            dump(path, args.values, sys.stdout)
        except BrokenPipeError:  # the reader left (| head): stop quietly, as cat does
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        except OSError as e:
            print(f"pcap_dump: {path}: {e.strerror or e}", file=sys.stderr)
            return 1
        except Scapy_Exception as e:
            print(f"pcap_dump: {path}: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
