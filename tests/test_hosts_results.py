"""The PS's result cache (hosts.ps.results): least recently used answers go first."""

from __future__ import annotations

from hosts.ps.results import Answer, ResultCache


def test_put_evicts_the_least_recently_used() -> None:
    cache = ResultCache(2)
    assert not cache.put((1, 1), Answer(0, b"a"))
    assert not cache.put((1, 2), Answer(0, b"b"))
    assert cache.use((1, 1)) == Answer(0, b"a")
    assert cache.put((1, 3), Answer(0, b"c"))
    assert list(cache) == [(1, 1), (1, 3)] and len(cache) == 2
    assert (1, 2) not in cache and cache.use((1, 2)) is None


def test_get_leaves_the_order_alone() -> None:
    cache = ResultCache(2)
    cache.put((1, 1), Answer(0, b"a"))
    cache.put((1, 2), Answer(4, b"b"))
    assert cache.get((1, 1)) == Answer(0, b"a")
    assert cache.put((1, 3), Answer(0, b"c"))
    assert list(cache) == [(1, 2), (1, 3)]


def test_put_again_replaces_and_refreshes() -> None:
    cache = ResultCache(3)
    cache.put((1, 1), Answer(0, b"a"))
    cache.put((1, 2), Answer(0, b"b"))
    assert not cache.put((1, 1), Answer(1, b"x"))
    assert list(cache) == [(1, 2), (1, 1)] and cache.get((1, 1)) == Answer(1, b"x")


def test_forget_drops_one_job() -> None:
    cache = ResultCache(8)
    for key in [(1, 1), (2, 1), (1, 2), (2, 2)]:
        cache.put(key, Answer(0, b""))
    cache.forget(1)
    assert list(cache) == [(2, 1), (2, 2)]
