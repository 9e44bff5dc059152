"""Call agreement between a job's workers and its PS, on the PS's side."""

from __future__ import annotations

from collections import deque

from esa import wire
from esa.job import Workers
from esa.wire import ControlType, Flag, RejectReason, ReportKind
from hosts import codec, quant
from hosts.agreement import IDLE_FORGET, PENDING_TTL
from hosts.drops import Drop
from hosts.ps import ParameterServer
from hosts.transport import Addr, Bytes
from tests.test_hosts_ps import SWITCH, Recorder, pkt, vec

T = wire.PacketType
C = ControlType
BOUND = 1.0


def addr(i: int) -> Addr:
    return ("10.0.1.1", 40000 + i)


class Mailbox:
    """A control transport that keeps what is sent and serves queued messages."""

    def __init__(self) -> None:
        self.sent: list[tuple[codec.Control, Addr]] = []
        self.inbox: deque[tuple[bytes, Addr]] = deque()

    def send(self, data: Bytes, to: Addr) -> None:
        self.sent.append((codec.decode_control(bytes(data), len(data)), to))

    def recv_into(self, buf: bytearray) -> tuple[int, Addr] | None:
        if not self.inbox:
            return None
        data, src = self.inbox.popleft()
        n = min(len(data), len(buf))
        buf[:n] = data[:n]
        return n, src

    def wait(self, timeout: float) -> None:
        raise AssertionError("not used")

    def take(self) -> list[tuple[int, int, int, int, Addr]]:
        """(type, code, worker, peer, to) of each message sent, then forget them."""
        out = [(m.ctype, m.code, m.worker, m.peer, to) for m, to in self.sent]
        self.sent.clear()
        return out


def call(
    worker: int, number: int = 0, length: int = 100, base: int = 0, nonce: int | None = None,
    fan_in: int = 2, mask: int = 0b11, bound: float = BOUND, job: int = 1,
) -> codec.Control:  # fmt: skip
    digest = wire.config_digest(fan_in, mask, bound, length, "float32")
    return codec.Control(
        C.CALL, 0, job, worker, 0, 1000 + worker if nonce is None else nonce, number, base,
        quant.chunks(length), length, fan_in, mask, 0, 0, digest,
    )  # fmt: skip


def status(worker: int, number: int, nonce: int | None = None) -> codec.Control:
    nonce = 1000 + worker if nonce is None else nonce
    return codec.Control(C.STATUS, 0, 1, worker, 0, nonce, number)


def server(fan_in: int = 2) -> tuple[ParameterServer, Recorder, Mailbox]:
    data, ctl = Recorder(), Mailbox()
    ps = ParameterServer(data, SWITCH, {1: Workers.of(fan_in)}, stall=1.0, control=ctl)
    return ps, data, ctl


def send(
    ps: ParameterServer, ctl: Mailbox, *msgs: tuple[codec.Control, int], now: float = 0.0
) -> None:
    ctl.inbox.extend((codec.encode_control(m), addr(src)) for m, src in msgs)
    ps.poll(now)


def test_go_only_once_every_worker_announced_the_same_call() -> None:
    ps, _, ctl = server(fan_in=3)
    send(ps, ctl, (call(0, fan_in=3, mask=7), 0), (call(2, fan_in=3, mask=7), 2))
    assert ctl.take() == []
    send(ps, ctl, (call(1, fan_in=3, mask=7), 1))
    assert ctl.take() == [(C.GO, 0, i, 0, addr(i)) for i in range(3)]
    send(ps, ctl, (call(2, fan_in=3, mask=7), 7))
    [(go, to)] = ctl.sent
    assert (go.ctype, go.worker, go.nonce, go.call, go.base, go.chunks, go.length) == (
        C.GO, 2, 1002, 0, 0, 4, 100,
    )  # fmt: skip
    assert to == addr(7), "answers go where the CALL came from"
    assert ps.counters.calls_agreed == 1


def test_mismatches_are_rejected_naming_the_worker_that_differs() -> None:
    """Both workers fail: the second at once, the first when it resends."""
    cases = [
        (call(1, length=101), RejectReason.LENGTH),
        (call(1, bound=2.0), RejectReason.CONFIG),
        (call(1, base=7), RejectReason.BASE),
    ]
    for second, reason in cases:
        ps, _, ctl = server()
        send(ps, ctl, (call(0), 0), (second, 1))
        send(ps, ctl, (call(0), 0))
        assert ctl.take() == [(C.REJECT, reason, 1, 0, addr(1)), (C.REJECT, reason, 0, 1, addr(0))]
        assert ps.counters.calls_agreed == 0


def test_reject_carries_the_peers_announcement() -> None:
    ps, _, ctl = server()
    send(ps, ctl, (call(0, length=64), 0), (call(1, length=100), 1))
    [(m, _)] = ctl.sent
    assert (m.code, m.peer, m.length, m.chunks, m.nonce) == (RejectReason.LENGTH, 0, 64, 2, 1001)


