"""In-memory store: a dict of immutable ``bytes`` behind one lock.

Spec: Zarr v3 core, "Stores" (readable, writeable and listable store).

Invariants:
- values are stored as ``bytes`` copies, so a caller mutating its buffer after ``set`` never
  changes the stored object, and a reader always gets one whole value (old or new);
- every key passes ``check_key``; listing prefixes pass ``check_prefix``;
- ``MemoryStore.named(name)`` returns the same store for the same name for the life of the
  process: ``memory://name`` URLs opened by tests and by the CLI in one process share data.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from typing import ClassVar

from zarrfs.core.errors import ReadOnlyError
from zarrfs.core.stores.base import (
    RangeRequest,
    Store,
    check_key,
    check_prefix,
    slice_range,
)


def _dir_prefix(prefix: str) -> str:
    """A checked listing prefix with exactly one trailing ``/`` (or ``""`` for the root)."""
    check_prefix(prefix)
    prefix = prefix.rstrip("/")
    return prefix + "/" if prefix else ""


class MemoryStore(Store):
    """A writable, listable store held in this process's memory."""

    listable = True

    _named: ClassVar[dict[str, MemoryStore]] = {}
    _named_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, *, read_only: bool = False, name: str | None = None) -> None:
        # key -> (value, generation); the generation is unique per set, for ``version``
        self._data: dict[str, tuple[bytes, int]] = {}
        self._lock = threading.Lock()
        self._generation = itertools.count(1)
        self.writable = not read_only
        self.name = name
        self.url = f"memory://{name}" if name is not None else f"memory://<anonymous {id(self):x}>"

    @classmethod
    def named(cls, name: str) -> MemoryStore:
        """The process-wide store called ``name``, created empty on first use."""
        with cls._named_lock:
            store = cls._named.get(name)
            if store is None:
                store = cls._named[name] = cls(name=name)
            return store

    @classmethod
    def forget(cls, name: str) -> None:
        """Drop the process-wide store ``name`` (its data goes once nobody holds it)."""
        with cls._named_lock:
            cls._named.pop(name, None)

    def read_only_view(self) -> MemoryStore:
        """A read-only store sharing this store's data."""
        view = MemoryStore(read_only=True, name=self.name)
        view._data = self._data
        view._lock = self._lock
        view._generation = self._generation
        return view

    # -- readable ---------------------------------------------------------------------------

    def _lookup(self, key: str) -> tuple[bytes, int] | None:
        check_key(key)
        with self._lock:
            return self._data.get(key)

    def get(self, key: str, byte_range: RangeRequest = None) -> bytes | None:
        entry = self._lookup(key)
        return None if entry is None else slice_range(entry[0], byte_range)

    def size(self, key: str) -> int | None:
        entry = self._lookup(key)
        return None if entry is None else len(entry[0])

    def version(self, key: str) -> str | None:
        entry = self._lookup(key)
        return None if entry is None else f"{entry[1]}:{len(entry[0])}"

    # -- writeable --------------------------------------------------------------------------

    def _check_writable(self) -> None:
        if not self.writable:
            raise ReadOnlyError(f"store {self.url} is read-only")

    def set(self, key: str, data: bytes | memoryview) -> None:
        self._check_writable()
        check_key(key)
        value = bytes(data)
        with self._lock:
            self._data[key] = (value, next(self._generation))

    def delete(self, key: str) -> None:
        self._check_writable()
        check_key(key)
        with self._lock:
            self._data.pop(key, None)

    # -- listable ---------------------------------------------------------------------------

    def list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        prefix = _dir_prefix(prefix)
        files: set[str] = set()
        dirs: set[str] = set()
        with self._lock:
            keys = list(self._data)
        for key in keys:
            if not key.startswith(prefix):
                continue
            head, sep, _ = key[len(prefix) :].partition("/")
            (dirs if sep else files).add(head)
        return sorted(files), sorted(dirs)

    def list_prefix(self, prefix: str) -> Iterator[str]:
        prefix = _dir_prefix(prefix)
        with self._lock:
            keys = list(self._data)
        return iter([key for key in keys if key.startswith(prefix)])
