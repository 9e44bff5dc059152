"""bench.loss_trace: what loss did to each chunk, counted from a run's
captures, here pcap files written by the test."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from bench import loss_trace
from esa.wire import CONTROL_PORT, UDP_PORT, ControlType, Flag, K, PacketType
from hosts.net import payload

C, R, FB, PULL = PacketType.CONTRIB, PacketType.RESULT, PacketType.FALLBACK, PacketType.PULL
RETX = int(Flag.RETX)
HOSTS = {"h1": 1, "h2": 2, "h3": 3}
"""two workers and their PS, on ports 1-3 of s1."""


def udp_frame(data: bytes, port: int = UDP_PORT) -> bytes:
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + 8 + len(data), 0, 0, 64, 17, 0,
                     bytes(4), bytes(4))  # fmt: skip
    udp = struct.pack("!HHHH", 40000, port, 8 + len(data), 0)
    return bytes(12) + b"\x08\x00" + ip + udp + data


def write_pcap(path: Path, frames: list[tuple[float, bytes]]) -> None:
    out = bytearray(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    for t, frame in frames:
        out += struct.pack("<IIII", int(t), round(t % 1 * 1e6), len(frame), len(frame)) + frame
    path.write_bytes(bytes(out))


def esa(ptype: int, flags: int, seq: int, bitmap: int, job: int = 1) -> bytes:
    h = payload.Header(ptype, flags, job, seq, bitmap, bin(bitmap).count("1"))
    return payload.encode(h, [0] * K)


def write_run(run: Path, packets: list[tuple[float, str, str, bytes]], got_sums: int) -> None:
    """A run of scheme esa, job 1 on h1, h2 (workers) and h3 (PS); each
    packet (time, host, ``in`` (from it to the switch) or ``out``, datagram)."""
    scenario = {"schemes": ["esa"], "jobs": [
        {"job": 1, "worker_hosts": ["h1", "h2"], "ps_hosts": ["h3"]}]}  # fmt: skip
    (run / "logs" / "esa").mkdir(parents=True)
    (run / "pcaps" / "esa").mkdir(parents=True)
    (run / "scenario.json").write_text(json.dumps(scenario))
    rounds = [{"scheme": "esa", "job": 1, "jct_s": 3.25}, {"scheme": "atp", "job": 1, "jct_s": 9.0}]
    (run / "rounds.json").write_text(json.dumps(rounds))
    hosts = {h: {"switch": "s1", "port": p} for h, p in HOSTS.items()}
    (run / "logs" / "esa" / "topology.json").write_text(json.dumps({"hosts": hosts}))
    report = {"ps": {"switch_results": got_sums}}
    (run / "logs" / "esa" / "j1ps0.json").write_text(json.dumps(report))
    for host, port in HOSTS.items():
        for way in ("in", "out"):
            mine = [(t, udp_frame(d)) for t, h, w, d in packets if (h, w) == (host, way)]
            write_pcap(run / "pcaps" / "esa" / f"s1-eth{port}_{way}.pcap", mine)


def test_a_lost_first_send_and_a_lost_result_the_ps_never_got(tmp_path: Path) -> None:
    """Chunk 7: h2's first send is lost, its resend completes the slot.
    Chunk 8: the switch completes it, h1 loses its result, the PS lost its
    copy too (it counted no sum of the switch): h1's resend falls back and the
    PS pulls h2, whose answer is no resend of a lost result.  Each worker
    was silent for about a second between the chunks (1.000 to 2.000, 1.050
    to 2.001).  Another job's packets and a control datagram are ignored."""
    packets = [
        (1.000, "h1", "in", esa(C, 0, 7, 0b01)),
        (1.050, "h2", "in", esa(C, RETX, 7, 0b10)),
        (1.051, "h1", "out", esa(R, 0, 7, 0b11)),
        (1.051, "h2", "out", esa(R, 0, 7, 0b11)),
        (1.051, "h3", "out", esa(R, 0, 7, 0b11)),
        (2.000, "h1", "in", esa(C, 0, 8, 0b01)),
        (2.001, "h2", "in", esa(C, 0, 8, 0b10)),
        (2.002, "h1", "out", esa(R, 0, 8, 0b11)),
        (2.002, "h2", "out", esa(R, 0, 8, 0b11)),
        (2.002, "h3", "out", esa(R, 0, 8, 0b11)),
        (2.050, "h1", "in", esa(C, RETX, 8, 0b01)),
        (2.051, "h3", "out", esa(FB, RETX, 8, 0b01)),
        (2.052, "h3", "in", esa(PULL, 0, 8, 0b01)),
        (2.052, "h1", "out", esa(PULL, 0, 8, 0b01)),
        (2.052, "h2", "out", esa(PULL, 0, 8, 0b01)),
        (2.053, "h2", "in", esa(C, RETX, 8, 0b10)),
        (2.054, "h3", "out", esa(FB, RETX, 8, 0b10)),
        (2.055, "h3", "in", esa(PacketType.PS_RESULT, 0, 8, 0b11)),
        (2.056, "h1", "out", esa(PacketType.PS_RESULT, 0, 8, 0b11)),
        (2.056, "h2", "out", esa(PacketType.PS_RESULT, 0, 8, 0b11)),
        (3.000, "h1", "in", esa(C, 0, 9, 0b01, job=2)),
        (3.001, "h1", "in", b"\x00" * 40),
    ]
    write_run(tmp_path, packets, got_sums=0)
    t = loss_trace.trace_job(tmp_path, "esa", {"job": 1, "worker_hosts": ["h1", "h2"],
                                               "ps_hosts": ["h3"], "iterations": 2})  # fmt: skip
    assert (t.chunks, t.lost_up, t.resent_after_result) == (2, 1, 1)
    assert (t.switch_sums, t.ps_got_sums, t.repeat_pulls) == (2, 0, 0)
    assert dict(t.pulls) == {"sum sent": 1}
    assert [round(s * 1e3) for s in t.repair_s] == [51, 56]
    assert sorted(round(s * 1e3) for s in t.silences) == [951, 1000]
    assert {p: [round(s * 1e3) for s in v] for p, v in t.paths.items()} == {
        "evicted": [], "flushed": [], "fallback": [56], "switch": [51]}  # fmt: skip
    assert loss_trace.row("esa", 1, t) == (
        "| esa | 1 | 3.25 | 2 | 1 | 1 | 2 / 0 | 1 | 1 / 0 / 0 / 0 | 0 | 53.5 | 2 / 1.00 "
        "| 0 / 0 / 1: 56 / 1: 51 | 0.05 / 0.05 | 0 / 4 |"
    )
    assert [round(s * 1e3) for s in t.call_skews] == [50, 1]


