"""Direct reads: the raw view of a chunk stored as plain bytes, served from its stored file.

A chunk whose chain is the ``bytes`` codec alone, in the native byte order, is stored as the
unit's elements in C order. A sequential reader of ``data.raw`` needs, from each chunk, one
run of rows after another; those runs are read from the stored object (``ObjectReader``:
``preadv`` on a directory store) straight into the reader's buffer, without a decoded unit
array in between. A cold sequential read then touches no fresh memory of its own beyond the
reply buffer (on a virtual machine that hands free memory back to its host, the first touch
of every page of a 16 MiB unit array costs more than reading it) and copies each byte once
less; the page cache of the chunk files is the only cache, filled ahead of the reader by
the kernel's read-ahead of each file read in order.

Invariants:
- ``read_pieces`` fills every destination completely from one open object of exactly the
  unit's size, or returns False having filled nothing the caller may use (the object is not
  a plain chunk of this unit: the caller loads it the usual way, which refuses it as
  corrupt), or raises (store error, or the object shrank while it was read); it never
  invents bytes;
- a missing object fills the destinations with the fill value (as a load would);
- what one call holds besides the destinations is one span of the object, at most
  ``SPAN_SLACK`` times the bytes the pieces need (``span_of``; callers check ``worth``), read
  into a buffer of the calling thread's that it keeps (up to ``SCRATCH_MAX``) and that only
  that thread uses, within one call.
"""

from __future__ import annotations

import errno
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np

from zarrfs.core.errors import CorruptDataError
from zarrfs.core.stores.base import ObjectReader

Sel = tuple[slice, ...]

#: reads of the raw view at least this large are served directly (smaller ones only when
#: they continue the previous read; a small random read loads its whole unit into the cache)
MIN_READ = 64 << 10

#: a span read for some pieces may hold at most this many times the bytes they need
SPAN_SLACK = 4


def span_of(shape: tuple[int, ...], itemsize: int, sel: Sel) -> tuple[int, int]:
    """Byte range ``[start, stop)`` of the C-order file of a unit of ``shape`` that holds
    every element of ``sel`` (from its first element to its last)."""
    first = 0
    last = 0
    for s, n in zip(sel, shape, strict=True):
        first = first * n + s.start
        last = last * n + (s.stop - 1)
    return first * itemsize, (last + 1) * itemsize


def worth(shape: tuple[int, ...], itemsize: int, sels: Sequence[Sel]) -> bool:
    """True if reading the spans of ``sels`` costs at most ``SPAN_SLACK`` times their bytes."""
    need = 0
    spans = 0
    for sel in sels:
        need += prod(s.stop - s.start for s in sel) * itemsize
        lo, hi = span_of(shape, itemsize, sel)
        spans += hi - lo
    return spans <= SPAN_SLACK * max(need, 1)


def read_pieces(
    reader: ObjectReader | None,
    shape: tuple[int, ...],
    dtype: np.dtype[Any],
    fill: Any,
    pieces: Sequence[tuple[Sel, np.ndarray[Any, Any]]],
    key: str,
    nowait: bool = False,
) -> bool:
    """Copy ``unit[sel]`` into ``dst`` for each ``(sel, dst)`` from the stored unit opened as
    ``reader`` (None: not stored, so the fill value). False, with nothing read, when the
    object is not exactly one unit of elements. With ``nowait``, ``BlockingIOError`` when a
    span is not in memory yet (the destinations are then partly filled)."""
    if reader is None:
        for _, dst in pieces:
            dst[...] = fill
        return True
    itemsize = dtype.itemsize
    if reader.size != prod(shape) * itemsize:
        return False
    strides = tuple(prod(shape[k + 1 :]) * itemsize for k in range(len(shape)))  # C order, in bytes
    for sel, dst in pieces:
        lo, hi = span_of(shape, itemsize, sel)
        # a span that is exactly the destination's bytes (chunks spanning the rest of the
        # array's rows, such as one image plane each) is read straight into it
        whole = dst.flags.c_contiguous and dst.dtype == dtype and dst.nbytes == hi - lo
        buf = dst.reshape(-1).view(np.uint8) if whole else _scratch(hi - lo)
        got = reader.readinto(buf.data, lo, nowait)
        if got != hi - lo:
            raise CorruptDataError(
                f"chunk file shrank to {lo + got} bytes while it was read", key=key
            )
        if whole:
            continue
        # the unit's elements of ``sel``, laid out in the span as in the file (numpy checks
        # that they lie within it); the constructor costs a fraction of ``as_strided``
        src = np.ndarray(
            tuple(s.stop - s.start for s in sel), dtype=dtype, buffer=buf, strides=strides
        )
        dst[...] = src
    return True


