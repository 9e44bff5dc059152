"""Worker agent: windowing, retransmission, results, PULL, overflow recovery."""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given
from hypothesis import strategies as st

from esa import wire
from esa.wire import ControlType, Flag, PacketType, RejectReason, ReportKind
from hosts.agreement import auth
from hosts.net import payload, quant
from hosts.net.drops import HostDrop
from hosts.net.transport import Addr, Bytes
from hosts.worker.agent import Worker
from hosts.worker.calls import ANNOUNCING, STREAMING
from hosts.worker.errors import AllreduceTimeout, CallRejected
from tests.test_hosts_agreement import KEY, SESSION, Mailbox
from tests.test_hosts_ps import Recorder, pkt

T = PacketType
C = ControlType
PS: Addr = ("10.0.0.9", wire.UDP_PORT)
PS2: tuple[Addr, ...] = (PS, ("10.0.0.10", wire.UDP_PORT))
"""A job's two PS shards."""
K = wire.K


def make(window: int = 4, rto: float = 1.0, index: int = 1) -> tuple[Worker, Recorder]:
    rec = Recorder()
    return Worker(3, index, 2, (PS,), rec, bound=1.0, window=window, rto=rto), rec


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
        (payload.Header(T.CONTRIB, 0, 3, i, 0b10, 1), q[i].tolist(), PS) for i in range(4)
    ]
    rec.sent.clear()
    rec.inbox.append(result(1, q[1] * 2))
    w.poll(0.1)
    assert sent(rec) == [(T.CONTRIB, 4, 0)]
    assert w.counters.sent == 5 and w.counters.delivered == 1


def test_timeout_retransmits_with_retx_and_backs_off_only_without_samples() -> None:
    """One timeout does not slow the window; a whole timeout in which more
    than half a window timed out and no sum came back doubles the RTO."""
    w, rec = make(window=2, rto=0.25)
    w.begin(tensor(3))
    assert w.poll(0.0) == 0.25
    sent(rec)
    assert w.poll(0.1) == 0.25
    assert sent(rec) == []
    assert w.poll(0.25) == 0.5
    assert sent(rec) == [(T.CONTRIB, 0, Flag.RETX), (T.CONTRIB, 1, Flag.RETX)]
    assert w.poll(0.5) == 1.0 and w.timeout.value == 0.5
    assert sent(rec) == [(T.CONTRIB, 0, Flag.RETX), (T.CONTRIB, 1, Flag.RETX)]
    assert w.counters.retransmitted == 4 and w.counters.sent == 6


def test_a_lost_chunk_does_not_slow_the_others() -> None:
    """Chunk 0 is lost again and again while the others complete: it is
    resent every RTO, and the RTO keeps following the samples."""
    w, rec = make(window=4, rto=0.125)
    x = tensor(8)
    w.begin(x)
    w.poll(0.0)
    q = quant.quantise(x, 1.0, w.scale).values
    for now, seqs in ((0.01, (1, 2, 3)), (0.02, (4, 5, 6)), (0.03, (7,))):
        rec.inbox.extend(result(seq, q[seq] * 2) for seq in seqs)
        w.poll(now)
    for now in (0.125, 0.25, 0.375):
        w.poll(now)
    assert [seq for _, seq, flags in sent(rec) if flags] == [0, 0, 0]
    assert w.timeout.value == 0.125 and w.stream.inflight.deadlines == {0: 0.5}


def test_timeout_adapts_to_the_time_to_a_sum() -> None:
    """A sum is a sample at RFC 6298's gains divided by the chunks in flight
    (3 of the call's 3, then 2)."""
    w, rec = make(window=4, rto=0.5)
    x = tensor(3)
    w.begin(x)
    w.poll(0.0)
    q = quant.quantise(x, 1.0, w.scale).values
    rec.inbox.append(result(0, q[0] * 2))
    w.poll(0.3)
    assert w.timeout.srtt == pytest.approx(0.3)
    assert w.timeout.value == pytest.approx(0.3 + 4 * 0.15)
    rec.inbox.append(result(1, q[1] * 2))
    w.poll(0.4)
    srtt = (1 - 0.125 / 2) * 0.3 + 0.125 / 2 * 0.4
    assert w.timeout.srtt == pytest.approx(srtt)
    rttvar = (1 - 0.25 / 2) * 0.15 + 0.25 / 2 * 0.1
    assert w.timeout.value == pytest.approx(srtt + 4 * rttvar)


