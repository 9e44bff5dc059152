"""Junk against a running job: a PS and its workers on 127.0.0.1 (switch
model in between) are sent malformed, spoofed and mutated datagrams between
iterations, on their ESA and control ports, and the workers' own authentic
control messages played again to the PS; every sum must stay exact.

    .venv/bin/python -m bench.fuzz_hosts --datagrams 10000

It prints the junk sent by target and kind, what the PS and the workers
dropped by reason, the replies the junk cost the PS, the state it changed
at the PS (calls agreed and epochs started beyond the job's own: must be
none), the calls that failed (threads that died) and the sums that differ
from the exact ones: both must be 0.
"""

from __future__ import annotations

import argparse
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import numpy.typing as npt

from esa import model, wire
from esa.job import Workers
from esa.spec import Policy
from esa.wire import ControlType, Flag, PacketType
from hosts.net import payload, quant
from hosts.net.drops import HostDrop
from hosts.net.transport import Addr, UdpTransport
from hosts.ps.parameter_server import ParameterServer
from hosts.worker.agent import Worker
from testbed.loopswitch import LoopSwitch

LOCAL: Addr = ("127.0.0.1", 0)
JOB = 9
FAR = 1 << 31
"""Junk with a well-formed header uses seqs this far from any call."""
BURST = 64
"""Junk datagrams sent before waiting for the target to take them."""

T = PacketType
Make = Callable[[random.Random, int], bytes]
"""(rng, a seq of the last finished call) -> one junk datagram."""


def _esa(ptype: int, flags: int, job: int, seq: int, bitmap: int, count: int) -> bytes:
    values = np.random.default_rng(seq).integers(-(2**31), 2**31, wire.K, dtype=np.int64)
    return payload.encode(payload.Header(ptype, flags, job, seq, bitmap, count), values)


def _length(rng: random.Random, _seq: int) -> bytes:
    n = rng.choice([rng.randrange(wire.PAYLOAD_BYTES), rng.randrange(wire.PAYLOAD_BYTES + 1, 300)])
    return rng.randbytes(n)


def _mutated(good: Make) -> Make:
    """``good`` with one to three bytes replaced: anything may come of it."""

    def make(rng: random.Random, seq: int) -> bytes:
        data = bytearray(good(rng, seq))
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)

    return make


def ps_kinds(fan_in: int) -> dict[str, tuple[Make, HostDrop | None]]:
    """Junk for the PS's ESA port: how to make it, and the reason it must be dropped for."""
    mask = (1 << fan_in) - 1
    to_ps = [T.FALLBACK, T.PARTIAL, T.FLOAT]

    def bit(r: random.Random) -> int:
        return 1 << r.randrange(fan_in)

    def ptype(r: random.Random, s: int) -> bytes:
        return _esa(r.choice([0, T.CONTRIB, T.PS_RESULT, T.PULL, 8, 255]), 0, JOB, s, bit(r), 1)

    def job(r: random.Random, s: int) -> bytes:
        return _esa(T.FALLBACK, 0, r.choice([0, JOB + 1, 65535]), s, 1, 1)

    def flags(r: random.Random, s: int) -> bytes:
        return _esa(T.FALLBACK, r.choice([Flag.FLOAT, Flag.HOLD, 0x80]), JOB, s, bit(r), 1)

    def bitmap(r: random.Random, s: int) -> bytes:
        # a FALLBACK may carry several bits (a rack's sum), none outside the mask
        return _esa(T.FALLBACK, 0, JOB, s, r.choice([0, 1 << fan_in, mask | 1 << fan_in]), 1)

    def count(r: random.Random, s: int) -> bytes:
        return _esa(T.FALLBACK, 0, JOB, s, bit(r), r.choice([0, 2, 200, 255]))

    def far(r: random.Random, s: int) -> bytes:
        return _esa(r.choice(to_ps), 0, JOB, (s + FAR) % (1 << 32), bit(r), 1)

    def near(r: random.Random, s: int) -> bytes:
        return _esa(r.choice(to_ps), 0, JOB, s, bit(r), 1)

    return {
        "length": (_length, HostDrop.LENGTH),
        "ptype": (ptype, HostDrop.PTYPE),
        "job": (job, HostDrop.JOB),
        "flags": (flags, HostDrop.FLAGS),
        "bitmap": (bitmap, HostDrop.BITMAP),
        "count": (count, HostDrop.COUNT),
        "seq": (far, HostDrop.SEQ),
        "mutated": (_mutated(near), None),
    }


