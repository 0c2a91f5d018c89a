"""The write path of an array: turning a byte range into changes of dirty units.

A write is applied under ``_write_lock`` in two phases (docs/write-path.md, "Buffer"):
load every partly covered unit that is not dirty (a failure changes nothing), then copy the
new values into each unit's dirty copy under its stripe lock.

Invariants:
- dirty units are private copies; a clean (cached) unit array is never mutated, and a frozen
  one (being stored by a flush) is copied before it is changed;
- a unit written in whole rows, or from the start of a row, and not cached is not loaded:
  its unwritten rows (and the unwritten elements of rows written in part) are recorded
  (``_unknown``, ``_unknown_cols``) and merged in before anyone needs them; in a unit so
  recorded, any part of one row is recorded too. A writer whose buffer is not page-aligned
  gets requests that start and end inside rows (the kernel splits a write-only descriptor's
  writes by the writer's pages): each row a request cuts the next one completes. Any other
  part of a row needs the unit's old content at once (a write it cannot be read for fails
  and changes nothing);
- the target of a write is resolved under ``_write_lock`` against the current shape, so no
  write lands outside it, even one that waited for a resize;
- the back-pressure flush runs after ``_write_lock`` is released (never flush under it);
- an inline write (``write_cached``) never waits on I/O, a load, a flush or another writer;
- a fresh unit array that the writes fill piece by piece is faulted in by a background thread
  (``pages.prefault_behind``), not a page at a time by the thread serving the writes.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from zarrfs.core import buffers
from zarrfs.core.arraybase import Coords, byte_order_char
from zarrfs.core.errors import InvalidWriteError, ReadOnlyError
from zarrfs.core.flushing import Flushing
from zarrfs.core.layout import box_pieces, element_range
from zarrfs.core.pages import prefault_behind
from zarrfs.core.units import MISSING


class _WouldBlock(Exception):
    """An inline write met work that needs waiting (``write_cached``)."""

    #: bytes the write had made dirty before it stopped
    added = 0


class WritePath(Flushing):
    """Applying writes to the dirty set, with the dirty-limit policy after each write."""

    def _write_view(
        self,
        chunk: Coords | None,
        offset: int,
        data: bytes,
        byte_order: str,
        inline: bool = False,
    ) -> bool:
        """Apply a write to the whole array (``chunk`` None) or to one chunk file, then flush
        or start a write-behind as the dirty limit asks; with ``inline``, only if it needs no
        waiting (``write_cached``). Takes ``_write_lock``; the caller holds no array lock."""
        if self.engine.read_only or not self.store.writable:
            if inline:
                return False
            raise ReadOnlyError(f"{self.path or '/'}: read-only")
        if not data:
            return True
        isz = self.itemsize
        if inline and (offset % isz or (offset + len(data)) % isz):
            return False
        if not self._write_lock.acquire(blocking=not inline):
            return False
        added = 0
        blocked = False
        try:
            # the target is resolved under the lock: a resize may have changed the shape
            # since the caller looked (a write never lands outside the current shape)
            origin, shape = self._write_target(chunk, offset, len(data))
            added = self._write_locked(origin, shape, offset, data, byte_order, inline)
        except _WouldBlock as exc:
            blocked, added = True, exc.added
        finally:
            self._write_lock.release()
            total = self.engine.add_dirty(added) if added else self.engine.dirty_bytes
        if blocked:
            return False
        self.mtime_ns = time.time_ns()
        self.engine.stats.add(self.path, "bytes_written", len(data))
        limit = self.engine.dirty_limit
        assert limit is not None
        if total > limit and not inline:
            self.relieve(limit)
        elif total > limit // 4:
            self._write_behind()
        return True

    def _write_target(
        self, chunk: Coords | None, offset: int, size: int
    ) -> tuple[Coords, tuple[int, ...]]:
        """(origin, shape) of the box a write goes to, checked against the current shape."""
        if chunk is None:
            if offset < 0 or offset + size > self.nbytes:
                raise InvalidWriteError(
                    f"write of {size} bytes at {offset} is outside the array ({self.nbytes} bytes)"
                )
            return (0,) * len(self.shape), self.shape
        self._check_chunk(chunk)
        if offset < 0 or offset + size > self.chunk_nbytes:
            raise InvalidWriteError("write outside the chunk")
        return self.grid.chunk_origin(chunk), tuple(self.metadata.chunk_shape)

    def _write_locked(
        self,
        origin: Coords,
        shape: tuple[int, ...],
        offset: int,
        data: bytes,
        byte_order: str,
        inline: bool = False,
    ) -> int:
        """Apply a write (``_write_lock`` held); returns the bytes newly made dirty. Raises
        ``_WouldBlock`` (``inline``) with nothing or a part applied (the same bytes again
        give the same result)."""
        self.check_unit_size("writing", writing=True)
        if self.cannot_encode is not None:  # (readable, but nothing written could be stored)
            raise InvalidWriteError(f"/{self.path}: cannot be written: {self.cannot_encode}")
        in_dtype = self.dtype.newbyteorder(byte_order_char(byte_order))
        isz = self.itemsize
        e0, e1, skip = element_range(offset, len(data), isz)
        added = 0
        limit = self.engine.dirty_limit
        assert limit is not None
        try:
            if skip or (offset + len(data)) % isz:
                # partial elements at the edges: merge with the current bytes
                old = self._read_view(origin, shape, e0 * isz, (e1 - e0) * isz, byte_order)
                assert old is not None
                buf = bytearray(old)
                buf[skip : skip + len(data)] = data
                data = bytes(buf)
            src = np.frombuffer(data, dtype=in_dtype)
            boxes = self._view_boxes(origin, shape, e0, e1)
            plan = [(b, list(box_pieces(self._unit_grid, b))) for b in boxes]
            # phase 1: load every partially covered unit that is not dirty (may fail: no change),
            # except that a unit written in whole rows or from the start of a row and not
            # cached is not loaded now: what was not written is merged in when it is read or
            # flushed (often it never is: a sequential writer covers every row before that)
            partial: set[Coords] = set()
            rows: set[Coords] = set()
            inrow: set[Coords] = set()  # a part of one row, not from its start
            for _, pieces in plan:
                for p in pieces:
                    sel = p.chunk_sel
                    if self._covers_unit(p.coords, sel):
                        continue
                    if self._deferrable(sel):
                        rows.add(p.coords)
                    else:
                        (inrow if self._one_row(sel) else partial).add(p.coords)
            with self._lock:
                # recorded in a unit deferred already (the rest of a row a writer began);
                # in any other unit its old content is needed now
                partial |= {c for c in inrow if c not in self._unknown}
                rows |= inrow - partial
                rows -= partial
                dirty = {c for c in partial | rows if c in self._dirty}
                unmerged = [c for c in partial if c in self._unknown]
            partial -= dirty
            rows -= dirty
            cache = self.engine.chunk_cache
            cached = {c for c in rows if (self.uid, c) in cache}
            partial |= cached
            deferred = rows - cached
            if inline:  # nothing to load, and no flush needed for the units it makes dirty
                with self._lock:
                    new = {p.coords for _, ps in plan for p in ps if p.coords not in self._dirty}
                if unmerged or self.engine.dirty_bytes + len(new) * self._unit_spec.nbytes > limit:
                    raise _WouldBlock
                hits = cache.get_all([(self.uid, c) for c in partial])  # from the cache only
                if hits is None:
                    raise _WouldBlock
                bases = {key[1]: (arr, False) for key, arr in hits.items()}
            else:
                if unmerged:
                    self._merge_unknown(unmerged)
                bases = self._get_units(partial) if partial else {}
            # phase 2: apply
            for b, pieces in plan:
                sbox = src[b.flat_start - e0 : b.flat_start - e0 + b.size].reshape(b.shape)
                for p in pieces:
                    covers = self._covers_unit(p.coords, p.chunk_sel)
                    added += self._apply(
                        p.coords, p.chunk_sel, sbox[p.box_sel], bases, covers, deferred, inline
                    )
            with self._lock:
                self._stored_bytes = None
        except _WouldBlock as exc:
            exc.added = added
            raise
        return added

    def _covers_unit(self, unit: Coords, sel: tuple[slice, ...]) -> bool:
        """True if ``sel`` covers the whole unit (then its old content is not needed)."""
        return all(s.start == 0 and s.stop == n for s, n in zip(sel, self._unit_spec.shape))

    def _covers_rows(self, sel: tuple[slice, ...]) -> bool:
        """True if ``sel`` covers whole rows (the full last axis) of a unit."""
        shape = self._unit_spec.shape
        return len(shape) > 0 and sel[-1].start == 0 and sel[-1].stop == shape[-1]

    def _deferrable(self, sel: tuple[slice, ...]) -> bool:
        """True if what ``sel`` leaves of a unit not dirty can be recorded instead of loaded:
        whole rows, or the start of one row (a sequential writer's next request writes the
        rest of it). A write of another part of a row needs the old row now, so that a write
        the old content cannot be read for fails at once and changes nothing."""
        if self._covers_rows(sel):
            return True
        return self._one_row(sel) and sel[-1].start == 0

    @staticmethod
    def _one_row(sel: tuple[slice, ...]) -> bool:
        """True if ``sel`` lies within one row of a unit (of at least one axis)."""
        return len(sel) > 0 and all(s.stop - s.start == 1 for s in sel[:-1])

    def _mark_written(
        self, unit: Coords, rows: np.ndarray[Any, Any], sel: tuple[slice, ...]
    ) -> None:
        """(``_lock`` held) Record ``sel`` as written in the deferred ``unit``: whole rows in
        ``rows``; a part of one row in that row's written intervals, the row flagged written
        once they cover it. A piece of several rows in part is never recorded so
        (``_deferrable``: such a unit is merged before the write)."""
        cols = self._unknown_cols.get(unit)
        if self._covers_rows(sel):
            rows[sel[:-1]] = True
            if cols:  # rows written whole since they were written in part
                for r in [r for r in cols if rows[r]]:
                    del cols[r]
        else:
            r = tuple(s.start for s in sel[:-1])
            if not rows[r]:
                if cols is None:
                    cols = self._unknown_cols[unit] = {}
                spans = _joined(cols.get(r, []) + [(sel[-1].start, sel[-1].stop)])
                if spans == [(0, self._unit_spec.shape[-1])]:
                    rows[r] = True
                    cols.pop(r, None)
                else:
                    cols[r] = spans
        if cols is not None and not cols:
            del self._unknown_cols[unit]

    def _apply(
        self,
        unit: Coords,
        sel: tuple[slice, ...],
        values: np.ndarray[Any, Any],
        bases: dict[Coords, tuple[Any, bool]],
        covers: bool,
        deferred: set[Coords],
        inline: bool = False,
    ) -> int:
        """Copy ``values`` into the dirty copy of ``unit``; returns bytes newly made dirty."""
        if not covers and unit not in bases and unit not in deferred:
            # it was dirty in phase 1; if a flush has cleaned it since, load the stored bytes
            with self._lock:
                clean = unit not in self._dirty
            if clean:
                if inline:  # committed units go to the cache: no waiting unless evicted
                    hit = self.engine.chunk_cache.get((self.uid, unit), count=False)
                    if hit is None:
                        raise _WouldBlock
                    bases = {unit: (hit, False)}
                else:
                    bases = self._get_units([unit])
        with self._stripe(unit):
            with self._lock:
                arr = self._dirty.get(unit)
                frozen = unit in self._frozen
            added = 0
            if arr is None or frozen:
                if arr is not None:
                    arr = buffers.copy(arr)
                else:
                    base = MISSING if covers else bases.get(unit, (MISSING, False))[0]
                    spec = self._unit_spec
                    if covers:  # every element is written below
                        arr = buffers.empty(spec.shape, spec.dtype)
                        prefault_behind(arr)  # while the writer fills it
                    elif unit in deferred:  # unwritten rows are merged in before any use
                        arr = buffers.empty(spec.shape, spec.dtype)
                        prefault_behind(arr)
                        with self._lock:
                            self._unknown[unit] = np.zeros(arr.shape[:-1], dtype=bool)
                    else:
                        arr = spec.fill_array() if base is MISSING else buffers.copy(base)
                    added = arr.nbytes
                with self._lock:
                    if not self._dirty:
                        self._dirty_since = time.monotonic()
                    self._dirty[unit] = arr
                    self._frozen.discard(unit)
            arr[sel] = values
            self._units.wrote(unit, arr, sel)
            with self._lock:
                rows = self._unknown.get(unit)
                if rows is not None:
                    self._mark_written(unit, rows, sel)
                if covers or (rows is not None and _all_written(rows)):
                    self._complete.add(unit)
        return added


def _all_written(rows: np.ndarray[Any, Any]) -> bool:
    """``rows.all()``, looked at whole only once its first and last rows are written (a writer
    in either direction completes a unit there; this runs for every piece of every write)."""
    if rows.size and not (rows.flat[0] and rows.flat[-1]):
        return False
    return bool(rows.all())


def _joined(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``[start, stop)`` intervals sorted, overlapping or touching ones joined."""
    out: list[tuple[int, int]] = []
    for start, stop in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], stop))
        else:
            out.append((start, stop))
    return out
