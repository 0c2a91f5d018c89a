"""LRUCache: recency order, the byte bound, oversized entries, invalidation, thread safety."""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest

from zarrfs.core.cache import LRUCache, default_sizeof


def test_get_put_and_miss() -> None:
    cache: LRUCache[str, bytes] = LRUCache(100)
    assert cache.get("a") is None
    assert cache.get("a", b"default") == b"default"
    assert cache.put("a", b"12345")
    assert cache.get("a") == b"12345"
    assert "a" in cache and "b" not in cache
    assert len(cache) == 1
    assert cache.nbytes == 5


def test_evicts_least_recently_used() -> None:
    cache: LRUCache[str, bytes] = LRUCache(30)
    for key in "abc":
        cache.put(key, b"x" * 10)
    assert cache.get("a") is not None  # a is now the most recent; b the least
    cache.put("d", b"x" * 10)
    assert "b" not in cache
    assert all(k in cache for k in "acd")
    cache.put("e", b"x" * 10)
    assert "c" not in cache  # then c
    cache.put("a", b"y" * 10)  # re-put refreshes recency too
    cache.put("f", b"x" * 10)
    assert "d" not in cache and "a" in cache
    assert cache.stats()["evictions"] == 3


def test_one_large_entry_evicts_several() -> None:
    cache: LRUCache[str, bytes] = LRUCache(100)
    for i in range(10):
        cache.put(str(i), b"x" * 10)
    cache.put("big", b"x" * 55)
    assert cache.nbytes <= 100
    assert [str(i) in cache for i in range(10)] == [False] * 6 + [True] * 4
    assert cache.stats()["evictions"] == 6


def test_byte_bound_holds_under_random_puts() -> None:
    rng = random.Random(7)
    cache: LRUCache[int, bytes] = LRUCache(1000)
    sizes: dict[int, int] = {}
    for _ in range(3000):
        key = rng.randrange(60)
        size = rng.randrange(0, 400)
        cache.put(key, b"x" * size)
        sizes[key] = size
        assert cache.nbytes <= 1000
        assert cache.nbytes == sum(sizes[k] for k in sizes if k in cache)


def test_entry_larger_than_capacity_is_not_cached() -> None:
    cache: LRUCache[str, bytes] = LRUCache(100)
    cache.put("keep", b"k" * 50)
    assert cache.put("huge", b"h" * 101) is False
    assert "huge" not in cache
    assert cache.get("keep") == b"k" * 50  # nothing was evicted for it
    assert cache.put("exact", b"e" * 100) is True  # exactly the capacity fits
    assert cache.stats()["rejected"] == 1


def test_oversized_put_drops_the_older_value_of_its_key() -> None:
    cache: LRUCache[str, bytes] = LRUCache(100)
    cache.put("k", b"old")
    assert cache.put("k", b"n" * 200) is False
    assert cache.get("k") is None  # never serve the stale value
    assert cache.nbytes == 0


def test_replacing_a_key_updates_the_byte_count() -> None:
    cache: LRUCache[str, bytes] = LRUCache(100)
    cache.put("k", b"x" * 40)
    cache.put("k", b"x" * 10)
    assert cache.nbytes == 10
    assert len(cache) == 1


def test_explicit_size_and_sizeof() -> None:
    cache: LRUCache[str, object] = LRUCache(100)
    cache.put("obj", object(), size=60)
    assert cache.nbytes == 60
    counted: LRUCache[str, list[int]] = LRUCache(100, sizeof=lambda v: 8 * len(v))
    counted.put("list", [1, 2, 3])
    assert counted.nbytes == 24
    with pytest.raises(ValueError):
        cache.put("neg", b"", size=-1)
    with pytest.raises(ValueError):
        LRUCache(-1)


def test_default_sizeof() -> None:
    assert default_sizeof(np.zeros((10, 10), dtype="<f8")) == 800
    assert default_sizeof(b"abc") == 3
    assert default_sizeof(bytearray(7)) == 7
    assert default_sizeof(memoryview(b"abcd")[1:]) == 3
    assert default_sizeof(object()) > 0


def test_numpy_arrays_are_counted_by_nbytes() -> None:
    cache: LRUCache[tuple[str, tuple[int, ...]], np.ndarray] = LRUCache(1000)
    cache.put(("a", (0,)), np.zeros(100, dtype=np.uint8))
    cache.put(("a", (1,)), np.zeros(100, dtype=np.float64))
    assert cache.nbytes == 900
    cache.put(("a", (2,)), np.zeros(200, dtype=np.uint8))
    assert ("a", (0,)) not in cache and cache.nbytes == 1000


