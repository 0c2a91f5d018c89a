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
- Kernel listing cache (``kernel_dir_cache``): with a positive attribute timeout, when pyfuse3
  tells ``readdir`` which directory it reads (``ReaddirToken.inode``, pyfuse3 as built by
  ``scripts/setup.sh``) and the kernel can open directories without asking (Linux >= 5.1), the
  first ``opendir`` answers ENOSYS. From then on the kernel opens directories without an
  ``opendir``/``releasedir`` request (a tree walk sends half the requests) and keeps every
  listing it read (``fuse_file_open`` gives such files FOPEN_KEEP_CACHE | FOPEN_CACHE_DIR):
  walking the tree again costs no request while the names and attributes are within their
  timeout. Without these conditions every directory is opened and released as before.
- What keeps a kept listing right (fs/fuse/readdir.c and dir.c):
  * the kernel reads a listing into its cache from offset 0 and marks it complete only on
    the empty reply at its end; it drops it at the next read from offset 0 when the
    directory's i_version changed. ``fuse_dir_changed`` bumps i_version after every create,
    mknod, mkdir, unlink, rmdir, rename (both directories) and link that succeeded through the
    mount: those changes need nothing from the daemon.
  * A change the kernel does not see as one to the directory must be dropped by the daemon
    (``pyfuse3.invalidate_inode``: the kernel drops the directory's cached pages; a kept
    listing with a page missing is read again from the daemon). Such changes happen when a
    file is committed (``flush``/``release`` of a writable handle: a metadata document can
    change an array's views, turn an empty group into an array, or change the views of a
    group's arrays; the shape, hence ``chunks/``), resized (``truncate``, a write past the end
    of ``data.raw``) or renamed over a view. The handler drops, before it answers, the kept
    listings of the directory holding the file and of the directories right below it
    (``_drop_listings_near``); it finds them in ``_listed_at``, which holds every directory
    whose listing the kernel read from offset 0 and may keep.
  * A listing read while such a change is made may be a snapshot from before it, cached by
    the kernel after the change dropped the directory's pages (the kernel fills its cache
    when the reply arrives, which can come after the invalidation). Every listing therefore
    records ``_generation`` (bumped by every handler that may change what listings show) when
    its snapshot is taken; when the kernel asks for the end of a listing whose generation is
    no longer current, its pages, all in the cache by then (the kernel asks for more only
    after storing a reply), are dropped before the end is answered. Invalidating a
    directory's pages while the kernel waits for a ``readdir`` of it is safe: the kernel reads
    replies into a private page and locks cache pages only while copying entries into them.
  * What other store clients change shows up once the daemon drops the kernel's copy of a
    listing, which ``expire_kernel_listings`` does within one attribute timeout of the read
    (1 s on a writable mount, 60 s on a read-only one).
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
#: the longest time between two passes of ``expire_kernel_listings`` (a quarter of the
#: attribute timeout when that is shorter)
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
    #: ``_generation`` when the names were read (kernel listing cache: a listing read while
    #: something changed is dropped from the kernel's cache at its end)
    generation: int = 0
    #: ``time.monotonic()`` before the names were read (None: prepared ahead): what listing
    #: them read is as current as the listing and is not revalidated when it is prepared
    listed_at: float | None = None


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
    #: listings ever recorded in ``_listed_at`` (a write scans for kept listings near its file
    #: only when one was recorded since that file's last scan)
    _listings_recorded: int

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
        self._listings_recorded = 0

    async def _start_listing(self, path: Path, node: VDir) -> DirListing:
        """A fresh snapshot of ``node``'s listing: from a listing prepared ahead (once), else
        listed (and the directory revalidated) in a worker thread."""
        generation = self._generation  # any change from now on may be missing from the names
        ahead = self._prelisted.pop(path, None)
        if ahead and ahead[1].node is node and time.monotonic() - ahead[0] <= self._timeout:
            pre = ahead[1]  # listed with its parent: answered without a worker thread
            # (kept only while nothing changed since it was read: ``_mutation`` drops it)
            return DirListing(path, node, pre.names, pre.prepared, 0, len(pre.names), generation)
        listed_at = time.monotonic()
        names = await self.offload(nodecalls.list_dir, node)
        return DirListing(path, node, names, generation=generation, listed_at=listed_at)

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
            self._listings_recorded += 1
        return listing

    @translate
    async def readdir(self, fh: int, start_id: int, token: Any) -> None:
        if fh == 0 and self.kernel_dir_cache:  # opened by the kernel without an opendir
            inode: int = token.inode
            listing = await self._kernel_listing(inode, start_id)
            if start_id >= len(listing.names):  # the kernel read all of it
                self._reading.pop(inode, None)
                if listing.generation != self._generation:  # it may keep an old snapshot
                    await trio.to_thread.run_sync(_invalidate_listings, [inode])
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
                    nodecalls.prepare_listing,
                    listing.node,
                    listing.names,
                    index,
                    stop,
                    listing.listed_at,
                )
                listing.prepared_from, listing.prepared_to = index, stop
                if generation == self._generation:
                    self._keep_prelisted(listing.path, ahead)
            for position, name, child, st in listing.prepared:
                if position < index:
                    continue
                path = listing.path + (name,)
                number = self.inodes.number_for(path)
                attrs = self.attributes(number, st)
                if not self.readdir_reply(token, os.fsencode(name), attrs, position + 1):
                    return
                self.inodes.remember(path, child, number)
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

    def _expiry_period(self) -> float:
        return min(EXPIRY_PERIOD, self._timeout / 4)

    def expired_listings(self, now: float) -> list[int]:
        """Directories whose listing the kernel may keep past one attribute timeout unless it
        is dropped in this pass of ``expire_kernel_listings`` (forgotten here: the caller
        drops the kernel's copy)."""
        expired = []
        keep = self._timeout - self._expiry_period()
        while self._listed_at:
            inode, listed = next(iter(self._listed_at.items()))
            if now - listed < keep:
                break
            del self._listed_at[inode]
            expired.append(inode)
        return expired

    async def expire_kernel_listings(self) -> None:
        """Runs for the life of the mount (kernel listing cache only): drops the kernel's copy
        of every listing before it is one attribute timeout old, so the next walk lists the
        directory again and sees what other store clients changed."""
        if not self.kernel_dir_cache:
            return
        period = self._expiry_period()
        while True:
            await trio.sleep(period)
            expired = self.expired_listings(time.monotonic())
            if expired:
                await trio.to_thread.run_sync(_invalidate_listings, expired)

    async def _drop_listings_near(self, path: Path | None) -> None:
        """``path`` was committed, resized or replaced: drop the listings the kernel keeps of
        the directory holding it and of the directories right below that one (an array's
        ``chunks/``; a group's arrays, whose views may follow the group's attributes)."""
        if not self._listed_at or not path:
            return
        parent = path[:-1]
        depth = len(parent)
        near = []
        for inode in self._listed_at:
            entry = self.inodes.get(inode)
            at = entry.path if entry is not None else None
            if at is not None and len(at) <= depth + 1 and at[:depth] == parent:
                near.append(inode)
        for inode in near:
            del self._listed_at[inode]
        if near:
            await trio.to_thread.run_sync(_invalidate_listings, near)
