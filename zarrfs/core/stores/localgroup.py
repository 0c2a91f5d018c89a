"""Atomic file replacement for the directory store, one object or a group at a time.

``replace_file`` is one ``set``: a temporary file in the key's directory, written, fsynced,
renamed over the key, then the directory fsynced. ``LocalGroup`` is group commit
(``Store.group``, one group per flush), in two steps:

1. stage: each object goes to a temporary file in its key's directory, written by the thread
   that produced it, which then starts the file's write-back without waiting for it
   (``sync_file_range``), so the disk works while the flush's other objects are encoded; or
   a temporary file written earlier, front to back while its bytes were produced
   (``LocalTemp``, ``Store.open_temp``), is adopted as it is;
2. commit: every temporary file is fsynced (its data mostly on disk by then; an adopted one
   was fsynced by its writer after its last byte, ``Staged.synced``, and is not again: on
   ext4 each fsync flushes the device's cache), renamed over its key, then each directory
   that got a rename is fsynced once (not once per object). The files being replaced are
   held open across the renames and closed by a thread of this module afterwards, so the
   file system frees their blocks after the commit rather than inside it.

Invariants:
- a temporary file is complete and fsynced before it is renamed, so after a crash at any
  point each key holds its old or its new bytes, never a mix (plus, at worst, temporary
  files, which are never listed as keys);
- ``commit`` returns only after every rename and every directory fsync, so the objects are
  durable; if it raises, every temporary file not renamed is unlinked;
- ``abort`` unlinks every temporary file still staged; nothing staged is ever visible
  before ``commit``.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import secrets
import stat
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from zarrfs.core.errors import StoreError
from zarrfs.core.libc import function
from zarrfs.core.stores import leftovers
from zarrfs.core.stores.base import Store, StoreGroup, TempObject
from zarrfs.core.stores.directio import (
    DIRECT_MIN,
    DirectWriter,
    allocate,
    direct_capable,
    write_pieces,
)

#: prefix of the temporary files of an unfinished ``set``; never keys
TEMP_PREFIX = ".zarrfs-tmp-"

_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

Pieces = Callable[[], Iterable[bytes | memoryview]]


def write_temp(dir_fd: int, pieces: Iterable[bytes | memoryview], sync: bool = True) -> str:
    """A new temporary file in ``dir_fd`` holding the concatenated ``pieces`` (each written
    as it comes, with direct I/O where it can: ``directio``), fsynced (``sync``; else only the
    write-back of what went through the page cache started) and closed; its name. If anything
    fails it is unlinked."""
    temp, fd = create_temp(dir_fd)
    try:
        try:
            write_pieces(fd, pieces)
            if sync:
                os.fsync(fd)
            else:
                start_writeback(fd)
        finally:
            os.close(fd)
    except BaseException:
        unlink_quietly(dir_fd, temp)
        raise
    return temp


def create_temp(dir_fd: int) -> tuple[str, int]:
    """A new, empty temporary file in ``dir_fd``, open for writing: (its name, descriptor)."""
    temp = TEMP_PREFIX + leftovers.TOKEN + secrets.token_hex(6)  # (the process's token first)
    return temp, os.open(temp, _TEMP_FLAGS, 0o666, dir_fd=dir_fd)


def unlink_quietly(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


def replace_file(dir_fd: int, name: str, pieces: Iterable[bytes | memoryview]) -> None:
    """Atomically and durably make ``name`` in ``dir_fd`` hold the concatenated ``pieces``
    (if producing one raises, the old file stays)."""
    temp = write_temp(dir_fd, pieces)
    try:
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        unlink_quietly(dir_fd, temp)
        raise
    os.fsync(dir_fd)


def publish(
    dir_fd: int,
    renames: Sequence[tuple[str, str]],
    sync: bool = False,
    synced: Collection[str] = (),
) -> None:
    """Rename each ``(temp, name)`` in ``dir_fd`` (fsyncing every temporary first when
    ``sync``, but those in ``synced``: fsynced by their writer after their last byte, which on
    ext4 saves a flush of the device's cache each), then fsync the directory once. If anything
    fails, the temporaries not renamed yet are unlinked and the error raised."""
    if sync:
        try:
            for temp, _ in renames:
                if temp in synced:
                    continue
                fd = os.open(temp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        except BaseException:
            for temp, _ in renames:
                unlink_quietly(dir_fd, temp)
            raise
    # the files being replaced are held open across their renames and closed by a thread
    # afterwards: freeing a replaced file's blocks then happens at that close, not inside the
    # rename that the commit (and a writer waiting for it) waits on
    replaced = _hold(dir_fd, [name for _, name in renames[:HELD_REPLACED]])
    try:
        for n, (temp, name) in enumerate(renames):
            try:
                os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                for left, _ in renames[n:]:
                    unlink_quietly(dir_fd, left)
                raise
        os.fsync(dir_fd)
    finally:
        if replaced:
            _closer.submit(close_all, replaced)


#: at most this many files replaced by one ``publish`` are held open until after it
HELD_REPLACED = 256
#: closes the files replaced by ``publish``: renamed over while closed, each 16 MiB chunk file
#: took ~3 ms inside its rename on ext4 (the file system freeing its blocks), which a commit
#: of 12 chunks waited 33-43 ms for (1-5 ms with them held open)
_closer = ThreadPoolExecutor(1, thread_name_prefix="zarrfs-close")
_HOLD_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _hold(dir_fd: int, names: Sequence[str]) -> list[int]:
    """Descriptors of those of ``names`` in ``dir_fd`` that exist and are regular files,
    held open so that renaming over them only unlinks them."""
    held: list[int] = []
    for name in names:
        try:
            fd = os.open(name, _HOLD_FLAGS, dir_fd=dir_fd)
        except OSError:  # missing (a new object), a symlink, or unreadable: replaced as is
            continue
        try:
            regular = stat.S_ISREG(os.fstat(fd).st_mode)
        except OSError:
            regular = False
        if regular:
            held.append(fd)
        else:
            os.close(fd)
    return held


def close_all(fds: list[int]) -> None:
    """Close every descriptor of ``fds``."""
    for fd in fds:
        os.close(fd)


def commit_staged(
    staged: list[Staged],
    open_dir: Callable[[tuple[str, ...], str], int | None],
    error: Callable[[str, OSError], Exception],
    url: str,
) -> None:
    """Rename every staged temporary over its key, fsyncing each directory once
    (``publish``); ``open_dir(parts, key)`` opens an existing directory of the store (None:
    missing), ``error(key, exc)`` names the key in a store error. If anything fails, what was
    not renamed is unlinked and the error raised."""
    by_dir: dict[tuple[str, ...], list[Staged]] = {}
    for st in staged:
        by_dir.setdefault(st.parts, []).append(st)
    pending = list(by_dir.items())
    try:
        while pending:
            parts, group = pending[0]
            key = group[0].key
            try:
                dir_fd = open_dir(parts, key)
                if dir_fd is None:  # a temporary keeps its directory: removed from outside
                    raise StoreError(f"{url}: {key!r}: its directory disappeared")
                try:
                    pending.pop(0)
                    renames = [(st.temp, st.name) for st in group]
                    synced = {st.temp for st in group if st.synced}
                    publish(dir_fd, renames, sync=True, synced=synced)
                finally:
                    os.close(dir_fd)
            except IsADirectoryError:
                raise StoreError(f"{url}: {key!r} is a directory") from None
            except OSError as exc:
                raise error(key, exc) from exc
    except BaseException:
        discard_staged([st for _, group in pending for st in group], open_dir)
        raise


def discard_staged(
    staged: list[Staged], open_dir: Callable[[tuple[str, ...], str], int | None]
) -> None:
    """Unlink staged temporaries (never raises)."""
    for st in staged:
        try:
            dir_fd = open_dir(st.parts, st.key)
        except (OSError, StoreError):
            continue
        if dir_fd is not None:
            unlink_quietly(dir_fd, st.temp)
            os.close(dir_fd)


_SYNC_FILE_RANGE: Callable[[int, int, int, int], int] | None = function(
    "sync_file_range", (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
)
_SYNC_FILE_RANGE_WRITE = 2


def start_writeback(fd: int) -> None:
    """Start writing the file's dirty pages to disk without waiting (Linux
    ``sync_file_range``); durability still needs ``fsync``. Nothing where unavailable."""
    if _SYNC_FILE_RANGE is not None:
        _SYNC_FILE_RANGE(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)


@dataclass(frozen=True)
class Staged:
    """One staged object: its key, the directory components and final name, the temporary."""

    key: str
    parts: tuple[str, ...]
    name: str
    temp: str
    #: fsynced by its writer after its last byte (the commit need not fsync it again)
    synced: bool = False


class LocalGroup(StoreGroup):
    """Group commit on a directory store (see the module docstring).

    ``stage(key, pieces)`` writes the temporary file (starting its write-back) and says
    where it is; ``commit_staged(staged)`` fsyncs and renames them and fsyncs each directory
    once (unlinking what it does not rename when it fails); ``discard(staged)`` unlinks
    temporaries."""

    def __init__(
        self,
        store: Store,
        stage: Callable[[str, Pieces], Staged],
        commit_staged: Callable[[list[Staged]], None],
        discard: Callable[[list[Staged]], None],
    ) -> None:
        super().__init__(store)
        self._stage = stage
        self._commit_staged = commit_staged
        self._discard = discard
        self._lock = threading.Lock()
        self._staged: dict[str, Staged] = {}

    def set(self, key: str, data: bytes | memoryview) -> None:
        view = memoryview(data).cast("B")
        self.set_stream(key, lambda: (view,))

    def set_stream(self, key: str, parts: Pieces) -> None:
        self._add(self._stage(key, parts))

    def adopt(self, temp: TempObject) -> bool:
        if not isinstance(temp, LocalTemp) or temp.store is not self.store:
            return False
        try:
            staged = temp.seal()
        except BaseException:
            temp.discard()
            raise
        self._add(staged)
        return True

    def _add(self, staged: Staged) -> None:
        with self._lock:
            earlier = self._staged.pop(staged.key, None)
            self._staged[staged.key] = staged
        if earlier is not None:  # staged twice: the later bytes win
            self._discard([earlier])

    def _take(self) -> list[Staged]:
        with self._lock:
            staged = list(self._staged.values())
            self._staged.clear()
        return staged

    def commit(self) -> None:
        staged = self._take()
        if staged:
            self._commit_staged(staged)

    def abort(self) -> None:
        staged = self._take()
        if staged:
            self._discard(staged)


class LocalTemp(TempObject):
    """A temporary file in its key's directory, written front to back (``DirectWriter``:
    direct I/O where it can, the file allocated whole first), then sealed (its write-back
    started, closed) and adopted by a ``LocalGroup`` of the same store, which fsyncs and
    renames it at commit like any staged object."""

    def __init__(
        self,
        store: Store,
        staged: Staged,
        fd: int,
        size: int,
        discard: Callable[[list[Staged]], None],
        building: bool = False,
    ) -> None:
        self.store = store
        self.key = staged.key
        self._staged = staged
        self._fd = fd
        self._discard_staged = discard
        self._writer = DirectWriter(fd, direct=size >= DIRECT_MIN)
        #: a second descriptor, for reading (``building``): it keeps the file's bytes
        #: readable after the file is renamed or unlinked, until ``release``
        self._reader = -1
        if building:
            self._reader = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
        elif self._writer.direct_possible and direct_capable(fd):
            allocate(fd, size)

    def append(self, data: memoryview) -> None:
        if self._staged.synced:
            raise ValueError("append after finish")
        self._writer.write(data)

    def finish(self) -> None:
        # fsynced here, by the thread that wrote it: the commit only renames it
        self._writer.finish()
        os.fsync(self._fd)
        self._staged = dataclasses.replace(self._staged, synced=True)

    def seal(self) -> Staged:
        """Write what the writer holds, start the file's write-back and close it; the file,
        as staged (on an error the caller discards it)."""
        if not self._staged.synced:  # else ``finish`` wrote and fsynced it all
            self._writer.finish()
            start_writeback(self._fd)
        self._close()
        return self._staged

    def _close(self) -> None:
        self._writer.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def discard(self) -> None:
        try:
            self._close()
        except OSError:
            pass
        self._discard_staged([self._staged])

    def read(self, offset: int, size: int) -> bytes:
        if self._reader < 0:
            raise ValueError("not a temporary opened for building, or released")
        on_disk = self._writer.written  # the rest waits in the writer's buffer
        head = b""
        if offset < on_disk:
            want = min(size, on_disk - offset)
            head = os.pread(self._reader, want, offset)
            if len(head) != want:
                raise OSError(f"temporary file of {self.key!r} shorter than written")
        if len(head) == size:
            return head
        start = max(offset, on_disk) - on_disk
        tail = bytes(self._writer.pending()[start : start + size - len(head)])
        if len(head) + len(tail) != size:
            raise ValueError(f"read past the end of the temporary file of {self.key!r}")
        return head + tail

    def release(self) -> None:
        if self._reader >= 0:
            os.close(self._reader)
            self._reader = -1
