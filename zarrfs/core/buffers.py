"""Chunk-sized buffers that stay mapped: freed blocks are taken again instead of fresh memory.

The engine allocates and drops chunk-sized buffers all the time: the encoded bytes of a chunk
read from the store, a decoded unit, a dirty copy a writer fills. Fresh anonymous memory is
the dearest part of that: every page is faulted in and zeroed by the kernel, and on a
virtual machine that returns free memory to its host (free page reporting, ballooning) the
host backs it again first. Measured here (2 vCPUs, Firecracker): 1.5-1.8 GiB/s to fault in
fresh memory, 4 KiB pages, huge pages or ``MADV_POPULATE_WRITE`` alike, against 26 GiB/s to
write memory already mapped; a cold read of a 512 MiB blosc array through the mount faulted in
~860 MiB (the encoded chunks read, then the decoded units). glibc would keep freed memory for
reuse only with a large mmap threshold, which leaves holes in its heaps (the daemon's peak
RSS grew by 100-190 MiB); this pool keeps whole blocks, bounded, and only blocks.

``take(nbytes)`` returns a writable, page-aligned ``uint8`` array of ``nbytes`` bytes with
``numpy.empty`` semantics (its contents are undefined): an idle block of the same size when
there is one, else a new private anonymous mapping. When the last reference to that array
and to every view of it is gone, its block becomes idle again (a ``weakref.finalize`` on the
array; nobody gives blocks back by hand, so nothing in use is ever handed out twice).

Invariants:
- a block is handed out at most once at a time: it is idle only after the array over it
  (and so every view, memoryview and slice of it) was freed;
- idle blocks take at most their bound: ``limit`` bytes, plus what the owner's ``spare()``
  gives (the part of its memory budget nothing uses now: the engine's chunk cache leaves its
  unused capacity, so a sequential reader's released units wait there for the loads that
  take their blocks next), read at each ``take`` and ``fit``. A block that would pass the
  bound frees the blocks idle longest, of any size, until it fits (blocks of a size nobody
  takes any more give way to the sizes in use), and a block larger than the bound is freed;
  ``take`` brings the idle blocks within the bound before it maps a new block, and the
  engine calls ``fit`` whenever its budget shrinks (a reservation, more dirty bytes), so
  idle blocks and what the budget holds stay within it together (units cached from memory
  not taken here, a codec's own output, can pass it until the next ``take`` or ``fit``);
  one idle longer than
  ``IDLE_SECONDS`` is freed at the next ``take``; ``trim`` frees them all;
- requests below ``MIN_BLOCK`` bytes are plain ``numpy.empty`` arrays (glibc reuses those);
- ``_lock`` is a leaf (``spare()`` is called before it is taken), and the finalizer of a
  freed array takes no lock (it appends its block to ``_returned``, which the next ``take``
  moves to the idle blocks): the cyclic garbage collector can free an array during any
  allocation, one made under ``_lock`` included, and a finalizer waiting for ``_lock``
  there would wait for good.
"""

from __future__ import annotations

import mmap
import threading
import time
import weakref
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

import numpy as np

#: requests at least this large come from blocks; smaller ones from ``numpy.empty``
MIN_BLOCK = 1 << 20
#: idle blocks unused this long are freed (a size nobody asks for any more)
IDLE_SECONDS = 30.0
#: idle bytes kept by default (the daemon sets the mount's own bound, ``configure``)
DEFAULT_LIMIT = 64 << 20


class _Block(mmap.mmap):
    """One private anonymous mapping (the type tells pool blocks apart in tests)."""


