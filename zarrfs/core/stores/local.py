"""Local directory store: one file per key under a root directory.

Spec: Zarr v3 "File system store" (store-filesystem.rst) and v3 core "Stores". A key ``a/b/c``
is the file ``<root>/a/b/c``; listing maps files back to keys.

Invariants:
- Containment (``localpaths``). Every key passes ``check_key``. Paths are never resolved as
  strings: each operation starts from the root's descriptor and resolves the key in one
  ``openat2`` call (``beneath``) or walks it one component at a time with ``openat`` and
  ``O_NOFOLLOW``, so no symbolic link inside the store is ever followed and nothing outside
  the root can be read or written through one (a key reached through a link raises
  ``StoreError``; links are never listed). The root is opened once, on first use (again after
  ``close``).
- Atomic, durable ``set``: the bytes go to a temporary file in the key's own directory, which
  is fsynced, renamed over the key (``rename`` is atomic) and then the directory is fsynced;
  directories created on the way are fsynced into their parents. Readers see the old or the
  new file, never a mix; a crash leaves the old or the new file plus, at worst, a temporary.
- Group commit (``group``): the objects of one flush are staged as temporary files (by the
  threads that produce them, which start their write-back), then fsynced, renamed together
  and each directory fsynced once (``localgroup``); each object is still replaced atomically.
- Temporary files are named ``.zarrfs-tmp-<random>``; no key may have a component starting
  with that prefix and listings skip such names, so crash leftovers are never mistaken for keys.
  A writable store that is the only writer open on its root removes the leftovers of other
  processes its listings meet (``leftovers``: each writer holds a lock on the root).
- ``delete`` unlinks the file, fsyncs its directory and removes directories left empty, up to
  but not including the root. A ``set`` racing with that pruning retries its walk.
- Ranged ``get`` reads only the requested bytes (``pread``); ``open_reader`` reads the file
  with ``preadv`` straight into the caller's buffers. A missing file, a missing parent
  or a directory at the key reads as None. Any other OS failure is a ``StoreError`` naming the
  key.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from zarrfs.core.errors import ReadOnlyError, StoreError
from zarrfs.core.stores.base import (
    ObjectReader,
    RangeRequest,
    Store,
    StoreGroup,
    TempObject,
    resolve_range,
)
from zarrfs.core.stores.directio import direct_capable
from zarrfs.core.stores.fileio import FileReader, pread_all
from zarrfs.core.stores.leftovers import claim
from zarrfs.core.stores.localgroup import (
    LocalGroup,
    LocalTemp,
    Pieces,
    Staged,
    close_all,
    commit_staged,
    create_temp,
    discard_staged,
    replace_file,
    write_temp,
)
from zarrfs.core.stores.locallist import LocalListing
from zarrfs.core.stores.localpaths import DIR_FLAGS, SET_ATTEMPTS
from zarrfs.core.stores.readahead import ListingReadAhead

T = TypeVar("T")


class LocalStore(LocalListing, Store):
    """A directory on a local (or network) file system as a Zarr store."""

    listable = True
    streams_sets = True
    reads_into = True

    def __init__(
        self, root: str | os.PathLike[str], *, read_only: bool = False, create: bool = False
    ) -> None:
        path = os.path.abspath(os.fspath(root))
        try:
            if create and not read_only:
                os.makedirs(path, exist_ok=True)
            real = os.path.realpath(path)
            st = os.stat(real)
        except FileNotFoundError:
            raise StoreError(f"store directory {path} does not exist") from None
        except OSError as exc:
            raise StoreError(f"cannot open store directory {path}: {exc.strerror}") from exc
        if not stat.S_ISDIR(st.st_mode):
            raise StoreError(f"store path {path} is not a directory")
        #: the store root with every symbolic link resolved, fixed at construction
        self.root = real
        self.writable = not read_only
        self.url = Path(real).as_uri()
        #: makes threads racing on the first use of ``_root_fd`` share one descriptor
        self._root_lock = threading.Lock()

    #: a descriptor of the root, every path is resolved from (opened on first use, once); -1:
    #: none yet (also what ``__del__`` sees of a store whose construction failed)
    _root_fd = -1

    def _root(self) -> int:
        fd = self._root_fd
        if fd < 0:
            with self._root_lock:
                fd = self._root_fd
                if fd < 0:
                    fd = os.open(self.root, DIR_FLAGS)
                    if self.writable:  # temporary files a dead writer left (``leftovers``)
                        self._locked = claim(fd)
                    self._root_fd = fd
        return fd

    #: the listing read-ahead helper (``enable_read_ahead``; None: off)
    _read_ahead: ListingReadAhead | None = None

    def enable_read_ahead(self) -> None:
        """Read the metadata below listed directories ahead in a helper process
        (``readahead``): a mount's tree walks on a cold page cache then wait on the disk far
        less. Off by default (the library API, tests)."""
        if self._read_ahead is None:
            self._read_ahead = ListingReadAhead(self.root)

    def read_ahead(self, prefixes: Sequence[str]) -> None:
        if self._read_ahead is not None:
            self._read_ahead.send(prefixes)

    @property
    def set_width(self) -> int | None:  # type: ignore[override]
        """Twice the CPUs on a local disk file system (``directio.DIRECT_FS``), where a flush's
        sets are this process's own work; elsewhere unbounded (``Store.set_width``). Asked once
        per flush: ``direct_capable`` keeps its answer per device."""
        return 2 * (os.cpu_count() or 1) if direct_capable(self._root()) else None

    def close(self) -> None:
        helper, self._read_ahead = self._read_ahead, None
        if helper is not None:
            helper.close()
        fd, self._root_fd = self._root_fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:  # pragma: no cover - interpreter shutdown
            pass

    def __repr__(self) -> str:
        return f"LocalStore({self.root!r}, read_only={not self.writable})"

    # -- readable ---------------------------------------------------------------------------

    def get(self, key: str, byte_range: RangeRequest = None) -> bytes | None:
        return self._read(key, byte_range)[0]

    def get_versioned(
        self, key: str, byte_range: RangeRequest = None
    ) -> tuple[bytes | None, str | None]:
        """One open: the version is the ``fstat`` of the file the bytes are read from (what
        ``version``'s ``lstat`` gives for it), so it always names those bytes."""
        if type(self).get is not LocalStore.get:  # a subclass that changes reads: through it
            return super().get_versioned(key, byte_range)
        data, st = self._read(key, byte_range)
        return data, (None if st is None else _version(st))

    def _read(
        self, key: str, byte_range: RangeRequest
    ) -> tuple[bytes | None, os.stat_result | None]:
        """The bytes of ``key`` (or the range) and the ``fstat`` of the file they come from."""
        try:
            opened = self._open_file(key)
            if opened is None:
                return None, None
            fd, st = opened
            try:
                start, length = resolve_range(st.st_size, byte_range)
                return pread_all(fd, length, start), st
            finally:
                os.close(fd)
        except OSError as exc:
            raise self._error(key, exc) from exc

    def open_reader(self, key: str) -> ObjectReader | None:
        try:
            opened = self._open_file(key)
        except OSError as exc:
            raise self._error(key, exc) from exc
        if opened is None:
            return None
        fd, st = opened
        return FileReader(fd, st.st_size, lambda exc: self._error(key, exc))

    def size(self, key: str) -> int | None:
        try:
            st = self._lstat(key)
        except OSError as exc:
            raise self._error(key, exc) from exc
        return None if st is None else st.st_size

    def version(self, key: str) -> str | None:
        try:
            st = self._lstat(key)
        except OSError as exc:
            raise self._error(key, exc) from exc
        return None if st is None else _version(st)

    # -- writeable --------------------------------------------------------------------------

    def _check_writable(self) -> None:
        if not self.writable:
            raise ReadOnlyError(f"store {self.url} is read-only")

    def set(self, key: str, data: bytes | memoryview) -> None:
        view = memoryview(data).cast("B")
        self.set_stream(key, lambda: (view,))

    def set_stream(self, key: str, pieces: Pieces) -> None:
        self._in_key_dir(key, lambda dir_fd, name: replace_file(dir_fd, name, pieces()))

    def group(self) -> StoreGroup:
        """Group commit: temporaries fsynced as staged, renamed together at ``commit``. A
        subclass that overrides ``set_stream`` (to observe or change every set) gets the
        default group, which calls it."""
        self._check_writable()
        if type(self).set_stream is not LocalStore.set_stream:
            return super().group()
        return LocalGroup(self, self._stage, self._commit_staged, self._discard)

    @property
    def builds_objects(self) -> bool:
        return type(self).set_stream is LocalStore.set_stream and self.writable

    def open_temp(self, key: str, size: int, building: bool = False) -> TempObject | None:
        """A temporary file in the key's directory (``LocalTemp``); None for a subclass that
        overrides ``set_stream`` (it sees every object it stores)."""
        if type(self).set_stream is not LocalStore.set_stream or not self.writable:
            return None
        parts = self._parts(key)
        temp, fd = self._in_key_dir(key, lambda dir_fd, name: create_temp(dir_fd))
        staged = Staged(key, tuple(parts[:-1]), parts[-1], temp)
        try:
            return LocalTemp(self, staged, fd, size, self._discard, building)
        except BaseException:
            os.close(fd)
            self._discard([staged])
            raise

    def _stage(self, key: str, pieces: Pieces) -> Staged:
        parts = self._parts(key)
        temp = self._in_key_dir(key, lambda dir_fd, name: write_temp(dir_fd, pieces(), False))
        return Staged(key, tuple(parts[:-1]), parts[-1], temp)

    def _commit_staged(self, staged: list[Staged]) -> None:
        """Rename every staged temporary over its key, fsyncing each directory once."""
        commit_staged(staged, self._existing_dir, self._error, self.url)

    def _discard(self, staged: list[Staged]) -> None:
        """Unlink staged temporaries (never raises)."""
        discard_staged(staged, self._existing_dir)

    def _in_key_dir(self, key: str, action: Callable[[int, str], T]) -> T:
        """``action(dir_fd, name)`` in the key's directory (created if missing), walking
        again when a concurrent ``delete`` pruned a directory on the way."""
        self._check_writable()
        parts = self._parts(key)
        try:
            for _ in range(SET_ATTEMPTS):
                # ENOENT anywhere below means a concurrent delete pruned a directory on the
                # way (mkdir or create in a removed directory): walk again
                try:
                    dir_fd = self._open_dir(parts[:-1], key, create=True)
                except FileNotFoundError:
                    continue
                if dir_fd is None:  # pragma: no cover - create=True never gives None
                    raise StoreError(f"{self.url}: {key!r}: cannot create its directory")
                try:
                    return action(dir_fd, parts[-1])
                except FileNotFoundError:
                    continue
                finally:
                    os.close(dir_fd)
        except IsADirectoryError:
            raise StoreError(f"{self.url}: {key!r} is a directory") from None
        except OSError as exc:
            raise self._error(key, exc) from exc
        raise StoreError(f"{self.url}: {key!r}: its directory keeps disappearing")

    def delete(self, key: str) -> None:
        self._check_writable()
        parts = self._parts(key)
        try:
            fds = self._open_dirs(parts[:-1], key, create=False)
            if fds is None:
                return
            try:
                try:
                    os.unlink(parts[-1], dir_fd=fds[-1])
                except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                    return  # missing, or a prefix rather than a key
                except PermissionError:
                    st = os.stat(parts[-1], dir_fd=fds[-1], follow_symlinks=False)
                    if stat.S_ISDIR(st.st_mode):
                        return
                    raise
                os.fsync(fds[-1])
                _prune_empty(fds, parts)
            finally:
                close_all(fds)
        except OSError as exc:
            raise self._error(key, exc) from exc


def _prune_empty(fds: list[int], parts: list[str]) -> None:
    """Remove the now-empty directories of ``parts[:-1]``, deepest first, never the root.

    ``fds[i]`` is the descriptor of the directory holding ``parts[i]``.
    """
    for i in range(len(parts) - 2, -1, -1):
        try:
            os.rmdir(parts[i], dir_fd=fds[i])
        except OSError:
            return  # not empty (or changed meanwhile): stop here
        os.fsync(fds[i])


def _version(st: os.stat_result) -> str:
    """The version token of a file (``Store.version``): it changes with every replacement
    (inode) and every write (mtime, size)."""
    return f"{st.st_mtime_ns}:{st.st_size}:{st.st_ino}"
