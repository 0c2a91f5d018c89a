"""Write-through of plain units: a writer's bytes reach the unit's new object while it writes.

A unit stored by the ``bytes`` codec alone, in the native byte order (``PlainUnits.direct``),
is stored as its elements in C order: the object a flush stores is the dirty unit array's
own bytes. When a writer fills such a unit front to back (``dd``, ``cp`` or
``numpy.tofile`` over ``data.raw``: each write continues the unit's C order where the one
before stopped), every finished run of at least ``STEP`` bytes is appended by a thread of
this module to a new object of the store (``Store.open_temp``: on a directory store a
temporary file beside the chunk, written with direct I/O), which the thread writing its last
byte also makes durable (``TempObject.finish``). The flush that stores the unit adopts that
object (``StoreGroup.adopt``), so only its rename is left: storing a layer of units no longer
writes all their bytes after the writer's last write, and a writer entering the next layer
does not wait for that.

Invariants:
- a stream holds bytes ``[0, submitted)`` of exactly one dirty unit array (by identity), in
  order; it grows only by a write whose piece of the unit is contiguous in C order and starts
  at ``submitted``. Any other write to the unit, a merge of the unit's unwritten rows
  (``drop``), or a new dirty copy of it (copy-on-write while a flush stores it) ends the
  stream;
- the flush adopts a stream (``take``) only if it streams the very array being stored, all of
  it, and every append succeeded; otherwise its object is discarded and the unit stored the
  usual way. A stream never changes what is stored, only when the bytes are written; the
  dirty unit stays in memory, and dirty, until the commit that stores it, as without streams;
- every stream ends taken or dropped (also when its array is collected without storing it:
  ``_orphans``, reaped by the next writer); a dropped stream's object is discarded by an
  appender thread, never while an append to it runs (each stream's appends and its discard
  hold its ``pump_lock``);
- appends run in ``THREADS`` threads of their own, which wait on nothing else of the engine
  (a flush waits on them, never the reverse); at most ``MAX_OPEN`` streams are open at once
  in the process (each holds a file descriptor); ``_lock`` is a leaf lock
  (docs/write-path.md), under which only dictionary and counter updates and ``submit``
  happen.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from math import prod
from typing import Any

import numpy as np

from zarrfs.core.direct import span_of
from zarrfs.core.stores.base import Store, TempObject

log = logging.getLogger(__name__)

Coords = tuple[int, ...]
Sel = tuple[slice, ...]

#: units smaller than this are stored the usual way (a file per small unit is not worth it)
MIN_UNIT = 1 << 20
#: an appender is started once this many new bytes of a stream are final (or it is complete)
STEP = 1 << 20
#: streams open at once in the process
MAX_OPEN = 256
#: appender threads (direct writes wait on the device; a few at once keep it busy)
THREADS = 4

_OPEN, _TAKEN, _DROPPED = range(3)

_lock = threading.Lock()
_open_count = 0
_pool = ThreadPoolExecutor(THREADS, thread_name_prefix="zarrfs-through")


class _Stream:
    """One unit's object being written (fields under ``_lock`` unless noted)."""

    __slots__ = ("arr", "key", "total", "submitted", "queued", "state", "pump_lock", "temp",
                 "written", "failed")  # fmt: skip

    def __init__(self, arr: np.ndarray[Any, Any], key: str) -> None:
        self.arr = arr
        self.key = key
        self.total = arr.nbytes
        #: bytes of ``arr`` that are final and belong to the stream
        self.submitted = 0
        #: ``submitted`` when an appender was last started
        self.queued = 0
        self.state = _OPEN
        #: held by whoever appends to or discards ``temp`` (the fields below are its)
        self.pump_lock = threading.Lock()
        self.temp: TempObject | None = None
        self.written = 0
        self.failed = False