def test_pop_and_clear() -> None:
    cache: LRUCache[str, bytes] = LRUCache(100)
    cache.put("a", b"aa")
    cache.put("b", b"bbb")
    assert cache.pop("a") == b"aa"
    assert cache.pop("a") is None
    assert cache.pop("a", b"d") == b"d"
    assert cache.nbytes == 3
    cache.clear()
    assert len(cache) == 0 and cache.nbytes == 0 and cache.get("b") is None


def test_invalidate_by_prefix_and_predicate() -> None:
    cache: LRUCache[object, bytes] = LRUCache(1000)
    for key in ["arr/c/0", "arr/c/1", "arr2/c/0", "other"]:
        cache.put(key, b"x")
    cache.put(("arr/", (0, 0)), b"x")
    cache.put(("other/", (0, 0)), b"x")
    cache.put(7, b"x")
    assert cache.invalidate("arr/") == 3
    assert sorted(str(k) for k in ["arr2/c/0", "other"] if k in cache) == ["arr2/c/0", "other"]
    assert ("other/", (0, 0)) in cache and 7 in cache
    assert cache.invalidate(lambda k: isinstance(k, int)) == 1
    assert 7 not in cache
    assert cache.nbytes == 3


def test_resize_evicts_to_fit() -> None:
    cache: LRUCache[str, bytes] = LRUCache(100)
    for key in "abcde":
        cache.put(key, b"x" * 20)
    cache.resize(50)
    assert cache.nbytes <= 50 and [k in cache for k in "abcde"] == [False] * 3 + [True] * 2
    cache.resize(0)
    assert len(cache) == 0
    assert cache.put("z", b"") is False  # a zero-capacity cache caches nothing


def test_stats_counters() -> None:
    cache: LRUCache[str, bytes] = LRUCache(20)
    cache.put("a", b"x" * 10)
    cache.get("a")
    cache.get("a")
    cache.get("missing")
    cache.put("b", b"x" * 10)
    cache.put("c", b"x" * 10)
    assert cache.stats() == {
        "hits": 2,
        "misses": 1,
        "evictions": 1,
        "rejected": 0,
        "entries": 2,
        "bytes": 20,
        "capacity": 20,
    }


def test_contains_does_not_touch_recency_or_counters() -> None:
    cache: LRUCache[str, bytes] = LRUCache(20)
    cache.put("a", b"x" * 10)
    cache.put("b", b"x" * 10)
    assert "a" in cache
    cache.put("c", b"x" * 10)
    assert "a" not in cache  # membership did not refresh a
    assert cache.stats()["hits"] == 0 and cache.stats()["misses"] == 0


def test_thread_safety_smoke() -> None:
    cache: LRUCache[int, bytes] = LRUCache(5000)
    gets = [0] * 8
    errors: list[BaseException] = []

    def size_of(key: int) -> int:
        return (key * 37) % 300 + 1

    def work(n: int) -> None:
        rng = random.Random(n)
        try:
            for _ in range(3000):
                key = rng.randrange(100)
                op = rng.random()
                if op < 0.5:
                    value = cache.get(key)
                    gets[n] += 1
                    if value is not None and len(value) != size_of(key):
                        raise AssertionError(f"wrong value for {key}")
                elif op < 0.9:
                    cache.put(key, bytes([key % 256]) * size_of(key))
                elif op < 0.97:
                    cache.pop(key)
                else:
                    cache.invalidate(lambda k: k % 10 == n)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    stats = cache.stats()
    assert stats["hits"] + stats["misses"] == sum(gets)
    assert stats["bytes"] <= 5000
    assert stats["bytes"] == sum(size_of(k) for k in range(100) if k in cache)
    assert stats["entries"] == sum(1 for k in range(100) if k in cache)


def test_get_all_returns_every_value_or_none_and_refreshes_them():
    c = LRUCache(3, sizeof=lambda v: 1)
    for k in "abc":
        c.put(k, k.upper())
    assert c.get_all(["a", "b"]) == {"a": "A", "b": "B"}
    assert c.get_all(["a", "z"]) is None
    c.put("d", "D")  # evicts the least recently used: c (a and b were just used)
    assert "c" not in c and "a" in c and "b" in c
    assert c.get_all([]) == {}