def worker_kinds(fan_in: int) -> dict[str, tuple[Make, HostDrop | None]]:
    """Junk for a worker's ESA port."""
    mask = (1 << fan_in) - 1
    results = [T.RESULT, T.PS_RESULT]

    def ptype(r: random.Random, s: int) -> bytes:
        return _esa(r.choice([0, T.CONTRIB, T.FALLBACK, T.PARTIAL, T.FLOAT, 99]), 0, JOB, s, 1, 1)

    def job(r: random.Random, s: int) -> bytes:
        return _esa(T.RESULT, 0, r.choice([0, JOB + 1]), s, mask, fan_in)

    def flags(r: random.Random, s: int) -> bytes:
        return _esa(
            T.RESULT, r.choice([Flag.FLOAT, Flag.HOLD, Flag.HOLD | Flag.RETX]), JOB, s, mask, fan_in
        )

    def bitmap(r: random.Random, s: int) -> bytes:
        return _esa(r.choice(results), 0, JOB, s, mask >> 1, fan_in)

    def count(r: random.Random, s: int) -> bytes:
        return _esa(r.choice(results), 0, JOB, s, mask, fan_in + 1)

    def stale(r: random.Random, s: int) -> bytes:
        far = (s + FAR) % (1 << 32)
        if r.random() < 0.5:
            return _esa(T.PULL, 0, JOB, far, 0, 0)
        return _esa(r.choice(results), 0, JOB, far, mask, fan_in)

    def near(r: random.Random, s: int) -> bytes:
        return _esa(r.choice(results), 0, JOB, s, mask, fan_in)

    return {
        "length": (_length, HostDrop.LENGTH),
        "ptype": (ptype, HostDrop.PTYPE),
        "job": (job, HostDrop.JOB),
        "flags": (flags, HostDrop.FLAGS),
        "bitmap": (bitmap, HostDrop.BITMAP),
        "count": (count, HostDrop.COUNT),
        "stale": (stale, HostDrop.STALE),
        "mutated": (_mutated(near), None),
    }


class Recorder(UdpTransport):
    """A worker's control socket that keeps a copy of every message it
    sends with a PS session (authentic, and counted by the PS when it
    arrives): what an eavesdropper could play again."""

    def __init__(self, bind: Addr, sent: list[bytes]) -> None:
        super().__init__(bind)
        self.sent = sent

    def send(self, data: bytes | bytearray | memoryview, addr: Addr) -> None:
        if payload.decode_control(bytes(data), len(data)).session:
            self.sent.append(bytes(data))
        super().send(data, addr)


def control_kinds(
    to_ps: bool, fan_in: int, recorded: list[bytes] | None = None
) -> dict[str, tuple[Make, HostDrop | None]]:
    """Junk for a control port: garbage, and well-formed messages of a
    process nobody knows (a random nonce) for the last finished call, not
    sealed with the job's key: the PS drops them as ``auth``, a worker, whose
    nonce they lack, as ``stranger``.  ``recorded``: the workers' authentic
    messages so far, played again to the PS (``replay``)."""
    types = [ControlType.STATUS] if to_ps else [ControlType.GO, ControlType.REJECT]

    def stranger(r: random.Random, _seq: int) -> bytes:
        msg = payload.Control(
            r.choice(types), 0, JOB, r.randrange(fan_in), 0, r.getrandbits(32), counter=1
        )
        return payload.encode_control(msg)

    kinds: dict[str, tuple[Make, HostDrop | None]] = {
        "length": (lambda r, s: r.randbytes(r.randrange(wire.CONTROL_BYTES)), HostDrop.CONTROL),
        "magic": (lambda r, s: b"\0\0" + r.randbytes(wire.CONTROL_BYTES - 2), HostDrop.CONTROL),
        "stranger": (stranger, HostDrop.AUTH if to_ps else HostDrop.STRANGER),
    }
    if recorded is not None:
        kinds["replayed"] = (lambda r, s: r.choice(recorded), HostDrop.REPLAY)
    return kinds


@dataclass
class Target:
    name: str
    addr: Addr
    kinds: dict[str, tuple[Make, HostDrop | None]]
    taken: Callable[[], int]
    """datagrams the target has handled so far."""