@pytest.mark.parametrize(
    ("ptype", "flags", "spurious"),
    [(T.RESULT, 0, True), (T.PS_RESULT, Flag.HOLD, True), (T.PS_RESULT, 0, False)],
)
def test_a_switch_sum_of_a_resent_chunk_shows_the_timeout_spurious(
    ptype: int, flags: int, spurious: bool
) -> None:
    """Chunk 0 is resent at 0.2 s, not 0.1 (its timer, set for 0.1 s, runs
    for the 0.15 s timeout chunk 1's sum grew it to), and its first transmissions' sum (the
    switch's RESULT, or ATP's PS answer flagged HOLD) comes at 0.3 s: the
    0.3 s is a sample, taken in full; a plain PS_RESULT may answer the
    retransmission and gives none (Karn)."""
    w, rec = make(window=2, rto=0.1)
    x = tensor(2)
    w.begin(x)
    w.poll(0.0)
    q = quant.quantise(x, 1.0, w.scale).values
    rec.inbox.append(result(1, q[1] * 2))
    w.poll(0.05)
    assert w.timeout.srtt == pytest.approx(0.05) and w.timeout.value == pytest.approx(0.15)
    assert sent(rec) == [(T.CONTRIB, 0, 0), (T.CONTRIB, 1, 0)]
    w.poll(0.1)
    assert sent(rec) == []
    w.poll(0.2)
    assert sent(rec) == [(T.CONTRIB, 0, Flag.RETX)]
    rec.inbox.append(result(0, q[0] * 2, ptype, flags))
    w.poll(0.3)
    assert w.done and w.counters.retransmitted == 1
    assert w.counters.spurious == int(spurious)
    if spurious:
        assert w.timeout.srtt == pytest.approx(0.875 * 0.05 + 0.125 * 0.3)
        assert w.timeout.rttvar == pytest.approx(0.75 * 0.025 + 0.25 * 0.25)
    else:
        assert w.timeout.srtt == pytest.approx(0.05)


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
    duplicates = c.dropped[HostDrop.DUPLICATE]
    assert (c.delivered, c.results_switch, c.results_ps, duplicates) == (3, 2, 1, 2)
    rec.sent.clear()
    w.begin(tensor(2, seed=1))
    w.poll(0.2)
    assert sent(rec) == [(T.CONTRIB, 3, 0), (T.CONTRIB, 4, 0)]
    rec.inbox.append(result(9, total[0]))
    w.poll(0.3)
    assert w.counters.dropped[HostDrop.STALE] == 1


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
    assert rec.sent[0][0] == payload.Header(T.CONTRIB, Flag.RETX, 3, 1, 0b10, 1)
    assert rec.sent[0][1] == quant.quantise(x, 1.0, w.scale).values[1].tolist()
    assert len(rec.sent) == 1
    assert (w.counters.pulls_answered, w.counters.dropped[HostDrop.STALE]) == (1, 1)
    assert list(w.stream.inflight) == [0]


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
    assert h == payload.Header(T.FLOAT, 0, 3, 0, 0b10, 1)
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
    duplicates = c.dropped[HostDrop.DUPLICATE]
    assert (c.overflowed, c.float_sent, c.results_float, duplicates) == (1, 2, 1, 1)


def raw(ptype: int, job: int, bitmap: int, count: int, flags: int = 0) -> bytes:
    return payload.encode(payload.Header(ptype, flags, job, 0, bitmap, count), [0] * K)


def test_every_field_is_checked_against_the_job() -> None:
    w, rec = make()
    w.begin(tensor(1))
    w.poll(0.0)
    good = result(0, [0] * K)
    cases = {
        HostDrop.LENGTH: [b"", good[:-1], good + b"1"],
        HostDrop.PTYPE: [bytes(wire.PAYLOAD_BYTES), raw(T.FALLBACK, 3, 1, 1),
                         raw(T.CONTRIB, 3, 1, 1),
                         raw(T.PARTIAL, 3, 3, 2), raw(T.FLOAT, 3, 1, 1)],
        HostDrop.JOB: [raw(T.RESULT, 4, 3, 2)],
        HostDrop.BITMAP: [raw(T.RESULT, 3, 1, 1), raw(T.PULL, 3, 3, 2), raw(T.PULL, 3, 4, 1),
                          raw(T.PS_RESULT, 3, 7, 3)],
        HostDrop.COUNT: [raw(T.RESULT, 3, 3, 1), raw(T.PULL, 3, 1, 2), raw(T.PS_RESULT, 3, 3, 255)],
        HostDrop.FLAGS: [raw(T.RESULT, 3, 3, 2, Flag.FLOAT), raw(T.RESULT, 3, 3, 2, Flag.HOLD),
                         raw(T.PS_RESULT, 3, 3, 2, Flag.OVERFLOW | Flag.FLOAT),
                         raw(T.PULL, 3, 1, 1, Flag.RETX), raw(T.RESULT, 3, 3, 2, 0x40)],
    }  # fmt: skip
    for datagrams in cases.values():
        rec.inbox.extend(datagrams)
    rec.sent.clear()
    w.poll(0.1)
    assert {r: n for r, n in w.counters.dropped.items() if n} == {
        r: len(d) for r, d in cases.items()
    }
    assert w.counters.delivered == 0 and rec.sent == []


