"""Call agreement between a job's workers and its PS, on the PS's side
(docs/agreement.md): announcements, epochs, processes, restarts, and the
authenticator that keeps everyone else out."""

from __future__ import annotations

import dataclasses
from collections import deque

from hypothesis import given
from hypothesis import strategies as st

from esa import wire
from esa.job import Workers
from esa.wire import LIVE_TTL, ControlType, Flag, RejectReason, ReportKind
from hosts.agreement import auth
from hosts.agreement.desk import GO_COPIES
from hosts.net import payload, quant
from hosts.net.drops import HostDrop
from hosts.net.transport import Addr, Bytes
from hosts.ps.parameter_server import ParameterServer
from tests import vworld
from tests.test_hosts_ps import SWITCH, Recorder, pkt, vec

T = wire.PacketType
C = ControlType
R = RejectReason
KEY = bytes(range(32))
SESSION = 0x5E55
NO = wire.NO_PEER


def addr(i: int) -> Addr:
    return ("10.0.1.1", 40000 + i)


class Mailbox:
    """A control transport that keeps what is sent and serves queued messages."""

    def __init__(self) -> None:
        self.sent: list[tuple[payload.Control, Addr]] = []
        self.raw: list[bytes] = []
        self.inbox: deque[tuple[bytes, Addr]] = deque()

    def send(self, data: Bytes, to: Addr) -> None:
        self.raw.append(bytes(data))
        self.sent.append((payload.decode_control(bytes(data), len(data)), to))

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


class Proc:
    """A worker process on the control channel: its index, nonce and message numbers."""

    def __init__(
        self, worker: int, nonce: int | None = None, fan_in: int = 2, mask: int = 0b11,
        session: int = SESSION, key: bytes = KEY, job: int = 1,
    ) -> None:  # fmt: skip
        self.worker, self.nonce = worker, 1000 + worker if nonce is None else nonce
        self.fan_in, self.mask, self.session, self.key, self.job = fan_in, mask, session, key, job
        self.counter = 0

    def msg(
        self, ctype: int, number: int = 0, length: int = 100, base: int = 0, bound: float = 1.0,
        **change: int,
    ) -> bytes:  # fmt: skip
        self.counter += 1
        digest = wire.config_digest(self.fan_in, self.mask, bound, length, "float32")
        m = payload.Control(
            ctype, 0, self.job, self.worker, 0, self.nonce, number, base, quant.chunks(length),
            length, self.fan_in, self.mask, 0, 0, digest, 0, self.session, self.counter,
        )  # fmt: skip
        return auth.seal(dataclasses.replace(m, **change), self.key)

    def call(self, number: int = 0, **kw: float) -> bytes:
        return self.msg(C.CALL, number, **kw)  # type: ignore[arg-type]


def server(fan_in: int = 2) -> tuple[ParameterServer, Recorder, Mailbox]:
    data, ctl = Recorder(), Mailbox()
    ps = ParameterServer(
        data, SWITCH, {1: Workers.of(fan_in)}, stall=1.0, control=ctl, keys={1: KEY},
        session=SESSION,
    )  # fmt: skip
    return ps, data, ctl


def send(ps: ParameterServer, ctl: Mailbox, *msgs: tuple[bytes, int], now: float = 0.0) -> None:
    ctl.inbox.extend((m, addr(src)) for m, src in msgs)
    ps.poll(now)


def both(ps: ParameterServer, ctl: Mailbox, n: int, procs: list[Proc], now: float = 0.0) -> None:
    """Every process announces call ``n`` of 4 chunks (base ``4 n``)."""
    send(ps, ctl, *[(p.call(n, base=4 * n), p.worker) for p in procs], now=now)


def offset(ps: ParameterServer) -> int:
    """Where the job's epoch at ``ps`` starts its seqs."""
    return ps.books[1].agreed[-1].offset


def as_sent(
    messages: list[tuple[int, int, int, int, Addr]],
) -> list[tuple[int, int, int, int, Addr]]:
    """``messages`` as the PS sends them: each GO ``GO_COPIES`` times."""
    return [m for m in messages for _ in range(GO_COPIES if m[0] == C.GO else 1)]


def dropped(ps: ParameterServer) -> dict[str, int]:
    return {r: n for r, n in ps.counters.dropped.items() if n}


