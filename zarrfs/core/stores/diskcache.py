"""On-disk cache of whole stored objects for remote stores (``-o disk_cache=DIR``,
``disk_cache_size=SIZE``).

A remote store keeps the objects it reads whole (encoded chunks, shards, metadata documents)
in a local directory, keyed by (store, key, version), and revalidates them with
``If-None-Match: <version>``: a 304 serves the cached bytes, so an unchanged object costs one
round trip and no transfer.

Invariants:
- Entry identity. An entry file is named ``sha256(namespace, key, version)``: the bytes of
  ``key`` in store ``namespace`` (its URL) at ``version`` (its ETag). A new version is a new
  file; the old one is deleted after it. At most one version per key is indexed.
- Atomic entries. A file is written under a unique temporary name in the cache directory and
  renamed into place, so no reader sees a partial file under an entry name. Its header records
  namespace, key, version, data length and CRC-32C of the data. An entry whose file disagrees
  with its header or its name (torn by a crash, truncated, edited) is deleted and read as a
  miss, never served. The CRC is checked at the first read of an entry in this process, and at
  every whole read.
- Size bound. The entries' total size stays at or under ``max_bytes``: least recently used
  entries are deleted first; an object larger than a quarter of ``max_bytes`` is not cached.
- Sharing. Several processes may use one directory (each bounds what it indexed: the entries
  found when it opened plus its own); an entry deleted by another process is a miss.
  Temporary files older than an hour are leftovers of a crash and are removed at open.
- Failures of the cache (full disk, permissions) are logged once and make it a no-op; they
  never fail a read or write of the store. Thread-safe.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import struct
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import crc32c

from zarrfs.core.errors import StoreError
from zarrfs.core.stores.base import RangeRequest, resolve_range, slice_range

log = logging.getLogger(__name__)

DEFAULT_SIZE = 1 << 30
_MAGIC = b"ZFSDC01\n"
_HEADER = struct.Struct("<8sIIIQI")  # magic, len(namespace), len(key), len(version), size, crc
_TEMP_PREFIX = ".tmp-"
_STALE_TEMP_S = 3600.0


@dataclass
class _Entry:
    name: str
    namespace: str
    key: str
    version: str
    size: int  # bytes of data
    file_size: int


def entry_name(namespace: str, key: str, version: str) -> str:
    digest = hashlib.sha256()
    for part in (namespace, key, version):
        raw = part.encode("utf-8", "surrogatepass")
        digest.update(len(raw).to_bytes(8, "little") + raw)
    return digest.hexdigest()


class DiskCache:
    """Whole objects of one store (``namespace``) in ``directory``, LRU-bounded by size."""

    def __init__(self, directory: str | os.PathLike[str], max_bytes: int, namespace: str) -> None:
        if max_bytes <= 0:
            raise StoreError("disk cache size must be positive")
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.namespace = namespace
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._lru: OrderedDict[str, _Entry] = OrderedDict()  # name -> entry, oldest first
        self._by_key: dict[tuple[str, str], str] = {}  # (namespace, key) -> name
        self._total = 0
        self._verified: set[str] = set()
        self._broken = False
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._scan()
        except OSError as exc:
            raise StoreError(f"disk cache {self.directory}: {exc.strerror or exc}") from exc

    # -- index ------------------------------------------------------------------------------

    def _scan(self) -> None:
        found: list[tuple[float, _Entry]] = []
        now = time.time()
        for item in os.scandir(self.directory):
            if item.name.startswith(_TEMP_PREFIX):
                try:
                    if now - item.stat().st_mtime > _STALE_TEMP_S:
                        os.unlink(item.path)
                except OSError:
                    pass
                continue
            if len(item.name) != 64 or not item.is_file(follow_symlinks=False):
                continue
            entry = self._read_header(item.name)
            if entry is None:
                self._unlink(item.name)
                continue
            found.append((item.stat().st_mtime, entry))
        for _, entry in sorted(found, key=lambda pair: pair[0]):
            self._index(entry)
        self._evict()

    def _index(self, entry: _Entry) -> None:
        """Add ``entry`` as the newest (lock held or during open)."""
        old = self._by_key.get((entry.namespace, entry.key))
        if old is not None and old != entry.name:
            self._drop(old, unlink=True)
        if entry.name in self._lru:
            self._total -= self._lru[entry.name].file_size
        self._lru[entry.name] = entry
        self._lru.move_to_end(entry.name)
        self._by_key[(entry.namespace, entry.key)] = entry.name
        self._total += entry.file_size

    def _drop(self, name: str, unlink: bool) -> None:
        entry = self._lru.pop(name, None)
        if entry is None:
            return
        self._total -= entry.file_size
        if self._by_key.get((entry.namespace, entry.key)) == name:
            del self._by_key[(entry.namespace, entry.key)]
        self._verified.discard(name)
        if unlink:
            self._unlink(name)

    def _evict(self) -> None:
        while self._total > self.max_bytes and self._lru:
            self._drop(next(iter(self._lru)), unlink=True)

    def _unlink(self, name: str) -> None:
        try:
            os.unlink(self.directory / name)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.debug("disk cache: cannot remove %s: %s", name, exc)

    # -- files ------------------------------------------------------------------------------

    def _read_header(self, name: str) -> _Entry | None:
        """The entry a file holds, if its header is sound and matches its name and size."""
        try:
            with open(self.directory / name, "rb") as f:
                head = f.read(_HEADER.size)
                if len(head) != _HEADER.size:
                    return None
                magic, n_ns, n_key, n_ver, size, _ = _HEADER.unpack(head)
                if magic != _MAGIC or max(n_ns, n_key, n_ver) > 1 << 16:
                    return None
                raw = f.read(n_ns + n_key + n_ver)
                file_size = os.fstat(f.fileno()).st_size
        except OSError:
            return None
        if len(raw) != n_ns + n_key + n_ver:
            return None
        try:
            namespace = raw[:n_ns].decode("utf-8", "surrogatepass")
            key = raw[n_ns : n_ns + n_key].decode("utf-8", "surrogatepass")
            version = raw[n_ns + n_key :].decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            return None
        if file_size != _HEADER.size + len(raw) + size:
            return None
        if entry_name(namespace, key, version) != name:
            return None
        return _Entry(name, namespace, key, version, size, file_size)

    def version_of(self, key: str) -> str | None:
        """The version cached for ``key`` (to revalidate with If-None-Match), or None."""
        with self._lock:
            name = self._by_key.get((self.namespace, key))
            return None if name is None else self._lru[name].version

    def read(self, key: str, version: str, byte_range: RangeRequest = None) -> bytes | None:
        """Cached bytes of ``key`` at ``version`` (or the range), or None (a miss)."""
        name = entry_name(self.namespace, key, version)
        with self._lock:
            entry = self._lru.get(name)
            verified = name in self._verified
        data = None if entry is None else self._load(entry, byte_range, verified)
        with self._lock:
            if data is None:
                self.misses += 1
                if entry is not None:
                    self._drop(name, unlink=True)
                return None
            self.hits += 1
            if name in self._lru:
                self._lru.move_to_end(name)
                self._verified.add(name)
        return data

    def _load(self, entry: _Entry, byte_range: RangeRequest, verified: bool) -> bytes | None:
        offset = entry.file_size - entry.size
        try:
            with open(self.directory / entry.name, "rb") as f:
                head = f.read(offset)
                if len(head) != offset or os.fstat(f.fileno()).st_size != entry.file_size:
                    return None
                crc = _HEADER.unpack(head[: _HEADER.size])[5]
                if byte_range is not None and verified:
                    start, length = resolve_range(entry.size, byte_range)
                    data = os.pread(f.fileno(), length, offset + start) if length else b""
                    return data if len(data) == length else None
                data = f.read()
        except OSError:
            return None
        if len(data) != entry.size or crc32c.crc32c(data) != crc:
            log.warning("disk cache: entry for %r is damaged; dropping it", entry.key)
            return None
        return slice_range(data, byte_range)

    def put(self, key: str, version: str, data: bytes) -> None:
        """Cache ``data`` as ``key`` at ``version`` (replacing other versions of ``key``)."""
        if self._broken or len(data) > self.max_bytes // 4:
            self.discard(key)
            return
        name = entry_name(self.namespace, key, version)
        fields = [s.encode("utf-8", "surrogatepass") for s in (self.namespace, key, version)]
        header = _HEADER.pack(_MAGIC, *(len(f) for f in fields), len(data), crc32c.crc32c(data))
        temp = self.directory / f"{_TEMP_PREFIX}{secrets.token_hex(8)}"
        try:
            with open(temp, "wb") as f:
                f.write(header)
                for raw in fields:
                    f.write(raw)
                f.write(data)
            os.rename(temp, self.directory / name)
        except OSError as exc:
            self._unlink(temp.name)
            if not self._broken:
                log.warning("disk cache %s disabled: %s", self.directory, exc.strerror or exc)
            self._broken = True
            self.discard(key)
            return
        entry = _Entry(name, self.namespace, key, version, len(data),
                       _HEADER.size + sum(map(len, fields)) + len(data))  # fmt: skip
        with self._lock:
            self._index(entry)
            self._verified.add(name)
            self._evict()

    def discard(self, key: str) -> None:
        """Forget any cached version of ``key``."""
        with self._lock:
            name = self._by_key.get((self.namespace, key))
            if name is not None:
                self._drop(name, unlink=True)

    @property
    def total_bytes(self) -> int:
        with self._lock:
            return self._total

    def close(self) -> None:
        """Nothing to flush: every entry is complete on disk once ``put`` returns."""


def open_disk_cache(directory: str, size: int | None, namespace: str) -> DiskCache:
    return DiskCache(directory, DEFAULT_SIZE if size is None else int(size), namespace)
