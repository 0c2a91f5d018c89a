"""ZarrArray: an array seen as one flat C-order file of decoded bytes.

The one facade the views use. It reads and writes any byte range of the decoded array (and of
each chunk, seen as a file of the full chunk shape), in a chosen byte order, through the array's
codec chain. The write-path protocol and the lock order are documented in
``docs/write-path.md``. The class is assembled from parts, one module each: ``arraybase`` (shared
state, geometry), ``readpath``, ``flushing`` (the dirty set), ``writepath``, and ``units`` (plain
chunks or inner chunks of shards, chosen once); ``engine`` holds what the arrays of a mount share.

Units. Data moves in *units*: the chunks of the regular grid, or — when the codec chain is a
plain ``sharding_indexed`` codec (no other codec before or after it, so inner chunks can be
fetched by byte range) — the inner chunks of the shards. Units live on a grid over the
*extended* array (the shape rounded up to whole chunks), so edge chunks keep their full shape
and ``chunks/`` files can show the part beyond the array edge.

Invariants:
- a clean unit array (cache, in-flight load) is never mutated; a dirty unit is mutated only
  under its stripe lock while it is in ``_dirty`` and not frozen by a flush in progress;
- readers copy from a dirty unit under its stripe lock, so they see each write whole or not at all;
- a load that overlapped a flush commit is not cached (``_epoch``), so caches never go stale
  through our own writes;
- a missing unit reads as the fill value without any decoding; a unit that fails to load raises
  (``CorruptDataError``/``StoreError``) and is never replaced by the fill value;
- a chunk is fetched with a byte range of at most its chain's ``max_encoded_size`` + 1 bytes, so
  an oversized stored object (a huge or sparse file, a zip member claiming gigabytes) costs no
  more memory than a valid chunk before it is refused as corrupt;
- ``write`` loads every partially covered unit before it changes anything, so a write that needs
  a unit that fails to load changes nothing.
"""

from __future__ import annotations

import time

import numpy as np

from zarrfs.core.codecs.base import ChunkSpec
from zarrfs.core.direct import MIN_READ
from zarrfs.core.engine import Engine
from zarrfs.core.errors import InvalidWriteError, ReadOnlyError, ZarrFSError
from zarrfs.core.flushing import DirtyState
from zarrfs.core.grid import RegularGrid, chunks_outside, edge_chunks, grid_difference
from zarrfs.core.stores.base import ByteRange
from zarrfs.core.writepath import WritePath

__all__ = ["DirtyState", "Engine", "ZarrArray"]

Coords = tuple[int, ...]

#: a shrink deletes up to this many chunk keys one by one; more are found by listing (a store
#: that cannot list refuses such a shrink)
_MAX_BLIND_DELETES = 1 << 16