class Reflector:
    """Answers each contribution at once with a RESULT of twice its values."""

    def __init__(self) -> None:
        self.queue: list[bytes] = []

    def send(self, data: Bytes, addr: Addr) -> None:
        h, v = payload.decode(bytes(data))
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
    w = Worker(3, 0, 2, (PS,), Reflector(), window=3, clock=lambda: 0.0)
    x = tensor(5).reshape(-1, 1)
    got = w.allreduce(x)
    assert got.shape == x.shape and got.dtype == np.float32
    q = quant.quantise(x, 1.0, w.scale).values.astype(np.int64) * 2
    assert np.array_equal(got.ravel(), quant.dequantise(q, w.scale).ravel()[: x.size])
    assert np.array_equal(w.allreduce(x), got)
    assert w.counters.sent == 10 and w.counters.results_switch == 10


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="bit 2"):
        Worker(1, 2, 2, (PS,), Recorder())
    with pytest.raises(ValueError, match="job"):
        Worker(0, 0, 2, (PS,), Recorder())
    with pytest.raises(ValueError, match=r"a job has 1, 2, 4 or 8 PS hosts \(up to 8\), got 3"):
        Worker(1, 0, 2, (PS,) * 3, Recorder())
    with pytest.raises(ValueError, match=r"PS control addresses for 2 PS hosts: \(\('10"):
        Worker(1, 0, 2, (PS, PS), Recorder(), control_addrs=(PS,))
    w, _ = make()
    with pytest.raises(RuntimeError):
        w.result()
    w.begin(tensor(1))
    with pytest.raises(RuntimeError):
        w.begin(tensor(1))


def agreed_worker(window: int = 4, shards: int = 1) -> tuple[Worker, Recorder, Mailbox]:
    rec, ctl = Recorder(), Mailbox()
    pses = PS2[:shards]
    return Worker(3, 1, 2, pses, rec, window=window, rto=0.25, control=ctl, key=KEY), rec, ctl


def answer(
    w: Worker, ctype: int = C.GO, shard: int = 0, key: bytes = KEY, **change: int
) -> tuple[bytes, Addr]:
    """The answer of ``shard``'s PS (session ``SESSION + shard``) to ``w``'s
    current call, with fields changed."""
    c, agent = w.cur, w.agent
    assert c is not None and agent is not None
    msg = payload.Control(
        ctype, 0, 3, w.index, 0, agent.nonce, c.number, c.base, c.n, c.size, 2, 3, 0, 0,
        c.digest, 0, SESSION + shard, agent.numbers[shard],
    )  # fmt: skip
    return auth.seal(dataclasses.replace(msg, **change), key), PS2[shard]


def greeted(w: Worker, ctl: Mailbox, now: float = 0.0, shards: int = 1) -> None:
    """Announce ``w``'s call and let each PS tell its session (CHALLENGE)."""
    w.poll(now)
    ctl.inbox.extend(answer(w, C.CHALLENGE, s) for s in range(shards))
    w.poll(now)


def calls(ctl: Mailbox) -> list[tuple[int, int, int, int]]:
    """(type, call, session, number) of each message sent, then forget them."""
    out = [(m.ctype, m.call, m.session, m.counter) for m, _ in ctl.sent]
    ctl.sent.clear()
    return out


def test_a_call_is_announced_until_the_ps_says_go() -> None:
    w, rec, ctl = agreed_worker()
    x = tensor(3)
    w.begin(x)
    assert w.poll(0.0) == 0.25
    [(m, to)] = ctl.sent
    assert w.agent is not None
    digest = wire.config_digest(2, 0b11, 1.0, x.size, "float32")
    assert dataclasses.replace(m, mac=0) == payload.Control(
        C.CALL, 0, 3, 1, 0, w.agent.nonce, 0, 0, 3, x.size, 2, 3, 0, 0, digest, 0, 0, 1
    )
    assert auth.authentic(ctl.raw[0], KEY)
    assert to == ("10.0.0.9", wire.CONTROL_PORT) and rec.sent == []
    assert w.poll(0.25) == 0.75 and w.poll(0.75) == 1.75 and w.poll(1.75) == 2.75
    assert calls(ctl) == [(C.CALL, 0, 0, n) for n in range(1, 5)]
    ctl.inbox.append(answer(w, C.CHALLENGE))
    assert w.poll(2.0) == 2.25, "the CALL goes again at once, with the session"
    assert calls(ctl) == [(C.CALL, 0, SESSION, 5)]
    ctl.inbox.append(answer(w))
    assert w.poll(2.1) == 2.35
    assert sent(rec) == [(T.CONTRIB, 0, 0), (T.CONTRIB, 1, 0), (T.CONTRIB, 2, 0)]
    assert w.counters.calls_sent == 5