class UnitStreams:
    """The streams of one array's units (plain chunks stored as their elements)."""

    def __init__(
        self, store: Store, key: Callable[[Coords], str], shape: tuple[int, ...], itemsize: int
    ) -> None:
        self._store = store
        self._key = key
        self._shape = shape
        self._itemsize = itemsize
        self._streams: dict[Coords, _Stream] = {}
        # an array dropped with streams it never stored (its flush failed for good): their
        # objects are discarded once it is collected (``_orphans``, reaped by the next writer)
        weakref.finalize(self, _orphans.append, (store, self._streams))

    @staticmethod
    def worth(nbytes: int) -> bool:
        """Whether units of ``nbytes`` are written through."""
        return nbytes >= MIN_UNIT

    def wrote(self, unit: Coords, arr: np.ndarray[Any, Any], sel: Sel) -> None:
        """A write copied the piece ``sel`` of ``unit`` into its dirty array ``arr`` (the
        unit's stripe lock held; never blocks: may be the event loop)."""
        global _open_count
        if _orphans:
            _reap()
        lo, hi = span_of(self._shape, self._itemsize, sel)
        contiguous = hi - lo == prod(s.stop - s.start for s in sel) * self._itemsize
        with _lock:
            stream = self._streams.get(unit)
            if stream is None:
                if lo or not contiguous or _open_count >= MAX_OPEN or not arr.flags.c_contiguous:
                    return
                stream = self._streams[unit] = _Stream(arr, self._key(unit))
                _open_count += 1
            elif stream.arr is not arr or lo != stream.submitted or not contiguous:
                self._end(unit, stream)
                return
            stream.submitted = hi
            if hi - stream.queued < STEP and hi < stream.total:
                return
            stream.queued = hi
            _pool.submit(_pump, self._store, stream)

    def drop(self, unit: Coords) -> None:
        """``unit``'s dirty array changes other than by a write that continues its stream."""
        with _lock:
            stream = self._streams.get(unit)
            if stream is not None:
                self._end(unit, stream)

    def take(self, unit: Coords, arr: np.ndarray[Any, Any]) -> TempObject | None:
        """The unit's object, complete, if its stream holds all of ``arr`` (the array a flush
        is storing); else None (any stream of the unit is discarded). The caller adopts or
        discards what it gets."""
        global _open_count
        with _lock:
            stream = self._streams.pop(unit, None)
            if stream is None:
                return None
            _open_count -= 1
            stream.state = _TAKEN
            whole = stream.arr is arr and stream.submitted == stream.total
        with stream.pump_lock:
            if whole:
                _append(self._store, stream)  # the bytes no appender has written yet
            temp, stream.temp = stream.temp, None
            if whole and not stream.failed and temp is not None:
                assert stream.written == stream.total
                return temp
        if temp is not None:
            temp.discard()
        return None

    def _end(self, unit: Coords, stream: _Stream) -> None:
        """Drop a stream (``_lock`` held): an appender discards its object."""
        del self._streams[unit]
        _drop(self._store, stream)


def _drop(store: Store, stream: _Stream) -> None:
    """``stream`` is out of its array's table (``_lock`` held): an appender discards its
    object."""
    global _open_count
    _open_count -= 1
    stream.state = _DROPPED
    _pool.submit(_pump, store, stream)


#: (store, streams) of collected ``UnitStreams`` whose streams were never stored. Their
#: finalizer only appends here (it may run in any thread, under any lock: it takes none)
_orphans: deque[tuple[Store, dict[Coords, _Stream]]] = deque()


def _reap() -> None:
    """Drop the streams of collected arrays (``_lock`` not held): their objects discarded,
    their places in ``MAX_OPEN`` freed."""
    while _orphans:
        try:
            store, streams = _orphans.popleft()
        except IndexError:  # another thread took the last one
            return
        with _lock:
            for stream in streams.values():
                _drop(store, stream)
            streams.clear()


def _pump(store: Store, stream: _Stream) -> None:
    """Appender thread: write what is final and not written yet, or discard the object of a
    dropped stream."""
    with stream.pump_lock:
        with _lock:
            state = stream.state
        if state == _OPEN:
            _append(store, stream)
        elif state == _DROPPED and stream.temp is not None:
            stream.temp.discard()
            stream.temp = None


def _append(store: Store, stream: _Stream) -> None:
    """Append ``[written, submitted)`` (``pump_lock`` held); a failure marks the stream failed
    (its unit is then stored the usual way, which reports any lasting error)."""
    if stream.failed:
        return
    data = stream.arr.reshape(-1).view(np.uint8).data
    try:
        while True:
            with _lock:
                stop = stream.submitted
            if stream.written >= stop:
                return
            if stream.temp is None:
                stream.temp = store.open_temp(stream.key, stream.total)
                if stream.temp is None:  # the store cannot: the usual way
                    stream.failed = True
                    return
            stream.temp.append(data[stream.written : stop])
            stream.written = stop
            if stop == stream.total:  # durable before the flush asks for it
                stream.temp.finish()
    except Exception as exc:  # store or OS error: the flush stores the unit as usual
        log.debug("writing %s through failed: %s", stream.key, exc)
        stream.failed = True
