"""Memory pages of buffers about to be filled: faulted in with one ``madvise`` call.

Used where a fresh buffer is filled at once by a copy the kernel or a codec makes (a chunk file
read into a unit array, a blosc chunk decoded into its output), so the pages are not faulted
in one at a time during that copy. Shared by the stores and the codecs (which do not import
each other). ``prefault_behind`` does the same in a background thread, a MiB per call, for a
buffer that is filled piece by piece later (a dirty unit a writer fills one request at a
time).

Invariants: ``prefault`` never changes the bytes of the buffer it is given, nor any page
outside it (only pages wholly inside the buffer are touched), so it may run while another
thread writes into the buffer; where the kernel lacks the advice it does nothing, and stops
asking after the first refusal. The background thread holds at most ``BEHIND_QUEUE`` buffers
(more are not faulted in ahead) and keeps each alive only until it is faulted in.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from zarrfs.core.libc import function

#: ``madvise`` advice (Linux 5.14+): fault a range in, writable, in one call
_MADV_POPULATE_WRITE = 23
#: destinations at least this large are faulted in before they are read into
PREFAULT_MIN = 64 << 10


_madvise: Callable[[int, int, int], int] | None = function(
    "madvise", (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
)


def prefault(buf: memoryview) -> None:
    """Fault in the whole pages of the writable buffer ``buf`` in one call, before a read fills
    it. A fresh unit array is otherwise faulted in a page at a time while the kernel copies
    into it (measured reading 512 MiB of chunk files into fresh arrays, 8 threads: 0.39-0.47 s
    of CPU without, 0.34-0.36 s with). Only pages wholly inside ``buf`` are touched, and their
    contents do not change; where the kernel lacks the advice nothing happens."""
    global _madvise
    if _madvise is None or len(buf) < PREFAULT_MIN:
        return
    start = np.frombuffer(buf, dtype=np.uint8).ctypes.data
    lo = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
    hi = (start + len(buf)) // mmap.PAGESIZE * mmap.PAGESIZE
    if hi > lo and _madvise(lo, hi - lo, _MADV_POPULATE_WRITE) != 0:
        if ctypes.get_errno() == errno.EINVAL:  # a kernel without the advice: stop asking
            _madvise = None


#: buffers the background thread faults in at once, and as many more waiting for it
#: (``prefault_behind`` skips a buffer when the queue is full). A writer over an array's rows
#: makes a whole layer of units dirty at its first rows (64 inner chunks of 2 MiB for the
#: benchmark's sharded array): with room for 16, the other 48 were faulted in by the writer
#: itself as it copied into them
BEHIND_QUEUE = 128
#: the background thread faults a buffer in this many bytes per call. ``madvise`` holds the
#: process's memory-map lock while it faults its range in, and a new mapping (the next fresh
#: unit, ``buffers``) waits for that lock: one call per 16 MiB unit made the writes that
#: start a layer of chunks (4 new units each) take 16-23 ms instead of ~1 (512 MiB ``dd``
#: over the benchmark's ``bytes`` array, medians of 5 alternating runs: 703 against 653 MiB/s)
BEHIND_STEP = 1 << 20
_behind: queue.Queue[memoryview] | None = None
_behind_lock = threading.Lock()


def prefault_behind(arr: np.ndarray[Any, Any]) -> None:
    """Fault in the pages of the fresh C-contiguous array ``arr`` in a background thread,
    while the caller goes on filling it piece by piece.

    A dirty unit a writer fills one 1 MiB request at a time is otherwise faulted in a page at
    a time by the thread that copies each request into it (the event loop for inline writes),
    and on a virtual machine that hands free memory back to the host every first touch of a
    page is slow. Measured, ``dd bs=1M conv=fsync`` over 512 MiB through the mount, 3 runs
    each: 1.27-1.47 s with, 1.58-1.72 s without (bytes); 2.12-2.21 s / 2.35-2.40 s (blosc)."""
    if _madvise is None or arr.nbytes < PREFAULT_MIN or arr.dtype.hasobject:
        return
    if not arr.flags.c_contiguous:
        return
    q = _behind_queue()
    try:
        q.put_nowait(arr.reshape(-1).view(np.uint8).data)
    except queue.Full:  # the thread is behind: the writer faults the pages itself
        pass


def wait_behind() -> None:
    """Return once every buffer queued by ``prefault_behind`` was faulted in (tests)."""
    with _behind_lock:
        q = _behind
    if q is not None:
        q.join()


def _behind_queue() -> queue.Queue[memoryview]:
    global _behind
    with _behind_lock:
        if _behind is None:
            _behind = queue.Queue(BEHIND_QUEUE)
            threading.Thread(
                target=_run_behind, args=(_behind,), name="zarrfs-prefault", daemon=True
            ).start()
        return _behind


def behind_step(nbytes: int) -> int:
    """Bytes of a buffer of ``nbytes`` faulted in per call: ``BEHIND_STEP``, or an eighth of a
    smaller buffer (at least 64 KiB), so the front of each of many small units comes first."""
    return max(64 << 10, min(BEHIND_STEP, nbytes // 8))


def _run_behind(q: queue.Queue[memoryview]) -> None:
    """Fault in the queued buffers a step (``behind_step``) of each in turn, front to back:
    a writer over rows fills every unit of a layer a little at a time (one row of each, then
    the next), so the front of every unit it started is needed before the back of any. One
    unit after the other, the writer's first rows of a layer landed in pages the thread had
    not reached (512 MiB ``dd`` overwrite, 8 alternating runs each: sharded 714 -> 762 MiB/s,
    ``bytes`` 1039 -> 1086; blosc 414 -> 433 and gzip 477 -> 486 in 4)."""
    active: list[tuple[memoryview, int]] = []
    while True:
        if not active:
            active.append((q.get(), 0))
        while len(active) < BEHIND_QUEUE:  # those queued meanwhile join this round
            try:
                active.append((q.get_nowait(), 0))
            except queue.Empty:
                break
        going: list[tuple[memoryview, int]] = []
        for buf, at in active:
            step = behind_step(len(buf))
            try:
                prefault(buf[at : at + step])
            finally:
                at += step
                if at < len(buf):
                    going.append((buf, at))
                else:
                    q.task_done()
        active = going
        del going, buf


def _forget_thread() -> None:
    """In a forked child the thread is gone: the next ``prefault_behind`` starts another."""
    global _behind, _behind_lock
    _behind, _behind_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_thread)
