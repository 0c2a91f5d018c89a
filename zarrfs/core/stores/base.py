"""The store interface: a key/value view of a Zarr store, split by capability.

Spec: Zarr v3 core, "Stores" (get, get_partial_values, set, erase, list_dir).

- A key is ``/``-separated, relative, made of non-empty segments that are neither ``.`` nor
  ``..`` and contain no NUL or backslash; ``check_key`` enforces it so no key ever escapes the
  store root. The empty key ``""`` is the root prefix for listing only.
- ``get`` returns None for a missing key; it never raises for absence. A byte range past the end
  is clipped (as HTTP does); a range starting past the end gives ``b""``.
- ``set`` replaces the object all-or-nothing (readers see the old or the new bytes, never a mix).
- Every failure is a ``StoreError`` (``StoreTimeout`` past the deadline); a read-only store raises
  ``ReadOnlyError`` from ``set``/``delete``.
- Stores are thread-safe: the FUSE layer calls them from many worker threads at once.
- ``group()`` stages several sets and makes them durable together (group commit, one
  ``StoreGroup`` per flush); by default each set is stored at once, as ``set`` does.
- ``open_reader`` gives the same bytes as ``get``, read by range into the caller's buffers; a
  store with ``reads_into`` does so without an intermediate copy of the object (the default
  reads the whole object with one ``get``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from zarrfs.core.errors import ReadOnlyError, StoreError


@dataclass(frozen=True)
class ByteRange:
    """Bytes ``[start, start + length)`` of an object; ``length=None`` means to the end."""

    start: int
    length: int | None = None

    def __post_init__(self) -> None:
        if self.start < 0 or (self.length is not None and self.length < 0):
            raise ValueError(f"invalid byte range {self}")


@dataclass(frozen=True)
class SuffixRange:
    """The last ``length`` bytes of an object (the whole object if it is shorter)."""

    length: int

    def __post_init__(self) -> None:
        if self.length < 0:
            raise ValueError(f"invalid suffix range {self}")


RangeRequest = ByteRange | SuffixRange | None


def resolve_range(size: int, byte_range: RangeRequest) -> tuple[int, int]:
    """``(start, length)`` of a range request on an object of ``size`` bytes, clipped."""
    if byte_range is None:
        return 0, size
    if isinstance(byte_range, SuffixRange):
        length = min(byte_range.length, size)
        return size - length, length
    if not isinstance(byte_range, ByteRange):
        raise TypeError(f"not a range request: {byte_range!r}")
    start = byte_range.start
    if start >= size:
        return start, 0
    available = size - start
    return start, available if byte_range.length is None else min(byte_range.length, available)


def check_key(key: str) -> str:
    """Return ``key`` if it is a safe store key, else raise ``StoreError``."""
    if not isinstance(key, str) or not key:
        raise StoreError(f"invalid store key {key!r}")
    if key.startswith("/") or "\\" in key or "\x00" in key:
        raise StoreError(f"invalid store key {key!r}")
    for part in key.split("/"):
        if part in ("", ".", ".."):
            raise StoreError(f"invalid store key {key!r}")
    return key


def check_prefix(prefix: str) -> str:
    """Return a listing prefix (``""`` or a safe key, with or without a trailing ``/``)."""
    if prefix == "":
        return prefix
    check_key(prefix.rstrip("/"))
    return prefix


def slice_range(data: bytes, byte_range: RangeRequest) -> bytes:
    """Apply a range request to a whole object's bytes (clipping like HTTP)."""
    if byte_range is None:
        return data
    if isinstance(byte_range, SuffixRange):
        return data[max(0, len(data) - byte_range.length) :] if byte_range.length else b""
    end = None if byte_range.length is None else byte_range.start + byte_range.length
    return data[byte_range.start : end]


