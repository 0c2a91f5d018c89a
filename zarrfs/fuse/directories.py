"""Directory requests: ``opendir``, ``readdir``, ``releasedir`` (a mixin of ``ZarrOperations``).

Invariants (developer notes):
- readdir offsets name entries: the entry at index ``i`` of a listing snapshot carries
  ``next_id = i + 1``, so offsets stay valid while the listing is read, even if the directory
  changes meanwhile. The snapshot is taken at ``opendir``, or, when the kernel opens
  directories itself (below), at the ``readdir`` of offset 0.
- Lookup counts: +1 for a readdirplus entry only when ``readdir_reply`` accepted it.
- Listing ahead: preparing a directory's children also lists the child directories whose
  listing comes from metadata already read (``VDir.lists_from_metadata``: an array's views and
  its ``chunks/``; ``nodecalls.prepare_listing``). The first listing of such a directory is then
  answered in the event loop from that listing, once, within one attribute timeout, and only if
  nothing was changed through the mount meanwhile (``_mutation``). Listing them otherwise costs
  worker-thread round trips, more than listing them takes (a tree walk lists every directory
  it is shown).
- Kernel listing cache (``kernel_dir_cache``): on a read-only mount with a positive attribute
  timeout, when pyfuse3 tells ``readdir`` which directory it reads (``ReaddirToken.inode``,
  pyfuse3 as built by ``scripts/setup.sh``) and the kernel can open directories without asking
  (Linux >= 5.1), the first ``opendir`` answers ENOSYS. From then on the kernel opens
  directories without an ``opendir``/``releasedir`` request and keeps every listing it read
  (FOPEN_KEEP_CACHE | FOPEN_CACHE_DIR): a second walk of the tree costs no request at all while
  the names and attributes are within their timeout. Nothing can change through a read-only
  mount; what other store clients change shows up once the daemon drops the kernel's copy of a
  listing, which ``expire_kernel_listings`` does one attribute timeout (+1 s) after the listing
  was read. Without these conditions every directory is opened and released as before.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyfuse3
import trio

from zarrfs.fuse import nodecalls
from zarrfs.fuse.inodes import InodeTable, Path
from zarrfs.fuse.metrics import OperationLatency
from zarrfs.fuse.offload import Offload
from zarrfs.fuse.requests import fail, translate
from zarrfs.views.base import Stat, VDir, VNode

log = logging.getLogger(__name__)

#: children stat'ed per worker call while listing a directory
READDIR_BATCH = 128
#: directories listed ahead (``nodecalls.prepare_listing``) kept for their first listing
PRELISTED_LIMIT = 4096
#: listings being read by the kernel without an open handle (kernel listing cache), by inode
READING_LIMIT = 1024
#: the kernel opens a directory without an opendir request after opendir answered ENOSYS
_NO_OPENDIR_LINUX = (5, 1)
#: seconds between two passes of ``expire_kernel_listings``
EXPIRY_PERIOD = 1.0


def _kernel_release() -> tuple[int, int]:
    try:
        major, minor = os.uname().release.split(".")[:2]
        return int(major), int("".join(c for c in minor if c.isdigit()) or 0)
    except ValueError:
        return (0, 0)


def kernel_dir_cache_supported() -> bool:
    """pyfuse3 names the directory in ``readdir`` and the kernel supports no-opendir mode."""
    return bool(getattr(pyfuse3, "READDIR_TOKEN_INODE", False)) and (
        _kernel_release() >= _NO_OPENDIR_LINUX
    )


@dataclass(eq=False)
class DirListing:
    """A directory being read: the name snapshot and the children prepared for the next reply."""

    path: Path
    node: VDir
    names: Sequence[str]
    #: (index, name, node, stat) for indexes in [prepared_from, prepared_to)
    prepared: list[tuple[int, str, VNode, Stat]] = field(default_factory=list)
    prepared_from: int = 0
    prepared_to: int = 0


def _invalidate_listings(inodes: list[int]) -> None:
    """Drop the kernel's cached listings (and attributes) of ``inodes`` (a worker thread: the
    kernel takes the directories' page locks)."""
    for inode in inodes:
        try:
            pyfuse3.invalidate_inode(inode)
        except OSError as exc:  # the kernel forgot the directory meanwhile: nothing cached
            log.debug("invalidate_inode(%d): %s", inode, exc)


