"""A PS's announcements, agreements (hosts.agreement.announcements) and its GO and
REJECT (hosts.agreement.answers)."""

from __future__ import annotations

import dataclasses

from esa import wire
from esa.job import Workers
from esa.wire import ControlType, RejectReason
from hosts.agreement.announcements import SEQ_MOD, Agreement, Announcement, differs
from hosts.agreement.answers import Answers
from hosts.net import payload

ADDR = ("10.0.0.1", wire.CONTROL_PORT)
C = ControlType


def call(worker: int = 0, **fields: int) -> payload.Control:
    base = payload.Control(C.CALL, 0, 3, worker, 0, 77 + worker, 4, 10, 2, 500, 2, 0b11, digest=9)
    return dataclasses.replace(base, **fields)


def test_an_announcement_is_its_calls_fields() -> None:
    a = Announcement.of(call(1, offset=5), ADDR)
    assert a == Announcement(1, 78, ADDR, 4, 10, 2, 500, 9, 5)
    assert a.shape() == (4, 10, 2, 500, 9)


def test_differs_names_the_first_field_that_differs() -> None:
    a = Announcement.of(call(0), ADDR)

    def other(**fields: int) -> Announcement:
        return Announcement.of(call(1, **fields), ADDR)

    assert differs(a, other(call=5, length=1)) is RejectReason.CALL
    assert differs(a, other(length=1, base=0)) is RejectReason.LENGTH
    assert differs(a, other(chunks=3)) is RejectReason.LENGTH
    assert differs(a, other(offset=1)) is RejectReason.BASE
    assert differs(a, other(digest=1)) is RejectReason.CONFIG


def test_an_agreement_covers_its_calls_seqs_modulo_2_to_32() -> None:
    ag = Agreement(4, 10, 2, 500, 9, SEQ_MOD - 11, {})
    assert [s for s in range(-3, 4) if ag.covers(s % SEQ_MOD)] == [-1, 0]


def test_against_table() -> None:
    answers = Answers(3, Workers.of(2, 0b101))
    assert answers.against_table(call(0, fan_in=2, mask=0b101)) is None
    assert answers.against_table(call(1, fan_in=2, mask=0b101)) is RejectReason.WORKER
    assert answers.against_table(call(40, fan_in=2, mask=0b101)) is RejectReason.WORKER
    assert answers.against_table(call(2, fan_in=3, mask=0b101)) is RejectReason.FAN_IN
    assert answers.against_table(call(2, fan_in=2, mask=0b111)) is RejectReason.MASK


def test_go_names_the_agreed_call_and_the_table() -> None:
    a = Announcement.of(call(1), ADDR)
    ag = Agreement(4, 10, 2, 500, 9, 1000, {1: a})
    msg, to = Answers(3, Workers.of(2)).go(ag, a)
    assert to == ADDR
    assert msg == payload.Control(
        C.GO, 0, 3, 1, 0, 78, 4, 10, 2, 500, 2, 0b11, digest=9, offset=1000
    )


def test_a_reject_carries_the_peers_call_or_the_senders_own() -> None:
    answers = Answers(3, Workers.of(2))
    mine, peer = call(0), Announcement.of(call(1, length=600, chunks=3), ADDR)
    msg, to = answers.reject(mine, ("h", 1), RejectReason.LENGTH, peer)
    assert to == ("h", 1)
    assert msg == payload.Control(
        C.REJECT, RejectReason.LENGTH, 3, 0, 1, 77, 4, 10, 3, 600, 2, 0b11, digest=9
    )
    msg, _ = answers.reject(mine, ("h", 1), RejectReason.DUPLICATE, None, index=0)
    assert (msg.peer, msg.length, msg.nonce) == (0, 500, 77)
    msg, _ = answers.reject(mine, ("h", 1), RejectReason.FAN_IN, None)
    assert msg.peer == wire.NO_PEER


def test_reject_announcement_answers_its_process() -> None:
    a, peer = Announcement.of(call(0), ("h", 2)), Announcement.of(call(1, base=0), ADDR)
    msg, to = Answers(3, Workers.of(2)).reject_announcement(a, RejectReason.BASE, peer)
    assert to == ("h", 2)
    assert (msg.ctype, msg.code, msg.worker, msg.peer, msg.nonce, msg.base) == (
        C.REJECT, RejectReason.BASE, 0, 1, 77, 0,
    )  # fmt: skip