@dataclass
class Report:
    sent: Counter[str] = field(default_factory=Counter)
    """junk sent, by ``target/kind``."""
    expected: dict[str, Counter[str]] = field(
        default_factory=lambda: {"ps": Counter(), "workers": Counter()}
    )
    """the drops by reason the junk must cause at the PS and at the workers
    (all kinds but ``mutated``, whose fate is not known in advance)."""
    ps: dict[str, int] = field(default_factory=dict)
    workers: dict[str, int] = field(default_factory=dict)
    """drops by reason, the workers' summed."""
    ps_counters: dict[str, object] = field(default_factory=dict)
    resent: int = 0
    """the workers' own resends: chunks retransmitted and calls announced
    again. On a loaded machine a timer fires early, and the answer to a
    resend may come after its call ended: a real datagram dropped as stale,
    at most one per worker of the job for each resend."""
    crashes: list[str] = field(default_factory=list)
    sums: int = 0
    mismatches: int = 0


def worker_targets(name: str, w: Worker, data: Addr, control: Addr) -> list[Target]:
    fan_in = w.fan_in
    return [
        Target(name, data, worker_kinds(fan_in), lambda: w.counters.received),
        Target(
            f"{name}-control",
            control,
            control_kinds(False, fan_in),
            lambda: w.counters.control_received,
        ),
    ]


def exact_sum(inputs: list[npt.NDArray[np.float32]], scale: float) -> npt.NDArray[np.float32]:
    total = sum(quant.quantise(x, 1.0, scale).values.astype(np.int64) for x in inputs)
    return quant.dequantise(total, scale).ravel()[: inputs[0].size]


def _deliver(target: Target, junk: list[bytes], sock: UdpTransport) -> None:
    """Send ``junk`` in bursts, each once the target has taken the last."""
    for start in range(0, len(junk), BURST):
        before = target.taken()
        burst = junk[start : start + BURST]
        for data in burst:
            sock.send(data, target.addr)
        end = time.monotonic() + 5.0
        while target.taken() < before + len(burst) and time.monotonic() < end:
            time.sleep(0.001)


