"""ZarrArray: an array seen as one flat C-order file of decoded bytes.

The one facade the views use. It reads and writes any byte range of the decoded array (and of
each chunk, seen as a file of the full chunk shape), in a chosen byte order, through the array's
codec chain. The write-path protocol is documented in ``docs/write-path.md``.

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

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from math import prod
from typing import Any, Literal

import numpy as np

from zarrfs.core.cache import LRUCache
from zarrfs.core.codecs.base import ChunkSpec
from zarrfs.core.errors import (
    CorruptDataError,
    InvalidWriteError,
    ReadOnlyError,
    StoreError,
    ZarrFSError,
)
from zarrfs.core.grid import RegularGrid, chunks_outside, edge_chunks, grid_difference
from zarrfs.core.layout import Box, box_pieces, element_range, flat_to_boxes
from zarrfs.core.metadata.model import ArrayMetadata
from zarrfs.core.stats import Stats
from zarrfs.core.stores.base import ByteRange, Store

log = logging.getLogger(__name__)

Coords = tuple[int, ...]

#: cache value for a unit (or shard) that is not in the store
_MISSING = np.zeros(0, dtype=np.uint8)
_NSTRIPES = 64
#: a read starting this close to where the previous one ended counts as sequential
_SEQUENTIAL_SLACK = 1 << 20
#: a shrink deletes up to this many chunk keys one by one; more are found by listing (a store
#: that cannot list refuses such a shrink)
_MAX_BLIND_DELETES = 1 << 16


_ORDER_CHAR: dict[str, Literal["<", ">", "="]] = {"little": "<", "big": ">", "native": "="}


def _byte_order_char(byte_order: str) -> Literal["<", ">", "="]:
    try:
        return _ORDER_CHAR[byte_order]
    except KeyError:
        raise ValueError(f"byte order must be little, big or native, not {byte_order!r}") from None


@dataclass
class Engine:
    """What all arrays of one mount share: caches, worker threads, counters, limits.

    Memory: ``cache_size`` bounds decoded chunks and unflushed writes together. Dirty chunks may
    take up to ``dirty_limit`` (three quarters of it by default): when a write takes the
    mount's dirty bytes past that, the writer flushes the array's oldest dirty units (down to
    half the limit) before returning. The decoded-chunk cache gets whatever dirty chunks leave
    (its capacity follows ``dirty_bytes``), and shard indexes a sixteenth on top. A sequential
    writer of a row-major file dirties a whole layer of chunks before the first one is
    complete, so a small dirty share would flush every chunk half-written several times.

    Work in flight holds memory too: an encode holds the encoded bytes (and the codecs'
    intermediate buffers) until the store has them, a load the fetched bytes and the decoded
    units until they are cached. Such work reserves its bound with
    ``working(n)`` for as long as it runs; reservations shrink the decoded-chunk cache like
    dirty bytes do, and together they may take at most what the dirty limit leaves
    (``work_limit``, a quarter of ``cache_size`` by default): more work waits until some
    finishes, except that one job always runs. So dirty chunks, cached chunks and the buffers
    of work in flight stay within ``cache_size`` together."""

    cache_size: int = 1 << 30
    threads: int = 8
    prefetch_bytes: int = 64 << 20
    dirty_limit: int | None = None
    read_only: bool = False
    chunk_cache: LRUCache[Any, Any] = field(init=False)
    index_cache: LRUCache[Any, Any] = field(init=False)
    executor: ThreadPoolExecutor = field(init=False)
    stats: Stats = field(default_factory=Stats)

    def __post_init__(self) -> None:
        most = self.cache_size * 3 // 4
        self.dirty_limit = most if self.dirty_limit is None else min(self.dirty_limit, most)
        self.chunk_cache = LRUCache(self.cache_size)
        self._dirty_lock = threading.Condition(threading.Lock())
        #: bytes of dirty (unflushed) chunk copies of every array of the mount
        self.dirty_bytes = 0
        #: bytes reserved by work in flight (``working``), at most ``work_limit`` but for one job
        self.work_bytes = 0
        self.work_limit = max(1, self.cache_size - self.dirty_limit)
        self.index_cache = LRUCache(max(1 << 20, self.cache_size // 16))
        self.executor = ThreadPoolExecutor(self.threads, thread_name_prefix="zarrfs-io")
        self._uid_lock = threading.Lock()
        self._next_uid = 0

    def add_dirty(self, n: int) -> int:
        """Account ``n`` more (or, negative, fewer) dirty bytes; returns the new total."""
        with self._dirty_lock:
            self.dirty_bytes += n
            self._resize_cache()
            return self.dirty_bytes

    @contextlib.contextmanager
    def working(self, n: int) -> Iterator[None]:
        """Reserve ``n`` bytes of the budget while the block runs (see the class docstring).

        Waits while other work holds so much that ``n`` more would pass ``work_limit``. A job
        must not wait for anything that needs a reservation while it holds one."""
        with self._dirty_lock:
            while self.work_bytes and self.work_bytes + n > self.work_limit:
                self._dirty_lock.wait()
            self.work_bytes += n
            self._resize_cache()
        try:
            yield
        finally:
            with self._dirty_lock:
                self.work_bytes -= n
                self._resize_cache()
                self._dirty_lock.notify_all()

    def _resize_cache(self) -> None:
        """The decoded-chunk cache gets what dirty chunks and work in flight leave (lock held)."""
        self.chunk_cache.resize(max(0, self.cache_size - self.dirty_bytes - self.work_bytes))

    def new_uid(self) -> int:
        with self._uid_lock:
            self._next_uid += 1
            return self._next_uid

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)

    def run_all(self, calls: Sequence[Callable[[], Any]]) -> list[Future[Any]]:
        """Run every call and return their finished futures (result or exception).

        The first call runs in the calling thread, the others in the engine's threads; a call
        still queued when the caller comes to wait for it is taken back and run in the calling
        thread. So when every pool thread is blocked (a store that never answers), work of
        other arrays still finishes instead of queueing behind it.
        """
        queued = [self.executor.submit(call) for call in calls[1:]]
        done = [_run_here(call) for call in calls[:1]]
        for call, fut in zip(calls[1:], queued):
            if fut.cancel():
                fut = _run_here(call)
            else:
                fut.exception()  # already running: wait for it
            done.append(fut)
        return done


class _WouldBlock(Exception):
    """An inline write met work that needs waiting (``write_cached``)."""

    #: bytes the write had made dirty before it stopped
    added = 0


def _run_here(call: Callable[[], Any]) -> Future[Any]:
    """``call()`` in this thread, as a finished future."""
    fut: Future[Any] = Future()
    try:
        fut.set_result(call())
    except BaseException as exc:
        fut.set_exception(exc)
    return fut


class _CountingReads(Store):
    """A view of a store that counts the bytes its reads return (``bytes_fetched``)."""

    def __init__(self, store: Store, count: Callable[[int], None]) -> None:
        self._store = store
        self._count = count
        self.url = store.url
        self.writable = store.writable
        self.listable = store.listable
        self.streams_sets = store.streams_sets

    def get(self, key: str, byte_range: Any = None) -> bytes | None:
        data = self._store.get(key, byte_range)
        if data is not None:
            self._count(len(data))
        return data

    def get_many(self, requests: Sequence[tuple[str, Any]]) -> list[bytes | None]:
        out = self._store.get_many(requests)
        self._count(sum(len(d) for d in out if d is not None))
        return out

    def size(self, key: str) -> int | None:
        return self._store.size(key)

    def set(self, key: str, data: bytes | memoryview) -> None:
        self._store.set(key, data)

    def set_stream(self, key: str, parts: Callable[[], Iterable[bytes | memoryview]]) -> None:
        self._store.set_stream(key, parts)

    def delete(self, key: str) -> None:
        self._store.delete(key)


@dataclass(frozen=True)
class DirtyState:
    """Unstored data of one array: bytes of dirty units, stored objects (chunks or shards)
    they belong to, how many of those are being encoded and stored now, and the age of the
    oldest write not stored yet (0 when clean)."""

    nbytes: int = 0
    objects: int = 0
    writing: int = 0
    oldest_age_s: float = 0.0


class ZarrArray:
    """Byte-range reads and writes of one array. Thread-safe."""

    def __init__(
        self,
        store: Store,
        path: str,
        metadata: ArrayMetadata,
        engine: Engine | None = None,
        save_metadata: Callable[[ArrayMetadata], None] | None = None,
    ) -> None:
        from zarrfs.core.codecs.sharding import ShardingCodec

        self.store = store
        self.path = path
        #: what chunk and shard I/O goes through: the store, counting bytes fetched
        self._io = _CountingReads(store, self._count_fetched)
        self.metadata = metadata
        self.engine = engine or Engine()
        self._save_metadata = save_metadata
        self.uid = self.engine.new_uid()
        self.dtype: np.dtype[Any] = metadata.data_type.dtype
        self.itemsize = self.dtype.itemsize
        chain = metadata.codecs
        codec = chain.array_bytes
        self._chunk_spec = metadata.chunk_spec()
        self._sharding: ShardingCodec | None = None
        if isinstance(codec, ShardingCodec) and not chain.array_array and not chain.bytes_bytes:
            self._sharding = codec
            self._per_shard = codec.chunks_per_shard(metadata.chunk_shape)
            self._unit_spec = codec.inner_spec(self._chunk_spec)
        else:
            self._per_shard = tuple(1 for _ in metadata.chunk_shape)
            self._unit_spec = self._chunk_spec
        self._prepared = None if self._sharding else chain.prepare(self._chunk_spec)
        self._set_shape(metadata.shape)
        self._lock = threading.Lock()  # guards _dirty, _unknown, _frozen, _inflight, _epoch
        self._write_lock = threading.RLock()  # one writer or flush commit at a time
        self._flush_lock = threading.Lock()
        #: per-unit load locks, made on first use (listing many arrays never needs them)
        self._stripes: list[threading.Lock] | None = None
        self._dirty: dict[Coords, np.ndarray[Any, Any]] = {}
        #: dirty units whose old content was never loaded: which rows (all axes but the last)
        #: have been written; the others are loaded and merged before anyone needs them
        self._unknown: dict[Coords, np.ndarray[Any, Any]] = {}
        self._frozen: set[Coords] = set()
        #: dirty units every element of which has been written (write-behind candidates)
        self._complete: set[Coords] = set()
        #: a write-behind flush of this array is queued or running
        self._behind = False
        #: unit -> the load bringing it (one load job may bring several units of a shard)
        self._inflight: dict[Coords, Future[dict[Coords, np.ndarray[Any, Any]]]] = {}
        self._epoch = 0
        self._dirty_since: float | None = None
        #: last change of the data through this object (the data files' mtime)
        self.mtime_ns = time.time_ns()
        self._last_end = -1
        #: flat byte offset up to which loads have been started by prefetching
        self._prefetch_end = 0
        self._stored_bytes: int | None = None

    def _count_fetched(self, n: int) -> None:
        self.engine.stats.add(self.path, "bytes_fetched", n)

    # ------------------------------------------------------------------ geometry

    def _set_shape(self, shape: tuple[int, ...]) -> None:
        self.shape = tuple(shape)
        self.grid = RegularGrid(self.shape, self.metadata.chunk_shape)
        ext = tuple(n * c for n, c in zip(self.grid.grid_shape, self.metadata.chunk_shape))
        self._unit_grid = RegularGrid(ext, self._unit_spec.shape)

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * self.itemsize

    @property
    def chunk_nbytes(self) -> int:
        """Size of one ``chunks/`` file: the full (outer) chunk shape."""
        return prod(self.metadata.chunk_shape) * self.itemsize

    @property
    def sharded(self) -> bool:
        return self._sharding is not None

    def chunk_key(self, coords: Coords) -> str:
        return self.metadata.chunk_store_key(self.path, coords)

    def _unit_location(self, unit: Coords) -> tuple[Coords, Coords]:
        """(outer chunk coords, coords inside the shard) of a unit."""
        shard = tuple(u // n for u, n in zip(unit, self._per_shard))
        return shard, tuple(u % n for u, n in zip(unit, self._per_shard))

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
        data = self._read_view(
            (0,) * len(self.shape), self.shape, offset, size, byte_order, cached_only
        )
        if data and self.engine.prefetch_bytes:
            self._maybe_prefetch(offset, len(data))
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

    def _check_chunk(self, coords: Coords) -> None:
        if not self.grid.contains(tuple(coords)):
            raise InvalidWriteError(f"chunk {coords} is outside the grid {self.grid.grid_shape}")

    def _view_boxes(self, origin: Coords, shape: tuple[int, ...], e0: int, e1: int) -> list[Box]:
        boxes = flat_to_boxes(shape, e0, e1)
        if any(origin):
            boxes = [
                Box(
                    tuple(a + o for a, o in zip(b.starts, origin)),
                    tuple(a + o for a, o in zip(b.stops, origin)),
                    b.flat_start,
                )
                for b in boxes
            ]
        return boxes

    def _read_view(
        self,
        origin: Coords,
        shape: tuple[int, ...],
        offset: int,
        size: int,
        byte_order: str,
        cached_only: bool = False,
    ) -> memoryview | None:
        total = prod(shape) * self.itemsize
        if offset < 0 or size < 0:
            raise InvalidWriteError("negative offset or size")
        size = min(size, total - offset)
        if size <= 0:
            return memoryview(b"")
        out_dtype = self.dtype.newbyteorder(_byte_order_char(byte_order))
        e0, e1, skip = element_range(offset, size, self.itemsize)
        out = np.empty(e1 - e0, dtype=out_dtype)
        boxes = self._view_boxes(origin, shape, e0, e1)
        plan = [(b, list(box_pieces(self._unit_grid, b))) for b in boxes]
        wanted = {p.coords for _, pieces in plan for p in pieces}
        if cached_only:
            cached = self._cached_units(wanted)
            if cached is None:
                return None
            units = cached
        else:
            units = self._get_units(wanted)
        fill = self._unit_spec.fill_value
        for b, pieces in plan:
            view = out[b.flat_start - e0 : b.flat_start - e0 + b.size].reshape(b.shape)
            for p in pieces:
                src, dirty = units[p.coords]
                if src is _MISSING:
                    view[p.box_sel] = fill
                elif dirty:
                    with self._stripe(p.coords):
                        view[p.box_sel] = src[p.chunk_sel]
                else:
                    view[p.box_sel] = src[p.chunk_sel]
        if cached_only:
            self.engine.stats.add_counts(
                self.path, {"bytes_served": size, "cache_hits": len(units)}
            )
        else:
            self.engine.stats.add(self.path, "bytes_served", size)
        raw = out.view(np.uint8)[skip : skip + size]
        raw.flags.writeable = False
        return memoryview(raw.data)

    def _stripe(self, unit: Coords) -> threading.Lock:
        stripes = self._stripes
        if stripes is None:
            with self._lock:
                if self._stripes is None:
                    self._stripes = [threading.Lock() for _ in range(_NSTRIPES)]
                stripes = self._stripes
        return stripes[hash(unit) % _NSTRIPES]

    def _cached_units(self, coords: set[Coords]) -> dict[Coords, tuple[Any, bool]] | None:
        """Every unit from the chunk cache, or None if one is dirty or not cached."""
        if self._dirty:
            with self._lock:
                if not self._dirty.keys().isdisjoint(coords):
                    return None
        uid = self.uid
        hits = self.engine.chunk_cache.get_all([(uid, c) for c in coords])
        if hits is None:
            return None
        return {key[1]: (arr, False) for key, arr in hits.items()}

    def _get_units(self, coords: Iterable[Coords]) -> dict[Coords, tuple[Any, bool]]:
        """Every requested unit as (array or _MISSING, is_dirty); loads what is not cached."""
        result: dict[Coords, tuple[Any, bool]] = {}
        need: list[Coords] = []
        cache = self.engine.chunk_cache
        coords = list(coords)
        if self._unknown:
            with self._lock:
                unmerged = [c for c in coords if c in self._unknown]
            if unmerged:
                self._merge_unknown(unmerged)
        with self._lock:
            for c in coords:
                d = self._dirty.get(c)
                if d is not None:
                    result[c] = (d, c not in self._frozen)
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
            for c, arr in self._load(need).items():
                result[c] = (arr, False)
        return result

    def _work_items(self, units: Sequence[Coords]) -> dict[Any, list[Coords]]:
        """Group units into load jobs: one per chunk, or one per shard for sharded arrays."""
        if self._sharding is None:
            return {u: [u] for u in units}
        jobs: dict[Any, list[Coords]] = {}
        for u in units:
            jobs.setdefault(("shard", self._unit_location(u)[0]), []).append(u)
        return jobs

    def _load(self, units: Sequence[Coords]) -> dict[Coords, Any]:
        """Load units from the store concurrently (joining loads already in flight)."""
        jobs = self._work_items(units)
        waits: list[Future[dict[Coords, Any]]] = []
        mine: list[tuple[Any, list[Coords], Future[dict[Coords, Any]]]] = []
        out: dict[Coords, Any] = {}
        cache = self.engine.chunk_cache
        with self._lock:
            for job, us in jobs.items():
                need = []
                for u in us:
                    fut = self._inflight.get(u)
                    if fut is not None:  # being loaded: join that load
                        if all(w is not fut for w in waits):
                            waits.append(fut)
                        continue
                    # a load that finished since the caller missed the cache put its units
                    # there before leaving ``_inflight`` (concurrent kernel read-ahead)
                    hit = cache.get((self.uid, u), count=False)
                    if hit is not None:
                        out[u] = hit
                    else:
                        need.append(u)
                if need:
                    fut = Future()
                    fut.units = need  # type: ignore[attr-defined]
                    for u in need:
                        self._inflight[u] = fut
                    mine.append((job, need, fut))
        # our jobs in worker threads and here (``run_all``); a prefetch we join that is still
        # queued behind busy threads is taken back and run here
        self.engine.run_all([functools.partial(self._run_job, *args) for args in mine])
        for fut in waits:
            task = getattr(fut, "task", None)
            if task is None:
                continue
            with self._lock:  # one waiter takes a queued prefetch back (cancel() stays True)
                claimed = not getattr(fut, "claimed", False) and task.cancel()
                if claimed:
                    fut.claimed = True  # type: ignore[attr-defined]
            if claimed:
                self._run_job(fut.job, fut.units, fut)  # type: ignore[attr-defined]
        for _, _, fut in mine:
            out.update(fut.result())
        for fut in waits:
            out.update(fut.result())
        return {u: out[u] for u in units}

    def _run_job(self, job: Any, units: list[Coords], fut: Future[dict[Coords, Any]]) -> None:
        try:
            with self._lock:
                epoch = self._epoch
            # the encoded bytes and the decoded units this load holds before they are cached
            with self.engine.working(2 * self._unit_spec.nbytes * len(units)):
                res = self._load_job(units)
            with self._lock:
                cacheable = epoch == self._epoch
            if cacheable:
                for u, arr in res.items():
                    self.engine.chunk_cache.put((self.uid, u), arr)
            fut.set_result(res)
        except BaseException as exc:
            fut.set_exception(exc)
        finally:
            with self._lock:
                for u in units:
                    if self._inflight.get(u) is fut:
                        del self._inflight[u]

    def _load_job(self, units: list[Coords]) -> dict[Coords, Any]:
        stats = self.engine.stats
        if self._sharding is None:
            (u,) = units
            key = self.chunk_key(u)
            assert self._prepared is not None
            # never fetch more than a valid chunk can take (+1 byte to see that it is longer)
            data = self._store_get(key, ByteRange(0, self._prepared.max_encoded_size + 1))
            if data is None:
                return {u: _MISSING}
            try:
                arr = self._prepared.decode(data)
            except CorruptDataError as exc:
                raise CorruptDataError(str(exc), key=key) from None
            stats.add(self.path, "chunks_decoded")
            return {u: arr}
        from zarrfs.core.sharding.access import read_inner_chunks

        shard, _ = self._unit_location(units[0])
        key = self.chunk_key(shard)
        index = self._shard_index(shard)
        if index is None:
            return {u: _MISSING for u in units}
        local = {self._unit_location(u)[1]: u for u in units}
        try:
            got = read_inner_chunks(
                self._io, key, self._sharding, self._chunk_spec, index, list(local)
            )
        except (CorruptDataError, StoreError):
            self.engine.index_cache.pop((self.uid, shard))
            raise
        stats.add(self.path, "chunks_decoded", sum(1 for v in got.values() if v is not None))
        return {local[c]: (_MISSING if arr is None else arr) for c, arr in got.items()}

    def _shard_index(self, shard: Coords) -> Any:
        from zarrfs.core.sharding.access import read_shard_index

        assert self._sharding is not None
        hit = self.engine.index_cache.get((self.uid, shard))
        if hit is not None:
            return None if hit is _MISSING else hit
        with self._lock:
            epoch = self._epoch
        key = self.chunk_key(shard)
        index = read_shard_index(self._io, key, self._sharding, self._chunk_spec)
        with self._lock:
            if epoch == self._epoch:
                value = _MISSING if index is None else index
                self.engine.index_cache.put((self.uid, shard), value)
        return index

    def _store_get(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        try:
            return self._io.get(key, byte_range)
        except StoreError as exc:
            if key in str(exc):
                raise
            raise type(exc)(f"{key}: {exc}") from exc

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

    def _maybe_prefetch(self, offset: int, size: int) -> None:
        """On sequential reads, start loading the units the next bytes will need.

        Reads within ``_SEQUENTIAL_SLACK`` of the previous end count as sequential (the kernel
        sends read-ahead requests concurrently, slightly out of order). The plan is redone
        every half window of bytes read; each starts at most one window of new loads.

        How far ahead: as far as the units met ahead fit in the chunk cache beside the units
        the reader uses now (those of the last window it read). A row-major reader of a
        chunked array uses a whole layer of chunks at once and meets the next layer's chunks
        only a layer of bytes later; loading them while the current layer is served, and never
        so many that the cache evicts the current layer, keeps the reader from waiting at
        every layer and from reloading the chunks it is still reading."""
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
        cache = self.engine.chunk_cache
        unit_bytes = self._unit_spec.nbytes
        using = set(self._units_in(max(0, end - window), end))
        # two windows of slack: the reader's next requests and other arrays also need room
        room = cache.capacity - len(using) * unit_bytes - 2 * window
        reach = max(window, room)  # flat bytes scanned ahead (their units take >= as many)
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
        for job, us in self._work_items(wanted).items():
            with self._lock:  # not already loading, not loaded meanwhile
                us = [u for u in us if u not in self._inflight and (self.uid, u) not in cache]
                if not us:
                    continue
                fut: Future[dict[Coords, Any]] = Future()
                fut.units = us  # type: ignore[attr-defined]
                for u in us:
                    self._inflight[u] = fut
            fut.job = job  # type: ignore[attr-defined]
            fut.task = self.engine.executor.submit(  # type: ignore[attr-defined]
                self._prefetch_job, job, us, fut
            )

    def _prefetch_job(self, job: Any, units: list[Coords], fut: Future[dict[Coords, Any]]) -> None:
        self._run_job(job, units, fut)
        exc = fut.exception()
        if exc is not None:
            log.debug("prefetch of %s failed: %s", self.path, exc)

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
            self.flush(down_to=limit // 2)
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
        in_dtype = self.dtype.newbyteorder(_byte_order_char(byte_order))
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
            # except that a unit written in whole rows and not cached is not loaded now: its
            # unwritten rows are merged in when it is read or flushed (often they never are:
            # a sequential writer covers every row before the flush)
            partial: set[Coords] = set()
            rows: set[Coords] = set()
            for _, pieces in plan:
                for p in pieces:
                    if self._covers_unit(p.coords, p.chunk_sel):
                        continue
                    (rows if self._covers_rows(p.chunk_sel) else partial).add(p.coords)
            rows -= partial
            with self._lock:
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

    def _write_behind(self) -> None:
        """Start storing the completely written dirty units in the background, so a
        sequential writer rarely waits for a flush (one such flush per array at a time)."""
        with self._lock:
            if self._behind:
                return
            units = [u for u in self._complete if u in self._dirty and u not in self._frozen]
            if not units:
                return
            self._behind = True

        def run() -> None:
            try:
                self.flush(only=units)
            except ZarrFSError as exc:  # the units stay dirty; the next flush reports it
                log.warning("%s: background flush failed: %s", self.path or "/", exc)
            finally:
                with self._lock:
                    self._behind = False

        self.engine.executor.submit(run)

    def _covers_unit(self, unit: Coords, sel: tuple[slice, ...]) -> bool:
        """True if ``sel`` covers the whole unit (then its old content is not needed)."""
        return all(s.start == 0 and s.stop == n for s, n in zip(sel, self._unit_spec.shape))

    def _covers_rows(self, sel: tuple[slice, ...]) -> bool:
        """True if ``sel`` covers whole rows (the full last axis) of a unit."""
        shape = self._unit_spec.shape
        return len(shape) > 0 and sel[-1].start == 0 and sel[-1].stop == shape[-1]

    def _merge_unknown(self, units: Sequence[Coords]) -> None:
        """Load the old content of deferred dirty units and fill their unwritten rows."""
        todo = []
        with self._lock:
            for u in units:
                rows = self._unknown.get(u)
                if rows is None:
                    continue
                if rows.all():  # fully written: nothing to merge
                    del self._unknown[u]
                else:
                    todo.append(u)
        if not todo:
            return
        old = self._load(todo)  # may raise: the units stay dirty and unmerged
        for u in todo:
            with self._stripe(u):
                with self._lock:
                    rows = self._unknown.pop(u, None)
                    arr = self._dirty.get(u)
                if rows is None or arr is None:
                    continue
                keep = ~rows
                if old[u] is _MISSING:
                    arr[keep] = self._unit_spec.fill_value
                else:
                    arr[keep] = old[u][keep]

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
                    arr = arr.copy()
                else:
                    base = _MISSING if covers else bases.get(unit, (_MISSING, False))[0]
                    spec = self._unit_spec
                    if covers:  # every element is written below
                        arr = np.empty(spec.shape, dtype=spec.dtype)
                    elif unit in deferred:  # unwritten rows are merged in before any use
                        arr = np.empty(spec.shape, dtype=spec.dtype)
                        with self._lock:
                            self._unknown[unit] = np.zeros(arr.shape[:-1], dtype=bool)
                    else:
                        arr = spec.fill_array() if base is _MISSING else base.copy()
                    added = arr.nbytes
                with self._lock:
                    if not self._dirty:
                        self._dirty_since = time.monotonic()
                    self._dirty[unit] = arr
                    self._frozen.discard(unit)
            arr[sel] = values
            with self._lock:
                rows = self._unknown.get(unit)
                if rows is not None:
                    rows[sel[:-1]] = True
                if covers or (rows is not None and rows.all()):
                    self._complete.add(unit)
        return added

    @property
    def dirty(self) -> bool:
        with self._lock:
            return bool(self._dirty)

    def dirty_state(self) -> DirtyState:
        """What this array holds that the store does not have yet (``stats.json``'s ``dirty``)."""
        with self._lock:
            if self._sharding is None:
                objects, writing = set(self._dirty), set(self._frozen)
            else:
                objects = {self._unit_location(u)[0] for u in self._dirty}
                writing = {self._unit_location(u)[0] for u in self._frozen}
            since = self._dirty_since
            return DirtyState(
                nbytes=sum(arr.nbytes for arr in self._dirty.values()),
                objects=len(objects),
                writing=len(writing & objects),
                oldest_age_s=0.0 if since is None else time.monotonic() - since,
            )

    def dirty_age(self) -> float:
        """Seconds since the oldest unflushed write (0 when clean)."""
        with self._lock:
            return 0.0 if self._dirty_since is None else time.monotonic() - self._dirty_since

    def flush(self, down_to: int | None = None, only: Sequence[Coords] | None = None) -> None:
        """Encode and store every dirty unit; on return they are in the store (or it raised).

        With ``down_to``, only the oldest dirty units, until the mount's dirty bytes would be
        at most ``down_to``; with ``only``, those of these units that are still dirty.

        Lock order (docs/write-path.md): ``_flush_lock``, then ``_write_lock`` for the snapshot
        only; the caller holds neither."""
        with self._flush_lock:
            self._flush_locked(down_to, only)

    def _flush_locked(
        self, down_to: int | None = None, only: Sequence[Coords] | None = None
    ) -> None:
        """``flush`` with ``_flush_lock`` held by the caller (and maybe ``_write_lock``)."""
        with self._write_lock:
            with self._lock:
                if only is None:
                    units = list(self._dirty)
                else:
                    units = [u for u in only if u in self._dirty]
                if down_to is not None:
                    excess = self.engine.dirty_bytes - down_to
                    for n, u in enumerate(units):
                        if excess <= 0:
                            del units[n:]
                            break
                        excess -= self._dirty[u].nbytes
                unmerged = [u for u in units if u in self._unknown]
            if unmerged:
                self._merge_unknown(unmerged)  # may raise: nothing flushed, all still dirty
            with self._lock:
                snapshot = {u: self._dirty[u] for u in units if u in self._dirty}
                self._frozen.update(snapshot)
        if not snapshot:
            return
        run: Callable[[Coords, dict[Coords, Any]], None]
        if self._sharding is None:
            jobs = [(u, {u: arr}) for u, arr in snapshot.items()]
            run = self._flush_chunk
        else:
            groups: dict[Coords, dict[Coords, Any]] = {}
            for u, arr in snapshot.items():
                groups.setdefault(self._unit_location(u)[0], {})[u] = arr
            jobs = list(groups.items())
            run = self._flush_shard
        done = self.engine.run_all([functools.partial(run, *job) for job in jobs])
        errors = [exc for f in done if (exc := f.exception()) is not None]
        if errors:
            with self._lock:
                self._frozen.difference_update(snapshot)
            raise errors[0]

    def _commit(self, written: dict[Coords, Any]) -> None:
        """Mark units clean after their bytes reached the store."""
        cache = self.engine.chunk_cache
        freed = 0
        with self._lock:
            self._epoch += 1
            for u, done in written.items():
                current = self._dirty.get(u)
                if current is not None and current is done:
                    del self._dirty[u]
                    self._frozen.discard(u)
                    self._complete.discard(u)
                    freed += current.nbytes
                    cache.put((self.uid, u), done)
                else:
                    cache.pop((self.uid, u))
            if not self._dirty:
                self._dirty_since = None
            self._stored_bytes = None
        self.engine.add_dirty(-freed)

    def _flush_chunk(self, unit: Coords, units: dict[Coords, Any]) -> None:
        arr = units[unit]
        key = self.chunk_key(unit)
        spec = self._chunk_spec
        assert self._prepared is not None
        if spec.is_fill(arr):
            self.store.delete(key)
        else:
            with self.engine.working(self._prepared.encode_memory):
                # a view of the frozen unit where the chain allows (it is copied, never
                # changed, by writes that come while it is stored)
                data = self._prepared.encode_buffer(arr)
                if data is None:
                    self.store.delete(key)
                else:
                    self.store.set(key, data)
                    self.engine.stats.add(self.path, "bytes_stored", len(data))
                del data
        self._commit(units)

    def _flush_shard(self, shard: Coords, units: dict[Coords, Any]) -> None:
        from zarrfs.core.sharding.access import rewrite_memory, rewrite_shard

        assert self._sharding is not None
        key = self.chunk_key(shard)
        updates = {self._unit_location(u)[1]: arr for u, arr in units.items()}
        held = rewrite_memory(self._io, self._sharding, self._chunk_spec, len(updates))
        try:
            with self.engine.working(held):
                rewrite_shard(self._io, key, self._sharding, self._chunk_spec, updates)
        finally:
            self.engine.index_cache.pop((self.uid, shard))
        self._commit(units)

    # ------------------------------------------------------------------ resizing

    def resize(self, shape: tuple[int, ...]) -> None:
        """Change the shape (axis 0 only through the views). Chunks wholly outside the new
        shape are deleted; the part of an edge chunk beyond the edge is reset to the fill value
        so that growing later shows fill values, never old data.

        Takes ``_flush_lock`` then ``_write_lock`` (the order every flush takes them) and holds
        both to the end: no flush or write of this array runs meanwhile, and a write that was
        waiting is then checked against the new shape."""
        if self.engine.read_only or not self.store.writable:
            raise ReadOnlyError(f"{self.path or '/'}: read-only")
        if len(shape) != len(self.shape) or any(s < 0 for s in shape):
            raise InvalidWriteError(f"invalid new shape {shape}")
        save = self._save_metadata
        if save is None:
            raise InvalidWriteError("this array cannot be resized")
        shape = tuple(shape)
        with self._flush_lock:
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
                self.metadata = self.metadata.with_shape(shape)
                save(self.metadata)
                self._set_shape(shape)
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
        if self.store.get(self.chunk_key(coords), ByteRange(0, 1)) is None and not self._sharding:
            return 0
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
        prefix = self.metadata.chunk_store_prefix(self.path)
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
