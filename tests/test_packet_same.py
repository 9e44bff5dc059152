"""``bench.packet_same`` names every run whose outcome differs between two
trees, and every run only one of them made."""

from __future__ import annotations

from bench import packet_same


def test_differing_names_changed_and_missing_runs() -> None:
    before = {"a": {"jct": [1.0]}, "b": {"jct": [2.0]}, "c": "Deadlock()"}
    after = {"a": {"jct": [1.0]}, "b": {"jct": [2.5]}, "d": {"jct": [3.0]}}
    assert packet_same.differing(before, after) == ["b", "c", "d"]


def test_the_same_outcomes_differ_nowhere() -> None:
    runs = {"n/esa-aging/64": {"jct": [1.0], "pulls": [3]}}
    assert packet_same.differing(runs, dict(runs)) == []
