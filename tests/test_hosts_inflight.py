"""The retransmission timers of chunks in flight (hosts.worker.inflight)."""

from __future__ import annotations

from hosts.worker.inflight import InFlight


def test_expired_come_earliest_first_and_stay_until_rearmed() -> None:
    t = InFlight()
    t.arm(2, 3.0)
    t.arm(0, 1.0)
    t.arm(1, 2.0)
    assert (len(t), list(t)) == (3, [2, 0, 1])
    assert list(t.expired(2.0)) == [0, 1]
    assert t.deadlines == {2: 3.0, 0: 1.0, 1: 2.0}
    assert list(t.expired(2.5)) == [] and t.next_deadline() == 3.0


def test_a_rearmed_chunk_keeps_only_its_last_deadline() -> None:
    t = InFlight()
    t.arm(0, 1.0)
    t.arm(0, 5.0)
    t.arm(1, 2.0)
    t.disarm(1)
    assert t.next_deadline() == 5.0
    assert list(t.expired(4.0)) == [] and list(t.expired(5.0)) == [0]


def test_a_chunk_rearmed_early_while_expiring_comes_up_again() -> None:
    t = InFlight()
    t.arm(0, 1.0)
    t.arm(1, 1.0)
    seen = []
    for chunk in t.expired(1.0):
        seen.append(chunk)
        if len(seen) == 1:
            t.arm(1, 0.5)
        else:
            t.arm(chunk, 9.0)
    assert seen == [0, 1] and t.deadlines == {0: 1.0, 1: 9.0}


def test_clear_and_empty() -> None:
    t = InFlight()
    assert t.next_deadline() is None
    t.arm(0, 1.0)
    t.clear()
    assert (len(t), t.next_deadline(), list(t.expired(9.0))) == (0, None, [])
