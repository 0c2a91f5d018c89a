"""Resolving a key of a local directory store to a descriptor (``LocalStore``'s containment).

Invariants (the containment rule of ``local``): paths are never resolved as strings. Each
operation starts from the root's descriptor (``_root``) and either resolves the key in one
``openat2`` call (``beneath``: no link followed, nothing outside the root) or walks it one
component at a time with ``openat`` and ``O_NOFOLLOW | O_DIRECTORY`` relative to the previous
directory's descriptor, touching the final component relative to its parent's descriptor
without following links. What ``openat2`` cannot decide (a link met, the call missing), and a
directory to create, is walked, which gives the precise answer: a key reached through a link
raises ``SymlinkRefused``, a component that is neither a directory nor a link reads as
missing (or, when creating, raises ``StoreError``). Every descriptor a method returns is the
caller's to close; on any failure the descriptors opened on the way are closed.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence

from zarrfs.core.errors import StoreError
from zarrfs.core.stores.base import check_key, check_prefix
from zarrfs.core.stores.beneath import open_beneath
from zarrfs.core.stores.localgroup import TEMP_PREFIX, close_all

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_PATH_FLAGS = getattr(os, "O_PATH", 0) | os.O_NOFOLLOW | os.O_CLOEXEC
#: ``_lstat_beneath``: a component of the key is missing
_MISSING = os.stat_result((0,) * 10)

#: how often a walk retries a directory that a concurrent ``delete`` or ``mkdir`` changed
SET_ATTEMPTS = 64


class SymlinkRefused(StoreError):
    """A key component is a symbolic link (never followed)."""


class LocalPaths:
    """Key-to-descriptor resolution for a store rooted at the descriptor ``_root()`` (a mixin;
    ``LocalStore`` provides ``_root`` and ``url``)."""

    url: str

    def _root(self) -> int:
        raise NotImplementedError

    def _error(self, key: str, exc: OSError) -> StoreError:
        return StoreError(f"{self.url}: {key!r}: {exc.strerror or exc}")

    def _parts(self, key: str) -> list[str]:
        parts = check_key(key).split("/")
        if any(part.startswith(TEMP_PREFIX) for part in parts):
            raise StoreError(f"invalid store key {key!r}: {TEMP_PREFIX!r} names are reserved")
        return parts

    def _prefix_parts(self, prefix: str) -> list[str]:
        check_prefix(prefix)
        prefix = prefix.rstrip("/")
        return prefix.split("/") if prefix else []

    def _refuse_link(self, key: str, name: str) -> SymlinkRefused:
        return SymlinkRefused(
            f"{self.url}: {key!r}: {name!r} is a symbolic link; links are not followed"
        )

    def _open_child_dir(self, dir_fd: int, name: str, key: str, create: bool) -> int | None:
        """Descriptor of directory ``name`` in ``dir_fd`` (created if asked), or None."""
        for _ in range(SET_ATTEMPTS):
            try:
                return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
            except FileNotFoundError:
                if not create:
                    return None
                try:
                    os.mkdir(name, 0o777, dir_fd=dir_fd)
                except FileExistsError:
                    continue
                os.fsync(dir_fd)  # the new directory's entry is durable in its parent
            except OSError as exc:
                if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                    raise
                try:
                    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat.S_ISLNK(st.st_mode):
                    raise self._refuse_link(key, name) from None
                if create:
                    raise StoreError(
                        f"{self.url}: {key!r}: {name!r} exists and is not a directory"
                    ) from None
                return None
        raise StoreError(f"{self.url}: {key!r}: directory {name!r} keeps changing")

    def _open_dirs(self, parts: Sequence[str], key: str, *, create: bool) -> list[int] | None:
        """Descriptors of the root and each directory in ``parts`` (caller closes them all);
        None if one is missing (and ``create`` is false)."""
        fds = [os.dup(self._root())]
        try:
            for name in parts:
                fd = self._open_child_dir(fds[-1], name, key, create)
                if fd is None:
                    close_all(fds)
                    return None
                fds.append(fd)
        except BaseException:
            close_all(fds)
            raise
        return fds

    def _open_dir(self, parts: Sequence[str], key: str, *, create: bool) -> int | None:
        """Descriptor of the directory ``parts`` (closing the ones on the way), or None.
        An existing directory is opened in one ``openat2`` call (``beneath``), also when
        ``create`` asks: only a missing one is made by the walk."""
        try:
            fast = open_beneath(self._root(), "/".join(parts) or ".", DIR_FLAGS)
        except (FileNotFoundError, NotADirectoryError):
            if not create:
                return None
            fast = None  # a directory on the way is missing: the walk makes it
        if fast is not None:
            return fast
        fd = os.dup(self._root())
        try:
            for name in parts:
                child = self._open_child_dir(fd, name, key, create)
                os.close(fd)
                fd = -1
                if child is None:
                    return None
                fd = child
        except BaseException:
            if fd >= 0:
                os.close(fd)
            raise
        return fd

    def _lstat(self, key: str) -> os.stat_result | None:
        """``lstat`` of the key's file, None if missing or a directory; refuses links."""
        parts = self._parts(key)
        st = self._lstat_beneath(key)
        if st is None:
            dir_fd = self._open_dir(parts[:-1], key, create=False)
            if dir_fd is None:
                return None
            try:
                st = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError):
                return None
            finally:
                os.close(dir_fd)
        elif st is _MISSING:
            return None
        if stat.S_ISLNK(st.st_mode):
            raise self._refuse_link(key, parts[-1])
        if stat.S_ISDIR(st.st_mode):
            return None
        if not stat.S_ISREG(st.st_mode):
            raise StoreError(f"{self.url}: {key!r} is not a regular file")
        return st

    def _lstat_beneath(self, key: str) -> os.stat_result | None:
        """``lstat`` of ``key`` through one ``openat2`` (a final link is opened as the link);
        ``_MISSING`` if a component is missing, None if only the walk can tell."""
        try:
            fd = open_beneath(self._root(), key, _PATH_FLAGS)
        except (FileNotFoundError, NotADirectoryError):
            return _MISSING
        if fd is None:
            return None
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)

    def _open_file(self, key: str) -> tuple[int, os.stat_result] | None:
        """An open descriptor of the key's regular file and its ``fstat`` (caller closes it);
        None if the key is missing or a directory. Raises ``OSError`` and ``StoreError``."""
        parts = self._parts(key)
        try:
            fast = open_beneath(self._root(), key, _READ_FLAGS)
        except (FileNotFoundError, NotADirectoryError):
            return None
        fd = self._open_walked(parts, key) if fast is None else fast
        if fd is None:
            return None
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                os.close(fd)
                return None
            if not stat.S_ISREG(st.st_mode):
                raise StoreError(f"{self.url}: {key!r} is not a regular file")
        except BaseException:
            os.close(fd)
            raise
        return fd, st

    def _open_walked(self, parts: list[str], key: str) -> int | None:
        dir_fd = self._open_dir(parts[:-1], key, create=False)
        if dir_fd is None:
            return None
        try:
            return os.open(parts[-1], _READ_FLAGS, dir_fd=dir_fd)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise self._refuse_link(key, parts[-1]) from None
            raise
        finally:
            os.close(dir_fd)

    def _existing_dir(self, parts: Sequence[str], key: str) -> int | None:
        return self._open_dir(parts, key, create=False)
