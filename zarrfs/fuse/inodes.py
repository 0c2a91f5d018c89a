"""Inode numbers and kernel lookup counts for the virtual tree (DESIGN §5 "fuse/ ... inodes").

A node is named by its path: a tuple of names from the root (the root is ``()``).

Invariants:
- The root is ``pyfuse3.ROOT_INODE`` and is never freed.
- Any other path gets the number ``number_for(path)``: a 63-bit hash of the path. The same path
  therefore gets the same inode number every time it is looked up, for the life of the mount
  (and across mounts), without the table remembering paths the kernel has forgotten -- a
  ``find`` over millions of chunk files costs memory only for what the kernel still holds.
- The table holds exactly the inodes the kernel knows: an entry is created by the first
  ``remember`` (lookup, create, mkdir, or a readdirplus entry the kernel accepted) and freed when
  ``forget`` brings its lookup count to zero.
- Two live entries never share a number: on a hash collision with a live entry of another path
  the next free number is taken (probing); that path keeps the probed number while it is live.
- While an entry is live its path maps to it (``by_path``). ``moved`` (rename) re-keys the moved
  entry and every live entry below it; the caller then looks their nodes up again (a view may
  serve a different node at the new path: a scratch file renamed over ``attributes.json``).
  ``detach`` (unlink, rmdir, or the target of a rename) unhooks an entry from its path so a new
  node at that path gets a fresh entry, while the old inode keeps serving the kernel's
  references until it is forgotten.
- Only the trio thread touches the table (no locking): worker threads receive nodes, never
  entries.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import pyfuse3

from zarrfs.views.base import VNode

log = logging.getLogger(__name__)

Path = tuple[str, ...]

_MASK = (1 << 63) - 1
#: numbers a path never gets: 0 (invalid) and the root
_RESERVED = frozenset({0, pyfuse3.ROOT_INODE})
#: ``Entry.cache_token`` before the first open
NEVER_OPENED = object()


def path_hash(path: Path) -> int:
    """The preferred inode number of ``path`` (stable across processes)."""
    # one encoding of the joined names: the same bytes as joining each name's encoding
    digest = hashlib.blake2b(os.fsencode("/".join(path)), digest_size=8)
    return int.from_bytes(digest.digest(), "little") & _MASK


@dataclass(eq=False)
class Entry:
    """One inode the kernel knows."""

    inode: int
    #: None once detached (unlinked or replaced by a rename)
    path: Path | None
    node: VNode
    lookups: int = 0
    #: ``VFile.cache_token()`` seen at the previous open (decides ``keep_cache``)
    cache_token: object = field(default=NEVER_OPENED)


class InodeTable:
    """inode <-> path <-> node, with the kernel's lookup counts."""

    def __init__(self, root: VNode, hash_path: Callable[[Path], int] = path_hash) -> None:
        self._hash = hash_path
        self._root = Entry(pyfuse3.ROOT_INODE, (), root, lookups=1)
        self._by_inode: dict[int, Entry] = {pyfuse3.ROOT_INODE: self._root}
        self._by_path: dict[Path, Entry] = {(): self._root}
        #: directory path -> {name: live entry with a path in it}
        self._children: dict[Path, dict[str, Entry]] = {}

    def __len__(self) -> int:
        """Live entries, the root included."""
        return len(self._by_inode)

    def get(self, inode: int) -> Entry | None:
        return self._by_inode.get(inode)

    def at(self, path: Path) -> Entry | None:
        """The live entry currently at ``path``."""
        return self._by_path.get(path)

    def siblings(self, path: Path) -> list[Entry]:
        """Live entries in the directory that holds ``path`` (that one included)."""
        return list(self._children.get(path[:-1], {}).values()) if path else []

    def number_for(self, path: Path) -> int:
        """The inode number ``remember(path, ...)`` gives (without registering anything)."""
        entry = self._by_path.get(path)
        if entry is not None:
            return entry.inode
        inode = self._hash(path) & _MASK
        while inode in _RESERVED or inode in self._by_inode:
            inode = (inode + 1) & _MASK
        return inode

    def remember(self, path: Path, node: VNode, number: int | None = None) -> Entry:
        """Count one more kernel reference to ``path`` (now served by ``node``). ``number``:
        what ``number_for(path)`` returned just before, with nothing registered since (saves
        hashing the path again)."""
        entry = self._by_path.get(path)
        if entry is None:
            if number is None or number in self._by_inode:
                number = self.number_for(path)
            entry = Entry(number, path, node)
            self._by_inode[entry.inode] = entry
            self._link(entry)
        entry.node = node
        if entry is not self._root:
            entry.lookups += 1
        return entry

    def forget(self, inode: int, count: int) -> None:
        """The kernel dropped ``count`` references; free the entry when none are left."""
        entry = self._by_inode.get(inode)
        if entry is None or entry is self._root:
            if entry is None:
                log.debug("forget of unknown inode %d", inode)
            return
        entry.lookups -= count
        if entry.lookups > 0:
            return
        del self._by_inode[inode]
        if entry.path is not None:
            self._unlink(entry)

    def detach(self, path: Path) -> None:
        """``path`` and everything below it no longer exist (unlink, rmdir, replaced)."""
        for entry in self._below(path):
            self._unlink(entry)
            entry.path = None

    def moved(self, old: Path, new: Path) -> list[Entry]:
        """Rename: the subtree at ``old`` is now at ``new`` (whatever was at ``new`` is gone).

        Returns the moved entries (their paths now under ``new``); their nodes still describe
        the old location until the caller looks them up again.
        """
        if old == new:
            return []
        moving = self._below(old)
        self.detach(new)
        for entry in moving:
            self._unlink(entry)
        for entry in moving:
            entry.path = new + entry.path[len(old) :]  # type: ignore[index]
            self._link(entry)
        return moving

    def _link(self, entry: Entry) -> None:
        path: Path = entry.path  # type: ignore[assignment]  # only entries with a path
        self._by_path[path] = entry
        self._children.setdefault(path[:-1], {})[path[-1]] = entry

    def _unlink(self, entry: Entry) -> None:
        path = entry.path
        if path is None or self._by_path.get(path) is not entry:
            return
        del self._by_path[path]
        names = self._children[path[:-1]]
        del names[path[-1]]
        if not names:
            del self._children[path[:-1]]

    def _below(self, path: Path) -> list[Entry]:
        """Live entries at ``path`` or under it (never the root)."""
        if not path:
            return []
        entry = self._by_path.get(path)
        found = [entry] if entry is not None else []
        depth = len(path)
        for directory, names in self._children.items():
            if directory[:depth] == path:
                found.extend(names.values())
        return found
