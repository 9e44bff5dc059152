"""The fast-path codec and the Scapy layer agree byte for byte."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP

from esa import model, wire
from hosts.net import payload
from hosts.net.scapy_layer import ESA

INT32 = st.integers(-(2**31), 2**31 - 1)
VALUES = st.lists(INT32, min_size=wire.K, max_size=wire.K)


@st.composite
def headers(draw: st.DrawFn) -> payload.Header:
    fields = {f.name: draw(st.integers(0, 2**f.bits - 1)) for f in wire.HEADER}
    fields["ptype"] = draw(st.sampled_from([int(p) for p in wire.PacketType]))
    return payload.Header(**fields)


@given(headers(), VALUES)
def test_codec_bytes_equal_scapy(h: payload.Header, values: list[int]) -> None:
    fields = {f.name: getattr(h, f.name) for f in wire.HEADER}
    assert payload.encode(h, values) == bytes(ESA(**fields, values=values))


@given(headers(), VALUES)
def test_decode_inverts_encode_and_scapy_dissects_it(h: payload.Header, values: list[int]) -> None:
    data = payload.encode(h, values)
    got_h, got_v = payload.decode(data)
    assert got_h == h
    assert got_v.dtype == np.int32
    assert got_v.tolist() == values
    dissected = ESA(data)
    assert [getattr(dissected, f.name) for f in wire.HEADER] == [
        getattr(h, f.name) for f in wire.HEADER
    ]
    assert dissected.values == values


def test_frame_is_reused_and_big_endian() -> None:
    frame = payload.Frame()
    first = frame.pack(payload.Header(1, 0, 1, 0, 1, 1), np.arange(wire.K))
    assert first is frame.buf
    assert len(first) == wire.PAYLOAD_BYTES
    off = wire.HEADER_BYTES
    assert first[off : off + 8] == bytes([0, 0, 0, 0, 0, 0, 0, 1])
    frame.pack(payload.Header(1, 0, 1, 0, 1, 1), np.full(wire.K, -1))
    assert frame.buf[off:] == b"\xff" * wire.VALUES_BYTES


def test_header_offsets_follow_wire() -> None:
    data = payload.encode(payload.Header(2, 0x0A, 0x0102, 0xDEADBEEF, 0x80000001, 7), [0] * wire.K)
    offsets = wire.field_offsets()
    expect = {"ptype": 2, "flags": 0x0A, "job": 0x0102, "seq": 0xDEADBEEF}
    expect |= {"bitmap": 0x80000001, "count": 7}
    for name, value in expect.items():
        pos, width = offsets[name]
        assert int.from_bytes(data[pos : pos + width], "big") == value


def test_scapy_binds_to_udp_port() -> None:
    pkt = IP(dst="10.0.0.1") / UDP(sport=1234, dport=wire.UDP_PORT) / ESA(ptype=1, job=3)
    parsed = IP(bytes(pkt))
    assert parsed.haslayer(ESA)
    assert parsed[ESA].job == 3
    assert len(bytes(parsed[UDP].payload)) == wire.PAYLOAD_BYTES
    reply = IP(bytes(IP() / UDP(sport=wire.UDP_PORT, dport=40000) / ESA(ptype=2)))
    assert reply.haslayer(ESA)


@pytest.mark.parametrize(
    "n", [0, 1, wire.HEADER_BYTES, wire.PAYLOAD_BYTES - 1, wire.PAYLOAD_BYTES + 1]
)
def test_wrong_length_is_malformed(n: int) -> None:
    with pytest.raises(payload.Malformed, match="length"):
        payload.decode(bytes(n))


@pytest.mark.parametrize("ptype", [0, max(wire.PacketType) + 1, 255])
def test_unknown_type_is_malformed(ptype: int) -> None:
    data = bytearray(wire.PAYLOAD_BYTES)
    data[wire.field_offsets()["ptype"][0]] = ptype
    with pytest.raises(payload.Malformed, match="type"):
        payload.decode_header(data, len(data))


@given(headers(), VALUES)
def test_model_packet_round_trip(h: payload.Header, values: list[int]) -> None:
    data = payload.encode(h, values)
    pkt = payload.to_model(data)
    assert pkt == model.Packet(
        wire.PacketType(h.ptype), h.job, h.seq, h.bitmap, tuple(values), h.flags, h.count
    )
    assert payload.from_model(pkt) == data