class ObjectReader:
    """One stored object open for range reads into caller buffers (``Store.open_reader``).

    The default holds the object's bytes; stores with ``reads_into`` read from the source on
    each call."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        #: the object's size in bytes when it was opened
        self.size = len(data)

    def readinto(self, buf: memoryview, offset: int, nowait: bool = False) -> int:
        """Fill ``buf`` with the bytes at ``offset``; fewer only at the end of the object.
        With ``nowait``, raise ``BlockingIOError`` instead of waiting for the bytes (a file
        not in the page cache); this one holds them."""
        part = memoryview(self._data)[offset : offset + len(buf)]
        buf[: len(part)] = part
        return len(part)

    def will_need(self, offset: int, length: int) -> None:
        """A hint that these bytes will be read soon (a store may start fetching them)."""

    def close(self) -> None:
        self._data = b""

    def __enter__(self) -> ObjectReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Store(ABC):
    """Readable store. Subclasses set the capability flags and implement the methods they offer."""

    #: set/delete are supported
    writable: bool = False
    #: list_dir/list_prefix are supported (HTTP stores cannot list)
    listable: bool = False
    #: the store's own URL, for messages and ``zarrfs info``
    url: str = ""
    #: ``set_stream`` writes the pieces as they come: the object is never whole in memory
    streams_sets: bool = False
    #: ``open_reader`` reads straight into the caller's buffers (no copy of the whole object)
    reads_into: bool = False
    #: at most this many objects of one flush are encoded and stored at once (None: as many
    #: as the engine has threads). A store whose sets are this process's own work and local
    #: I/O sets it near the CPU count: more threads only take turns holding the interpreter
    #: lock; a store that waits on a network wants them all
    set_width: int | None = None

    @abstractmethod
    def get(self, key: str, byte_range: RangeRequest = None) -> bytes | None:
        """The object's bytes (or the requested range); None if the key is missing."""

    def get_many(self, requests: Sequence[tuple[str, RangeRequest]]) -> list[bytes | None]:
        """Several reads; remote stores override to fetch concurrently and coalesce ranges."""
        return [self.get(key, rng) for key, rng in requests]

    def open_reader(self, key: str) -> ObjectReader | None:
        """The object open for range reads (see ``ObjectReader``); None if the key is missing."""
        data = self.get(key)
        return None if data is None else ObjectReader(data)

    def size(self, key: str) -> int | None:
        """The object's size in bytes, or None if missing."""
        data = self.get(key)
        return None if data is None else len(data)

    def exists(self, key: str) -> bool:
        return self.size(key) is not None

    def version(self, key: str) -> str | None:
        """An opaque token that changes whenever the object changes (mtime+size, ETag);
        None if the key is missing."""
        data = self.get(key)
        return None if data is None else f"{len(data)}:{hash(data)}"

    def get_versioned(
        self, key: str, byte_range: RangeRequest = None
    ) -> tuple[bytes | None, str | None]:
        """``get`` and a ``version`` of the object that is never newer than the bytes
        returned (None, None if the key is missing). A store that learns the version from the
        read itself says so in one request; the default asks for the version first, so a
        change racing the read leaves an older token (re-read on the next check), never a
        token newer than the bytes (a change missed)."""
        version = self.version(key)
        data = self.get(key, byte_range)
        return data, (None if data is None else version)

    def set(self, key: str, data: bytes | memoryview) -> None:
        """Store ``data`` under ``key``, replacing any object all-or-nothing."""
        raise ReadOnlyError(f"store {self.url or type(self).__name__} is read-only")

    def set_stream(self, key: str, parts: Callable[[], Iterable[bytes | memoryview]]) -> None:
        """``set`` of the concatenation of the pieces ``parts()`` yields, all-or-nothing.

        If ``parts()`` raises, nothing is stored. Stores with ``streams_sets`` write each piece
        as it comes; they may call ``parts`` again to retry from the start. The default joins
        the pieces and calls ``set``."""
        self.set(key, b"".join(parts()))

    def group(self) -> StoreGroup:
        """A group of sets made durable together (see ``StoreGroup``). The default stores
        each set at once; the directory store overrides it to sync a flush's objects
        together."""
        return StoreGroup(self)

    @property
    def builds_objects(self) -> bool:
        """Whether ``open_temp(..., building=True)`` gives objects here (not None)."""
        return False

    def open_temp(self, key: str, size: int, building: bool = False) -> TempObject | None:
        """A new object for ``key`` of ``size`` bytes, written front to back while it is
        produced and invisible until a group of this store adopts it (``StoreGroup.adopt``);
        None where the store cannot (the default): the object is then ``set`` as usual.

        With ``building``, an object put together from pieces over time (a shard built while
        a writer fills it, ``core/sharding/builder.py``): ``size`` is only a guess (nothing is
        reserved for it), and what was appended can be read back (``TempObject.read``)."""
        return None

    def delete(self, key: str) -> None:
        """Remove ``key`` (no error if it is missing)."""
        raise ReadOnlyError(f"store {self.url or type(self).__name__} is read-only")

    def list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        """Immediate children of ``prefix`` (``""`` or ``"a/b/"``): (key names, sub-prefix names),
        each sorted, names relative to ``prefix`` without slashes."""
        raise StoreError(f"store {self.url or type(self).__name__} cannot list")

    def list_prefix(self, prefix: str) -> Iterator[str]:
        """Every key under ``prefix`` (full keys), in no particular order."""
        raise StoreError(f"store {self.url or type(self).__name__} cannot list")

    def list_sizes(self, prefix: str) -> Iterator[tuple[str, int]]:
        """(key, size) of every key under ``prefix``; object stores answer from one listing."""
        for key in self.list_prefix(prefix):
            size = self.size(key)
            if size is not None:
                yield key, size

    def read_ahead(self, prefixes: Sequence[str]) -> None:
        """Hint: the nodes at ``prefixes`` are about to be listed (a tree walk); a store may
        start reading their metadata ahead. Never blocks; the default does nothing."""

    def close(self) -> None:
        """Release connections and file handles."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StoreGroup:
    """Sets staged together and committed together (group commit).

    ``set``/``set_stream`` stage an object, ``commit`` makes every staged object visible and
    durable, ``abort`` drops what is staged and not committed yet. Invariants, whatever the
    store:

    - after ``commit`` returns, every staged object is stored as by ``Store.set``; if it
      raises, any of them may or may not be stored (the caller treats all as unstored);
    - each object is replaced all-or-nothing: a failure or a crash at any point leaves the
      old or the new bytes of each key, never a mix;
    - a key is staged at most once per group; staging is thread-safe (the worker threads of
      one flush stage into one group). Deletes are not staged: ``Store.delete`` at once.

    This default stores each object when it is staged (the behaviour of ``Store.set``), so
    ``commit`` and ``abort`` have nothing left to do.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    def set(self, key: str, data: bytes | memoryview) -> None:
        self.store.set(key, data)

    def set_stream(self, key: str, parts: Callable[[], Iterable[bytes | memoryview]]) -> None:
        self.store.set_stream(key, parts)

    def adopt(self, temp: TempObject) -> bool:
        """Stage ``temp`` (complete: every byte appended) as ``set`` would stage its bytes;
        False where the group cannot (the default; ``temp`` is then left to the caller)."""
        return False

    def commit(self) -> None:
        """Make every staged object visible and durable."""

    def abort(self) -> None:
        """Drop the staged objects that are not committed (never raises)."""


class TempObject:
    """A new object being written front to back (``Store.open_temp``), not visible under its
    key until a ``StoreGroup`` of its store adopts it and commits. Used by one thread at a
    time; ``discard`` unlinks it and may be called at any point (never raises)."""

    key: str = ""

    def append(self, data: memoryview) -> None:
        """Write ``data`` (a byte view, not kept after the call) after the bytes so far."""
        raise NotImplementedError

    def finish(self) -> None:
        """Every byte is appended: make them durable now, ahead of the adoption (the default
        does nothing; adoption and commit do what is left)."""

    def discard(self) -> None:
        """Drop the object (its storage is freed; nothing becomes visible)."""

    def read(self, offset: int, size: int) -> bytes:
        """Bytes ``[offset, offset + size)`` of what was appended (an object opened
        ``building``); they stay readable after ``finish``, adoption, a commit and even
        ``discard`` or a failed commit, until ``release``."""
        raise NotImplementedError

    def release(self) -> None:
        """Let go of what ``read`` needs (idempotent; the object itself is not touched)."""
