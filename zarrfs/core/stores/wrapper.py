"""A store seen through an adapter: one delegating type for every view of a store.

``StoreWrapper`` forwards the whole ``Store`` interface (every method, the capability flags and
the URL) to the store it wraps; an adapter overrides only what it changes. Two adapters:

- ``CountingReads``: counts the bytes its reads return, ``open_reader`` reads included (an
  array's ``bytes_fetched``);
- ``DocumentReads``: a whole-object ``get`` reads at most ``limit`` + 1 bytes and refuses a
  longer document with ``MetadataError``, so a huge or sparse metadata file cannot make its
  reader allocate more.

Invariants: a wrapper answers every call its store answers, with the same result and the same
errors, except for what its docstring names; the capability flags are read from the wrapped
store on each access, never copied.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from zarrfs.core.errors import MetadataError
from zarrfs.core.stores.base import (
    ByteRange,
    ObjectReader,
    RangeRequest,
    Store,
    StoreGroup,
    TempObject,
)


class StoreWrapper(Store):
    """Forwards everything to ``inner``."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner

    @property
    def writable(self) -> bool:  # type: ignore[override]
        return self.inner.writable

    @property
    def listable(self) -> bool:  # type: ignore[override]
        return self.inner.listable

    @property
    def url(self) -> str:  # type: ignore[override]
        return self.inner.url

    @property
    def streams_sets(self) -> bool:  # type: ignore[override]
        return self.inner.streams_sets

    @property
    def reads_into(self) -> bool:  # type: ignore[override]
        return self.inner.reads_into

    @property
    def set_width(self) -> int | None:  # type: ignore[override]
        return self.inner.set_width

    def get(self, key: str, byte_range: RangeRequest = None) -> bytes | None:
        return self.inner.get(key, byte_range)

    def get_versioned(
        self, key: str, byte_range: RangeRequest = None
    ) -> tuple[bytes | None, str | None]:
        if type(self).get is not StoreWrapper.get:  # a wrapper that changes reads: through it
            return super().get_versioned(key, byte_range)
        return self.inner.get_versioned(key, byte_range)

    def get_many(self, requests: Sequence[tuple[str, RangeRequest]]) -> list[bytes | None]:
        return self.inner.get_many(requests)

    def open_reader(self, key: str) -> ObjectReader | None:
        return self.inner.open_reader(key)

    def size(self, key: str) -> int | None:
        return self.inner.size(key)

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)

    def version(self, key: str) -> str | None:
        return self.inner.version(key)

    def set(self, key: str, data: bytes | memoryview) -> None:
        self.inner.set(key, data)

    def set_stream(self, key: str, parts: Callable[[], Iterable[bytes | memoryview]]) -> None:
        self.inner.set_stream(key, parts)

    def group(self) -> StoreGroup:
        return self.inner.group()

    def _sees_sets(self) -> bool:
        """A wrapper that observes or changes sets sees every object it stores (it gives no
        temporary objects)."""
        return type(self).set is not StoreWrapper.set or (
            type(self).set_stream is not StoreWrapper.set_stream
        )

    @property
    def builds_objects(self) -> bool:
        return not self._sees_sets() and self.inner.builds_objects

    def open_temp(self, key: str, size: int, building: bool = False) -> TempObject | None:
        if self._sees_sets():
            return None
        return self.inner.open_temp(key, size, building)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        return self.inner.list_dir(prefix)

    def list_prefix(self, prefix: str) -> Iterator[str]:
        return self.inner.list_prefix(prefix)

    def list_sizes(self, prefix: str) -> Iterator[tuple[str, int]]:
        return self.inner.list_sizes(prefix)

    def read_ahead(self, prefixes: Sequence[str]) -> None:
        self.inner.read_ahead(prefixes)

    def close(self) -> None:
        """Nothing: the wrapped store belongs to whoever opened it."""


class CountingReads(StoreWrapper):
    """Counts the bytes every read returns through ``count``."""

    def __init__(self, inner: Store, count: Callable[[int], None]) -> None:
        super().__init__(inner)
        self._count = count

    def get(self, key: str, byte_range: RangeRequest = None) -> bytes | None:
        data = self.inner.get(key, byte_range)
        if data is not None:
            self._count(len(data))
        return data

    def get_versioned(
        self, key: str, byte_range: RangeRequest = None
    ) -> tuple[bytes | None, str | None]:
        data, version = self.inner.get_versioned(key, byte_range)
        if data is not None:
            self._count(len(data))
        return data, version

    def get_many(self, requests: Sequence[tuple[str, RangeRequest]]) -> list[bytes | None]:
        out = self.inner.get_many(requests)
        self._count(sum(len(d) for d in out if d is not None))
        return out

    def open_reader(self, key: str) -> ObjectReader | None:
        reader = self.inner.open_reader(key)
        return None if reader is None else _CountingReader(reader, self._count)


class _CountingReader(ObjectReader):
    """An ``ObjectReader`` counting the bytes its reads return."""

    def __init__(self, inner: ObjectReader, count: Callable[[int], None]) -> None:
        self.inner = inner
        self.size = inner.size
        self._count = count

    def readinto(self, buf: memoryview, offset: int, nowait: bool = False) -> int:
        n = self.inner.readinto(buf, offset, nowait)
        self._count(n)
        return n

    def will_need(self, offset: int, length: int) -> None:
        self.inner.will_need(offset, length)

    def close(self) -> None:
        self.inner.close()


class RecordingVersions(StoreWrapper):
    """Whole-object reads through ``get_versioned``; ``versions`` keeps the version of each
    key read (for the reads of one node: the token then names the bytes that were parsed)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.versions: dict[str, str | None] = {}

    def get(self, key: str, byte_range: RangeRequest = None) -> bytes | None:
        if byte_range is not None:
            return self.inner.get(key, byte_range)
        data, version = self.inner.get_versioned(key)
        self.versions[key] = version
        return data


class DocumentReads(StoreWrapper):
    """A whole-object ``get`` reads at most ``limit`` + 1 bytes and refuses a longer object."""

    def __init__(self, inner: Store, limit: int) -> None:
        super().__init__(inner)
        self.limit = limit

    def get(self, key: str, byte_range: RangeRequest = None) -> bytes | None:
        return self.get_versioned(key, byte_range)[0]

    def get_versioned(
        self, key: str, byte_range: RangeRequest = None
    ) -> tuple[bytes | None, str | None]:
        if byte_range is not None:
            return self.inner.get_versioned(key, byte_range)
        data, version = self.inner.get_versioned(key, ByteRange(0, self.limit + 1))
        if data is not None and len(data) > self.limit:
            raise MetadataError(f"{key}: metadata document larger than {self.limit} bytes")
        return data, version
