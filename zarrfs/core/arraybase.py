"""The state every part of a ``ZarrArray`` shares, and its geometry.

``ZarrArray`` is assembled from parts, each in its own module: ``readpath.ReadPath`` (cache,
loads in flight, prefetch), ``flushing.Flushing`` (the dirty set and when it is stored),
``writepath.WritePath`` (applying writes) and ``array.ZarrArray`` (the public facade, resize).
This base holds their shared state, created once here, and the locks of docs/write-path.md.

Invariants:
- every attribute below is guarded by the lock named beside it; the locks are taken only in
  the order of docs/write-path.md (``_edit_lock``, ``_flush_lock``, ``_write_lock``, a stripe,
  ``_lock``);
- the unit strategy (``_units``) is chosen once, from the metadata, and never changes;
- the shape (``shape``, ``grid``, ``_unit_grid``) changes only under ``_write_lock`` and
  ``_flush_lock`` together (``resize``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import cached_property
from math import prod
from typing import Any, Literal

import numpy as np

from zarrfs.core.codecs.chain import PreparedChain
from zarrfs.core.engine import Engine
from zarrfs.core.errors import MemoryLimitError, NodeNotFound
from zarrfs.core.grid import RegularGrid
from zarrfs.core.layout import Box, flat_to_boxes
from zarrfs.core.metadata.model import ArrayMetadata
from zarrfs.core.shardunits import ShardedUnits, choose_units
from zarrfs.core.stores.base import Store
from zarrfs.core.stores.wrapper import CountingReads
from zarrfs.core.units import PlainUnits, UnitContext

Coords = tuple[int, ...]

_NSTRIPES = 64

_ORDER_CHAR: dict[str, Literal["<", ">", "="]] = {"little": "<", "big": ">", "native": "="}


def byte_order_char(byte_order: str) -> Literal["<", ">", "="]:
    try:
        return _ORDER_CHAR[byte_order]
    except KeyError:
        raise ValueError(f"byte order must be little, big or native, not {byte_order!r}") from None


@dataclass(eq=False)
class Load:
    """One load job in flight: the units of one outer chunk it brings, and its result.

    A streaming load (one plain unit) also shows the unit array it is filling: its first
    ``ready`` bytes are final and may be read while the rest is loaded; ``cond`` is notified
    when ``ready`` grows and when the load ends."""

    outer: Coords
    units: list[Coords]
    done: Future[dict[Coords, Any]] = field(default_factory=Future)
    #: the queued pool task, when the load runs in the background (a waiter may take it back)
    task: Future[None] | None = None
    #: a waiter took the queued task back and runs it (set under the array's ``_lock``)
    claimed: bool = False
    #: the unit array being filled (streaming loads), and how many of its bytes are final
    array: np.ndarray[Any, Any] | None = None
    ready: int = 0
    cond: threading.Condition = field(default_factory=threading.Condition)

    def publish(self, array: np.ndarray[Any, Any], ready: int) -> None:
        """The first ``ready`` bytes of ``array`` are loaded (called by the loading thread)."""
        with self.cond:
            self.array = array
            self.ready = ready
            self.cond.notify_all()

    def ready_array(self, need: int) -> np.ndarray[Any, Any] | None:
        """The unit array if its first ``need`` bytes are loaded (the load may still run)."""
        with self.cond:
            return self.array if self.array is not None and self.ready >= need else None


class ArrayState:
    """Shared state and geometry of one array (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        path: str,
        metadata: ArrayMetadata,
        engine: Engine | None = None,
        save_metadata: Callable[[ArrayMetadata, tuple[int, ...]], ArrayMetadata] | None = None,
        edit_lock: threading.RLock | None = None,
    ) -> None:
        self.store = store
        #: the node's metadata edit lock (``Hierarchy.edit_lock``): a resize holds it, before
        #: any lock of the array, so no other read-modify-write of the metadata crosses it
        self._edit_lock = edit_lock if edit_lock is not None else threading.RLock()
        self.path = path
        #: what chunk and shard I/O goes through: the store, counting bytes fetched
        self._io = CountingReads(store, self._count_fetched)
        self.metadata = metadata
        self.engine = engine or Engine()
        self._save_metadata = save_metadata
        self.uid = self.engine.new_uid()
        self.dtype: np.dtype[Any] = metadata.data_type.dtype
        self.itemsize = self.dtype.itemsize
        #: plain chunks or inner chunks of shards, chosen once
        self._units = choose_units(
            metadata,
            UnitContext(
                self._io,
                self.engine,
                self.uid,
                path,
                self.chunk_key,
                self._get_epoch,
                self._if_current,
            ),  # fmt: skip
        )
        self._chunk_spec = self._units.chunk_spec
        self._unit_spec = self._units.unit_spec
        self._set_shape(metadata.shape)
        self._lock = threading.Lock()  # guards _dirty, _unknown(_cols), _frozen, _inflight, _epoch
        self._write_lock = threading.RLock()  # one writer or flush commit at a time
        self._flush_lock = threading.Lock()
        #: per-unit load locks, made on first use (listing many arrays never needs them)
        self._stripes: list[threading.Lock] | None = None
        self._dirty: dict[Coords, np.ndarray[Any, Any]] = {}
        #: dirty units whose old content was never loaded: which rows (all axes but the last)
        #: have been written; the others are loaded and merged before anyone needs them
        self._unknown: dict[Coords, np.ndarray[Any, Any]] = {}
        #: of those units, the rows written in part (by writes whose pieces are one row each):
        #: row index -> the ``[start, stop)`` element intervals written, sorted and disjoint; a
        #: row they come to cover is flagged in ``_unknown`` and leaves this map
        #: (``WritePath._mark_written``)
        self._unknown_cols: dict[Coords, dict[tuple[int, ...], list[tuple[int, int]]]] = {}
        self._frozen: set[Coords] = set()
        #: dirty units every element of which has been written (write-behind candidates)
        self._complete: set[Coords] = set()
        #: a write-behind flush of this array is queued or running
        self._behind = False
        #: unit -> the load bringing it (one load job may bring several units of a shard)
        self._inflight: dict[Coords, Load] = {}
        self._epoch = 0
        self._dirty_since: float | None = None
        #: last change of the data through this object (the data files' mtime)
        self.mtime_ns = time.time_ns()
        self._last_end = -1
        #: flat byte offset up to which loads have been started by prefetching
        self._prefetch_end = 0
        #: flat byte offset before which passed units were dropped from the cache
        self._release_from = 0
        self._stored_bytes: int | None = None

    @property
    def _prepared(self) -> PreparedChain | None:
        """The prepared chain of a plain chunk (None when units are inner chunks of shards)."""
        return self._units.prepared if isinstance(self._units, PlainUnits) else None

    def _get_epoch(self) -> int:
        with self._lock:
            return self._epoch

    def _if_current(self, epoch: int, action: Callable[[], object]) -> bool:
        """Run ``action`` under ``_lock`` if the epoch is still ``epoch``; whether it ran."""
        with self._lock:
            if self._epoch != epoch:
                return False
            action()
            return True

    def _count_fetched(self, n: int) -> None:
        self.engine.stats.add(self.path, "bytes_fetched", n)

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

    def _unit_limit(self, writing: bool) -> int:
        """The largest unit (a chunk, or an inner chunk of a shard) that can be read (held in
        the chunk cache) or written (held dirty, within the dirty limit); never less than
        ``Engine.min_unit_limit``."""
        engine = self.engine  # (the cache's own capacity shrinks while writes are dirty)
        limit = (engine.dirty_limit or 0) if writing else engine.cache_size - engine.pool_bytes
        return max(limit, engine.min_unit_limit)

    @cached_property
    def oversize(self) -> bool:
        """Whether one unit decodes to more than the chunk cache holds and more than
        ``Engine.min_unit_limit`` (64 MiB; a smaller unit is loaded whatever the cache, one
        chunk of memory beside it). Such a unit is never loaded: it is read only straight from
        its stored file (plain-bytes chunks), and any other read of it fails with
        ``MemoryLimitError`` (ENOMEM) before any allocation, as does a write of a unit over
        both the dirty limit and that floor (``check_unit_size``). Memory stays within
        ``cache_size`` and one such floor, and a unit the cache cannot hold is not decoded
        again for every read that touches it (a sequential reader of a 2 GiB chunk would
        decode it 2,048 times). Computed once: the unit and the engine's sizes never change."""
        return self._unit_spec.nbytes > self._unit_limit(False)

    @cached_property
    def cannot_encode(self) -> str | None:
        """Why nothing written to this array could be stored (a numcodecs codec configured so
        that it decodes but cannot encode), or None: checked at the first write, once."""
        return self.metadata.codecs.prepare(self._chunk_spec).cannot_encode

    def check_unit_size(self, what: str, writing: bool = False) -> None:
        """Refuse ``what`` (reading or writing units) where a unit is over its limit."""
        if not (self._unit_spec.nbytes > self._unit_limit(True) if writing else self.oversize):
            return
        need = -(-self._unit_spec.nbytes * 4 // 3 // (1 << 20))  # MiB: within both limits
        raise MemoryLimitError(
            f"/{self.path}: {what} needs its chunks in memory, {self._unit_spec.nbytes} bytes "
            f"each, more than this mount's cache allows (-o cache_size={self.engine.cache_size}"
            f"); mount with -o cache_size={need}M or more"
        )

    @property
    def sharded(self) -> bool:
        return isinstance(self._units, ShardedUnits)

    def chunk_key(self, coords: Coords) -> str:
        return self.metadata.chunk_store_key(self.path, coords)

    def _check_chunk(self, coords: Coords) -> None:
        if not self.grid.contains(tuple(coords)):
            # a chunk file opened before a resize took its chunk away: gone, as at its lookup
            raise NodeNotFound(
                f"chunk {tuple(coords)} no longer exists: the grid is {self.grid.grid_shape}"
            )

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

    def _stripe(self, unit: Coords) -> threading.Lock:
        stripes = self._stripes
        if stripes is None:
            with self._lock:
                if self._stripes is None:
                    self._stripes = [threading.Lock() for _ in range(_NSTRIPES)]
                stripes = self._stripes
        return stripes[hash(unit) % _NSTRIPES]