class BlockPool:
    """Blocks of memory kept mapped for reuse; see the module docstring."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self._lock = threading.Lock()
        self.limit = limit
        #: idle blocks by size, most recently freed last, each with the time it became idle
        self._idle: defaultdict[int, list[tuple[_Block, float]]] = defaultdict(list)
        self._idle_bytes = 0
        #: blocks whose array was freed, with the time: appended by the finalizer without a
        #: lock, moved to ``_idle`` by ``_settle`` (under ``_lock``)
        self._returned: deque[tuple[_Block, float]] = deque()
        #: blocks handed out again (counters for stats and tests)
        self.reused = 0
        self.created = 0
        #: bytes beyond ``limit`` that idle blocks may take now (None: none); a weak method
        #: of the owner's, so the pool keeps no engine alive
        self.spare: weakref.WeakMethod[Callable[[], int]] | None = None

    def _bound(self) -> int:
        """``limit`` plus what ``spare()`` allows now (called without ``_lock``)."""
        get = self.spare() if self.spare is not None else None
        return self.limit + max(0, get()) if get is not None else self.limit

    @property
    def idle_bytes(self) -> int:
        dropped: list[_Block] = []
        bound = self._bound()
        with self._lock:
            self._settle(dropped, bound)
            return self._idle_bytes

    def take(self, nbytes: int, capacity: int = 0) -> np.ndarray[Any, Any]:
        """A writable ``uint8`` array of ``nbytes`` bytes, contents undefined, in a block of
        ``max(nbytes, capacity)`` bytes (rounded up to whole pages): requests of varying
        sizes (encoded chunks) name the largest they can be, so their blocks are alike."""
        if nbytes < MIN_BLOCK:
            return np.empty(nbytes, dtype=np.uint8)
        size = -(-max(nbytes, capacity) // mmap.PAGESIZE) * mmap.PAGESIZE
        now = time.monotonic()
        expired: list[_Block] = []
        bound = self._bound()
        with self._lock:
            self._settle(expired, bound)
            block = None
            kept = self._idle.get(size)
            if kept:
                block, _ = kept.pop()
                self._idle_bytes -= size
                self.reused += 1
            self._expire(now, expired)
            self._fit(bound, expired)  # before a new block is mapped: within the bound
        del expired  # freed outside the lock
        if block is None:
            block = _Block(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            with self._lock:
                self.created += 1
        arr = np.frombuffer(block, dtype=np.uint8, count=nbytes)
        finalizer = weakref.finalize(arr, self._idle_again, block)
        finalizer.atexit = False
        return arr

    def fit(self) -> None:
        """Free the idle blocks longest idle until they are within the bound read now."""
        dropped: list[_Block] = []
        bound = self._bound()
        with self._lock:
            self._settle(dropped, bound)
            self._fit(bound, dropped)
        del dropped  # freed outside the lock

    def stats(self) -> dict[str, int]:
        """``stats.json``'s ``buffers``: idle bytes kept, blocks made and blocks taken again."""
        dropped: list[_Block] = []
        bound = self._bound()
        with self._lock:
            self._settle(dropped, bound)
            return {
                "idle_bytes": self._idle_bytes,
                "limit": self.limit,
                "blocks_created": self.created,
                "blocks_reused": self.reused,
            }

    def trim(self) -> None:
        """Free every idle block."""
        dropped: list[_Block] = []
        with self._lock:
            self._settle(dropped, self.limit)
            idle = self._idle
            self._idle = defaultdict(list)
            self._idle_bytes = 0
        del idle, dropped

    def _idle_again(self, block: _Block) -> None:
        """The array over ``block`` was freed. A finalizer: it runs in any thread, under any
        locks, also this pool's own (the cyclic garbage collector may free an array during
        any allocation, one made under ``_lock`` included), so it takes no lock: the block
        waits in ``_returned`` for the next ``_settle``."""
        self._returned.append((block, time.monotonic()))

    def _settle(self, dropped: list[_Block], bound: int) -> None:
        """Move the returned blocks to ``_idle`` (``_lock`` held), freeing the longest idle ones
        to keep within ``bound``: the blocks freed go to ``dropped``, for the caller to
        release after the lock (a block is unmapped once its last export is released)."""
        while self._returned:
            try:
                block, since = self._returned.popleft()
            except IndexError:  # pragma: no cover - only this thread pops, under the lock
                break
            size = len(block)
            if size > bound:
                dropped.append(block)
                continue
            self._fit(bound - size, dropped)  # the longest idle make room
            self._idle[size].append((block, since))
            self._idle_bytes += size

    def _fit(self, bound: int, dropped: list[_Block]) -> None:
        """Free the longest idle blocks until the idle ones take at most ``bound`` bytes
        (``_lock`` held; the blocks freed go to ``dropped``)."""
        while self._idle_bytes > bound:
            oldest = min(self._idle, key=lambda n: self._idle[n][0][1])
            kept = self._idle[oldest]
            dropped.append(kept.pop(0)[0])
            self._idle_bytes -= oldest
            if not kept:
                del self._idle[oldest]

    def _expire(self, now: float, out: list[_Block]) -> None:
        """Move blocks idle longer than ``IDLE_SECONDS`` to ``out`` (lock held)."""
        for size in list(self._idle):
            kept = self._idle[size]
            while kept and now - kept[0][1] > IDLE_SECONDS:
                out.append(kept.pop(0)[0])
                self._idle_bytes -= size
            if not kept:
                del self._idle[size]


#: the process's pool (the daemon serves one mount per process)
pool = BlockPool()


def take(nbytes: int, capacity: int = 0) -> np.ndarray[Any, Any]:
    """``pool.take``: ``nbytes`` bytes of writable memory, contents undefined."""
    return pool.take(nbytes, capacity)


def empty(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """``numpy.empty(shape, dtype)`` (C order) in a pool block when it is chunk-sized."""
    dt = np.dtype(dtype)
    if dt.hasobject:
        return np.empty(shape, dtype=dt)
    n = dt.itemsize
    for s in shape:
        n *= s
    return take(n).view(dt).reshape(shape)


def copy(arr: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A C-order copy of ``arr`` (``arr.copy()``), in a pool block when it is chunk-sized."""
    out = empty(arr.shape, arr.dtype)
    np.copyto(out, arr)
    return out


def apart(arr: np.ndarray[Any, Any], block: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``arr``, or a copy of it (``copy``) where it is a view of ``block``: a result decoded
    from a block is kept (cached) longer than the block is needed, and a view would keep the
    block, sized for the largest input, from being taken again until then."""
    return copy(arr) if np.may_share_memory(arr, block) else arr


def configure(limit: int, spare: Callable[[], int] | None = None) -> None:
    """Keep at most ``limit`` idle bytes (the mount's share of its memory bound), and what
    ``spare()`` (a bound method, held weakly) leaves beside it."""
    pool.spare = weakref.WeakMethod(spare) if spare is not None else None
    pool.limit = limit
    if pool.idle_bytes > limit:
        pool.trim()
