"""Worker agent: windowing, retransmission, results, PULL, overflow recovery."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from esa import wire
from esa.wire import Flag, PacketType
from hosts import codec, quant
from hosts.transport import Addr, Bytes
from hosts.worker import Worker
from tests.test_hosts_ps import Recorder, pkt

T = PacketType
PS: Addr = ("10.0.0.9", wire.UDP_PORT)
K = wire.K


def make(window: int = 4, rto: float = 1.0, index: int = 1) -> tuple[Worker, Recorder]:
    rec = Recorder()
    return Worker(3, index, 2, PS, rec, bound=1.0, window=window, rto=rto), rec


def tensor(chunks: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, chunks * K - 5).astype(np.float32)


def sent(rec: Recorder) -> list[tuple[int, int, int]]:
    out = [(h.ptype, h.seq, h.flags) for h, _, _ in rec.sent]
    rec.sent.clear()
    return out


def result(seq: int, values: npt.ArrayLike, ptype: int = T.RESULT, flags: int = 0) -> bytes:
    return pkt(ptype, 3, seq, 0b11, values, flags)


def test_window_streams_chunks_with_increasing_seqs() -> None:
    w, rec = make()
    x = tensor(6)
    w.begin(x)
    w.poll(0.0)
    q = quant.quantise(x, 1.0, w.scale).values
    assert [(h, v, a) for h, v, a in rec.sent] == [
        (codec.Header(T.CONTRIB, 0, 3, i, 0b10, 1), q[i].tolist(), PS) for i in range(4)
    ]
    rec.sent.clear()
    rec.inbox.append(result(1, q[1] * 2))
    w.poll(0.1)
    assert sent(rec) == [(T.CONTRIB, 4, 0)]
    assert w.counters.sent == 5 and w.counters.delivered == 1


def test_timeout_retransmits_with_retx_in_deadline_order_and_backs_off() -> None:
    w, rec = make(window=2, rto=1.0)
    w.begin(tensor(3))
    assert w.poll(0.0) == 1.0
    sent(rec)
    assert w.poll(0.5) == 1.0
    assert sent(rec) == []
    assert w.poll(1.0) == 3.0, "one timeout doubles the timeout once"
    assert sent(rec) == [(T.CONTRIB, 0, Flag.RETX), (T.CONTRIB, 1, Flag.RETX)]
    assert w.counters.retransmitted == 2 and w.counters.sent == 4


def test_timeout_adapts_to_the_time_to_a_sum() -> None:
    w, rec = make(window=4, rto=0.5)
    x = tensor(3)
    w.begin(x)
    w.poll(0.0)
    q = quant.quantise(x, 1.0, w.scale).values
    rec.inbox.append(result(0, q[0] * 2))
    w.poll(0.3)
    assert w.srtt == pytest.approx(0.3)
    assert w.rto == pytest.approx(0.3 + 4 * 0.15)
    rec.inbox.append(result(1, q[1] * 2))
    w.poll(0.4)
    srtt = 0.875 * 0.3 + 0.125 * 0.4
    assert w.srtt == pytest.approx(srtt)
    assert w.rto == pytest.approx(srtt + 4 * (0.75 * 0.15 + 0.25 * 0.1))


def test_results_delivered_exactly_once_and_seqs_continue_across_calls() -> None:
    w, rec = make(window=8)
    x = tensor(3)
    w.begin(x)
    w.poll(0.0)
    q = quant.quantise(x, 1.0, w.scale).values
    total = q.astype(np.int64) * 2
    rec.inbox.extend([result(0, total[0]), result(1, total[1], T.PS_RESULT)])
    rec.inbox.extend([result(0, total[0] + 1), result(2, total[2]), result(1, total[1])])
    w.poll(0.1)
    assert w.done
    assert np.array_equal(w.result(), quant.dequantise(total, w.scale).ravel()[: x.size])
    c = w.counters
    assert (c.delivered, c.results_switch, c.results_ps, c.duplicates) == (3, 2, 1, 2)
    rec.sent.clear()
    w.begin(tensor(2, seed=1))
    w.poll(0.2)
    assert sent(rec) == [(T.CONTRIB, 3, 0), (T.CONTRIB, 4, 0)]
    rec.inbox.append(result(9, total[0]))
    w.poll(0.3)
    assert w.counters.stale == 1


def test_pull_resends_contributions_the_ps_lacks() -> None:
    w, rec = make(window=8)
    x = tensor(2)
    w.begin(x)
    w.poll(0.0)
    rec.inbox.extend([result(0, [0] * K), result(1, [0] * K)])
    w.poll(0.1)
    w.begin(tensor(1, seed=2))
    w.poll(0.2)
    sent(rec)
    rec.inbox.append(pkt(T.PULL, 3, 1, 0b01, [0] * K))
    rec.inbox.append(pkt(T.PULL, 3, 0, 0b10, [0] * K))
    rec.inbox.append(pkt(T.PULL, 3, 77, 0b01, [0] * K))
    w.poll(0.3)
    assert rec.sent[0][0] == codec.Header(T.CONTRIB, Flag.RETX, 3, 1, 0b10, 1)
    assert rec.sent[0][1] == quant.quantise(x, 1.0, w.scale).values[1].tolist()
    assert len(rec.sent) == 1
    assert (w.counters.pulls_answered, w.counters.stale) == (1, 1)
    assert list(w.inflight) == [0]


def test_pull_for_an_unsent_chunk_sends_it_once_as_retx() -> None:
    """It then occupies the window like any chunk in flight."""
    w, rec = make(window=1)
    w.begin(tensor(3))
    w.poll(0.0)
    rec.inbox.append(pkt(T.PULL, 3, 2, 0b01, [0] * K))
    w.poll(0.1)
    rec.inbox.append(result(0, [0] * K))
    w.poll(0.2)
    assert sent(rec) == [(T.CONTRIB, 0, 0), (T.CONTRIB, 2, Flag.RETX)]
    rec.inbox.append(result(2, [0] * K))
    w.poll(0.3)
    assert sent(rec) == [(T.CONTRIB, 1, 0)]


def test_overflow_recovery_through_float() -> None:
    w, rec = make(window=8, rto=1.0)
    x = tensor(2)
    x[3] = 7.5
    w.begin(x)
    w.poll(0.0)
    assert sent(rec) == [(T.CONTRIB, 0, Flag.OVERFLOW), (T.CONTRIB, 1, 0)]
    rec.inbox.append(result(0, [0] * K, flags=Flag.OVERFLOW))
    rec.inbox.append(result(1, [0] * K))
    w.poll(0.5)
    [(h, bits, _)] = rec.sent
    assert h == codec.Header(T.FLOAT, 0, 3, 0, 0b10, 1)
    assert quant.from_bits(bits).tolist() == x[:K].tolist()
    rec.sent.clear()
    w.poll(1.5)
    assert sent(rec) == [(T.FLOAT, 0, Flag.RETX)]
    summed = x[:K] * np.float32(3)
    rec.inbox.append(result(0, [0] * K, T.PS_RESULT, Flag.OVERFLOW))
    rec.inbox.append(result(0, quant.float_bits(summed), T.PS_RESULT, Flag.FLOAT))
    w.poll(1.6)
    assert w.done
    assert w.result()[:K].tolist() == summed.tolist()
    c = w.counters
    assert (c.overflowed, c.float_sent, c.results_float, c.duplicates) == (1, 2, 1, 1)


def test_malformed_and_foreign_are_counted() -> None:
    w, rec = make()
    w.begin(tensor(1))
    w.poll(0.0)
    good = result(0, [0] * K)
    rec.inbox.extend([b"", good[:-1], good + b"1", bytes(wire.PAYLOAD_BYTES)])
    rec.inbox.append(pkt(T.RESULT, 4, 0, 0b11, [0] * K))
    rec.inbox.append(pkt(T.RESULT, 3, 0, 0b01, [0] * K))
    rec.inbox.append(pkt(T.FALLBACK, 3, 0, 0b11, [0] * K))
    rec.inbox.append(result(0, [0] * K, T.PS_RESULT, Flag.FLOAT))
    w.poll(0.1)
    assert (w.counters.malformed, w.counters.foreign, w.counters.delivered) == (7, 1, 0)


class Reflector:
    """Answers each contribution at once with a RESULT of twice its values."""

    def __init__(self) -> None:
        self.queue: list[bytes] = []

    def send(self, data: Bytes, addr: Addr) -> None:
        h, v = codec.decode(bytes(data))
        self.queue.append(result(h.seq, v.astype(np.int64) * 2))

    def recv_into(self, buf: bytearray) -> tuple[int, Addr] | None:
        if not self.queue:
            return None
        data = self.queue.pop(0)
        buf[: len(data)] = data
        return len(data), PS

    def wait(self, timeout: float) -> None:
        pass


def test_allreduce_blocking_api() -> None:
    w = Worker(3, 0, 2, PS, Reflector(), window=3, clock=lambda: 0.0)
    x = tensor(5).reshape(-1, 1)
    got = w.allreduce(x)
    assert got.shape == x.shape and got.dtype == np.float32
    q = quant.quantise(x, 1.0, w.scale).values.astype(np.int64) * 2
    assert np.array_equal(got.ravel(), quant.dequantise(q, w.scale).ravel()[: x.size])
    assert np.array_equal(w.allreduce(x), got)
    assert w.counters.sent == 10 and w.counters.results_switch == 10


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="bit 2"):
        Worker(1, 2, 2, PS, Recorder())
    with pytest.raises(ValueError, match="job"):
        Worker(0, 0, 2, PS, Recorder())
    w, _ = make()
    with pytest.raises(RuntimeError):
        w.result()
    w.begin(tensor(1))
    with pytest.raises(RuntimeError):
        w.begin(tensor(1))
