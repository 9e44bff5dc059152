"""The retransmission timeout shared by the worker and the packet simulator."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from esa.wire import Flag, PacketType
from hosts.timing.rto import RetransmitTimeout, sums_first_sends


def test_first_sample_sets_srtt_and_half_variance() -> None:
    t = RetransmitTimeout(0.01, 1.0)
    t.sample(0.2)
    assert (t.srtt, t.rttvar) == (0.2, 0.1)
    assert t.value == pytest.approx(0.2 + 4 * 0.1)


def test_never_below_initial_nor_above_cap() -> None:
    t = RetransmitTimeout(0.5, 1.0)
    t.sample(0.001)
    assert t.value == 0.5
    for _ in range(50):
        t.sample(10.0)
    assert t.value == 1.0


def test_sample_counts_at_most_twice_srtt() -> None:
    t = RetransmitTimeout(0.001, 10.0)
    t.sample(0.1)
    t.sample(5.0)
    assert t.srtt == pytest.approx(0.875 * 0.1 + 0.125 * 0.2)
    assert t.rttvar == pytest.approx(0.75 * 0.05 + 0.25 * 0.1)


def test_a_spurious_timeout_counts_in_full() -> None:
    t = RetransmitTimeout(0.001, 10.0)
    t.sample(0.1)
    t.spurious(5.0)
    assert t.srtt == pytest.approx(0.875 * 0.1 + 0.125 * 5.0)
    assert t.rttvar == pytest.approx(0.75 * 0.05 + 0.25 * 4.9)


@pytest.mark.parametrize(
    ("ptype", "flags", "first"),
    [
        (PacketType.RESULT, 0, True),
        (PacketType.RESULT, Flag.OVERFLOW, True),
        (PacketType.PS_RESULT, Flag.HOLD, True),
        (PacketType.PS_RESULT, 0, False),
        (PacketType.PS_RESULT, Flag.FLOAT, False),
        (PacketType.PULL, Flag.HOLD, False),
    ],
)
def test_which_results_sum_first_sends(ptype: int, flags: int, first: bool) -> None:
    assert sums_first_sends(ptype, flags) is first


def test_gains_are_divided_by_the_chunks_in_flight() -> None:
    """Eight chunks in flight give eight samples a round trip: each moves
    srtt and rttvar an eighth of RFC 6298's step; a spurious timeout moves
    them a full step."""
    t = RetransmitTimeout(0.001, 10.0)
    t.sample(0.1, in_flight=8)
    t.sample(0.15, in_flight=8)
    assert t.srtt == pytest.approx(0.1 + 0.125 / 8 * 0.05)
    assert t.rttvar == pytest.approx(0.05 * (1 - 0.25 / 8) + 0.25 / 8 * 0.05)
    t.spurious(0.5)
    srtt = 0.1 + 0.125 / 8 * 0.05
    assert t.srtt == pytest.approx(0.875 * srtt + 0.125 * 0.5)


def test_first_sends_give_samples_and_a_late_first_sum_shows_a_spurious_timeout() -> None:
    """Chunk 1 was sent once: a sample.  Chunk 2 was resent and the switch's
    sum came: spurious, a full sample.  Chunk 3 went out again for the PS,
    and chunk 4 belongs to a call that ended: neither gives a sample."""
    t = RetransmitTimeout(0.01, 1.0)
    for chunk in (1, 2, 3):
        t.sent(chunk, 0.0)
    t.resend(2)
    t.forget(3)
    assert not t.answered(1, 0.1, 3, PacketType.RESULT, 0)
    assert t.srtt == pytest.approx(0.1)
    assert t.answered(2, 0.4, 2, PacketType.RESULT, 0)
    srtt = 0.875 * 0.1 + 0.125 * 0.4
    assert t.srtt == pytest.approx(srtt)
    assert not t.answered(3, 0.5, 1, PacketType.RESULT, 0)
    t.sent(4, 1.0)
    t.clear()
    assert not t.answered(4, 1.2, 1, PacketType.RESULT, 0)
    assert t.srtt == pytest.approx(srtt)


def test_doubles_once_per_round_when_half_a_window_expires_unsampled() -> None:
    t = RetransmitTimeout(0.1, 1.0)
    t.expired(0.0, window=4)  # opens the round ending at 0.1
    assert t.value == 0.1
    for _ in range(3):
        t.expired(0.05, window=4)
    assert t.value == 0.1  # the round has not ended
    t.expired(0.1, window=4)  # 4 expiries > 4 / 2, none sampled
    assert (t.value, t.learnt) == (0.2, 0.1)  # a backoff holds no timer in flight
    t.expired(0.15, window=4)
    assert t.value == 0.2
    t.sample(0.3)
    assert t.value == t.learnt == pytest.approx(0.3 + 4 * 0.15)


def test_a_sample_in_the_round_prevents_doubling() -> None:
    t = RetransmitTimeout(0.1, 1.0)
    t.expired(0.0, window=2)
    t.sample(0.05)
    assert t.value == pytest.approx(0.15)
    t.expired(0.05, window=2)
    t.expired(0.1, window=2)
    assert t.value == pytest.approx(0.15)


@given(st.lists(st.floats(1e-6, 100.0), max_size=40), st.floats(1e-4, 1.0))
def test_bounds_hold_for_any_samples(samples: list[float], initial: float) -> None:
    t = RetransmitTimeout(initial, 1.0)
    for s in samples:
        t.sample(s)
        assert initial <= t.value == t.learnt <= max(initial, 1.0)


def test_rejects_non_positive_initial() -> None:
    with pytest.raises(ValueError, match="initial timeout must be > 0, got 0"):
        RetransmitTimeout(0.0, 1.0)
    with pytest.raises(ValueError, match="a sampled chunk is in flight itself, got 0"):
        RetransmitTimeout(0.1, 1.0).sample(0.1, in_flight=0)