@pytest.mark.parametrize("offset", [0, 1 << 20])
def test_a_pull_while_announcing_sends_the_call_again_at_once(offset: int) -> None:
    """The GO is lost and the CALL's interval has doubled; a PULL for a
    chunk of the call (the epoch's seqs start at ``offset``: at 0 the worker
    finds the chunk, elsewhere it knows no such seq) shows the PS streaming
    it: the CALL goes again at once, even just after the interval sent one,
    and at most every ``PROBE_EVERY`` for PULLs.  A PULL while the worker
    streams sends no CALL."""
    w, rec, ctl = agreed_worker()
    w.begin(tensor(3))
    greeted(w, ctl)
    assert w.poll(0.25) == 0.75 and w.poll(0.75) == 1.75
    assert [m[0] for m in calls(ctl)] == [C.CALL] * 4
    rec.inbox.append(pkt(T.PULL, 3, offset + 1, 0b01, [0] * K))
    assert w.poll(0.8) == 1.8, "a CALL went at 0.75 from the interval, and one now"
    assert calls(ctl) == [(C.CALL, 0, SESSION, 5)]
    rec.inbox.append(pkt(T.PULL, 3, offset + 1, 0b01, [0] * K))
    assert w.poll(0.85) == 1.8 and calls(ctl) == []
    rec.inbox.append(pkt(T.PULL, 3, offset + 2, 0b01, [0] * K))
    assert w.poll(0.95) == 1.95
    assert calls(ctl) == [(C.CALL, 0, SESSION, 6)]
    rec.inbox.append(pkt(T.PULL, 3, offset + 2, 0b01, [0] * K))
    assert w.poll(1.0) == 1.95 and calls(ctl) == []
    early = w.counters.dropped[HostDrop.EARLY], w.counters.dropped[HostDrop.STALE]
    assert early == ((4, 0) if offset == 0 else (0, 4))
    ctl.inbox.append(answer(w, offset=offset))
    w.poll(1.1)
    rec.inbox.append(pkt(T.PULL, 3, offset + 1, 0b01, [0] * K))
    w.poll(1.3)
    assert w.cur is not None and w.cur.phase == STREAMING and calls(ctl) == []
    assert w.counters.calls_sent == 6


def test_answers_for_another_process_shape_session_or_key_are_ignored() -> None:
    w, rec, ctl = agreed_worker()
    w.begin(tensor(2))
    greeted(w, ctl)
    assert w.agent is not None
    for change in ({"nonce": w.agent.nonce ^ 1}, {"worker": 0}, {"job": 4}, {"digest": 1},
                   {"length": 1}, {"call": 1}, {"ctype": C.CALL}, {"session": 7}):  # fmt: skip
        ctl.inbox.append(answer(w, **change))
    ctl.inbox.append(answer(w, key=bytes(32)))
    ctl.inbox.append((b"junk", PS))
    rec.inbox.append(result(0, [0] * K))
    w.poll(0.1)
    assert rec.sent == [] and w.cur is not None and w.cur.phase == ANNOUNCING
    assert {r: n for r, n in w.counters.dropped.items() if n} == {
        HostDrop.STRANGER: 6, HostDrop.STALE: 1, HostDrop.SESSION: 1, HostDrop.AUTH: 1,
        HostDrop.CONTROL: 1, HostDrop.EARLY: 1,
    }  # fmt: skip


def test_a_stale_challenge_is_ignored() -> None:
    """A CHALLENGE answers a message sent under the session it corrects: a
    recorded one from before the worker took its session changes nothing."""
    w, _, ctl = agreed_worker()
    w.begin(tensor(2))
    w.poll(0.0)
    old = answer(w, C.CHALLENGE, session=99)
    ctl.inbox.append(answer(w, C.CHALLENGE))
    w.poll(0.0)
    ctl.inbox.append(old)
    w.poll(0.1)
    assert w.agent is not None and w.agent.sessions == [SESSION]
    assert w.counters.dropped[HostDrop.STALE] == 1


def test_a_rejected_call_raises_once_and_sends_nothing() -> None:
    w, rec, ctl = agreed_worker()
    w.begin(tensor(2))
    greeted(w, ctl)
    ctl.inbox.append(answer(w, C.REJECT, code=RejectReason.LENGTH, peer=0, length=99))
    with pytest.raises(CallRejected) as e:
        w.poll(0.1)
    assert str(e.value) == (
        "job 3 call 0 rejected by the PS: this worker has 59 values, worker 0 has 99"
    )
    assert (e.value.job, e.value.call, e.value.reason, e.value.peer, e.value.shard) == (
        3, 0, "length", 0, 0,
    )  # fmt: skip
    assert w.poll(0.2) is None and rec.sent == [] and not w.done
    w.begin(tensor(1))
    w.poll(0.3)
    assert ctl.sent[-1][0].call == 1