def test_go_only_once_every_worker_announced_the_same_call() -> None:
    ps, _, ctl = server(fan_in=3)
    w = [Proc(i, fan_in=3, mask=7) for i in range(3)]
    send(ps, ctl, (w[0].call(), 0), (w[2].call(), 2))
    assert ctl.take() == []
    send(ps, ctl, (w[1].call(), 1))
    assert ctl.take() == as_sent([(C.GO, 0, i, 0, addr(i)) for i in range(3)])
    send(ps, ctl, (w[2].call(), 7))
    (go, to), copy = ctl.sent
    assert copy == (go, to) and ctl.raw[-1] == ctl.raw[-2], "the copy is the same datagram"
    assert (go.ctype, go.worker, go.nonce, go.call, go.base, go.chunks, go.length) == (
        C.GO, 2, 1002, 0, 0, 4, 100,
    )  # fmt: skip
    assert (go.session, go.counter, to) == (SESSION, 2, addr(7)), (
        "answers go where the CALL came from"
    )
    assert auth.authentic(ctl.raw[-1], KEY)
    assert ps.counters.calls_agreed == 1 and ps.counters.gos_sent == 4, "a GO, not its copies"


def test_mismatches_are_rejected_naming_the_worker_that_differs() -> None:
    """Both workers fail at once, each told of the other (docs/agreement.md:
    REJECT to both as soon as two announcements differ), and the first again
    if it resends (its REJECT was lost): a second that gave up and left at
    once does not leave the first waiting for its deadline."""
    for change, reason in (({"length": 101}, R.LENGTH), ({"bound": 2.0}, R.CONFIG),
                           ({"base": 7}, R.BASE)):  # fmt: skip
        ps, _, ctl = server()
        w0, w1 = Proc(0), Proc(1)
        send(ps, ctl, (w0.call(), 0), (w1.call(0, **change), 1))
        assert ctl.take() == [(C.REJECT, reason, 1, 0, addr(1)), (C.REJECT, reason, 0, 1, addr(0))]
        send(ps, ctl, (w1.msg(C.BYE), 1), (w0.call(), 0))
        assert ctl.take() == [], "w1 left: nothing differs from w0's call any more"
        ps, _, ctl = server()
        w0, w1 = Proc(0), Proc(1)
        send(ps, ctl, (w0.call(), 0), (w1.call(0, **change), 1), (w0.call(), 0))
        again = [(C.REJECT, reason, 0, 1, addr(0)), (C.REJECT, reason, 1, 0, addr(1))]
        assert ctl.take()[2:] == again
        assert ps.counters.calls_agreed == 0


def test_reject_carries_the_peers_announcement() -> None:
    ps, _, ctl = server()
    send(ps, ctl, (Proc(0).call(length=64), 0), (Proc(1).call(length=100), 1))
    [(m, _), (n, _)] = ctl.sent
    assert (m.code, m.peer, m.length, m.chunks, m.nonce) == (R.LENGTH, 0, 64, 2, 1001)
    assert (n.code, n.peer, n.length, n.chunks, n.nonce) == (R.LENGTH, 1, 100, 4, 1000)


def test_job_table_mismatches_are_rejected_without_a_peer() -> None:
    ps, _, ctl = server()
    send(
        ps, ctl, (Proc(2, fan_in=3, mask=7).call(), 0), (Proc(0, fan_in=3, mask=7).call(), 0),
        (Proc(0, mask=0b101).call(), 0),
    )  # fmt: skip
    assert ctl.take() == [
        (C.REJECT, R.WORKER, 2, NO, addr(0)),
        (C.REJECT, R.FAN_IN, 0, NO, addr(0)),
        (C.REJECT, R.MASK, 0, NO, addr(0)),
    ]
    assert ps.books[1].pending == {} and ps.books[1].roster.procs == {}


def test_an_unknown_job_or_key_is_told_without_an_authenticator() -> None:
    """The PS has no key of job 9, and the CALL of job 1 under another key is
    not the job's: both answers are unsigned REJECTs; nothing is held."""
    ps, _, ctl = server()
    send(ps, ctl, (Proc(0, job=9).call(), 0), (Proc(0, key=bytes(32)).call(), 1))
    assert ctl.take() == [
        (C.REJECT, R.UNKNOWN_JOB, 0, NO, addr(0)),
        (C.REJECT, R.KEY, 0, NO, addr(1)),
    ]
    assert [payload.decode_control(r, len(r)).mac for r in ctl.raw] == [0, 0]
    assert dropped(ps) == {HostDrop.JOB: 1, HostDrop.AUTH: 1}
    assert ps.books[1].snapshot() == server()[0].books[1].snapshot()


