"""Byte-bounded LRU caches (decoded chunks, shard indexes, metadata documents).

Not a Zarr spec section: an engine component (DESIGN.md §5, ``cache.py``).

Invariants:
- ``nbytes`` (the sum of the cached entries' sizes) never exceeds ``capacity``: a ``put``
  evicts least-recently-used entries until the new one fits, and an entry larger than the whole
  capacity is not cached at all (and replaces nothing: an older value under its key is dropped,
  so the cache never serves a value older than the last ``put``).
- One lock guards all state; every operation is O(1) except ``invalidate`` (O(entries)).
- ``get`` refreshes recency; ``put`` of an existing key replaces it and refreshes recency.
- Cached values are shared, not copied: callers must treat them as immutable.
- An entry's size is the ``size`` given to ``put``, else ``sizeof(value)``; the default sizeof
  counts ``nbytes`` (numpy arrays, memoryviews) or ``len`` (bytes, bytearray, str).
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def default_sizeof(value: Any) -> int:
    """Bytes a cached value holds: ``nbytes`` if it has one, ``len`` for byte strings,
    else the object's shallow size (pass an explicit size for anything nested)."""
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    if isinstance(value, (bytes, bytearray, str)):
        return len(value)
    return sys.getsizeof(value)


class LRUCache(Generic[K, V]):
    """A thread-safe least-recently-used cache bounded by the total size of its values."""

    def __init__(self, capacity: int, sizeof: Callable[[V], int] = default_sizeof) -> None:
        if capacity < 0:
            raise ValueError(f"cache capacity must be >= 0, got {capacity}")
        self._capacity = capacity
        self._sizeof = sizeof
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._nbytes = 0
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0
        self._evictions = 0
        self._rejected = 0

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def nbytes(self) -> int:
        return self._nbytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        """Membership without touching recency or the hit/miss counters."""
        with self._lock:
            return key in self._entries

    def get(self, key: K, default: V | None = None, count: bool = True) -> V | None:
        """The cached value (now most recently used), or ``default``; ``count=False`` leaves
        the hit/miss counters alone (a probe that falls back to a counted lookup)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self._misses += count
                return default
            self._entries.move_to_end(key)
            self._hits += count
            return entry[0]

    def get_all(self, keys: Iterable[K]) -> dict[K, V] | None:
        """Every key's value (each now most recently used), or None if one is missing; one
        lock round for all, no hit/miss counting (a probe with a counted fallback)."""
        out: dict[K, V] = {}
        with self._lock:
            entries = self._entries
            for key in keys:
                entry = entries.get(key)
                if entry is None:
                    return None
                out[key] = entry[0]
            for key in out:
                entries.move_to_end(key)
        return out

    def put(self, key: K, value: V, size: int | None = None) -> bool:
        """Cache ``value`` under ``key``; False if it is too large to be cached."""
        if size is None:
            size = self._sizeof(value)
        if size < 0:
            raise ValueError(f"cache entry size must be >= 0, got {size}")
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._nbytes -= old[1]
            if size > self._capacity or self._capacity == 0:
                self._rejected += 1
                return False
            self._evict_to(self._capacity - size)
            self._entries[key] = (value, size)
            self._nbytes += size
            return True

    def pop(self, key: K, default: V | None = None) -> V | None:
        """Remove ``key`` and return its value (``default`` if it was not cached)."""
        with self._lock:
            entry = self._entries.pop(key, None)
            if entry is None:
                return default
            self._nbytes -= entry[1]
            return entry[0]

    def invalidate(self, match: Callable[[K], bool] | str) -> int:
        """Drop every entry whose key matches; return how many were dropped.

        ``match`` is a predicate on keys, or a string prefix: it matches ``str`` keys starting
        with it and tuple keys whose first element is such a string (``(path, coords)``).
        """
        predicate: Callable[[K], bool]
        if isinstance(match, str):
            prefix = match

            def has_prefix(key: K) -> bool:
                head = key[0] if isinstance(key, tuple) and key else key
                return isinstance(head, str) and head.startswith(prefix)

            predicate = has_prefix
        else:
            predicate = match
        with self._lock:
            doomed = [key for key in self._entries if predicate(key)]
            for key in doomed:
                _, size = self._entries.pop(key)
                self._nbytes -= size
            return len(doomed)

    def clear(self) -> None:
        """Drop every entry (the counters keep counting)."""
        with self._lock:
            self._entries.clear()
            self._nbytes = 0

    def resize(self, capacity: int) -> None:
        """Change the capacity, evicting least-recently-used entries to fit."""
        if capacity < 0:
            raise ValueError(f"cache capacity must be >= 0, got {capacity}")
        with self._lock:
            self._capacity = capacity
            self._evict_to(capacity)

    def _evict_to(self, nbytes: int) -> None:
        """Evict least-recently-used entries until at most ``nbytes`` remain (lock held)."""
        while self._nbytes > nbytes:
            _, (_, size) = self._entries.popitem(last=False)
            self._nbytes -= size
            self._evictions += 1

    def stats(self) -> dict[str, int]:
        """Counters for ``stats.json``: hits, misses, evictions, rejected (too large),
        entries, bytes (cached now) and capacity."""
        with self._lock:
            return {
                "hits": self._hits,
                "misses": self._misses,
                "evictions": self._evictions,
                "rejected": self._rejected,
                "entries": len(self._entries),
                "bytes": self._nbytes,
                "capacity": self._capacity,
            }