def test_an_unknown_job_is_taken_unauthenticated_only_from_a_ps_without_a_session() -> None:
    w, _, ctl = agreed_worker()
    w.begin(tensor(2))
    w.poll(0.0)
    unknown = answer(w, C.REJECT, code=RejectReason.UNKNOWN_JOB, peer=wire.NO_PEER)
    unsigned = payload.encode_control(payload.decode_control(unknown[0], wire.CONTROL_BYTES))[:-8]
    ctl.inbox.append((unsigned + bytes(8), PS))
    with pytest.raises(CallRejected) as e:
        w.poll(0.1)
    assert (
        str(e.value) == "job 3 call 0 rejected by the PS: the PS at 10.0.0.9:58785 serves no job 3"
    )
    w.begin(tensor(2))
    greeted(w, ctl, 0.2)
    ctl.inbox.append((unsigned[:12] + bytes([0, 0, 0, 1]) + unsigned[16:] + bytes(8), PS))
    w.poll(0.3)
    assert w.counters.dropped[HostDrop.AUTH] == 1
    assert w.cur is not None and w.cur.phase == ANNOUNCING


def test_a_key_the_ps_can_not_authenticate_is_named() -> None:
    w, _, ctl = agreed_worker()
    w.begin(tensor(2))
    w.poll(0.0)
    reject = payload.decode_control(
        answer(w, C.REJECT, code=RejectReason.KEY)[0], wire.CONTROL_BYTES
    )
    ctl.inbox.append((payload.encode_control(dataclasses.replace(reject, mac=0)), PS))
    with pytest.raises(CallRejected) as e:
        w.poll(0.1)
    assert str(e.value) == (
        "job 3 call 0 rejected by the PS: the PS at 10.0.0.9:58785 can not authenticate this "
        "worker: its key is not job 3's"
    )


def test_alive_while_streaming_and_when_a_chunk_times_out() -> None:
    w, rec, ctl = agreed_worker(window=2)
    w.begin(tensor(3))
    greeted(w, ctl)
    ctl.inbox.append(answer(w))
    w.poll(0.0)
    calls(ctl)
    assert w.poll(0.25) == 0.5, "chunks 0 and 1 time out: ALIVE at once"
    assert calls(ctl) == [(C.ALIVE, 0, SESSION, 3)]
    assert w.poll(0.5) == 0.75 and calls(ctl) == [(C.ALIVE, 0, SESSION, 4)]
    assert w.poll(0.75) == 1.0 and calls(ctl) == [], "the RTO doubled: nothing timed out"
    assert w.poll(1.0) == 1.5 and calls(ctl) == [(C.ALIVE, 0, SESSION, 5)]
    rec.inbox.extend(result(s, [0] * K) for s in range(3))
    w.poll(0.8)
    assert w.done and w.poll(5.0) is None and ctl.sent == []


def test_a_ps_restart_mid_call_holds_its_chunks_until_it_agreed_the_call_again() -> None:
    """The PS's CHALLENGE names a new session: the worker RESUMEs the call,
    sends that PS nothing meanwhile, and resends what it lacks after the GO."""
    w, rec, ctl = agreed_worker()
    w.begin(tensor(3))
    greeted(w, ctl)
    ctl.inbox.append(answer(w))
    w.poll(0.0)
    rec.inbox.append(result(0, [0] * K))
    w.poll(0.1)
    sent(rec)
    calls(ctl)
    ctl.inbox.append(answer(w, C.CHALLENGE, session=SESSION + 7))
    w.poll(0.2)
    assert calls(ctl) == [(C.RESUME, 0, SESSION + 7, 3)]
    w.poll(1.0)
    assert sent(rec) == [], "chunks 1 and 2 wait for the new GO"
    ctl.inbox.append(answer(w, session=SESSION + 7))
    w.poll(1.1)
    assert sent(rec) == [(T.CONTRIB, 1, Flag.RETX), (T.CONTRIB, 2, Flag.RETX)]
    rec.inbox.extend(result(s, [0] * K) for s in (1, 2))
    w.poll(1.2)
    assert w.done


def test_a_call_that_times_out_after_a_ps_restart_names_it() -> None:
    reports: dict[int, Report] = {0: (ReportKind.NOTHING_HELD, 0b11, 0, 0)}
    w, _, _ = ticking_worker({0}, reports, shards=1, restart_at=0.3)
    with pytest.raises(AllreduceTimeout) as e:
        w.allreduce(tensor(2), timeout=1.0)
    assert str(e.value) == (
        "job 3 call 0: no sum after 1 s (2 of 2 chunks without a sum; the PS restarted during "
        "the call); missing workers unknown (the PS holds no partial sum of the call)"
    )


def test_a_duplicate_found_mid_call_fails_it() -> None:
    w, _, ctl = agreed_worker()
    w.begin(tensor(2))
    greeted(w, ctl)
    ctl.inbox.append(answer(w))
    w.poll(0.0)
    ctl.inbox.append(answer(w, C.REJECT, code=RejectReason.DUPLICATE, peer=0))
    with pytest.raises(CallRejected) as e:
        w.poll(0.1)
    assert str(e.value) == "job 3 call 0 rejected by the PS: worker 0 runs in two processes"
    assert e.value.reason == "duplicate"