def run(
    datagrams: int = 10_000,
    iters: int = 4,
    fan_in: int = 2,
    size: int = 3000,
    seed: int = 1,
    mutate: bool = True,
) -> Report:
    """``mutate``: also send mutated copies of real datagrams, whose fate is
    not known in advance (without them every drop reason is)."""
    rng = random.Random(seed)
    report = Report()
    data = [UdpTransport(LOCAL) for _ in range(fan_in)]
    recorded: list[bytes] = []
    control = [Recorder(LOCAL, recorded) for _ in range(fan_in)]
    ps_t, ps_c, fuzzer = UdpTransport(LOCAL), UdpTransport(LOCAL), UdpTransport(LOCAL)
    sw = model.SwitchModel(pool_size=16, policy=Policy.ESA)
    sw.add_job(JOB, model.JobConfig(fan_in, (1 << fan_in) - 1, priority=1, ps_ports=(1,)))
    switch = LoopSwitch(sw, ps={JOB: (ps_t.addr,)}, workers={JOB: [t.addr for t in data]}).start()
    ps = ParameterServer(ps_t, switch.addr, {JOB: Workers.of(fan_in)}, stall=0.05, control=ps_c)
    workers = [
        Worker(JOB, i, fan_in, (switch.addr,), data[i], rto=0.02, control=control[i],
               control_addrs=(ps_c.addr,))
        for i in range(fan_in)
    ]  # fmt: skip
    inputs = [
        [np.random.default_rng([seed, i, it]).uniform(-1, 1, size).astype(np.float32)
         for it in range(iters)]
        for i in range(fan_in)
    ]  # fmt: skip
    results: list[list[npt.NDArray[np.float32]]] = [[] for _ in range(fan_in)]
    ready = [threading.Event() for _ in range(fan_in)]
    go = [threading.Event() for _ in range(iters)]
    stop = threading.Event()

    def guarded(name: str, body: Callable[[], None]) -> Callable[[], None]:
        def run_body() -> None:
            try:
                body()
            except Exception as e:
                report.crashes.append(f"{name}: {type(e).__name__}: {e}")
                stop.set()

        return run_body

    def work(i: int) -> None:
        w = workers[i]
        for it in range(iters):
            while not go[it].is_set() and not stop.is_set():
                w.linger(0.01)
            results[i].append(w.allreduce(inputs[i][it], timeout=30.0))
            ready[i].set()
        w.linger(0.5)

    threads = [threading.Thread(target=guarded("ps", partial(ps.serve, stop.is_set)))]
    threads += [
        threading.Thread(target=guarded(f"worker {i}", partial(work, i))) for i in range(fan_in)
    ]
    for t in threads:
        t.start()
    targets = [
        Target("ps", ps_t.addr, ps_kinds(fan_in), lambda: ps.counters.received),
        Target(
            "ps-control",
            ps_c.addr,
            control_kinds(True, fan_in, recorded),
            lambda: ps.counters.control_received,
        ),
    ]
    for i, w in enumerate(workers):
        targets += worker_targets(f"worker{i}", w, data[i].addr, control[i].addr)
    go[0].set()
    slots = max(1, iters - 1) * len(targets)
    counts = [datagrams // slots + (k < datagrams % slots) for k in range(slots)]
    for it in range(1, iters):
        for e in ready:
            while not e.wait(0.1) and not stop.is_set():
                pass
            e.clear()
        c = workers[0].cur
        assert c is not None
        last = (c.first + c.n - 1) % (1 << 32)
        for target in targets:
            kinds = [k for k in target.kinds if mutate or k != "mutated"]
            count = counts.pop()
            picks = [rng.choice(kinds) for _ in range(count)]
            report.sent.update(f"{target.name}/{k}" for k in picks)
            host = "ps" if target.name.startswith("ps") else "workers"
            reasons = [target.kinds[k][1] for k in picks]
            report.expected[host].update(r.value for r in reasons if r is not None)
            junk = [target.kinds[k][0](rng, last) for k in picks]
            _deliver(target, junk, fuzzer)
        go[it].set()
    for t in threads[1:]:
        t.join(timeout=60)
    stop.set()
    threads[0].join()
    switch.stop()
    for tr in [ps_t, ps_c, fuzzer, *data, *control]:
        tr.close()
    scale = quant.job_scale(1.0, fan_in)
    for it in range(iters):
        want = exact_sum([inputs[i][it] for i in range(fan_in)], scale)
        for i in range(fan_in):
            report.sums += 1
            got = results[i][it] if it < len(results[i]) else None
            report.mismatches += got is None or not np.array_equal(got, want)
    report.ps = {r: n for r, n in ps.counters.dropped.items() if n}
    report.workers = dict(sum((Counter(w.counters.dropped) for w in workers), Counter()))
    report.ps_counters = ps.counters.as_dict()
    calls = sum(w.counters.calls_sent for w in workers) - iters * fan_in
    report.resent = sum(w.counters.retransmitted for w in workers) + max(0, calls)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.fuzz_hosts", description=__doc__.splitlines()[0]
    )
    p.add_argument("--datagrams", type=int, default=10_000)
    p.add_argument("--iters", type=int, default=4)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    r = run(a.datagrams, a.iters, seed=a.seed)
    print(f"junk datagrams sent: {sum(r.sent.values())}")
    for key in sorted(r.sent):
        print(f"  {key:28s} {r.sent[key]:6d}")
    print("dropped by the PS:      " + ", ".join(f"{k} {v}" for k, v in sorted(r.ps.items())))
    print(
        "dropped by the workers: "
        + ", ".join(f"{k} {v}" for k, v in sorted(r.workers.items()) if v)
    )
    c = r.ps_counters
    print(f"PS replies: pulls {c['pulls_sent']}, answers from cache {c['answered_from_cache']}, "
          f"suppressed by budget {c['suppressed']}, rejects {c['rejects_sent']}")  # fmt: skip
    print(
        f"state the junk changed at the PS: calls agreed {c['calls_agreed']} (the job's own: "
        f"{a.iters}), epochs started {c['epochs_started']} (the job's own: 1)"
    )
    print(f"calls failed (crashes): {len(r.crashes)}" + "".join(f"\n  {c}" for c in r.crashes))
    print(f"sum mismatches: {r.mismatches} of {r.sums} sums")
    changed = c["calls_agreed"] != a.iters or c["epochs_started"] != 1
    return 1 if r.crashes or r.mismatches or changed else 0


if __name__ == "__main__":
    raise SystemExit(main())