def test_a_process_of_another_session_is_challenged() -> None:
    """A worker new to this PS (session 0) or from before a restart gets the
    session, bound to the message it answers; nothing else happens."""
    ps, _, ctl = server()
    w0 = Proc(0, session=0)
    send(ps, ctl, (w0.call(), 0), (w0.call(session=4), 0))
    assert [(m.ctype, m.session, m.counter, m.nonce) for m, _ in ctl.sent] == [
        (C.CHALLENGE, SESSION, 1, 1000), (C.CHALLENGE, SESSION, 2, 1000),
    ]  # fmt: skip
    assert dropped(ps) == {HostDrop.SESSION: 1}, "a first message (session 0) is no drop"
    assert ps.books[1].roster.procs == {} and ps.counters.challenges_sent == 2
    w0.session = SESSION
    send(ps, ctl, (w0.call(), 0), (Proc(1).call(), 1))
    assert [m.ctype for m, _ in ctl.sent[2:]] == [C.GO] * 2 * GO_COPIES


def test_forged_replayed_and_mutated_messages_change_nothing() -> None:
    ps, _, ctl = server()
    w0, w1 = Proc(0), Proc(1)
    first = [w0.call(), w1.call()]
    send(ps, ctl, (first[0], 0), (first[1], 1))
    ctl.take()
    book = ps.books[1]
    before = book.snapshot()
    flipped = bytearray(first[0])
    flipped[20] ^= 1
    stranger = Proc(0, nonce=77, key=bytes(range(1, 33)))
    attacks = [*first, bytes(flipped), stranger.call(), stranger.msg(C.BYE), w0.call(session=9)]
    send(ps, ctl, *[(a, 5) for a in attacks])
    assert book.snapshot() == before
    assert dropped(ps) == {HostDrop.REPLAY: 2, HostDrop.AUTH: 3, HostDrop.SESSION: 1}
    assert ctl.take() == [(C.REJECT, R.KEY, 0, NO, addr(5)), (C.REJECT, R.KEY, 0, NO, addr(5)),
                          (C.CHALLENGE, 0, 0, 0, addr(5))]  # fmt: skip


def test_rejects_and_challenges_are_rate_limited_per_destination() -> None:
    ps, _, ctl = server()
    forger = Proc(0, key=bytes(32))
    send(ps, ctl, *[(forger.call(), 5) for _ in range(50)], now=0.0)
    send(ps, ctl, *[(forger.call(), 6) for _ in range(50)], now=0.0)
    send(ps, ctl, *[(forger.call(), 5) for _ in range(50)], now=1.0)
    assert [to for *_, to in ctl.take()] == [addr(5)] * 4 + [addr(6)] * 4 + [addr(5)] * 2
    assert (ps.counters.rejects_sent, ps.counters.control_suppressed) == (10, 140)


def test_two_live_processes_with_one_index_both_fail_with_their_peers() -> None:
    """The second process waits while the first is alive; the first speaks
    again, and both, and the peer that announced with them, are rejected."""
    ps, _, ctl = server(fan_in=3)
    a, b = Proc(0, fan_in=3, mask=7), Proc(0, nonce=5, fan_in=3, mask=7)
    peer = Proc(1, fan_in=3, mask=7)
    send(ps, ctl, (a.call(), 0), (peer.call(), 1), (b.call(), 9))
    assert ctl.take() == []
    send(ps, ctl, (a.call(), 0), now=0.5)
    dup = R.DUPLICATE
    assert ctl.take() == [(C.REJECT, dup, 0, 0, addr(0)), (C.REJECT, dup, 1, 0, addr(1)),
                          (C.REJECT, dup, 0, 0, addr(9))]  # fmt: skip
    send(ps, ctl, (b.call(), 9), (Proc(2, fan_in=3, mask=7).call(), 2), now=0.6)
    assert ctl.take() == [(C.REJECT, dup, 0, 0, addr(9))]
    assert ps.counters.calls_agreed == 0


def test_a_second_process_fails_a_call_in_progress_at_every_worker() -> None:
    """Worker 0 streams call 0 (it said ALIVE) when another process claims
    index 0: the call fails at worker 0, worker 1 and the newcomer."""
    ps, _, ctl = server()
    a, w1, b = Proc(0), Proc(1), Proc(0, nonce=5)
    both(ps, ctl, 0, [a, w1])
    ctl.take()
    send(ps, ctl, (b.call(), 9), now=1.0)
    send(ps, ctl, (a.msg(C.ALIVE), 0), now=1.2)
    [*fails] = ctl.sent
    assert [(m.ctype, m.code, m.worker, m.peer, m.call, to) for m, to in fails] == [
        (C.REJECT, R.DUPLICATE, 0, 0, 0, addr(0)), (C.REJECT, R.DUPLICATE, 1, 0, 0, addr(1)),
        (C.REJECT, R.DUPLICATE, 0, 0, 0, addr(9)),
    ]  # fmt: skip


