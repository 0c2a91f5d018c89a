"""The read path of an array: units from the dirty set, the cache or the store.

Invariants:
- a clean unit array (cache, load in flight) is never mutated; readers copy out of a dirty
  unit under its stripe lock, so they see each write to that unit whole or not at all;
- each unit is loaded by at most one load at a time (``_inflight``): a reader needing a unit
  that is being loaded joins that load (and may take a queued prefetch back to run it itself);
- a load that overlapped a commit (the epoch moved) is not cached, so the cache never holds
  bytes older than the store;
- a missing unit reads as the fill value without decoding; a unit that fails to load raises
  and is never replaced by the fill value;
- deferred dirty units (rows written whole, old content never loaded) are completed from the
  store before anyone reads them (``_merge_unknown``);
- prefetch loads only what fits in the chunk cache beside the units the reader uses now;
- a streaming load (``UnitStrategy.streams``) runs in the background even for the reader that
  starts it, and readers copy from its unit array only the pieces within its published
  ``ready`` prefix (waiting for more, or taking the load back while it is still queued); the
  load alone writes to that array, only beyond ``ready``, and caches it once it is whole.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Sequence
from math import prod
from typing import Any

import numpy as np

from zarrfs.core.arraybase import ArrayState, Coords, Load, byte_order_char
from zarrfs.core.direct import span_of, worth
from zarrfs.core.errors import InvalidWriteError
from zarrfs.core.layout import box_pieces, element_range, flat_to_boxes
from zarrfs.core.units import MISSING

log = logging.getLogger(__name__)

#: a read starting this close to where the previous one ended counts as sequential
_SEQUENTIAL_SLACK = 1 << 20
#: units whose last byte is this far (or a prefetch window, if less) behind a sequential
#: reader are released: the kernel's read-ahead requests (4 MiB by default, ``-o
#: readahead=``) come at most a window out of order, and a unit released too early is only
#: loaded again, never read wrong
RELEASE_SLACK = 8 << 20


class ReadPath(ArrayState):
    """Reading units: the dirty set first, then the chunk cache, then loads."""

    def _read_view(
        self,
        origin: Coords,
        shape: tuple[int, ...],
        offset: int,
        size: int,
        byte_order: str,
        cached_only: bool = False,
        direct: bool = False,
    ) -> memoryview | None:
        """Bytes ``[offset, offset+size)`` of the C-order box ``origin + shape`` as a fresh
        read-only buffer; with ``cached_only``, None unless every unit is clean and cached.
        With ``direct`` (a large or sequential read), units of a ``streams`` strategy that are not
        dirty, cached or being loaded are read from their stored files (``core/direct.py``)."""
        total = prod(shape) * self.itemsize
        if offset < 0 or size < 0:
            raise InvalidWriteError("negative offset or size")
        size = min(size, total - offset)
        if size <= 0:
            return memoryview(b"")
        out_dtype = self.dtype.newbyteorder(byte_order_char(byte_order))
        direct = direct or self.oversize  # (the only way such units are read)
        e0, e1, skip = element_range(offset, size, self.itemsize)
        out = np.empty(e1 - e0, dtype=out_dtype)
        boxes = self._view_boxes(origin, shape, e0, e1)
        plan = [(b, list(box_pieces(self._unit_grid, b))) for b in boxes]
        wanted = {p.coords for _, pieces in plan for p in pieces}
        if direct and out_dtype == self._unit_spec.dtype:
            wanted -= self._direct_units(plan, wanted)
        if cached_only:
            cached = self._cached_units(wanted) if wanted else {}
            if cached is None:
                return None
            units = cached
        else:
            units = self._get_units(wanted, partial=True)
        fill = self._unit_spec.fill_value
        direct_pieces: dict[Coords, list[tuple[tuple[slice, ...], Any]]] = {}
        for b, pieces in plan:
            view = out[b.flat_start - e0 : b.flat_start - e0 + b.size].reshape(b.shape)
            for p in pieces:
                if p.coords not in units:
                    direct_pieces.setdefault(p.coords, []).append((p.chunk_sel, view[p.box_sel]))
                    continue
                src, dirty = units[p.coords]
                if type(src) is Load:
                    src = self._loaded_part(src, p.coords, p.chunk_sel, not cached_only)
                    if src is None:
                        return None
                if src is MISSING:
                    view[p.box_sel] = fill
                elif dirty:
                    with self._stripe(p.coords):
                        view[p.box_sel] = src[p.chunk_sel]
                else:
                    view[p.box_sel] = src[p.chunk_sel]
        for u, parts in direct_pieces.items():
            try:  # inline (cached_only): only chunks open already, bytes in the page cache
                done = self._units.read_direct(u, parts, nowait=cached_only)
            except BlockingIOError:  # read again by a worker thread, which may wait
                self.engine.stats.add(self.path, "direct_reads_offloaded")
                return None
            if not done:  # not a plain chunk: load it (and have it refused)
                if cached_only:
                    return None
                src = self._get_units([u])[u][0]
                for sel, dst in parts:
                    dst[...] = fill if src is MISSING else src[sel]
        if cached_only:
            self.engine.stats.add_counts(
                self.path, {"bytes_served": size, "cache_hits": len(units)}
            )
        else:
            self.engine.stats.add(self.path, "bytes_served", size)
        raw = out.view(np.uint8)[skip : skip + size]
        raw.flags.writeable = False
        return memoryview(raw.data)

    def _direct_units(self, plan: list[tuple[Any, list[Any]]], wanted: set[Coords]) -> set[Coords]:
        """The units of ``wanted`` to read straight from their stored files: a plain-bytes
        strategy, and neither dirty, cached nor being loaded, where the file spans the pieces
        need are not much larger than the pieces (``direct.worth``)."""
        if not self._units.direct or not self._unit_spec.shape:  # (a 0-d box is a scalar)
            return set()
        chosen = self._not_in_memory(wanted)
        if not chosen:
            return chosen
        sels: dict[Coords, list[tuple[slice, ...]]] = {}
        for _, pieces in plan:
            for p in pieces:
                if p.coords in chosen:
                    sels.setdefault(p.coords, []).append(p.chunk_sel)
        spec = self._unit_spec
        if self.oversize:  # never loaded: any span of the file beats the refusal
            return chosen
        return {c for c in chosen if worth(spec.shape, spec.dtype.itemsize, sels[c])}

    def _not_in_memory(self, coords: Iterable[Coords]) -> set[Coords]:
        """The units of ``coords`` that are neither dirty, cached nor being loaded."""
        cache, uid = self.engine.chunk_cache, self.uid
        with self._lock:
            busy = self._dirty.keys() | self._inflight.keys()
        return {c for c in coords if c not in busy and (uid, c) not in cache}

    def _cached_units(self, coords: set[Coords]) -> dict[Coords, tuple[Any, bool]] | None:
        """Every unit from the chunk cache (or a streaming load of it in flight, whose loaded
        part may do), or None if one is dirty or neither cached nor streaming."""
        if self._dirty:
            with self._lock:
                if not self._dirty.keys().isdisjoint(coords):
                    return None
        uid = self.uid
        hits = self.engine.chunk_cache.get_all([(uid, c) for c in coords])
        if hits is None:
            if not self._units.streams or not self._inflight:
                return None
            out: dict[Coords, tuple[Any, bool]] = {}
            cache = self.engine.chunk_cache
            for c in coords:
                hit = cache.get((uid, c), count=False)
                if hit is None:
                    with self._lock:
                        hit = self._inflight.get(c)
                    if hit is None:
                        return None
                out[c] = (hit, False)
            return out
        return {key[1]: (arr, False) for key, arr in hits.items()}

    def _loaded_part(
        self, load: Load, unit: Coords, sel: tuple[slice, ...], wait: bool
    ) -> Any | None:
        """The array of a streaming ``load`` once the elements ``sel`` of ``unit`` are loaded
        (waiting for them, or running the load here if it is still queued), or None when
        ``wait`` is false and they are not loaded yet. Raises what the load raised."""
        last = np.ravel_multi_index(tuple(s.stop - 1 for s in sel), self._unit_spec.shape)
        need = (int(last) + 1) * self.itemsize
        while True:
            arr = load.ready_array(need)
            if arr is not None:
                return arr
            if load.done.done():
                return load.done.result()[unit]
            if not wait:
                return None
            with self._lock:  # still queued behind busy threads: run it here
                claimed = load.task is not None and not load.claimed and load.task.cancel()
                if claimed:
                    load.claimed = True
            if claimed:
                self._run_load(load)
                continue
            with load.cond:
                if not load.done.done() and (load.array is None or load.ready < need):
                    load.cond.wait()

    def _get_units(
        self, coords: Iterable[Coords], partial: bool = False
    ) -> dict[Coords, tuple[Any, bool]]:
        """Every requested unit as (array or MISSING, is_dirty); loads what is not cached.
        With ``partial``, a unit being loaded by a streaming load may come as that ``Load``
        (read it through ``_loaded_part``)."""
        result: dict[Coords, tuple[Any, bool]] = {}
        need: list[Coords] = []
        cache = self.engine.chunk_cache
        coords = list(coords)
        while True:
            if self._unknown:
                with self._lock:
                    unmerged = [c for c in coords if c in self._unknown]
                if unmerged:
                    self._merge_unknown(unmerged)
            with self._lock:
                # a writer may have made a unit dirty since, in whole rows of it, the others
                # not loaded yet (``_unknown``): merge again rather than serve those rows
                if any(c in self._unknown and not self._unknown[c].all() for c in coords):
                    continue
                for c in coords:
                    d = self._dirty.get(c)
                    if d is not None:
                        result[c] = (d, c not in self._frozen)
                break
        for c in coords:
            if c in result:
                continue
            hit = cache.get((self.uid, c))
            if hit is not None:
                result[c] = (hit, False)
            else:
                need.append(c)
        self.engine.stats.add(self.path, "cache_hits", len(result))
        if need:
            self.engine.stats.add(self.path, "cache_misses", len(need))
            for c, arr in self._load(need, partial).items():
                result[c] = (arr, False)
        return result

    def _merge_unknown(self, units: Sequence[Coords]) -> None:
        """Load the old content of deferred dirty units and fill what was not written: the
        unwritten rows, and the unwritten elements of rows written in part."""
        todo = []
        with self._lock:
            for u in units:
                rows = self._unknown.get(u)
                if rows is None:
                    continue
                if rows.all():  # fully written: nothing to merge
                    del self._unknown[u]
                    self._unknown_cols.pop(u, None)
                else:
                    todo.append(u)
        if not todo:
            return
        old = self._load(todo)  # may raise: the units stay dirty and unmerged
        fill = self._unit_spec.fill_value
        for u in todo:
            with self._stripe(u):
                with self._lock:
                    rows = self._unknown.pop(u, None)
                    cols = self._unknown_cols.pop(u, {})
                    arr = self._dirty.get(u)
                if rows is None or arr is None:
                    continue
                self._units.unstream(u)  # its stream, if any, cannot hold these rows
                keep = np.logical_not(rows, out=np.empty(rows.shape, dtype=bool))  # (0-d too)
                parts = [(r, spans) for r, spans in cols.items() if not rows[r]]
                for r, _ in parts:  # written in part: only their other elements below
                    keep[r] = False
                src = old[u]
                arr[keep] = fill if src is MISSING else src[keep]
                for r, spans in parts:
                    row, at = arr[r], 0
                    for start, stop in spans + [(row.shape[-1], row.shape[-1])]:
                        if start > at:
                            row[at:start] = fill if src is MISSING else src[r][at:start]
                        at = stop

    def _load(self, units: Sequence[Coords], partial: bool = False) -> dict[Coords, Any]:
        """Load units from the store concurrently (joining loads already in flight). With
        ``partial`` and a streaming strategy, the loads run in the background and the units
        being loaded come back as their ``Load``."""
        self.check_unit_size("reading")
        groups = self._units.groups(units)
        waits: list[Load] = []
        mine: list[Load] = []
        out: dict[Coords, Any] = {}
        cache = self.engine.chunk_cache
        with self._lock:
            for outer, us in groups.items():
                need = []
                for u in us:
                    running = self._inflight.get(u)
                    if running is not None:  # being loaded: join that load
                        if all(w is not running for w in waits):
                            waits.append(running)
                        continue
                    # a load that finished since the caller missed the cache put its units
                    # there before leaving ``_inflight`` (concurrent kernel read-ahead)
                    hit = cache.get((self.uid, u), count=False)
                    if hit is not None:
                        out[u] = hit
                    else:
                        need.append(u)
                if need:
                    load = Load(outer, need)
                    for u in need:
                        self._inflight[u] = load
                    mine.append(load)
        if partial and self._units.streams:
            for load in mine:
                load.task = self.engine.executor.submit(self._background_load, load)
            for load in mine + waits:
                for u in load.units:
                    out.setdefault(u, load)
            return {u: out[u] for u in units}
        # our jobs in worker threads and here (``run_all``); a prefetch we join that is still
        # queued behind busy threads is taken back and run here
        self.engine.run_all([functools.partial(self._run_load, load) for load in mine])
        for load in waits:
            if load.task is None:
                continue
            with self._lock:  # one waiter takes a queued prefetch back (cancel() stays True)
                claimed = not load.claimed and load.task.cancel()
                if claimed:
                    load.claimed = True
            if claimed:
                self._run_load(load)
        for load in mine:
            out.update(load.done.result())
        for load in waits:
            out.update(load.done.result())
        return {u: out[u] for u in units}

    def _run_load(self, load: Load) -> None:
        """Run one load job; its units go to the cache unless a commit overlapped it."""
        units = load.units
        try:
            with self._lock:
                epoch = self._epoch
            # the encoded bytes and the decoded units this load holds before they are cached
            with self.engine.working(self._units.load_memory(len(units))):
                res = self._units.load(load.outer, units, load.publish)
            cache = self.engine.chunk_cache
            with self._lock:  # a commit or park since the load began: not cached (checked
                # and put under the lock that commit takes, so none can come in between)
                if epoch == self._epoch:
                    for u, arr in res.items():
                        cache.put((self.uid, u), arr)
            load.done.set_result(res)
        except BaseException as exc:
            load.done.set_exception(exc)
        finally:
            with self._lock:
                for u in units:
                    if self._inflight.get(u) is load:
                        del self._inflight[u]
            with load.cond:  # waiters of a streaming load see it ended
                load.cond.notify_all()

    def _units_in(self, start: int, stop: int) -> list[Coords]:
        """The units holding the flat bytes ``[start, stop)``, in the order a reader meets them."""
        e0, e1, _ = element_range(start, max(0, stop - start), self.itemsize)
        wanted: list[Coords] = []
        seen: set[Coords] = set()
        for b in flat_to_boxes(self.shape, e0, e1):
            for p in box_pieces(self._unit_grid, b):
                if p.coords not in seen:
                    seen.add(p.coords)
                    wanted.append(p.coords)
        return wanted

    def _reads_sequentially(self, offset: int) -> bool:
        """True if a read at ``offset`` continues the previous one (``_SEQUENTIAL_SLACK``)."""
        return abs(offset - self._last_end) <= _SEQUENTIAL_SLACK

    def _maybe_prefetch(self, offset: int, size: int, direct: bool = False) -> None:
        """On sequential reads, start loading the units the next bytes will need.

        Reads within ``_SEQUENTIAL_SLACK`` of the previous end count as sequential (the kernel
        sends read-ahead requests concurrently, slightly out of order). The plan is redone
        every half window of bytes read; each starts at most one window of new loads. A reader
        served by direct reads (``direct``) loads nothing ahead: the kernel reads ahead in each
        chunk file it reads in order (asking it to read the next window with
        ``POSIX_FADV_WILLNEED`` cost the daemon 0.13-0.2 s more CPU per 512 MiB, and the
        reads were no faster).

        How far ahead: as far as the units met ahead fit in the chunk cache beside the units
        the reader uses now (those of the last window it read), and no further than a layer
        of units (a window where layers are thinner). A row-major reader of a chunked array
        uses a whole layer of chunks at once and meets the next layer's chunks only a layer of
        bytes later; loading them while the current layer is served, and never so many that
        the cache evicts the current layer, keeps the reader from waiting at every layer and
        from reloading the chunks it is still reading. Not further: the layer after next is
        loaded only once the reader is in the next one, when the layer it left has been
        released (``RELEASE_SLACK`` behind it), so its units take that layer's blocks
        (``core/buffers.py``) instead of fresh memory."""
        end = offset + size
        sequential = abs(offset - self._last_end) <= _SEQUENTIAL_SLACK
        self._last_end = end
        if not sequential:
            self._prefetch_end = end
            return
        window = self.engine.prefetch_bytes
        if self._prefetch_end - end > window // 2 or end >= self.nbytes:
            return
        self._prefetch_end = end + window
        self._release_behind(end - min(RELEASE_SLACK, window))
        if (direct and self._units.direct) or self.oversize:  # (nothing to load ahead)
            return
        engine = self.engine
        cache = engine.chunk_cache
        unit_bytes = self._unit_spec.nbytes
        using = set(self._units_in(max(0, end - window), end))
        # the units ahead count whether cached, loading or not yet loaded, so the room is the
        # budget dirty data leaves (loads in flight are not counted twice), less a window of
        # slack for the reader's next requests and other arrays
        room = engine.cache_size - engine.pool_bytes - engine.dirty_bytes
        room -= len(using) * unit_bytes + window
        # flat bytes scanned ahead (their units take >= as many): a layer of units, or a
        # window where layers are thinner, and never more than the room
        layer = 0  # (a 0-d array has no layers)
        if self.shape and self.shape[0]:
            layer = self._unit_spec.shape[0] * (self.nbytes // self.shape[0])
        reach = max(window, min(room, layer))
        wanted: list[Coords] = []
        new = 0
        for u in self._units_in(end, min(self.nbytes, end + reach)):
            if u in using:
                continue
            room -= unit_bytes
            if room < 0:
                break
            if u in self._dirty or (self.uid, u) in cache:
                continue
            new += unit_bytes
            if new > window:
                break
            wanted.append(u)
        for outer, us in self._units.groups(wanted).items():
            with self._lock:  # not already loading, not loaded meanwhile
                us = [u for u in us if u not in self._inflight and (self.uid, u) not in cache]
                if not us:
                    continue
                load = Load(outer, us)
                for u in us:
                    self._inflight[u] = load
            load.task = self.engine.executor.submit(self._background_load, load)

    def _release_behind(self, behind: int) -> None:
        """Drop from the chunk cache the clean units a sequential reader has passed: those
        whose last byte lies before ``behind`` (``RELEASE_SLACK``, or a window if less, before
        the reader). It never needs them again, the kernel's page cache keeps what was served,
        and the blocks they free (``core/buffers.py``) take the next units the reader needs,
        instead of fresh memory.
        Scans each stretch of bytes once (``_release_from`` only grows), and at most a window
        of them: a unit that ends past ``behind`` is met again by the next scan, a reader that
        went back releases nothing before it passes the furthest point released, and one that
        jumped ahead releases nothing it jumped over (so the scan never runs over the array
        from its start)."""
        start = max(self._release_from, behind - self.engine.prefetch_bytes)
        if behind <= start:
            return
        self._release_from = behind
        grid = self._unit_grid
        passed = []
        for u in self._units_in(start, behind):
            box = tuple(
                slice(o, min(o + c, n))
                for o, c, n in zip(grid.chunk_origin(u), grid.chunk_shape, self.shape)
            )
            if span_of(self.shape, self.itemsize, box)[1] <= behind:  # its last byte is behind
                passed.append(u)
        cache = self.engine.chunk_cache
        with self._lock:  # loads in flight and dirty units stay
            for u in passed:
                if u not in self._inflight and u not in self._dirty:
                    cache.pop((self.uid, u))

    def _background_load(self, load: Load) -> None:
        """A load run by a pool thread (prefetch, streaming); its waiters see any failure."""
        self._run_load(load)
        exc = load.done.exception()
        if exc is not None:
            log.debug("background load of %s failed: %s", self.path, exc)
