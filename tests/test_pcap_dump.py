"""``python -m hosts.net.pcap_dump``: a capture's ESA packets, one line each."""

from __future__ import annotations

from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Packet, Raw
from scapy.utils import wrpcap

from esa import wire
from hosts.net import pcap_dump
from hosts.net.scapy_layer import ESA


def frame(src: str, dst: str, sport: int, payload: Packet, t: float) -> Packet:
    pkt = Ether() / IP(src=src, dst=dst) / UDP(sport=sport, dport=wire.UDP_PORT) / payload
    pkt.time = t
    return pkt


def test_each_esa_packet_is_decoded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    values = list(range(-3, wire.K - 3))
    arp = Ether() / ARP()
    arp.time = 100.0
    frames = [
        arp,
        frame(
            "10.0.0.1",
            "10.0.0.3",
            wire.UDP_PORT,
            ESA(ptype=1, job=3, seq=7, bitmap=2, count=1, values=values),
            100.25,
        ),
        frame(
            "10.0.0.3",
            "10.0.0.254",
            wire.UDP_PORT,
            ESA(ptype=5, flags=1, job=3, seq=8, bitmap=3, count=2),
            100.5,
        ),
        frame("10.0.0.2", "10.0.0.3", 40000, Raw(b"\x01\x00\x00"), 101.0),
    ]
    path = tmp_path / "s1-eth1_in.pcap"
    wrpcap(str(path), frames)
    assert pcap_dump.main([str(path)]) == 0
    assert capsys.readouterr().out == (
        "     2   0.250000  10.0.0.1:58784 > 10.0.0.3:58784  CONTRIB   job 3 seq 7 "
        "bitmap 0x2 count 1 flags 0x0  values -3 -2 -1 0 ...\n"
        "     3   0.500000  10.0.0.3:58784 > 10.0.0.254:58784  PS_RESULT job 3 seq 8 "
        "bitmap 0x3 count 2 flags 0x1  values 0 0 0 0 ...\n"
        "     4   1.000000  10.0.0.2:40000 > 10.0.0.3:58784  short: 3 bytes, "
        "an ESA packet has 141\n"
        "4 frames, 3 ESA packets\n"
    )
    assert pcap_dump.main([str(path), "--values", str(wire.K)]) == 0
    shown = capsys.readouterr().out.splitlines()[0]
    assert shown.endswith("values " + " ".join(map(str, values)))


def test_a_file_that_is_no_capture(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "x.pcap"
    path.write_text("hello\n")
    assert pcap_dump.main([str(path)]) == 1
    assert capsys.readouterr().err == f"pcap_dump: {path}: Not a supported capture file\n"
    assert pcap_dump.main([str(tmp_path / "none.pcap")]) == 1
    assert "No such file or directory" in capsys.readouterr().err