def test_a_new_run_is_accepted_once_the_old_processes_said_bye() -> None:
    ps, data, ctl = server()
    old = [Proc(0), Proc(1)]
    both(ps, ctl, 0, old)
    first = offset(ps)
    assert first == wire.epoch_offset(1, {0: 1000, 1: 1001})
    data.inbox.extend([pkt(T.FALLBACK, 1, first, 1, vec(1)), pkt(T.FALLBACK, 1, first, 2, vec(2))])
    send(ps, ctl, *[(p.msg(C.BYE), p.worker) for p in old], now=0.1)
    assert list(ps.done) == [(1, first)]
    ctl.take()
    data.sent.clear()
    new = [Proc(0, nonce=7), Proc(1, nonce=8)]
    both(ps, ctl, 0, new, now=0.2)
    assert ctl.take() == as_sent([(C.GO, 0, 0, 0, addr(0)), (C.GO, 0, 1, 0, addr(1))])
    assert not ps.done, "a new epoch: the old sums do not answer the new calls"
    assert offset(ps) == wire.epoch_offset(1, {0: 7, 1: 8}) != first, "at other seqs"
    assert ctl.raw and payload.decode_control(ctl.raw[-1], wire.CONTROL_BYTES).offset == offset(ps)
    data.inbox.append(pkt(T.FALLBACK, 1, first, 1, vec(5), flags=Flag.RETX))
    send(ps, ctl, now=0.2)
    assert data.sent == [] and dropped(ps) == {HostDrop.SEQ: 1}, "the old epoch's seqs are fenced"


def test_a_killed_processs_index_is_taken_once_it_was_silent_for_the_ttl() -> None:
    """No BYE: the new process waits (no answer) while the old one was heard
    within ``LIVE_TTL``, and takes its index after."""
    ps, _, ctl = server()
    old = [Proc(0), Proc(1)]
    both(ps, ctl, 0, old)
    ctl.take()
    new = [Proc(0, nonce=7), Proc(1, nonce=8)]
    both(ps, ctl, 0, new, now=LIVE_TTL - 0.5)
    assert ctl.take() == []
    both(ps, ctl, 0, new, now=LIVE_TTL + 0.1)
    assert ctl.take() == as_sent([(C.GO, 0, 0, 0, addr(0)), (C.GO, 0, 1, 0, addr(1))])
    assert ps.counters.calls_agreed == 2


def test_a_superseded_process_that_speaks_again_fails_with_the_new_one() -> None:
    ps, _, ctl = server()
    a, b, w1 = Proc(0), Proc(0, nonce=5), Proc(1)
    both(ps, ctl, 0, [a, w1])
    send(ps, ctl, (b.call(1, base=4), 9), now=LIVE_TTL + 1)
    ctl.take()
    send(ps, ctl, (a.call(1, base=4), 0), now=LIVE_TTL + 1.5)
    dup = R.DUPLICATE
    assert ctl.take() == [(C.REJECT, dup, 0, 0, addr(0)), (C.REJECT, dup, 0, 0, addr(9)),
                          (C.REJECT, dup, 1, 0, addr(1))]  # fmt: skip


def test_a_restarted_worker_is_told_its_peers_call() -> None:
    ps, _, ctl = server()
    w0, w1 = Proc(0), Proc(1)
    for n in range(3):
        both(ps, ctl, n, [w0, w1], now=n)
    send(ps, ctl, (w0.call(3, base=12), 0), now=3.0)
    ctl.take()
    send(ps, ctl, (Proc(1, nonce=55).call(), 1), now=5.5)
    [(m, _), (told, to)] = ctl.sent
    assert (m.ctype, m.code, m.peer, m.call, m.base) == (C.REJECT, R.CALL, 0, 3, 12)
    assert (told.ctype, told.code, told.peer, told.call, told.base, to) == (
        C.REJECT, R.CALL, 1, 0, 0, addr(0),
    )  # fmt: skip
    assert ps.books[1].pending.keys() == {0}


