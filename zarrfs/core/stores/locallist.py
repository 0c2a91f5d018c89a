"""Listing a local directory store (``LocalStore``'s listable capability).

Invariants (those of ``local``): names starting with the temporary-file prefix or holding a
backslash are never listed; only regular files are keys and only real directories are
descended into (``d_type``/``lstat``, links are never followed nor listed); a directory replaced
by a link while a listing walks is skipped. ``list_sizes`` stats each file relative to its
directory's descriptor (one ``fstatat`` per key, no walk from the root per key).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator

from zarrfs.core.stores.leftovers import alone, leftover, remove_leftovers
from zarrfs.core.stores.localgroup import TEMP_PREFIX
from zarrfs.core.stores.localpaths import DIR_FLAGS, LocalPaths, SymlinkRefused


def _listed(name: str) -> bool:
    return not name.startswith(TEMP_PREFIX) and "\\" not in name


def _read_dir(dir_fd: int) -> tuple[list[os.DirEntry[str]], list[str], list[str]]:
    """The listed regular-file entries, the names of the real subdirectories of ``dir_fd``
    (links are neither: ``d_type``/``lstat``), in directory order, and the temporary names."""
    files: list[os.DirEntry[str]] = []
    dirs: list[str] = []
    temps: list[str] = []
    with os.scandir(dir_fd) as entries:
        for entry in entries:
            if not _listed(entry.name):
                if entry.name.startswith(TEMP_PREFIX):
                    temps.append(entry.name)
                continue
            if entry.is_dir(follow_symlinks=False):
                dirs.append(entry.name)
            elif entry.is_file(follow_symlinks=False):
                files.append(entry)
    return files, dirs, temps


class LocalListing(LocalPaths):
    """``list_dir``, ``list_prefix`` and ``list_sizes`` over ``_open_dir`` (a mixin)."""

    #: this store holds its lock on the root (``leftovers``): listings remove the leftovers
    #: of dead writers they meet while no other writer is open
    _locked = False

    def _entries(self, dir_fd: int, where: str) -> tuple[list[os.DirEntry[str]], list[str]]:
        """``_read_dir`` of the directory ``where``, removing the leftovers met."""
        files, dirs, temps = _read_dir(dir_fd)
        if self._locked:
            others = [name for name in temps if leftover(name, TEMP_PREFIX)]
            if others and alone(self._root()):  # (asked after the names were read)
                remove_leftovers(dir_fd, others, where)
        return files, dirs

    # -- listable ---------------------------------------------------------------------------

    def _scan(self, dir_fd: int, where: str) -> tuple[list[str], list[str]]:
        files, dirs = self._entries(dir_fd, where)
        return sorted(entry.name for entry in files), sorted(dirs)

    def list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        parts = self._prefix_parts(prefix)
        if any(part.startswith(TEMP_PREFIX) for part in parts):
            return [], []
        try:
            dir_fd = self._open_dir(parts, prefix, create=False)
            if dir_fd is None:
                return [], []
            try:
                return self._scan(dir_fd, "/".join(parts))
            finally:
                os.close(dir_fd)
        except OSError as exc:
            raise self._error(prefix, exc) from exc

    def list_prefix(self, prefix: str) -> Iterator[str]:
        start = self._prefix_parts(prefix)
        first = self.list_dir(prefix)  # errors on the prefix itself surface here, eagerly
        return self._walk(start, first)

    def _walk(self, start: list[str], first: tuple[list[str], list[str]]) -> Iterator[str]:
        pending: list[tuple[list[str], tuple[list[str], list[str]] | None]] = [(start, first)]
        while pending:
            parts, listing = pending.pop()
            if listing is None:
                try:
                    listing = self.list_dir("/".join(parts))
                except SymlinkRefused:
                    continue  # replaced by a link since its parent was listed
            files, dirs = listing
            base = "/".join(parts)
            for name in files:
                yield f"{base}/{name}" if base else name
            pending.extend(([*parts, name], None) for name in reversed(dirs))

    def list_sizes(self, prefix: str) -> Iterator[tuple[str, int]]:
        parts = self._prefix_parts(prefix)
        if any(part.startswith(TEMP_PREFIX) for part in parts):
            return iter(())
        try:
            dir_fd = self._open_dir(parts, prefix, create=False)
        except OSError as exc:
            raise self._error(prefix, exc) from exc
        if dir_fd is None:
            return iter(())
        out: list[tuple[str, int]] = []
        try:
            self._sizes_below(dir_fd, "/".join(parts), out)
        except OSError as exc:
            raise self._error(prefix, exc) from exc
        finally:
            os.close(dir_fd)
        return iter(out)

    def _sizes_below(self, dir_fd: int, base: str, out: list[tuple[str, int]]) -> None:
        """Append (key, size) of every regular file below ``dir_fd`` (the directory ``base``)."""
        files, subdirs = self._entries(dir_fd, base)
        for entry in files:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:  # removed since the directory was read
                continue
            if stat.S_ISREG(st.st_mode):
                out.append((f"{base}/{entry.name}" if base else entry.name, st.st_size))
        for name in subdirs:
            try:
                fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
            except OSError:  # removed, or replaced by a link, since it was listed: skipped
                continue
            try:
                self._sizes_below(fd, f"{base}/{name}" if base else name, out)
            finally:
                os.close(fd)