def pulled(frames: list[loss_trace.Frame]) -> dict[str, int]:
    t = loss_trace.JobTrace()
    loss_trace.trace_chunk(frames, 0b111, 3, t)
    return {**t.pulls, "repeat": t.repeat_pulls}


def f(t: float, who: str, inbound: bool, ptype: int, bitmap: int) -> loss_trace.Frame:
    return loss_trace.Frame(t, who, inbound, ptype, 0, bitmap)


def test_each_pull_takes_the_first_cause_that_fits_its_missing_workers() -> None:
    """w0 fell back and its FALLBACK was lost on the PS's link; w1 sits in a
    slot; w2 never reached the switch."""
    frames = [
        f(0.0, "w0", True, C, 0b001),
        f(0.1, "ps", False, FB, 0b001),
        f(0.2, "w1", True, C, 0b010),
        f(1.0, "ps", True, PULL, 0b000),  # w0, w1, w2 missing
        f(2.0, "ps", True, PULL, 0b001),  # w1, w2 missing
        f(3.0, "ps", True, PULL, 0b011),  # w2 missing
    ]
    assert pulled(frames) == {"to PS, lost": 1, "in slot": 1, "not at switch": 1, "repeat": 2}


def test_a_chunks_path_is_what_left_its_slot_first() -> None:
    """A partial that left before any resend of its chunk was evicted; after
    one, a resend flushed it; a FALLBACK alone is a fallback."""
    P = PacketType.PARTIAL
    up, retx = f(0.0, "w0", True, C, 0b001), loss_trace.Frame(0.1, "w1", True, C, RETX, 0b010)
    partial, fallback = f(0.2, "ps", False, P, 0b001), f(0.3, "ps", False, FB, 0b010)
    assert loss_trace.chunk_path([up, partial, retx, fallback]) == "evicted"
    assert loss_trace.chunk_path([up, retx, partial]) == "flushed"
    assert loss_trace.chunk_path([up, retx, fallback]) == "fallback"
    assert loss_trace.chunk_path([up, retx]) == "switch"