class ZarrArray(WritePath):
    """Byte-range reads and writes of one array. Thread-safe.

    ``store``, ``path``, ``metadata``, ``engine``: what it is; ``save_metadata(own, shape)``
    stores the metadata resized and returns what it stored (``resize``); ``edit_lock`` is the
    node's metadata edit lock (``Hierarchy.edit_lock``)."""

    # ------------------------------------------------------------------ reading

    def read(self, offset: int, size: int, byte_order: str = "little") -> bytes:
        """Bytes ``[offset, offset+size)`` of the C-order decoded array (clipped at the end)."""
        return bytes(self.read_buffer(offset, size, byte_order))

    def read_buffer(self, offset: int, size: int, byte_order: str = "little") -> memoryview:
        """``read`` without the final copy: a read-only view of a buffer owned by the caller
        from now on (the FUSE reply is sent straight from it)."""
        data = self._read_array(offset, size, byte_order, cached_only=False)
        assert data is not None
        return data

    def read_cached(self, offset: int, size: int, byte_order: str = "little") -> memoryview | None:
        """``read_buffer`` if it needs nothing but clean cached units, else None.

        Never waits on I/O, a load or a stripe lock (only on the short critical sections of the
        caches), so an event loop may call it inline and fall back to a worker thread on None.
        A sequential reader served this way still starts the prefetch of what comes next."""
        return self._read_array(offset, size, byte_order, cached_only=True)

    def _read_array(
        self, offset: int, size: int, byte_order: str, cached_only: bool
    ) -> memoryview | None:
        # units not in memory are read from their stored files (plain-bytes chunks only;
        # core/direct.py) for large or sequential reads; a small random read loads its unit
        # whole into the cache, where the reads near it find it
        direct = self.engine.direct_reads and (size >= MIN_READ or self._reads_sequentially(offset))
        data = self._read_view(
            (0,) * len(self.shape), self.shape, offset, size, byte_order, cached_only, direct
        )
        if data and self.engine.prefetch_bytes:
            self._maybe_prefetch(offset, len(data), direct)
        return data

    def read_chunk(
        self, coords: Coords, offset: int, size: int, byte_order: str = "little"
    ) -> bytes:
        """Bytes of chunk ``coords`` seen as a C-order file of the full chunk shape."""
        return bytes(self.read_chunk_buffer(coords, offset, size, byte_order))

    def read_chunk_buffer(
        self, coords: Coords, offset: int, size: int, byte_order: str = "little"
    ) -> memoryview:
        """``read_chunk`` as a read-only view (see ``read_buffer``)."""
        data = self._read_chunk_view(coords, offset, size, byte_order, cached_only=False)
        assert data is not None
        return data

    def read_chunk_cached(
        self, coords: Coords, offset: int, size: int, byte_order: str = "little"
    ) -> memoryview | None:
        """``read_chunk_buffer`` from clean cached units only, else None (``read_cached``)."""
        return self._read_chunk_view(coords, offset, size, byte_order, cached_only=True)

    def _read_chunk_view(
        self, coords: Coords, offset: int, size: int, byte_order: str, cached_only: bool
    ) -> memoryview | None:
        self._check_chunk(coords)
        origin = self.grid.chunk_origin(coords)
        return self._read_view(
            origin, self.metadata.chunk_shape, offset, size, byte_order, cached_only
        )

    # ------------------------------------------------------------------ writing

    def write(self, offset: int, data: bytes, byte_order: str = "little") -> None:
        """Write bytes at ``offset`` of the C-order decoded array (buffered until ``flush``)."""
        self._write_view(None, offset, data, byte_order)

    def write_cached(self, offset: int, data: bytes, byte_order: str = "little") -> bool:
        """``write``, if it can be done now without waiting: whole elements into units that
        are dirty already or written whole (rows), no store access, no flush, no lock held
        by another writer. Returns False otherwise, with nothing changed or with part of the
        bytes applied (writing them again then gives the same result), so an event loop may
        call it inline and hand the write to a worker thread on False."""
        if offset < 0 or offset + len(data) > self.nbytes:
            return False
        try:
            return self._write_view(None, offset, data, byte_order, inline=True)
        except InvalidWriteError:  # the shape changed meanwhile: the worker thread reports it
            return False

    def write_chunk(
        self, coords: Coords, offset: int, data: bytes, byte_order: str = "little"
    ) -> None:
        """Write into chunk ``coords`` seen as a C-order file of the full chunk shape."""
        self._check_chunk(coords)
        self._write_view(tuple(coords), offset, data, byte_order)

    # ------------------------------------------------------------------ resizing

    def resize(self, shape: tuple[int, ...]) -> None:
        """Change the shape (axis 0 only through the views). Chunks wholly outside the new
        shape are deleted; the part of an edge chunk beyond the edge is reset to the fill value
        so that growing later shows fill values, never old data.

        Takes the node's ``_edit_lock`` (so a metadata edit committed meanwhile cannot write
        back the old shape), then ``_flush_lock`` and ``_write_lock`` (the order every flush
        takes them), and holds all three to the end: no flush or write of this array runs
        meanwhile, and a write that was waiting is then checked against the new shape."""
        if self.engine.read_only or not self.store.writable:
            raise ReadOnlyError(f"{self.path or '/'}: read-only")
        if len(shape) != len(self.shape) or any(s < 0 for s in shape):
            raise InvalidWriteError(f"invalid new shape {shape}")
        save = self._save_metadata
        if save is None:
            raise InvalidWriteError("this array cannot be resized")
        shape = tuple(shape)
        self.metadata.with_shape(shape)  # (refused now if it is: before anything changes)
        with self._edit_lock, self._flush_lock:
            self._flush_locked()  # before taking the write lock: writers go on meanwhile
            with self._write_lock:
                old = self.grid
                new = RegularGrid(shape, self.metadata.chunk_shape)
                doomed = chunks_outside(old, new)
                if not self.store.listable and doomed > _MAX_BLIND_DELETES:
                    raise InvalidWriteError(
                        f"shrinking would delete up to {doomed} chunks, and the store cannot "
                        "list which exist"
                    )
                # reset the parts of kept edge chunks that fall outside the smaller shape
                small = tuple(min(a, b) for a, b in zip(old.shape, new.shape))
                small_grid = RegularGrid(small, self.metadata.chunk_shape)
                changed = [k for k, (a, b) in enumerate(zip(old.shape, shape)) if a != b]
                added = 0
                for coords in edge_chunks(small_grid, changed):
                    if new.contains(coords) and old.contains(coords):
                        added += self._fill_outside(coords, small_grid.chunk_extent(coords))
                if added:
                    self.engine.add_dirty(added)
                self._flush_locked()
                if doomed:
                    self._delete_outside(old, new)
                self.metadata = save(self.metadata, shape)
                self._set_shape(shape)
                self.mtime_ns = time.time_ns()  # every byte of data.raw may have moved
                with self._lock:
                    self._epoch += 1
                    self._stored_bytes = None
        self.engine.chunk_cache.invalidate(lambda k: k[0] == self.uid)
        self.engine.index_cache.invalidate(lambda k: k[0] == self.uid)

    def _fill_outside(self, coords: Coords, keep: tuple[int, ...]) -> int:
        """Set the elements of chunk ``coords`` at or beyond ``keep`` (per axis) to fill
        (``_write_lock`` held); returns the bytes newly made dirty."""
        cshape = tuple(self.metadata.chunk_shape)
        if keep == cshape:
            return 0
        if self.store.get(self.chunk_key(coords), ByteRange(0, 1)) is None and not self.sharded:
            return 0
        self.check_unit_size("resizing", writing=True)  # (before reading the chunk whole)
        origin = self.grid.chunk_origin(coords)
        full = self._read_view(origin, cshape, 0, self.chunk_nbytes, "native")
        assert full is not None
        arr = np.frombuffer(full, dtype=self.dtype.newbyteorder("=")).reshape(cshape).copy()
        mask = np.zeros(cshape, dtype=bool)
        mask[tuple(slice(0, k) for k in keep)] = True
        arr[~mask] = self._chunk_spec.fill_value
        return self._write_locked(origin, cshape, 0, arr.tobytes(), "native")

    def _delete_outside(self, old: RegularGrid, new: RegularGrid) -> None:
        """Delete the stored chunks of ``old`` that ``new`` does not contain: the keys the
        store lists under the array's prefix when it can list and the difference is large,
        else every coordinate of the difference (never the whole old grid)."""
        if self.store.listable and chunks_outside(old, new) > _MAX_BLIND_DELETES:
            prefix = self.metadata.chunk_store_prefix(self.path)
            encoding = self.metadata.chunk_key_encoding
            doomed = []
            for key in self.store.list_prefix(prefix):
                coords = encoding.decode(key[len(prefix) :], old.ndim)
                if coords is not None and old.contains(coords) and not new.contains(coords):
                    doomed.append(key)
            for key in doomed:
                self.store.delete(key)
            return
        for coords in grid_difference(old, new):
            self.store.delete(self.chunk_key(coords))

    # ------------------------------------------------------------------ misc

    def stored_bytes(self) -> int | None:
        """Bytes the array's chunks take in the store (None if the store cannot list)."""
        if not self.store.listable:
            return None
        with self._lock:
            if self._stored_bytes is not None:
                return self._stored_bytes
        # the chunk folder alone (``c/``) where the encoding has one: the array's own
        # metadata documents are not listed, nor stat'ed
        prefix = self.metadata.chunk_listing_prefix(self.path)
        total = 0
        try:
            for key, size in self.store.list_sizes(prefix):
                rest = key[len(prefix) :]
                if rest in ("zarr.json", ".zarray", ".zattrs") or "/zarr.json" in rest:
                    continue
                total += size
        except ZarrFSError:
            return None
        with self._lock:
            self._stored_bytes = total
        return total

    def invalidate(self) -> None:
        """Drop cached chunks and indexes (the store changed behind us)."""
        with self._lock:
            self._epoch += 1
            self._stored_bytes = None
        self.engine.chunk_cache.invalidate(lambda k: k[0] == self.uid)
        self.engine.index_cache.invalidate(lambda k: k[0] == self.uid)

    def chunk_spec(self) -> ChunkSpec:
        return self._chunk_spec

    def __repr__(self) -> str:
        return f"ZarrArray({self.store.url}/{self.path}, shape={self.shape}, dtype={self.dtype})"