def test_a_dead_workers_announcement_expires() -> None:
    ps, _, ctl = server()
    send(ps, ctl, (Proc(0).call(), 0), now=0.0)
    send(ps, ctl, (Proc(0, nonce=42).call(), 3), now=LIVE_TTL)
    send(ps, ctl, (Proc(1).call(), 1), now=LIVE_TTL)
    assert ctl.take() == as_sent([(C.GO, 0, 0, 0, addr(3)), (C.GO, 0, 1, 0, addr(1))])


def test_a_late_worker_learns_who_went_silent() -> None:
    """Worker 0 announced and died; worker 1 comes within the TTL, gets its
    GO, and at its deadline the PS names worker 0."""
    ps, _, ctl = server()
    w0, w1 = Proc(0), Proc(1)
    send(ps, ctl, (w0.call(), 0), now=0.0)
    send(ps, ctl, (w1.call(), 1), now=2.0)
    send(ps, ctl, (w1.msg(C.STATUS), 1), now=2.5)
    assert ctl.sent[-1][0].code == ReportKind.NOTHING_HELD
    send(ps, ctl, (w1.msg(C.ALIVE), 1), (w1.msg(C.STATUS), 1), now=LIVE_TTL + 0.1)
    r = ctl.sent[-1][0]
    assert (r.ctype, r.code, r.mask, r.missing) == (C.REPORT, ReportKind.STOPPED, 0b10, 0b01)
    assert (r.base, r.chunks, r.length) == (0, 0, 3100), "silent, for 3.1 s"


def test_a_worker_that_said_bye_is_named_as_gone_not_silent() -> None:
    """Issue 37: worker 2 of three dies; worker 0 gives up and leaves (BYE)
    just before worker 1 asks.  The PS names worker 2 silent (for how long)
    and worker 0 gone with a BYE."""
    ps, _, ctl = server(fan_in=3)
    w = [Proc(i, fan_in=3, mask=7) for i in range(3)]
    send(ps, ctl, *[(w[i].call(length=96), i) for i in range(3)], now=0.0)
    send(ps, ctl, *[(w[i].msg(C.ALIVE), i) for i in range(2)], now=LIVE_TTL)
    send(ps, ctl, (w[0].msg(C.STATUS), 0), now=LIVE_TTL + 0.5)
    r = ctl.sent[-1][0]
    assert (r.code, r.worker, r.missing, r.base, r.chunks, r.length) == (
        ReportKind.STOPPED, 0, 0b100, 0, 0, 3500,
    )  # fmt: skip
    send(ps, ctl, (w[0].msg(C.BYE), 0), (w[1].msg(C.STATUS), 1), now=LIVE_TTL + 0.502)
    r = ctl.sent[-1][0]
    assert (r.code, r.worker, r.mask, r.missing, r.base, r.chunks, r.length) == (
        ReportKind.STOPPED, 1, 0b010, 0b101, 0b001, 0, 3502,
    )  # fmt: skip


def test_a_worker_that_said_bye_before_a_call_is_named_as_gone_not_unstarted() -> None:
    """Issue 37: call 0 summed; worker 2 of three leaves (BYE); workers 0
    and 1 announce call 1 and wait for the GO.  The PS names worker 2 as
    gone with a BYE, not as a worker that has not started the call."""
    ps, _, ctl = server(fan_in=3)
    w = [Proc(i, fan_in=3, mask=7) for i in range(3)]
    send(ps, ctl, *[(w[i].call(length=96), i) for i in range(3)], now=0.0)
    send(ps, ctl, (w[2].msg(C.BYE), 2), now=0.1)
    send(ps, ctl, (w[0].call(1, length=96, base=3), 0), now=0.2)
    send(ps, ctl, (w[1].call(1, length=96, base=3), 1), (w[1].msg(C.STATUS, 1), 1), now=0.3)
    r = ctl.sent[-1][0]
    assert (r.code, r.worker, r.mask, r.missing, r.base) == (
        ReportKind.NOT_ANNOUNCED, 1, 0b011, 0b100, 0b100,
    )  # fmt: skip
    send(ps, ctl, (w[0].msg(C.STATUS, 1), 0), now=0.4)
    r = ctl.sent[-1][0]
    assert (r.code, r.worker, r.mask, r.missing, r.base) == (
        ReportKind.NOT_ANNOUNCED, 0, 0b001, 0b110, 0b110,
    ), "worker 1 gave the call up by asking: it left"  # fmt: skip