def test_leave_says_bye_to_the_ps_hosts_it_spoke_to() -> None:
    w, _, ctl = agreed_worker(shards=2)
    w.begin(tensor(2))
    w.poll(0.0)
    ctl.inbox.append(answer(w, C.CHALLENGE, 1))
    w.poll(0.0)
    ctl.sent.clear()
    w.leave()
    assert [(m.ctype, m.session, to) for m, to in ctl.sent] == [
        (C.BYE, SESSION + 1, ("10.0.0.10", wire.CONTROL_PORT))
    ]


def test_a_float_sum_the_worker_did_not_ask_for_is_dropped() -> None:
    w, rec = make()
    w.begin(tensor(1))
    w.poll(0.0)
    rec.inbox.append(result(0, [0] * K, T.PS_RESULT, Flag.FLOAT))
    w.poll(0.1)
    assert not w.done and w.counters.dropped[HostDrop.UNASKED] == 1


def test_a_forged_overflow_does_not_wedge_a_chunk() -> None:
    """The worker asks for float recovery, but still takes the exact sum."""
    w, rec = make(window=2)
    x = tensor(2)
    w.begin(x)
    w.poll(0.0)
    q = quant.quantise(x, 1.0, w.scale).values.astype(np.int64)
    rec.inbox.append(result(0, [0] * K, T.PS_RESULT, Flag.OVERFLOW))
    w.poll(0.1)
    assert sent(rec) == [(T.CONTRIB, 0, 0), (T.CONTRIB, 1, 0), (T.FLOAT, 0, 0)]
    rec.inbox.extend([result(0, q[0] * 2), result(1, q[1] * 2)])
    w.poll(0.2)
    assert w.done
    assert np.array_equal(w.result(), quant.dequantise(q * 2, w.scale).ravel()[: x.size])


