"""What loss did to each chunk of a run, read from its captures (issue 39).

    .venv/bin/python -m runner --scenario mininet/scenarios/lossy-pool.json \\
        --switch model --schemes esa,atp --pcap --out results/trace
    .venv/bin/python -m bench.loss_trace results/trace

Reads the captures of the switch ports the jobs' hosts attach to
(``pcaps/<scheme>/<switch>-eth<port>_in.pcap``, what the host sent that its
link delivered; ``_out``, what the switch sent it, before its link's loss)
and each PS's report, and prints per scheme and job:

- ``lost up``: workers' first sends of a chunk that never reached the switch;
- ``resent after result``: a worker's resend of a chunk after the switch
  had sent it the chunk's sum and no PULL of it (its result was lost on the
  way down, or its timer fired too early: the ``early`` column of ``make
  run``);
- ``switch sums``: chunks the switch completed (a RESULT out: ESA and
  STATIC to the workers and the PS, ATP to the PS only), and how many sums
  of the switch the PS counted (its ``switch_results``): a sum the PS never
  got can not answer a worker that lost its copy;
- ``pulls``: PULLs the PS sent, each by the first reason that fits its
  missing workers: the switch had sent the PS the chunk's sum (``sum
  sent``); a missing contribution had gone to the PS and its link lost it
  (``to PS, lost``); it was in a switch slot (``in slot``); it had not
  reached the switch (``not at switch``); and how many of the pulls were a
  chunk's second or later (``repeat``);
- ``repair ms``: over the chunks some worker resent, the mean time from the
  chunk's first contribution at the switch to its last sum sent to a worker;
- ``silences``: the times a worker of the job sent nothing that reached the
  switch for more than ``SILENCE_S`` (its ESA packets; a long one is a
  worker waiting on a timer: a lost GO whose CALL resend had backed off
  left one silent for 1.5 s at 10 % loss), and the longest, in seconds;
- ``paths``: where the chunks' time went: each chunk by the first of
  ``PATHS`` that fits what left its slot for the PS: a partial that left
  before any resend of the chunk reached the switch (``evicted``: a
  preemption, an owner's eviction of a guest, a squat or stale reclaim), one
  that a resend flushed (``flushed``: a contribution that sat in a slot,
  S3 and S6), contributions only (``fallback``), or nothing (``switch``);
  per path the chunks and their mean time in ms from the chunk's first
  contribution at the switch to its last sum sent to a worker;
- ``call skew``: over the job's calls, the time from the first worker's
  first contribution of the call at the switch to the last worker's, summed
  and the longest, in seconds: while a worker has not started the call its
  peers' chunks of it wait for it (it waits for the previous call's last
  sum, for its peers' announcements, or for a GO that was lost);
- ``late starts``: of its workers' calls, those a worker started more than
  ``LATE_S`` after the last of the job's workers first announced the call
  (its CALL at the switch), how many of them sent the CALL again first (a
  GO or a CALL lost: the worker waits for its CALL's next resend, whose
  interval doubles while it waits for its peers), and how late on average;
- ``jct s``: the job's completion time in the run (``rounds.json``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import struct
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from esa.wire import (
    CONTROL_BYTES,
    CONTROL_PORT,
    PAYLOAD_BYTES,
    UDP_PORT,
    ControlType,
    Flag,
    PacketType,
)
from hosts.net.payload import HEADER_STRUCT, decode_control
from runner.capture import pcap_name

PCAP_HEADER, RECORD = 24, struct.Struct("<IIII")
ETH, UDP = 14, 8
RESULTS = (PacketType.RESULT, PacketType.PS_RESULT)
TO_PS = (PacketType.FALLBACK, PacketType.PARTIAL)
CAUSES = ("sum sent", "to PS, lost", "in slot", "not at switch")
PATHS = ("evicted", "flushed", "fallback", "switch")
SILENCE_S = 0.3
"""Seconds without a packet from a worker that count as a silence."""
LATE_S = 0.03
"""Seconds after its job's last announcement of a call past which a worker's start is late."""


@dataclass(frozen=True)
class Frame:
    """One ESA packet at a switch port: when, whose port, which way."""

    t: float
    who: str
    """``ps`` or the worker's bit index as ``w<I>``."""
    inbound: bool
    """the switch received it (``_in``), else sent it (``_out``)."""
    ptype: int
    flags: int
    bitmap: int