def test_a_worker_that_never_resumed_a_call_is_named_never_heard_from() -> None:
    """The PS restarted during call 3 and only worker 1 resumed it: worker 0
    is never heard from by this PS, and no process holds its index."""
    ps, _, ctl = server()
    w1 = Proc(1)
    send(ps, ctl, (w1.msg(C.RESUME, 3, base=12, offset=900), 1), now=0.0)
    send(ps, ctl, (w1.msg(C.STATUS, 3), 1), now=1.0)
    r = ctl.sent[-1][0]
    assert (r.code, r.mask, r.missing, r.base, r.chunks, r.length) == (
        ReportKind.STOPPED, 0b10, 0b01, 0, 0b01, 0,
    )  # fmt: skip
    send(ps, ctl, (Proc(0).call(4, base=16), 0), (w1.msg(C.STATUS, 3), 1), now=1.5)
    assert ctl.sent[-1][0].code == ReportKind.NOTHING_HELD, "a live process holds index 0"


def test_a_delayed_copy_of_a_past_call_is_dropped() -> None:
    ps, _, ctl = server()
    w0, w1 = Proc(0), Proc(1)
    for n in range(3):
        both(ps, ctl, n, [w0, w1])
    ctl.take()
    send(ps, ctl, (w0.call(0), 0))
    assert ctl.take() == [] and dropped(ps) == {HostDrop.STALE: 1}


def test_data_outside_the_agreed_calls_is_dropped() -> None:
    ps, data, ctl = server()
    w0, w1 = Proc(0), Proc(1)
    send(ps, ctl, (w0.call(length=64), 0), (w1.call(length=64), 1))
    at = offset(ps)
    seqs = (at, at + 1, at + 2, at + (1 << 31), at - 1)
    data.inbox.extend(pkt(T.FALLBACK, 1, seq % (1 << 32), 0b01, vec(0)) for seq in seqs)
    send(ps, ctl)
    assert sorted(ps.sums.partials) == [(1, at), (1, at + 1)]
    assert ps.counters.dropped[HostDrop.SEQ] == 3
    send(ps, ctl, (w0.call(1, length=64, base=2), 0), (w1.call(1, length=64, base=2), 1))
    send(ps, ctl, (w0.call(2, length=64, base=4), 0), (w1.call(2, length=64, base=4), 1))
    assert offset(ps) == at, "an epoch keeps its offset"
    data.inbox.append(pkt(T.FALLBACK, 1, at + 1, 0b10, vec(0)))
    send(ps, ctl)
    assert ps.counters.dropped[HostDrop.SEQ] == 4, "two agreed calls are kept: 1 and 2"


def test_a_restarted_ps_adopts_the_call_in_progress_from_a_resume() -> None:
    """Worker 1 streams call 3 and worker 0, done with it, announces call 4
    when the PS restarts: the new PS takes call 3 from worker 1's RESUME
    (and its data), and agrees call 4 once worker 1 announces it too."""
    ps, data, ctl = server()
    w0, w1 = Proc(0), Proc(1)
    send(ps, ctl, (w0.call(4, base=16), 0), (w1.msg(C.RESUME, 3, base=12, offset=900), 1))
    assert ctl.take() == as_sent([(C.GO, 0, 1, 0, addr(1))])
    assert ps.books[1].agreement(3) is not None and ps.counters.calls_agreed == 1
    assert ctl.sent == [] and offset(ps) == 900, "the epoch keeps the offset it had"
    seq = 900 + 12 + 1
    data.inbox.extend(
        [pkt(T.FALLBACK, 1, seq, 0b10, vec(1)), pkt(T.FALLBACK, 1, seq, 0b01, vec(2))]
    )
    send(ps, ctl)
    assert [(h.ptype, h.seq) for h, _, _ in data.sent] == [(T.PS_RESULT, seq)]
    send(ps, ctl, (w1.call(4, base=16), 1))
    assert ctl.take() == as_sent([(C.GO, 0, 0, 0, addr(0)), (C.GO, 0, 1, 0, addr(1))])
    assert [a.call for a in ps.books[1].agreed] == [3, 4], "call 4 continues call 3"
    assert offset(ps) == 900


def test_a_resume_joins_a_call_another_worker_resumed() -> None:
    ps, _, ctl = server()
    w0, w1 = Proc(0), Proc(1)
    resume = {"base": 12, "offset": 900}
    send(ps, ctl, (w1.msg(C.RESUME, 3, **resume), 1), (w0.msg(C.RESUME, 3, **resume), 0))
    send(ps, ctl, (w0.msg(C.RESUME, 3, base=12, offset=901), 0))
    send(ps, ctl, (w0.msg(C.RESUME, 3, base=12, offset=900, length=99), 0))
    assert ctl.take() == as_sent([(C.GO, 0, 1, 0, addr(1)), (C.GO, 0, 0, 0, addr(0)),
                                  (C.REJECT, R.BASE, 0, 1, addr(0)),
                                  (C.REJECT, R.LENGTH, 0, 1, addr(0))])  # fmt: skip