def test_job_table_mismatches_are_rejected_without_a_peer() -> None:
    ps, _, ctl = server()
    send(
        ps, ctl, (call(2, fan_in=3, mask=7), 0), (call(0, fan_in=3, mask=7), 0),
        (call(0, fan_in=2, mask=0b101), 0), (call(0, job=9), 0),
    )  # fmt: skip
    assert ctl.take() == [
        (C.REJECT, RejectReason.WORKER, 2, wire.NO_PEER, addr(0)),
        (C.REJECT, RejectReason.FAN_IN, 0, wire.NO_PEER, addr(0)),
        (C.REJECT, RejectReason.MASK, 0, wire.NO_PEER, addr(0)),
        (C.REJECT, RejectReason.UNKNOWN_JOB, 0, wire.NO_PEER, addr(0)),
    ]
    assert ps.books[1].pending == {}


def test_a_worker_index_announced_by_two_processes_fails_both() -> None:
    ps, _, ctl = server(fan_in=3)
    send(ps, ctl, (call(0, fan_in=3, mask=7), 0), (call(0, fan_in=3, mask=7, nonce=5), 9))
    send(ps, ctl, (call(0, fan_in=3, mask=7), 0), (call(1, fan_in=3, mask=7), 1))
    dup = RejectReason.DUPLICATE
    assert ctl.take() == [(C.REJECT, dup, 0, 0, addr(9)), (C.REJECT, dup, 0, wire.NO_PEER, addr(0))]


def test_a_second_process_for_an_agreed_index_is_rejected_until_the_job_idles() -> None:
    ps, _, ctl = server()
    send(ps, ctl, (call(0), 0), (call(1), 1))
    ctl.take()
    send(ps, ctl, (call(0, nonce=77), 5), now=IDLE_FORGET - 1)
    assert ctl.take() == [(C.REJECT, RejectReason.DUPLICATE, 0, 0, addr(5))]
    send(ps, ctl, (call(0, nonce=77), 5), (call(1, nonce=78), 6), now=2 * IDLE_FORGET)
    assert ctl.take() == [(C.GO, 0, 0, 0, addr(5)), (C.GO, 0, 1, 0, addr(6))]
    assert ps.counters.calls_agreed == 2


def test_a_restarted_worker_is_told_its_peers_call() -> None:
    ps, _, ctl = server()
    for n in range(3):
        send(ps, ctl, (call(0, n, base=4 * n), 0), (call(1, n, base=4 * n), 1))
    send(ps, ctl, (call(0, 3, base=12), 0))
    ctl.take()
    send(ps, ctl, (call(1, nonce=55), 1))
    [(m, _)] = ctl.sent
    assert (m.ctype, m.code, m.peer, m.call, m.base) == (C.REJECT, RejectReason.CALL, 0, 3, 12)
    assert ps.books[1].pending.keys() == {0}


def test_a_restarted_worker_of_a_recent_call_is_rejected_as_a_duplicate() -> None:
    ps, _, ctl = server()
    send(ps, ctl, (call(0), 0), (call(1), 1))
    ctl.take()
    send(ps, ctl, (call(1, nonce=55), 1))
    assert ctl.take() == [(C.REJECT, RejectReason.DUPLICATE, 1, 1, addr(1))]


def test_announcements_expire() -> None:
    """A dead worker's announcement stops holding its index."""
    ps, _, ctl = server()
    send(ps, ctl, (call(0), 0), now=0.0)
    send(ps, ctl, (call(0, nonce=42), 3), now=PENDING_TTL)
    send(ps, ctl, (call(1), 1), now=PENDING_TTL)
    assert ctl.take() == [(C.GO, 0, 0, 0, addr(3)), (C.GO, 0, 1, 0, addr(1))]


def test_a_delayed_copy_of_a_past_call_is_dropped() -> None:
    ps, _, ctl = server()
    for n, base in ((0, 0), (1, 4), (2, 8)):
        send(ps, ctl, (call(0, n, base=base), 0), (call(1, n, base=base), 1))
    ctl.take()
    send(ps, ctl, (call(0, 0), 0))
    assert ctl.take() == [] and ps.counters.dropped[Drop.STALE] == 1


