"""The on-disk object cache of remote stores: entries keyed by store, key and version, atomic
files that are verified before use, an LRU bound by size, and sharing across openings."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from zarrfs.core.errors import StoreError
from zarrfs.core.stores.base import ByteRange, SuffixRange
from zarrfs.core.stores.diskcache import DiskCache, entry_name

NS = "s3://bucket/store"


def entries(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if not p.name.startswith("."))


def test_round_trip_and_ranges(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, 1 << 20, NS)
    assert cache.version_of("a/c/0") is None
    cache.put("a/c/0", '"e1"', b"0123456789")
    assert cache.version_of("a/c/0") == '"e1"'
    assert cache.read("a/c/0", '"e1"') == b"0123456789"
    assert cache.read("a/c/0", '"e1"', ByteRange(2, 3)) == b"234"
    assert cache.read("a/c/0", '"e1"', SuffixRange(4)) == b"6789"
    assert cache.read("a/c/0", '"e2"') is None  # another version is a miss
    assert (cache.hits, cache.misses) == (3, 1)
    assert entries(tmp_path) == [tmp_path / entry_name(NS, "a/c/0", '"e1"')]


def test_new_version_replaces_the_old_file(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, 1 << 20, NS)
    cache.put("k", "v1", b"old")
    cache.put("k", "v2", b"new")
    assert cache.version_of("k") == "v2"
    assert cache.read("k", "v1") is None
    assert cache.read("k", "v2") == b"new"
    assert entries(tmp_path) == [tmp_path / entry_name(NS, "k", "v2")]


def test_namespaces_do_not_mix(tmp_path: Path) -> None:
    one = DiskCache(tmp_path, 1 << 20, "s3://one")
    two = DiskCache(tmp_path, 1 << 20, "s3://two")
    one.put("k", "v", b"one")
    assert two.version_of("k") is None
    assert two.read("k", "v") is None
    assert one.read("k", "v") == b"one"


def test_lru_bound_by_size(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, 4000, NS)
    for i in range(4):
        cache.put(f"k{i}", "v", bytes([i]) * 900)
    assert cache.read("k0", "v") is not None  # k0 is now the most recent
    cache.put("k4", "v", b"x" * 900)  # over 4000 bytes with headers: evicts k1, the LRU
    assert cache.version_of("k1") is None
    assert [cache.version_of(f"k{i}") for i in (0, 2, 3, 4)] == ["v"] * 4
    assert cache.total_bytes <= 4000
    assert len(entries(tmp_path)) == 4


def test_large_objects_are_not_cached(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, 4000, NS)
    cache.put("small", "v", b"s" * 999)
    cache.put("big", "v", b"b" * 1001)  # more than a quarter of the cache
    assert cache.version_of("small") == "v"
    assert cache.version_of("big") is None


def test_entries_survive_reopening(tmp_path: Path) -> None:
    DiskCache(tmp_path, 1 << 20, NS).put("k", "v", b"kept")
    again = DiskCache(tmp_path, 1 << 20, NS)
    assert again.version_of("k") == "v"
    assert again.read("k", "v", ByteRange(1, 2)) == b"ep"


def test_reopening_with_a_smaller_bound_evicts_oldest_first(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, 1 << 20, NS)
    for i in range(3):
        cache.put(f"k{i}", "v", b"z" * 500)
        path = tmp_path / entry_name(NS, f"k{i}", "v")
        os.utime(path, (time.time() - 100 + i, time.time() - 100 + i))
    small = DiskCache(tmp_path, 1200, NS)
    assert small.version_of("k0") is None
    assert small.version_of("k2") == "v"


def test_damaged_entries_are_dropped_never_served(tmp_path: Path) -> None:
    DiskCache(tmp_path, 1 << 20, NS).put("k", "v", b"A" * 100)
    path = tmp_path / entry_name(NS, "k", "v")
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF  # same length, one byte changed
    path.write_bytes(bytes(raw))
    cache = DiskCache(tmp_path, 1 << 20, NS)
    assert cache.version_of("k") == "v"  # the header is sound ...
    assert cache.read("k", "v", ByteRange(0, 10)) is None  # ... the data is not: dropped
    assert not path.exists()


def test_truncated_or_misnamed_files_are_removed_at_open(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, 1 << 20, NS)
    cache.put("a", "v", b"a" * 100)
    cache.put("b", "v", b"b" * 100)
    a = tmp_path / entry_name(NS, "a", "v")
    a.write_bytes(a.read_bytes()[:-1])
    b = tmp_path / entry_name(NS, "b", "v")
    b.rename(tmp_path / ("0" * 64))  # a valid entry under a name that is not its own
    again = DiskCache(tmp_path, 1 << 20, NS)
    assert again.version_of("a") is None and again.version_of("b") is None
    assert entries(tmp_path) == []


def test_stale_temporary_files_are_removed_fresh_ones_kept(tmp_path: Path) -> None:
    stale, fresh = tmp_path / ".tmp-stale", tmp_path / ".tmp-fresh"
    stale.write_bytes(b"x")
    fresh.write_bytes(b"y")
    old = time.time() - 7200
    os.utime(stale, (old, old))
    DiskCache(tmp_path, 1 << 20, NS)
    assert not stale.exists() and fresh.exists()


def test_an_entry_removed_by_another_process_is_a_miss(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, 1 << 20, NS)
    cache.put("k", "v", b"data")
    (tmp_path / entry_name(NS, "k", "v")).unlink()
    assert cache.read("k", "v") is None
    assert cache.version_of("k") is None


def test_full_disk_disables_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cache = DiskCache(tmp_path, 1 << 20, NS)

    def no_space(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "rename", no_space)
    cache.put("k", "v", b"data")
    assert cache.version_of("k") is None
    assert entries(tmp_path) == []  # the temporary file is gone too
    assert "No space left" in caplog.text
    monkeypatch.undo()
    cache.put("k2", "v", b"data")  # stays off: one warning, no retry storm
    assert cache.version_of("k2") is None


def test_threads_share_one_cache(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, 64 << 10, NS)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(50):
                key, version = f"k{i % 7}", f"v{n}-{i}"
                data = f"{n}:{i}".encode() * 50
                cache.put(key, version, data)
                got = cache.read(key, version)
                assert got in (data, None)  # None: another thread replaced it meanwhile
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert cache.total_bytes == sum(p.stat().st_size for p in entries(tmp_path))


def test_bad_size() -> None:
    with pytest.raises(StoreError):
        DiskCache("/tmp", 0, NS)