class DirectoryHandlers:
    """``opendir``/``readdir``/``releasedir`` over the state ``ZarrOperations`` sets up."""

    inodes: InodeTable
    offload: Offload
    latency: OperationLatency | None
    readdir_reply: Callable[..., bool]
    _timeout: float
    _generation: int
    _handles: Any
    #: open directories by handle
    _dirs: dict[int, DirListing]
    #: listings prepared ahead, by path; valid for one attribute timeout and only while
    #: nothing was changed through the mount (``_mutation``)
    _prelisted: dict[Path, tuple[float, nodecalls.Prelisted]]
    #: kernel listing cache on: opendir answers ENOSYS, readdir finds the directory by inode
    kernel_dir_cache: bool
    #: kernel listing cache: listings being read (by inode) and when each was last read
    _reading: OrderedDict[int, DirListing]
    _listed_at: OrderedDict[int, float]

    # provided by ZarrOperations
    def _dir(self, inode: int) -> tuple[Path, VDir]:
        raise NotImplementedError

    def attributes(self, inode: int, st: Stat) -> pyfuse3.EntryAttributes:
        raise NotImplementedError

    def describe(self, op: str, args: Sequence[Any]) -> str:
        raise NotImplementedError

    def _init_directories(self, kernel_dir_cache: bool) -> None:
        self._dirs = {}
        self._prelisted = {}
        self.kernel_dir_cache = kernel_dir_cache
        self._reading = OrderedDict()
        self._listed_at = OrderedDict()

    async def _start_listing(self, path: Path, node: VDir) -> DirListing:
        """A fresh snapshot of ``node``'s listing: from a listing prepared ahead (once), else
        listed (and the directory revalidated) in a worker thread."""
        ahead = self._prelisted.pop(path, None)
        if ahead and ahead[1].node is node and time.monotonic() - ahead[0] <= self._timeout:
            pre = ahead[1]  # listed with its parent: answered without a worker thread
            return DirListing(path, node, pre.names, pre.prepared, 0, len(pre.names))
        return DirListing(path, node, await self.offload(nodecalls.list_dir, node))

    @translate
    async def opendir(self, inode: int, ctx: Any) -> int:
        if self.kernel_dir_cache:  # the kernel opens directories itself from now on
            raise fail(errno.ENOSYS)
        path, node = self._dir(inode)
        fh: int = next(self._handles)
        self._dirs[fh] = await self._start_listing(path, node)
        return fh

    async def _kernel_listing(self, inode: int, start_id: int) -> DirListing:
        """The listing the kernel reads from ``start_id`` without an open handle: a fresh one at
        offset 0 (the kernel's cache missed), else the one being read."""
        listing = self._reading.get(inode)
        if start_id == 0 or listing is None:
            path, node = self._dir(inode)
            listing = await self._start_listing(path, node)
            self._reading[inode] = listing
            self._reading.move_to_end(inode)
            while len(self._reading) > READING_LIMIT:
                self._reading.popitem(last=False)
            self._listed_at.pop(inode, None)
            self._listed_at[inode] = time.monotonic()
        return listing

    @translate
    async def readdir(self, fh: int, start_id: int, token: Any) -> None:
        if fh == 0 and self.kernel_dir_cache:  # opened by the kernel without an opendir
            inode: int = token.inode
            listing = await self._kernel_listing(inode, start_id)
            if start_id >= len(listing.names):  # the kernel read all of it
                self._reading.pop(inode, None)
        else:
            held = self._dirs.get(fh)
            if held is None:
                raise fail(errno.EBADF)
            listing = held
        index = start_id
        while index < len(listing.names):
            if not listing.prepared_from <= index < listing.prepared_to:
                stop = min(index + READDIR_BATCH, len(listing.names))
                generation = self._generation
                listing.prepared, ahead = await self.offload(
                    nodecalls.prepare_listing, listing.node, listing.names, index, stop
                )
                listing.prepared_from, listing.prepared_to = index, stop
                if generation == self._generation:
                    self._keep_prelisted(listing.path, ahead)
            for position, name, child, st in listing.prepared:
                if position < index:
                    continue
                path = listing.path + (name,)
                attrs = self.attributes(self.inodes.number_for(path), st)
                if not self.readdir_reply(token, os.fsencode(name), attrs, position + 1):
                    return
                self.inodes.remember(path, child)
            index = listing.prepared_to

    def _keep_prelisted(self, path: Path, ahead: list[nodecalls.Prelisted]) -> None:
        now = time.monotonic()
        for pre in ahead:
            self._prelisted[path + pre.below] = (now, pre)
        while len(self._prelisted) > PRELISTED_LIMIT:  # oldest first
            del self._prelisted[next(iter(self._prelisted))]

    @translate
    async def releasedir(self, fh: int) -> None:
        self._dirs.pop(fh, None)

    def expired_listings(self, now: float) -> list[int]:
        """Directories whose listing the kernel has kept for more than one attribute timeout
        (forgotten here: the caller drops the kernel's copy)."""
        expired = []
        while self._listed_at:
            inode, listed = next(iter(self._listed_at.items()))
            if now - listed <= self._timeout:
                break
            del self._listed_at[inode]
            expired.append(inode)
        return expired

    async def expire_kernel_listings(self) -> None:
        """Runs for the life of the mount (kernel listing cache only): drops the kernel's copy
        of every listing read more than one attribute timeout ago, so the next walk lists the
        directory again and sees what other store clients changed."""
        if not self.kernel_dir_cache:
            return
        while True:
            await trio.sleep(EXPIRY_PERIOD)
            expired = self.expired_listings(time.monotonic())
            if expired:
                await trio.to_thread.run_sync(_invalidate_listings, expired)