class Ticking(Recorder):
    """A transport on a virtual clock: waiting advances it (by at least a
    nanosecond, so that halves of a wait always get there), and datagrams
    scheduled for a time arrive once it has passed."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.due: list[tuple[float, bytes]] = []

    def wait(self, timeout: float) -> None:
        self.now += max(timeout, 1e-9)
        if self.due and self.due[0][0] < self.now:
            self.now = self.due[0][0]
        while self.due and self.due[0][0] <= self.now:
            self.inbox.append(self.due.pop(0)[1])


def test_linger_lasts_while_peers_pull() -> None:
    t = Ticking()
    w = Worker(3, 1, 2, (PS,), t, window=4, rto=1.0, clock=lambda: t.now)
    x = tensor(2)
    w.begin(x)
    w.poll(0.0)
    t.inbox.extend(result(s, [0] * K) for s in range(2))
    w.poll(0.0)
    assert w.done
    t.due = [(0.75, pkt(T.PULL, 3, 0, 0b01, [0] * K)), (1.5, pkt(T.PULL, 3, 1, 0b01, [0] * K))]
    w.linger(1.0)
    assert t.now == 2.5 and w.counters.pulls_answered == 2
    t.due = [(t.now + 0.5 * k, pkt(T.PULL, 3, 1, 0b01, [0] * K)) for k in range(1, 100)]
    start = t.now
    w.linger(1.0, limit=5.0)
    assert t.now == start + 5.0


# -- several PS hosts per job -------------------------------------------------


@given(st.sampled_from([1, 2, 4, 8]), st.integers(1, 9), st.integers(1, 9))
def test_each_chunk_goes_to_its_shards_ps(shards: int, first: int, second: int) -> None:
    """Chunk ``seq`` goes to the PS ``seq % shards``, across calls (whose
    first seq is where the last ended) and when resent as FLOAT."""
    pses = tuple((f"10.0.0.{10 + s}", wire.UDP_PORT) for s in range(shards))
    rec = Recorder()
    w = Worker(3, 1, 2, pses, rec, window=16, rto=1.0)
    x = tensor(first)
    w.begin(x)
    w.poll(0.0)
    rec.inbox.extend(result(seq, [0] * K) for seq in range(first))
    w.poll(0.1)
    y = tensor(second, seed=1)
    y[0] = 2.0
    w.begin(y)
    w.poll(0.2)
    rec.inbox.append(result(first, [0] * K, flags=Flag.OVERFLOW))
    w.poll(0.3)
    got = [(h.ptype, h.seq, to) for h, _, to in rec.sent]
    want = [(T.CONTRIB, seq, pses[seq % shards]) for seq in range(first + second)]
    assert got == [*want, (T.FLOAT, first, pses[first % shards])]


def test_a_call_streams_once_every_shards_ps_said_go() -> None:
    w, rec, ctl = agreed_worker(shards=2)
    w.begin(tensor(3))
    greeted(w, ctl, shards=2)
    control = [("10.0.0.9", wire.CONTROL_PORT), ("10.0.0.10", wire.CONTROL_PORT)]
    assert w.agent is not None
    assert [(m.ctype, m.counter, m.session, to) for m, to in ctl.sent] == [
        (C.CALL, 2, 0, control[0]), (C.CALL, 3, 0, control[1]),
        (C.CALL, 4, SESSION, control[0]), (C.CALL, 5, SESSION + 1, control[1]),
    ]  # fmt: skip
    ctl.sent.clear()
    ctl.inbox.append(answer(w, shard=1))
    w.poll(0.1)
    assert w.cur is not None and (w.cur.phase, w.cur.go) == (ANNOUNCING, 0b10)
    assert w.poll(0.25) == 0.75
    assert [(m.ctype, to) for m, to in ctl.sent] == [(C.CALL, control[0])]
    ctl.inbox.extend([answer(w, shard=1), answer(w, shard=0)])
    w.poll(0.3)
    assert w.cur.phase == STREAMING
    assert [(h.seq, to) for h, _, to in rec.sent] == [(0, PS2[0]), (1, PS2[1]), (2, PS2[0])]
    assert w.counters.calls_sent == 5
    assert {r: n for r, n in w.counters.dropped.items() if n} == {}


def test_a_reject_names_the_shard_whose_ps_sent_it() -> None:
    w, rec, ctl = agreed_worker(shards=2)
    w.begin(tensor(2))
    greeted(w, ctl, shards=2)
    ctl.inbox.append(answer(w, shard=0))
    ctl.inbox.append(
        answer(w, C.REJECT, shard=1, code=RejectReason.MASK, peer=wire.NO_PEER, mask=7)
    )
    with pytest.raises(CallRejected) as e:
        w.poll(0.1)
    assert str(e.value) == (
        "job 3 call 0 rejected by PS shard 1 of 2: this worker has mask 0x3, the PS's job 0x7"
    )
    assert (e.value.reason, e.value.peer, e.value.shard) == ("mask", None, 1)
    assert rec.sent == []


Report = tuple[int, ...]
"""What a PS reports: kind, mask, missing, partials and, for STOPPED, base
(said BYE), chunks (never heard from), length (milliseconds silent) and
offset (not stopped, missed by the partial sums)."""


class Answering(Mailbox):
    """A worker's control transport to PS shards that answer at once: a
    CHALLENGE to a message of another session, GO to a CALL from the shards
    in ``go`` (and to every RESUME), ``reports[shard]`` (kind, announced,
    missing, partials) to a STATUS; from ``restart_at`` on (on ``t``'s
    clock), shard 0's PS has a new session."""

    def __init__(
        self,
        t: Ticking,
        go: set[int],
        reports: dict[int, Report],
        restart_at: float = float("inf"),
    ) -> None:
        super().__init__()
        self.t, self.go, self.reports, self.restart_at = t, go, reports, restart_at

    def send(self, data: Bytes, to: Addr) -> None:
        super().send(data, to)
        m = self.sent[-1][0]
        shard = [ps[0] for ps in PS2].index(to[0])
        session = SESSION + shard + (7 if shard == 0 and self.t.now >= self.restart_at else 0)
        reply = dataclasses.replace(m, session=session)
        if m.session != session:
            reply = dataclasses.replace(reply, ctype=C.CHALLENGE)
        elif m.ctype in (C.CALL, C.RESUME) and (shard in self.go or m.ctype == C.RESUME):
            reply = dataclasses.replace(reply, ctype=C.GO)
        elif m.ctype == C.STATUS and shard in self.reports:
            kind, mask, missing, partials, *more = self.reports[shard]
            base, chunks, length, lacking = (*more, 0, 0, 0, 0)[:4]
            reply = dataclasses.replace(
                reply, ctype=C.REPORT, code=kind, mask=mask, missing=missing, partials=partials,
                base=base, chunks=chunks, length=length, offset=lacking,
            )  # fmt: skip
        else:
            return
        self.inbox.append((auth.seal(reply, KEY), to))

    def wait(self, timeout: float) -> None:
        self.t.wait(timeout)


def ticking_worker(
    go: set[int], reports: dict[int, Report], shards: int = 2, **kw: float
) -> tuple[Worker, Ticking, Answering]:
    t = Ticking()
    ctl = Answering(t, go, reports, **kw)
    w = Worker(
        3, 1, 2, PS2[:shards], t, window=4, rto=0.25, clock=lambda: t.now, control=ctl, key=KEY
    )
    return w, t, ctl


def test_a_timeout_waiting_for_a_go_names_the_silent_shard() -> None:
    w, _, ctl = ticking_worker({0}, {1: (ReportKind.NOT_ANNOUNCED, 0b10, 0b01, 0)})
    with pytest.raises(AllreduceTimeout) as e:
        w.allreduce(tensor(3), timeout=1.0)
    assert str(e.value) == (
        "job 3 call 0: no sum after 1 s (waiting for the GO of PS shard 1 of 2); "
        "PS shard 1: workers [0] have not started it (started: [1])"
    )
    assert e.value.missing == [0]
    assert [to[0] for m, to in ctl.sent if m.ctype == C.STATUS] == ["10.0.0.10"]