def udp_datagrams(path: Path, port: int) -> Iterator[tuple[float, bytes]]:
    """(time, payload) of each whole UDP datagram to or from ``port`` in a
    pcap file."""
    data = path.read_bytes()
    off = PCAP_HEADER
    while off + RECORD.size <= len(data):
        sec, usec, incl, _ = RECORD.unpack_from(data, off)
        off += RECORD.size
        frame = data[off : off + incl]
        off += incl
        if frame[12:14] != b"\x08\x00" or frame[ETH + 9] != 17:
            continue
        udp = ETH + (frame[ETH] & 0x0F) * 4
        src, dst, length = struct.unpack_from("!HHH", frame, udp)
        if port in (src, dst) and len(frame) >= udp + length:
            yield sec + usec / 1e6, frame[udp + UDP : udp + length]


def esa_frames(path: Path) -> Iterator[tuple[float, tuple[int, int, int, int, int, int]]]:
    """(time, header fields) of each ESA packet (a datagram of an ESA
    packet's length on ``UDP_PORT``) in a pcap file."""
    for t, datagram in udp_datagrams(path, UDP_PORT):
        if len(datagram) == PAYLOAD_BYTES:
            yield t, HEADER_STRUCT.unpack_from(datagram)


@dataclass
class JobTrace:
    """One job's counts under one scheme."""

    chunks: int = 0
    lost_up: int = 0
    resent_after_result: int = 0
    switch_sums: int = 0
    ps_got_sums: int = 0
    pulls: Counter[str] = field(default_factory=Counter)
    repeat_pulls: int = 0
    repair_s: list[float] = field(default_factory=list)
    silences: list[float] = field(default_factory=list)
    """each worker's gaps longer than ``SILENCE_S`` between its packets at the switch."""
    paths: dict[str, list[float]] = field(default_factory=lambda: {p: [] for p in PATHS})
    """per path (``PATHS``), each chunk's time from its first contribution at
    the switch to its last sum sent to a worker."""
    jct_s: float = 0.0
    call_skews: list[float] = field(default_factory=list)
    """per call, the first worker's first contribution at the switch to the last worker's."""
    worker_calls: int = 0
    late: list[tuple[float, bool]] = field(default_factory=list)
    """``late_starts``: per late start, how late and whether the CALL went again."""


def trace_job(run: Path, scheme: str, job: dict[str, object]) -> JobTrace:
    logs, pcaps = run / "logs" / scheme, run / "pcaps" / scheme
    hosts = json.loads((logs / "topology.json").read_text())["hosts"]
    workers = [str(h) for h in job["worker_hosts"]]  # type: ignore[attr-defined]
    ps_hosts = [str(h) for h in job["ps_hosts"]]  # type: ignore[attr-defined]
    roles = {h: f"w{i}" for i, h in enumerate(workers)} | dict.fromkeys(ps_hosts, "ps")
    chunks: dict[int, list[Frame]] = defaultdict(list)
    for host, who in roles.items():
        at = hosts[host]
        for way in ("in", "out"):
            path = pcaps / pcap_name(f"{at['switch']}-eth{at['port']}", way)
            for t, (ptype, flags, j, seq, bitmap, _) in esa_frames(path):
                if j == job["job"]:
                    chunks[seq].append(Frame(t, who, way == "in", ptype, flags, bitmap))
    out = JobTrace(chunks=len(chunks))
    for r in json.loads((run / "rounds.json").read_text()):
        if (r["scheme"], r["job"]) == (scheme, job["job"]):
            out.jct_s = float(r["jct_s"])
    for ps in range(len(ps_hosts)):
        report = json.loads((logs / f"j{job['job']}ps{ps}.json").read_text())["ps"]
        out.ps_got_sums += report["switch_results"]
    mask = (1 << len(workers)) - 1
    for frames in chunks.values():
        frames.sort(key=lambda f: f.t)
        trace_chunk(frames, mask, len(workers), out)
    sent: dict[str, list[float]] = defaultdict(list)
    for frames in chunks.values():
        for f in frames:
            if f.inbound and f.who != "ps":
                sent[f.who].append(f.t)
    for times in sent.values():
        times.sort()
        out.silences += [b - a for a, b in itertools.pairwise(times) if b - a > SILENCE_S]
    starts = call_starts(chunks, int(str(job["iterations"])))
    out.call_skews = call_skews(starts)
    out.worker_calls = sum(len(first) for first in starts)
    announced = {
        who: call_frames(
            pcaps / pcap_name(f"{hosts[h]['switch']}-eth{hosts[h]['port']}", "in"),
            int(str(job["job"])),
        )
        for h, who in roles.items()
        if who != "ps"
    }
    out.late = late_starts(starts, announced)
    return out