def test_calls_are_split_in_seq_order_from_the_first_sent_across_the_wrap() -> None:
    """Two calls of two chunks whose seqs wrap around 2^32: w1 starts the
    second call 40 ms after w0 (it sends 2^32 - 1 and 0 of the first call,
    1 and 2 of the second); a resend is a start too, a result is none."""
    top = (1 << 32) - 1
    chunks = {
        top: [f(0.000, "w0", True, C, 0b01), f(0.001, "w1", True, C, 0b10)],
        0: [f(0.002, "w0", True, C, 0b01), f(0.003, "w1", True, C, 0b10)],
        1: [f(0.100, "w0", True, C, 0b01), f(0.090, "w0", False, R, 0b11)],
        2: [f(0.110, "w0", True, C, 0b01),
            loss_trace.Frame(0.140, "w1", True, C, RETX, 0b10)],
    }  # fmt: skip
    assert [round(s * 1e3) for s in loss_trace.call_skews(loss_trace.call_starts(chunks, 2))] == [
        1,
        40,
    ]


def test_a_late_start_is_counted_from_the_jobs_last_first_call() -> None:
    """Call 4: w0 announced at 1.00, w1 at 1.01 (last); w0 started at 1.02,
    w1 at 1.20 after a second CALL at 1.15: late by 190 ms, its CALL sent
    again.  Call 5: w1 started 50 ms after the last announcement with no
    second CALL; w0 in time.  A call that a worker's captures show no CALL
    of is left out."""
    starts = [{"w0": 1.02, "w1": 1.20}, {"w0": 2.01, "w1": 2.05}, {"w0": 3.0, "w1": 3.5}]
    announced = {"w0": {4: [1.00], 5: [2.00], 6: [2.9]}, "w1": {4: [1.01, 1.15], 5: [1.99]}}
    late = loss_trace.late_starts(starts, announced)
    assert [(round(d * 1e3), again) for d, again in late] == [(190, True), (50, False)]


def test_calls_are_read_from_the_control_datagrams_of_a_capture(tmp_path: Path) -> None:
    """Two CALLs of job 1 (calls 3 and 3 again, then 4), a GO, another
    job's CALL and a datagram of the wrong length on the control port."""

    def call(ctype: int, job: int, number: int) -> bytes:
        return payload.encode_control(payload.Control(ctype, job=job, call=number))

    C_ = ControlType
    frames = [(1.0, call(C_.CALL, 1, 3)), (1.1, call(C_.GO, 1, 3)),
              (1.2, call(C_.CALL, 2, 3)), (1.3, call(C_.CALL, 1, 3)), (1.4, b"\x00" * 9),
              (2.0, call(C_.CALL, 1, 4))]  # fmt: skip
    write_pcap(tmp_path / "c.pcap", [(t, udp_frame(d, CONTROL_PORT)) for t, d in frames])
    assert loss_trace.call_frames(tmp_path / "c.pcap", 1) == {3: [1.0, 1.3], 4: [2.0]}