def test_a_timeout_names_the_shards_of_the_chunks_without_a_sum() -> None:
    w, t, _ = ticking_worker({0, 1}, {1: (ReportKind.PARTIALS, 0b11, 0b01, 2)})
    t.due = [(0.6, result(0, [0] * K)), (0.7, result(2, [0] * K))]
    with pytest.raises(AllreduceTimeout) as e:
        w.allreduce(tensor(4), timeout=1.0)
    assert str(e.value) == (
        "job 3 call 0: no sum after 1 s (2 of 4 chunks without a sum, at PS shard 1 of 2); "
        "PS shard 1: the PS's partial sums of 2 chunks miss workers [0]"
    )
    assert e.value.missing == [0]


def test_a_timeout_names_the_workers_gone_silent() -> None:
    w, _, _ = ticking_worker({0}, {0: (ReportKind.STOPPED, 0b10, 0b01, 0, 0, 0, 4321)}, shards=1)
    with pytest.raises(AllreduceTimeout) as e:
        w.allreduce(tensor(2), timeout=1.0)
    assert str(e.value) == (
        "job 3 call 0: no sum after 1 s (2 of 2 chunks without a sum); worker 0 silent for 4.3 s"
    )
    assert (e.value.missing, e.value.left) == ([0], [])


def test_a_timeout_waiting_for_a_go_names_the_workers_that_said_bye() -> None:
    """Issue 37: a peer that left is named as gone, not as not started."""
    report = (ReportKind.NOT_ANNOUNCED, 0b0010, 0b1101, 0, 0b0100)
    w, _, _ = ticking_worker(set(), {0: report}, shards=1)
    with pytest.raises(AllreduceTimeout) as e:
        w.allreduce(tensor(2), timeout=1.0)
    assert str(e.value) == (
        "job 3 call 0: no sum after 1 s (waiting for the PS's GO); "
        "workers [0, 3] have not started it, worker 2 said BYE (started: [1])"
    )
    assert (e.value.missing, e.value.left) == ([0, 3], [2])


@pytest.mark.parametrize(
    ("missing", "left", "unheard", "ms", "why", "named"),
    [
        (0b1101, 0b0001, 0, 3050, "workers 2, 3 silent for 3.0 s or more, worker 0 said BYE",
         ([2, 3], [0])),
        (0b0101, 0b0101, 0, 0, "workers 0, 2 said BYE", ([], [0, 2])),
        (0b1001, 0, 0b1000, 0, "worker 0 silent for over 3 s, worker 3 never heard from",
         ([0, 3], [])),
        (0b0011, 0b0001, 0b0010, 0, "worker 0 said BYE, worker 1 never heard from", ([1], [0])),
    ],
)  # fmt: skip
def test_a_timeout_names_each_worker_that_stopped_as_what_it_is(
    missing: int, left: int, unheard: int, ms: int, why: str, named: tuple[list[int], list[int]]
) -> None:
    """Silent (for how long), said BYE, or never heard from (issue 37: a
    peer that gave up and left was named silent)."""
    report = (ReportKind.STOPPED, 0b100, missing, 0, left, unheard, ms)
    w, _, _ = ticking_worker({0}, {0: report}, shards=1)
    with pytest.raises(AllreduceTimeout) as e:
        w.allreduce(tensor(2), timeout=1.0)
    assert str(e.value) == f"job 3 call 0: no sum after 1 s (2 of 2 chunks without a sum); {why}"
    assert (e.value.missing, e.value.left) == named


def test_a_timeout_does_not_name_the_worker_itself_as_not_started() -> None:
    """Issue 37: every CALL of worker 1 was lost: the PS's report names it
    among those that have not started; the error says the PS has not heard
    its CALL and names only its peers as missing."""
    report = (ReportKind.NOT_ANNOUNCED, 0b0001, 0b1110, 0)
    w, _, _ = ticking_worker(set(), {0: report}, shards=1)
    with pytest.raises(AllreduceTimeout) as e:
        w.allreduce(tensor(2), timeout=1.0)
    assert str(e.value) == (
        "job 3 call 0: no sum after 1 s (waiting for the PS's GO); workers [2, 3] have not "
        "started it, the PS has not heard this worker's CALL (started: [0])"
    )
    assert (e.value.missing, e.value.left) == ([2, 3], [])


def test_a_timeout_names_the_worker_the_partial_sums_miss_beside_one_that_left() -> None:
    """Issue 37, soak (2): worker 2 said BYE while worker 0, killed less
    than the TTL ago, is not yet silent: the PS names both."""
    report = (ReportKind.STOPPED, 0b0010, 0b0101, 2, 0b0100, 0, 0, 0b0001)
    w, _, _ = ticking_worker({0}, {0: report}, shards=1)
    with pytest.raises(AllreduceTimeout) as e:
        w.allreduce(tensor(2), timeout=1.0)
    assert str(e.value) == (
        "job 3 call 0: no sum after 1 s (2 of 2 chunks without a sum); "
        "worker 2 said BYE, the PS's partial sums of 2 chunks miss worker 0"
    )
    assert (e.value.missing, e.value.left) == ([0], [2])
