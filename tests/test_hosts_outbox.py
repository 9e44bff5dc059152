"""What the PS sends (hosts.ps.aggregate.Outbox): sums, and pulls and answers within budget."""

from __future__ import annotations

from esa import wire
from esa.wire import PacketType
from hosts.net import payload
from hosts.net.counters import PSCounters
from hosts.ps.aggregate import Outbox
from tests.test_hosts_ps import SWITCH, Recorder


def outbox(budget: int = 2, fan_in: int = 2, stall: float = 1.0) -> tuple[Outbox, Recorder]:
    rec = Recorder()
    box = Outbox(rec, SWITCH, PSCounters())
    box.add_job(1, fan_in, budget, stall)
    return box, rec


def test_encode_and_send() -> None:
    box, rec = outbox()
    datagram = box.encode(PacketType.PS_RESULT, 0, (1, 9), 0b11, 2, [5] * wire.K)
    box.send(datagram)
    assert rec.sent == [
        (payload.Header(PacketType.PS_RESULT, 0, 1, 9, 0b11, 2), [5] * wire.K, SWITCH)
    ]


def test_replies_stay_within_the_jobs_budget() -> None:
    box, rec = outbox(budget=2, fan_in=2, stall=1.0)
    answer = box.encode(PacketType.PS_RESULT, 0, (1, 0), 0b11, 2, [0] * wire.K)
    assert box.budgets[1].rate == 4.0 and box.budgets[1].burst == 4.0
    assert [box.reply(1, answer, 0.0) for _ in range(5)] == [True] * 4 + [False]
    assert box.counters.suppressed == 1
    assert box.reply(1, answer, 0.25)
    assert len(rec.sent) == 5


def test_pull_names_the_workers_held_and_counts() -> None:
    box, rec = outbox(budget=1, fan_in=1)
    assert box.pull((1, 4), 0b10, 1, 0.0)
    assert not box.pull((1, 4), 0b10, 1, 0.0)
    assert (box.counters.pulls_sent, box.counters.suppressed) == (1, 1)
    assert rec.sent == [(payload.Header(PacketType.PULL, 0, 1, 4, 0b10, 1), [0] * wire.K, SWITCH)]