#: a thread keeps its span buffer up to this size (a larger span gets a buffer of its own)
SCRATCH_MAX = 8 << 20

_local = threading.local()


def _scratch(n: int) -> np.ndarray[Any, Any]:
    """``n`` bytes of this thread's span buffer, whose pages stay mapped between reads (a
    fresh buffer per read is faulted in again every time)."""
    if n > SCRATCH_MAX:
        return np.empty(n, dtype=np.uint8)
    buf: np.ndarray[Any, Any] | None = getattr(_local, "buf", None)
    if buf is None or len(buf) < n:
        buf = np.empty(max(n, 1 << 20), dtype=np.uint8)
        _local.buf = buf
    return buf[:n]


@dataclass(eq=False)
class _Open:
    #: None: the chunk is not stored (read as the fill value)
    reader: ObjectReader | None
    epoch: int
    opened: float
    users: int = 0
    dropped: bool = False


class OpenChunks:
    """Stored chunks kept open for direct reads, shared by the arrays of a mount.

    A sequential reader reads each chunk a few rows at a time, so the chunk stays open
    between its reads instead of being opened and closed for each.

    Invariants (all under ``_lock``):
    - an entry serves only its array's commit ``epoch`` (a chunk this mount replaced is never
      read through the descriptor of the old file, nor found missing after it stored it) and
      for ``MAX_AGE`` seconds after it was opened (one another program replaced or created is
      read as before at most that long);
    - at most ``MAX_OPEN`` entries; a dropped entry's reader is closed by whoever releases it
      last (never while a read uses it), and every entry of a ``clear`` is closed so.
    """

    MAX_OPEN = 64
    MAX_AGE = 1.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[int, str], _Open] = OrderedDict()

    def acquire(
        self,
        uid: int,
        key: str,
        epoch: int,
        open_: Callable[[str], ObjectReader | None],
        nowait: bool = False,
    ) -> _Open:
        """The open chunk ``key`` of array ``uid`` (release it); its ``reader`` is None when
        the chunk is not stored. With ``nowait``, ``BlockingIOError`` unless it is open
        already."""
        now = time.monotonic()
        with self._lock:
            found = self._entries.get((uid, key))
            if found is not None and (found.epoch != epoch or now - found.opened > self.MAX_AGE):
                self._drop((uid, key), found)
                found = None
            if found is not None:
                found.users += 1
                self._entries.move_to_end((uid, key))
                return found
        if nowait:
            raise BlockingIOError(errno.EAGAIN, "chunk not open yet")
        entry = _Open(open_(key), epoch, now, users=1)
        with self._lock:
            old = self._entries.get((uid, key))
            if old is not None:
                self._drop((uid, key), old)
            self._entries[(uid, key)] = entry
            while len(self._entries) > self.MAX_OPEN:
                first = next(iter(self._entries))
                self._drop(first, self._entries[first])
        return entry

    def release(self, entry: _Open) -> None:
        with self._lock:
            entry.users -= 1
            if entry.dropped and entry.users == 0 and entry.reader is not None:
                entry.reader.close()

    def clear(self) -> None:
        """Drop every entry (closed now, or by the read still using it)."""
        with self._lock:
            for k in list(self._entries):
                self._drop(k, self._entries[k])

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _drop(self, k: tuple[int, str], entry: _Open) -> None:
        del self._entries[k]
        entry.dropped = True
        if entry.users == 0 and entry.reader is not None:
            entry.reader.close()