def test_data_outside_the_agreed_calls_is_dropped() -> None:
    ps, data, ctl = server()
    send(ps, ctl, (call(0, length=64), 0), (call(1, length=64), 1))
    data.inbox.extend(pkt(T.FALLBACK, 1, seq, 0b01, vec(0)) for seq in (0, 1, 2, 1 << 31))
    send(ps, ctl)
    assert sorted(ps.partials) == [(1, 0), (1, 1)]
    assert ps.counters.dropped[Drop.SEQ] == 2
    send(ps, ctl, (call(0, 1, length=64, base=2), 0), (call(1, 1, length=64, base=2), 1))
    send(ps, ctl, (call(0, 2, length=64, base=4), 0), (call(1, 2, length=64, base=4), 1))
    data.inbox.append(pkt(T.FALLBACK, 1, 1, 0b10, vec(0)))
    send(ps, ctl)
    assert ps.counters.dropped[Drop.SEQ] == 3, "two agreed calls are kept: 1 and 2"


def test_a_new_epoch_forgets_the_jobs_old_chunks() -> None:
    """A job restarted against a running PS reuses sequence numbers: the old
    sums in the cache must not answer the new calls."""
    ps, data, ctl = server()
    send(ps, ctl, (call(0, length=32), 0), (call(1, length=32), 1))
    data.inbox.extend([pkt(T.FALLBACK, 1, 0, 1, vec(1)), pkt(T.FALLBACK, 1, 0, 2, vec(2))])
    send(ps, ctl)
    assert list(ps.done) == [(1, 0)]
    later = 2 * IDLE_FORGET
    send(ps, ctl, (call(0, length=32, nonce=9), 0), (call(1, length=32, nonce=8), 1), now=later)
    assert not ps.done
    data.inbox.append(pkt(T.FALLBACK, 1, 0, 1, vec(5), flags=Flag.RETX))
    send(ps, ctl, now=later)
    assert [h.ptype for h, _, _ in data.sent] == [T.PS_RESULT, T.PULL], "no answer from the cache"
    assert ps.partials[1, 0].bitmap == 1


def test_status_reports_who_is_missing() -> None:
    ps, data, ctl = server(fan_in=3)
    c3 = {"fan_in": 3, "mask": 7, "length": 96}
    send(ps, ctl, (call(0, **c3), 0), (status(0, 0), 0))
    [(r, _)] = ctl.sent[-1:]
    assert (r.ctype, r.code, r.mask, r.missing) == (C.REPORT, ReportKind.NOT_ANNOUNCED, 1, 0b110)
    send(ps, ctl, (call(1, **c3), 1), (call(2, **c3), 2), (status(1, 0), 1))
    assert ctl.sent[-1][0].code == ReportKind.NOTHING_HELD
    data.inbox.extend([pkt(T.FALLBACK, 1, 0, 0b001, vec(0)), pkt(T.PARTIAL, 1, 2, 0b011, vec(0))])
    send(ps, ctl, (status(2, 0), 2))
    r, to = ctl.sent[-1]
    assert (r.code, r.worker, r.nonce, r.missing, r.partials, to) == (
        ReportKind.PARTIALS, 2, 1002, 0b110, 2, addr(2),
    )  # fmt: skip
    send(ps, ctl, (status(2, 5), 2))
    assert ctl.sent[-1][0].code == ReportKind.UNKNOWN_CALL
    sent = len(ctl.sent)
    send(ps, ctl, (status(2, 0, nonce=1), 2))
    assert len(ctl.sent) == sent and ps.counters.dropped[Drop.STRANGER] == 1


def test_malformed_control_messages_are_dropped() -> None:
    ps, _, ctl = server()
    good = codec.encode_control(call(0))
    bad_magic = b"\0\0" + good[2:]
    bad_type = good[:2] + b"\x63" + good[3:]
    go = codec.encode_control(codec.Control(C.GO, 0, 1, 0))
    bad_chunks = codec.encode_control(codec.Control(C.CALL, 0, 1, 0, length=100, chunks=3))
    for data in (b"", good[:-1], good + b"\0", bad_magic, bad_type, go, bad_chunks):
        ctl.inbox.append((data, addr(0)))
    ps.poll(0.0)
    assert ps.counters.dropped[Drop.CONTROL] == 7 and ctl.sent == []
    assert ps.counters.control_received == 7


def test_a_forged_call_never_holds_up_or_evicts_the_jobs_workers() -> None:
    ps, _, ctl = server()
    send(ps, ctl, (call(0), 0), (call(1), 1))
    ctl.take()
    send(ps, ctl, (call(0, 1, base=4, nonce=66), 9), (call(1, 1, base=4, length=99, nonce=67), 9))
    assert ctl.take() == [(C.REJECT, RejectReason.LENGTH, 1, 0, addr(9))]
    send(ps, ctl, (call(0, 1, base=4), 0), (call(1, 1, base=4), 1))
    assert ctl.take() == [(C.GO, 0, 0, 0, addr(0)), (C.GO, 0, 1, 0, addr(1))]
    send(ps, ctl, (call(0, 1, base=4, nonce=66), 9))
    assert ctl.take() == [(C.REJECT, RejectReason.DUPLICATE, 0, 0, addr(9))]