def test_status_reports_who_is_missing() -> None:
    ps, data, ctl = server(fan_in=3)
    w = [Proc(i, fan_in=3, mask=7) for i in range(3)]
    send(ps, ctl, (w[0].call(length=96), 0), (w[0].msg(C.STATUS), 0))
    r = ctl.sent[-1][0]
    assert (r.ctype, r.code, r.mask, r.missing) == (C.REPORT, ReportKind.NOT_ANNOUNCED, 1, 0b110)
    assert ps.books[1].pending == {}, "a worker that asks has given the call up"
    send(ps, ctl, *[(w[i].call(length=96), i) for i in range(3)], (w[1].msg(C.STATUS), 1))
    assert ctl.sent[-1][0].code == ReportKind.NOTHING_HELD
    at = offset(ps)
    data.inbox.extend(
        [pkt(T.FALLBACK, 1, at, 0b001, vec(0)), pkt(T.PARTIAL, 1, at + 2, 0b011, vec(0))]
    )
    send(ps, ctl, (w[2].msg(C.STATUS), 2))
    r, to = ctl.sent[-1]
    assert (r.code, r.worker, r.nonce, r.missing, r.partials, to) == (
        ReportKind.PARTIALS, 2, 1002, 0b110, 2, addr(2),
    )  # fmt: skip
    send(ps, ctl, (w[2].msg(C.STATUS, 5), 2))
    assert ctl.sent[-1][0].code == ReportKind.UNKNOWN_CALL
    sent = len(ctl.sent)
    send(ps, ctl, (Proc(2, nonce=1, fan_in=3, mask=7).msg(C.STATUS), 2))
    assert len(ctl.sent) == sent and dropped(ps) == {HostDrop.STRANGER: 1}


def test_malformed_control_messages_are_dropped() -> None:
    ps, _, ctl = server()
    good = Proc(0).call()
    go = Proc(0).msg(C.GO)
    for data in (b"", good[:-1], good + b"\0", b"\0\0" + good[2:], good[:2] + b"\x63" + good[3:],
                 go, Proc(0).call(counter=0)):  # fmt: skip
        ctl.inbox.append((data, addr(0)))
    send(ps, ctl, (Proc(0).call(chunks=3), 0))
    assert dropped(ps) == {HostDrop.CONTROL: 8} and ctl.sent == []
    assert ps.counters.control_received == 8


def test_a_bye_frees_a_pending_index() -> None:
    ps, _, ctl = server()
    w0 = Proc(0)
    send(ps, ctl, (w0.call(), 0), (w0.msg(C.BYE), 0))
    assert ps.books[1].pending == {} and ps.books[1].roster.holders == {}
    send(ps, ctl, (w0.call(), 0))
    assert ctl.take() == [] and dropped(ps) == {HostDrop.STRANGER: 1}


@given(st.lists(st.integers(0, 200), max_size=60))
def test_the_replay_window_takes_each_number_once_and_none_too_old(numbers: list[int]) -> None:
    w, seen = auth.ReplayWindow(), set[int]()
    for n in numbers:
        want = n > 0 and n not in seen and n > max(seen, default=0) - auth.ReplayWindow.SIZE
        assert w.fresh(n) == want
        if want:
            w.take(n)
            seen.add(n)


def four() -> tuple[ParameterServer, Recorder, Mailbox, list[Proc]]:
    """A PS of a fan-in-4 job and the job's four worker processes."""
    ps, data, ctl = server(fan_in=4)
    return ps, data, ctl, [Proc(i, fan_in=4, mask=0xF) for i in range(4)]


def test_an_asker_whose_report_was_lost_is_not_named_as_not_started() -> None:
    """Issue 37, soak (1): worker 3 is gone before call 0; worker 2's first
    CALL is lost, its resend arrives; at its deadline the REPORT to its
    STATUS is lost too, and it asks again.  Both reports count worker 2's
    announcement: only worker 3 has not started the call."""
    ps, _, ctl, w = four()
    send(ps, ctl, (w[0].call(length=96), 0), (w[1].call(length=96), 1), now=0.0)
    w[2].counter += 1  # the lost CALL
    send(ps, ctl, (w[2].call(length=96), 2), now=0.5)
    for now in (5.0, 5.2):
        send(ps, ctl, (w[2].msg(C.STATUS), 2), now=now)
        r = ctl.sent[-1][0]
        assert (r.code, r.worker, r.mask, r.missing, r.base) == (
            ReportKind.NOT_ANNOUNCED, 2, 0b0111, 0b1000, 0,
        ), f"the report at {now} s"  # fmt: skip