def call_starts(chunks: dict[int, list[Frame]], calls: int) -> list[dict[str, float]]:
    """Per call (the chunks in seq order, from the first sent, split into
    ``calls`` equal runs), each worker's first contribution at the switch;
    seqs may wrap around 2^32."""
    started: dict[int, dict[str, float]] = {}
    for seq, frames in chunks.items():
        at: dict[str, float] = {}
        for f in frames:
            if f.inbound and f.ptype == PacketType.CONTRIB:
                at[f.who] = min(f.t, at.get(f.who, f.t))
        if at:
            started[seq] = at
    if not started:
        return []
    base = min(started, key=lambda seq: min(started[seq].values()))
    seqs = sorted(started, key=lambda seq: (seq - base) % (1 << 32))
    per = len(seqs) // calls
    out = []
    for c in range(calls):
        first: dict[str, float] = {}
        for seq in seqs[c * per : (c + 1) * per]:
            for who, t in started[seq].items():
                first[who] = min(t, first.get(who, t))
        out.append(first)
    return out


def call_skews(starts: list[dict[str, float]]) -> list[float]:
    """Per call, the first worker's first contribution to the last worker's."""
    return [max(first.values()) - min(first.values()) for first in starts if first]


def late_starts(
    starts: list[dict[str, float]], announced: dict[str, dict[int, list[float]]]
) -> list[tuple[float, bool]]:
    """Per worker and call (the job's calls in number order), when it
    started more than ``LATE_S`` after the last of its job's workers first
    announced the call: how late, and whether it sent the CALL again before
    it started (its GO, or its CALL, was lost).  ``announced``: per worker,
    per call number, the times its CALLs reached the switch."""
    numbers = sorted({n for calls in announced.values() for n in calls})
    late = []
    for first, n in zip(starts, numbers, strict=False):
        if not all(n in announced.get(who, {}) for who in first):
            continue
        last = max(min(announced[who][n]) for who in first)
        for who, t in first.items():
            if t - last > LATE_S:
                again = any(last < a < t for a in announced[who][n])
                late.append((t - last, again))
    return late


def call_frames(path: Path, job: int) -> dict[int, list[float]]:
    """Per call number, the times of the CALLs of ``job`` in a pcap file."""
    calls: dict[int, list[float]] = defaultdict(list)
    for t, datagram in udp_datagrams(path, CONTROL_PORT):
        if len(datagram) != CONTROL_BYTES:
            continue
        msg = decode_control(datagram, len(datagram))
        if msg.ctype == ControlType.CALL and msg.job == job:
            calls[msg.call].append(t)
    return calls


