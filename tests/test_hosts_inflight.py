"""The retransmission timers of chunks in flight (hosts.worker.inflight)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hosts.worker.inflight import InFlight


def test_expired_come_earliest_first_and_stay_until_rearmed() -> None:
    t = InFlight()
    t.arm(2, 2.0, 1.0)
    t.arm(0, 0.0, 1.0)
    t.arm(1, 1.0, 1.0)
    assert (len(t), list(t)) == (3, [2, 0, 1])
    assert list(t.expired(2.0, 1.0)) == [0, 1]
    assert t.deadlines == {2: 3.0, 0: 1.0, 1: 2.0}
    assert list(t.expired(2.5, 1.0)) == [] and t.next_deadline() == 3.0


def test_a_rearmed_chunk_keeps_only_its_last_deadline() -> None:
    t = InFlight()
    t.arm(0, 0.0, 1.0)
    t.arm(0, 4.0, 1.0)
    t.arm(1, 1.0, 1.0)
    t.disarm(1)
    assert t.next_deadline() == 5.0
    assert list(t.expired(4.0, 1.0)) == [] and list(t.expired(5.0, 1.0)) == [0]


def test_a_timeout_grown_since_the_send_sets_the_timer_again() -> None:
    t = InFlight()
    t.arm(0, 0.0, 1.0)
    t.arm(1, 0.5, 1.0)
    assert list(t.expired(1.6, 3.0)) == []
    assert t.deadlines == {0: 3.0, 1: 3.5} and t.next_deadline() == 3.0
    assert list(t.expired(3.0, 3.0)) == [0] and list(t.expired(3.5, 2.0)) == [1]


def test_a_chunk_due_at_once_expires_whatever_the_timeout() -> None:
    t = InFlight()
    t.arm(0, 0.0, 1.0)
    t.due(0, 0.5)
    t.due(1, 0.5)
    assert list(t.expired(0.5, 9.0)) == [0, 1]


def test_a_chunk_rearmed_early_while_expiring_comes_up_again() -> None:
    t = InFlight()
    t.arm(0, 0.0, 1.0)
    t.arm(1, 0.0, 1.0)
    seen = []
    for chunk in t.expired(1.0, 1.0):
        seen.append(chunk)
        if len(seen) == 1:
            t.due(1, 0.5)
        else:
            t.arm(chunk, 1.0, 8.0)
    assert seen == [0, 1] and t.deadlines == {0: 1.0, 1: 9.0}


@given(
    st.lists(st.tuples(st.integers(0, 7), st.integers(0, 50), st.integers(1, 20)), max_size=30),
    st.integers(0, 100),
    st.integers(1, 30),
)
def test_a_chunk_expires_exactly_when_its_timeout_has_passed_since_its_send(
    arms: list[tuple[int, int, int]], now: int, timeout: int
) -> None:
    t = InFlight()
    last: dict[int, tuple[int, int]] = {}
    for chunk, sent, armed in arms:
        t.arm(chunk, float(sent), float(armed))
        last[chunk] = (sent, armed)
    due = sorted(c for c, (s, a) in last.items() if s + a <= now and s + timeout <= now)
    assert sorted(t.expired(float(now), float(timeout))) == due
    for chunk, (sent, armed) in last.items():
        if chunk not in due and sent + armed <= now:
            assert t.deadlines[chunk] == sent + timeout


def test_clear_and_empty() -> None:
    t = InFlight()
    assert t.next_deadline() is None
    t.arm(0, 0.0, 1.0)
    t.clear()
    assert (len(t), t.next_deadline(), list(t.expired(9.0, 1.0))) == (0, None, [])
