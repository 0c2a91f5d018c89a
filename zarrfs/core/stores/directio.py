"""Writing a new file's bytes with direct I/O (``O_DIRECT``), past the page cache.

The directory store writes every object to a fresh temporary file and fsyncs it before the
rename (``localgroup``). Through the page cache, that costs the CPU a copy into freshly
allocated cache pages plus their write-back; for 512 MiB of 16 MiB objects on ext4 that is
1.0-1.8 s of CPU and 1.2-2.3 s until fsynced, against 0.1-0.2 s of CPU and 0.5-0.7 s with
direct writes of 1 MiB from a page-aligned buffer (the daemon's CPU is what a writer through
the mount waits on: two cores also serve the FUSE requests and encode chunks).

Invariants:
- the file ends up holding exactly the concatenated pieces, in order, whatever mix of direct
  and buffered writes stored them;
- a direct write starts at a file offset, from a memory address, and has a length that are
  all multiples of ``ALIGN``; the bytes that do not qualify go through a page-aligned bounce
  buffer (a piece's unaligned bytes, the file's last partial block);
- before ``finish`` and while direct writes are on, the file offset is a multiple of
  ``ALIGN``; buffered writes happen only for the last partial block, for a file smaller than
  ``DIRECT_MIN`` (direct writes wait on the device one by one, small objects are cheaper
  through the page cache and the commit's fsync: one write from the bounce buffer when the
  size shows only at the end, each piece as it comes when it is known up front), and after
  a refusal; without direct I/O the pieces are written as they come, never copied;
- direct I/O is used only on the local disk file systems in ``DIRECT_FS`` (``fstatfs``): on a
  network file system each direct write would wait for the server, and a memory file system
  has no page cache to bypass;
- where the file system refuses direct I/O (``fcntl`` or a direct ``write`` failing with
  ``EINVAL``, which writes nothing), the rest of the file is written buffered from the same
  offset;
- an object whose pieces come as a tuple or list (its size known up front) and which is
  written with direct I/O is first allocated whole (``posix_fallocate``): direct writes
  appended 1 MiB at a time while other files grow get several extents each (4-5 per 16 MiB
  file against 1 written through the page cache, whose allocation is delayed to write-back);
- durability is the caller's, as before: direct I/O bypasses the page cache, not the device's
  volatile cache, and the file's size and extents are metadata, so the file is still fsynced;
- at most ``POOL_KEEP`` idle bounce buffers (``BOUNCE`` bytes each) are kept for reuse; a
  buffer is used by one writer at a time.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from zarrfs.core.libc import function

#: alignment of a direct write's offset, address and length (the largest logical block size
#: of common devices; any smaller one divides it)
ALIGN = 4096
#: bytes gathered in the bounce buffer per direct write
BOUNCE = 1 << 20
#: files smaller than this are written through the page cache
DIRECT_MIN = 256 << 10
#: idle bounce buffers kept for reuse
POOL_KEEP = 8

#: threads writing through the page cache at once: one per CPU. Page-cache writes from more
#: threads than CPUs contend in the kernel (page allocation, LRU and memcg locks): eight
#: concurrent writers of 16 MiB objects use four times the CPU of two for the same bytes.
_BUFFERED_WRITERS = threading.BoundedSemaphore(os.cpu_count() or 1)

#: file systems (``statfs`` ``f_type``) whose files are written with direct I/O
DIRECT_FS = {
    0xEF53: "ext2/ext3/ext4",
    0x58465342: "xfs",
    0x9123683E: "btrfs",
    0xF2F52010: "f2fs",
}


_FSTATFS: Callable[[int, Any], int] | None = function("fstatfs", (ctypes.c_int, ctypes.c_void_p))
#: whether each device (``st_dev``) holds a file system of ``DIRECT_FS``
_direct_devices: dict[int, bool] = {}


def direct_capable(fd: int) -> bool:
    """Whether the file ``fd`` is on a local disk file system written with direct I/O."""
    dev = os.fstat(fd).st_dev
    known = _direct_devices.get(dev)
    if known is None:
        known = False
        if _FSTATFS is not None:
            buf = ctypes.create_string_buffer(256)  # struct statfs; f_type is its first word
            if _FSTATFS(fd, buf) == 0:
                f_type = ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF
                known = f_type in DIRECT_FS
        _direct_devices[dev] = known
    return known


_pool: list[mmap.mmap] = []
_pool_lock = threading.Lock()


def _take_buffer() -> mmap.mmap:
    with _pool_lock:
        if _pool:
            return _pool.pop()
    return mmap.mmap(-1, BOUNCE)  # anonymous mappings start on a page boundary


def _give_buffer(buf: mmap.mmap) -> None:
    with _pool_lock:
        if len(_pool) < POOL_KEEP:
            _pool.append(buf)
            return
    buf.close()


def _copy(dst: memoryview, src: memoryview) -> None:
    """``dst[:] = src`` without holding the interpreter lock for the copy: ``numpy.copyto``
    releases it for large arrays, a ``memoryview`` slice assignment copies holding it. A
    thread copying 1 MiB pieces the latter way kept another thread that wanted the lock
    waiting the whole switch interval (5 ms; 0.08 ms with ``numpy.copyto``); the pieces are
    the encoded inner chunks a parking job appends while the event loop takes writes."""
    np.copyto(np.frombuffer(dst, dtype=np.uint8), np.frombuffer(src, dtype=np.uint8))


def _address(view: memoryview) -> int:
    return int(np.frombuffer(view, dtype=np.uint8).ctypes.data) if len(view) else 0


class DirectWriter:
    """Writes one new file's bytes, in order, from its start (see the module docstring)."""

    def __init__(self, fd: int, direct: bool = True) -> None:
        """``direct``: the file may be written with direct I/O (False: a file known to stay
        smaller than ``DIRECT_MIN``)."""
        self.fd = fd
        self.written = 0  # bytes in the file so far
        # None: not tried yet; False: every write goes through the page cache
        self._direct: bool | None = None if direct and direct_capable(fd) else False
        self._flag_on = False
        self._buf: mmap.mmap | None = None
        self._view: memoryview | None = None
        self._fill = 0

    @property
    def direct_possible(self) -> bool:
        """Direct writes are not ruled out (the file system is one of ``DIRECT_FS``, the file
        not known to stay small, nothing refused so far)."""
        return self._direct is not False

    def write(self, data: memoryview) -> None:
        """Append ``data`` (a byte view; not kept after the call)."""
        if self._direct is False and self._fill == 0:  # no copy for the page cache's sake
            self._write_buffered(data)
            return
        while len(data):
            if (
                self._fill == 0
                and self._direct is not False
                and len(data) >= DIRECT_MIN
                and _address(data) % ALIGN == 0
            ):  # straight from the caller's buffer
                whole = len(data) // ALIGN * ALIGN
                self._write_direct(data[:whole])
                data = data[whole:]
                continue
            view = self._bounce()
            take = min(BOUNCE - self._fill, len(data))
            _copy(view[self._fill : self._fill + take], data[:take])
            self._fill += take
            data = data[take:]
            if self._fill == BOUNCE:
                self._write_direct(view)
                self._fill = 0

    def pending(self) -> memoryview:
        """The bytes appended after the first ``written`` ones: still in the bounce buffer."""
        return self._view[: self._fill] if self._view is not None else memoryview(b"")

    def finish(self) -> None:
        """Write what the bounce buffer holds and give the buffer back."""
        try:
            if self._fill:
                view = self._bounce()
                whole = self._fill // ALIGN * ALIGN
                if self.written == 0 and self._fill < DIRECT_MIN:  # a small file
                    whole = 0
                if whole:
                    self._write_direct(view[:whole])
                self._write_buffered(view[whole : self._fill])
                self._fill = 0
        finally:
            self.close()

    def close(self) -> None:
        """Give the bounce buffer back (idempotent; the file descriptor stays the caller's)."""
        if self._buf is not None:
            assert self._view is not None
            self._view.release()
            _give_buffer(self._buf)
            self._buf = self._view = None

    def _bounce(self) -> memoryview:
        if self._view is None:
            self._buf = _take_buffer()
            self._view = memoryview(self._buf)
        return self._view

    def _set_direct(self, on: bool) -> bool:
        """Switch ``O_DIRECT`` on the descriptor; False when the file system refuses it."""
        if self._flag_on == on:
            return True
        flags = fcntl.fcntl(self.fd, fcntl.F_GETFL)
        try:
            fcntl.fcntl(self.fd, fcntl.F_SETFL, flags | os.O_DIRECT if on else flags & ~os.O_DIRECT)
        except OSError as exc:
            if not on or exc.errno != errno.EINVAL:
                raise
            return False
        self._flag_on = on
        return True

    def _write_direct(self, data: memoryview) -> None:
        """Write ``data`` (aligned, a multiple of ``ALIGN`` long) directly, or buffered if the
        file system refuses direct I/O."""
        if self._direct is not False and self._set_direct(True):
            self._direct = True
            done = 0
            try:
                while done < len(data):
                    done += os.write(self.fd, data[done:])
                self.written += done
                return
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self.written += done  # a refused direct write wrote nothing
                data = data[done:]
        self._direct = False
        self._write_buffered(data)

    def _write_buffered(self, data: memoryview) -> None:
        self._set_direct(False)
        done = 0
        with _BUFFERED_WRITERS:
            while done < len(data):
                done += os.write(self.fd, data[done:])
        self.written += done


def allocate(fd: int, size: int) -> None:
    """Reserve ``size`` bytes for the file at once where the file system can (direct writes
    appended piece by piece otherwise get an extent each when several files grow at once)."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError:  # not supported here, or no room: the writes themselves will tell
        pass


def write_pieces(fd: int, pieces: Iterable[bytes | memoryview]) -> None:
    """Write the concatenated ``pieces`` to the new, empty file ``fd`` (each piece released
    as soon as it is written or copied)."""
    size = sum(memoryview(p).nbytes for p in pieces) if isinstance(pieces, tuple | list) else None
    writer = DirectWriter(fd, direct=size is None or size >= DIRECT_MIN)
    try:
        if size is not None and writer.direct_possible:
            allocate(fd, size)  # one extent, as delayed allocation gives buffered writes
        for piece in pieces:
            with memoryview(piece) as raw, raw.cast("B") as data:
                writer.write(data)
            del piece
        writer.finish()
    finally:
        writer.close()