def trace_chunk(frames: list[Frame], mask: int, workers: int, out: JobTrace) -> None:
    firsts = {
        f.who
        for f in frames
        if f.inbound and f.ptype == PacketType.CONTRIB and not f.flags & Flag.RETX
    }
    out.lost_up += workers - len(firsts)
    out.switch_sums += any(not f.inbound and f.ptype == PacketType.RESULT for f in frames)
    answered: set[str] = set()
    asked: set[str] = set()
    resent = False
    at_switch = to_ps = 0
    sum_sent = False
    pulled = 0
    for f in frames:
        if f.inbound and f.ptype == PacketType.CONTRIB:
            at_switch |= f.bitmap
            if f.flags & Flag.RETX:
                resent = True
                out.resent_after_result += f.who in answered and f.who not in asked
        elif not f.inbound and f.ptype in RESULTS and f.who != "ps":
            answered.add(f.who)
        elif not f.inbound and f.ptype == PacketType.PULL:
            asked.add(f.who)
        elif not f.inbound and f.who == "ps" and f.ptype in TO_PS:
            to_ps |= f.bitmap
        elif not f.inbound and f.who == "ps" and f.ptype == PacketType.RESULT:
            sum_sent = True
        elif f.inbound and f.who == "ps" and f.ptype == PacketType.PULL:
            missing = mask & ~f.bitmap
            if sum_sent:
                cause = CAUSES[0]
            elif missing & to_ps:
                cause = CAUSES[1]
            elif missing & at_switch:
                cause = CAUSES[2]
            else:
                cause = CAUSES[3]
            out.pulls[cause] += 1
            out.repeat_pulls += pulled > 0
            pulled += 1
    results = [f.t for f in frames if not f.inbound and f.ptype in RESULTS and f.who != "ps"]
    contribs = [f.t for f in frames if f.inbound and f.ptype == PacketType.CONTRIB]
    if resent and results and contribs:
        out.repair_s.append(max(results) - min(contribs))
    if results and contribs:
        out.paths[chunk_path(frames)].append(max(results) - min(contribs))


def chunk_path(frames: list[Frame]) -> str:
    """The first of ``PATHS`` that fits what left the chunk's slot for its
    PS (``frames`` in time order)."""
    resent = False
    fell_back = False
    for f in frames:
        if f.inbound and f.ptype == PacketType.CONTRIB and f.flags & Flag.RETX:
            resent = True
        elif not f.inbound and f.who == "ps" and f.ptype == PacketType.PARTIAL:
            return PATHS[1] if resent else PATHS[0]
        elif not f.inbound and f.who == "ps" and f.ptype == PacketType.FALLBACK:
            fell_back = True
    return PATHS[2] if fell_back else PATHS[3]


def row(scheme: str, job: int, t: JobTrace) -> str:
    pulls = " / ".join(str(t.pulls[c]) for c in CAUSES)
    repair = f"{statistics.fmean(t.repair_s) * 1e3:.1f}" if t.repair_s else "-"
    longest = f"{max(t.silences):.2f}" if t.silences else "-"
    paths = " / ".join(
        f"{len(t.paths[p])}: {statistics.fmean(t.paths[p]) * 1e3:.0f}" if t.paths[p] else "0"
        for p in PATHS
    )
    skew = f"{sum(t.call_skews):.2f} / {max(t.call_skews):.2f}" if t.call_skews else "-"
    again = sum(a for _, a in t.late)
    late = f"{len(t.late)} / {t.worker_calls}, {again}" if t.late else f"0 / {t.worker_calls}"
    if t.late:
        late += f", {statistics.fmean(d for d, _ in t.late) * 1e3:.0f}"
    return (
        f"| {scheme} | {job} | {t.jct_s:.2f} | {t.chunks} | {t.lost_up} | {t.resent_after_result} "
        f"| {t.switch_sums} / {t.ps_got_sums} | {t.pulls.total()} | {pulls} | {t.repeat_pulls} "
        f"| {repair} | {len(t.silences)} / {longest} | {paths} | {skew} | {late} |"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.loss_trace", description=__doc__)
    ap.add_argument("run", type=Path, help="a make run results directory, run with --pcap")
    args = ap.parse_args(argv)
    scenario = json.loads((args.run / "scenario.json").read_text())
    print(
        "| scheme | job | jct s | chunks | lost up | resent after result | switch sums / PS got "
        f"| pulls | {' / '.join(CAUSES)} | repeat | repair ms "
        f"| silences > {SILENCE_S:g} s / longest s | paths {' / '.join(PATHS)}: chunks: mean ms "
        f"| call skew s: sum / longest | late starts (> {LATE_S * 1e3:g} ms) / worker-calls, "
        "CALL sent again, mean ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for scheme in scenario["schemes"]:
        for job in scenario["jobs"]:
            print(row(scheme, int(job["job"]), trace_job(args.run, scheme, job)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