def test_a_peer_that_gave_up_is_named_gone_not_unstarted() -> None:
    """Issue 37: a peer that asked (it gave the call up, its BYE is on its
    way) is named as gone with a BYE, not as a worker that has not started;
    the worker that never announced stays named as not started."""
    ps, _, ctl, w = four()
    send(ps, ctl, *[(w[i].call(length=96), i) for i in range(3)], now=0.0)
    send(ps, ctl, (w[1].msg(C.STATUS), 1), now=5.0)
    send(ps, ctl, (w[0].msg(C.STATUS), 0), now=5.01)
    r = ctl.sent[-1][0]
    assert (r.code, r.worker, r.mask, r.missing, r.base) == (
        ReportKind.NOT_ANNOUNCED, 0, 0b0101, 0b1010, 0b0010,
    )  # fmt: skip
    send(ps, ctl, (w[1].msg(C.BYE), 1), (w[2].msg(C.STATUS), 2), now=5.02)
    r = ctl.sent[-1][0]
    assert (r.code, r.worker, r.mask, r.missing, r.base) == (
        ReportKind.NOT_ANNOUNCED, 2, 0b0100, 0b1011, 0b0011,
    )  # fmt: skip


def test_a_bye_does_not_hide_the_worker_the_partial_sums_miss() -> None:
    """Issue 37, soak (2): worker 0 is killed streaming call 0, less than
    ``LIVE_TTL`` before its peers' deadline.  The first peer to ask is told
    the partial sums miss worker 0; it says BYE, and the peers that ask
    after are told both: worker 1 said BYE, the partial sums miss worker 0."""
    ps, data, ctl, w = four()
    send(ps, ctl, *[(w[i].call(length=96), i) for i in range(4)], now=0.0)
    at = offset(ps)
    data.inbox.extend(
        [pkt(T.PARTIAL, 1, at, 0b1110, vec(0)), pkt(T.PARTIAL, 1, at + 1, 0b1110, vec(0))]
    )
    send(ps, ctl, (w[0].msg(C.ALIVE), 0), now=3.0)
    send(ps, ctl, *[(w[i].msg(C.ALIVE), i) for i in (1, 2, 3)], now=4.5)
    send(ps, ctl, (w[1].msg(C.STATUS), 1), now=5.0)
    r = ctl.sent[-1][0]
    assert (r.code, r.worker, r.missing, r.partials) == (ReportKind.PARTIALS, 1, 0b0001, 2)
    send(ps, ctl, (w[1].msg(C.BYE), 1), now=5.01)
    for i in (2, 3):
        send(ps, ctl, (w[i].msg(C.STATUS), i), now=5.02)
        r = ctl.sent[-1][0]
        assert (r.code, r.worker, r.missing, r.base, r.chunks, r.offset, r.partials) == (
            ReportKind.STOPPED, i, 0b0011, 0b0010, 0, 0b0001, 2,
        ), f"worker {i}'s report"  # fmt: skip


class LosesFirstReport(vworld.World):
    """A world whose network loses the first REPORT a PS sends."""

    lost = 0

    def send(self, src: Addr, dst: Addr, data: bytes) -> None:
        m = payload.decode_control(data, len(data)) if len(data) == wire.CONTROL_BYTES else None
        if m is not None and m.ctype == C.REPORT and not self.lost:
            self.lost += 1
            return
        super().send(src, dst, data)


def test_a_worker_whose_report_was_lost_names_the_peer_that_never_started() -> None:
    """Issue 37, soak (1), end to end: worker 1 never starts call 0; worker
    0's first REPORT is lost and it asks again.  Its error names worker 1 as
    not started and worker 0 as started."""
    world = LosesFirstReport(shards=1, seed=1)
    p = world.spawn(0, world.new_run())
    world.begin(p)
    world.run(lambda: not p.busy, vworld.TIMEOUT + vworld.ASKING)
    assert world.lost == 1
    e = p.calls[-1].error
    assert str(e) == (
        f"job {vworld.JOB} call 0: no sum after {vworld.TIMEOUT:g} s (waiting for the PS's GO); "
        "workers [1] have not started it (started: [0])"
    )
