"""Reading local files for the directory store: whole ranges (``pread_all``) and readers that
``preadv`` straight into the caller's buffers (``FileReader``, behind ``LocalStore.open_reader``).

Invariants: ``pread_all`` returns fewer bytes than asked only at the end of the file;
``FileReader.readinto`` fills the buffer from ``offset`` until it is full or the file ends and
returns how much it read, raising the store's error (naming the key) for any OS failure (with
``nowait``, ``BlockingIOError`` when any of it is not in the page cache: it never waits); the
reader owns its descriptor and ``close`` releases it once.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable

from zarrfs.core.errors import StoreError
from zarrfs.core.stores.base import ObjectReader


def pread_all(fd: int, length: int, offset: int) -> bytes:
    """Up to ``length`` bytes at ``offset`` (fewer only at end of file)."""
    if length <= 0:
        return b""
    first = os.pread(fd, length, offset)
    if len(first) == length or not first:
        return first
    parts = [first]
    got = len(first)
    while got < length:
        more = os.pread(fd, length - got, offset + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


class FileReader(ObjectReader):
    """A chunk file open for ``preadv`` straight into the caller's buffers."""

    def __init__(self, fd: int, size: int, error: Callable[[OSError], StoreError]) -> None:
        self._fd = fd
        self.size = size
        self._error = error
        # the whole object will be read, front to back: the kernel may read ahead further
        with contextlib.suppress(OSError, AttributeError):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)

    def readinto(self, buf: memoryview, offset: int, nowait: bool = False) -> int:
        if nowait:  # from the page cache only: all of it, or BlockingIOError
            try:
                n = os.preadv(self._fd, [buf], offset, os.RWF_NOWAIT)
            except BlockingIOError:
                raise
            except OSError as exc:
                raise self._error(exc) from exc
            if n < len(buf) and offset + n < self.size:
                raise BlockingIOError(errno.EAGAIN, "part of the range is not cached")
            return n
        got = 0
        try:
            while got < len(buf):
                n = os.preadv(self._fd, [buf[got:]], offset + got)
                if n <= 0:
                    break
                got += n
        except OSError as exc:
            raise self._error(exc) from exc
        return got

    def will_need(self, offset: int, length: int) -> None:
        # the kernel starts reading the range into the page cache and returns
        with contextlib.suppress(OSError, AttributeError):
            os.posix_fadvise(self._fd, offset, length, os.POSIX_FADV_WILLNEED)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
