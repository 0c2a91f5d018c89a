"""FUSE requests -> virtual-node calls (DESIGN §2 the mounted tree, §4 semantics, §5 rules).

``ZarrOperations`` only translates: it resolves inodes and file handles, runs the node call in a
worker thread through ``Offload``, and turns the result into pyfuse3 structures. Content, caching
of data, validation and durability belong to the nodes (``zarrfs.views``).

Invariants (developer notes):
- Only ``FUSEError`` leaves a handler: every handler is wrapped by ``_translate``, which sends any
  other exception through the one errno table (``zarrfs.fuse.errors``). ``forget`` never raises.
  What a handler returns is checked there too (``read``/``getxattr`` bytes, ``write`` an int):
  pyfuse3 converts it outside the handler, where a type error would end the main loop.
- Handlers touch the inode and handle tables only in the trio thread; worker threads get nodes.
- The exceptions to "node calls run in worker threads": ``read`` first asks the handle's
  ``read_cached``, which answers from memory without waiting (cached decoded chunks) or returns
  None; only then is the read offloaded. ``write`` likewise first tries ``write_cached`` (bytes
  into units already dirty or written whole, no load, no flush). A worker-thread round trip
  costs ~150 us, more than a cached 4 KiB read takes in total.
- Directories (listing snapshots, listing ahead, the kernel's listing cache and what drops a
  listing it keeps) are handled by ``directories.DirectoryHandlers``, whose notes apply here.
- Lookup counts: +1 for lookup, create and mkdir replies, and for a readdirplus entry only when
  ``readdir_reply`` accepted it; ``forget`` subtracts (see ``inodes``).
- Kernel caching, chosen here and in ``directories`` and nowhere else:
  * attribute and entry timeouts: ``DEFAULT_TIMEOUTS`` (1 s read-write, 60 s read-only) unless
    ``-o attr_timeout=``. Consistency is close-to-open (every ``open`` revalidates the node), so
    the timeout only bounds how stale ``stat``/``ls`` may be; 1 s keeps sizes changed by other
    writers visible quickly while sparing the store a ``stat`` storm from ``ls -l``/``find``.
    Nothing changes through a read-only mount: there the timeout only bounds how late changes
    made by other store clients show up, and 60 s (NFS's longest attribute cache) lets a tree
    walked once be walked again from the kernel's caches.
  * page cache: kept across opens (``keep_cache``) only when ``VFile.cache_token()`` is not None
    and equals the token of the previous open of that inode; otherwise the kernel drops it.
  * ``direct_io`` when the node asks for it (content generated per read), and for every open
    for writing only (``O_WRONLY``: ``dd of=``, ``cp``, ``>``): the kernel then passes each
    write straight from the writer's buffer instead of copying it into page-cache pages first
    (which it fills 4 KiB at a time for a FUSE file), and drops any cached pages of the
    written range before the write. Such a descriptor cannot be memory-mapped (``mmap``
    needs read access), and opens that read keep the page cache.
  * negative lookups are not cached (ENOENT, not a zero inode): new arrays appear at once.
- Background requests (the kernel's read-ahead): up to ``MAX_BACKGROUND`` in flight, not the
  kernel's 12. Past three quarters of the limit the kernel counts the connection congested
  and drops the asynchronous part of each read-ahead window; the reader then asks for those
  pages itself when it reaches them, windows after the requests around them (a cold ``cat``
  of a compressed array sent requests up to 15 MiB behind the furthest one every 32 MiB, and
  its units of a layer already released were decoded again). Sent at FUSE_INIT by pyfuse3
  as ``scripts/setup.sh`` builds it (``Operations.max_background``); ignored by a released
  pyfuse3, which keeps the kernel's limit.
- ``supports_dot_lookup`` is off (no NFS export), so the kernel never looks up ``.``/``..``.
- Permissions: modes come from the node, masked by ``-o umask=`` and with write bits cleared on
  read-only mounts; owner and group are ``-o uid=``/``gid=`` (default: the mounting user). They
  are not stored, so ``chmod``/``chown`` succeed only when they change nothing and are refused
  with EPERM otherwise; time updates (``touch``) are accepted and ignored.
- Extended attributes and ``statfs``: ``xattrs.AttributeHandlers``.
- ``ftruncate`` on a handle that edits a private copy (a handle with a ``truncate(size)``
  method, e.g. a metadata document being edited) truncates that copy; otherwise, and for
  ``truncate(path)``, ``VFile.truncate`` changes the node.
- ``flush`` (every ``close``) makes the written bytes durable and returns its error to
  ``close()``; ``release`` errors reach no process and are only logged.
- After anything that may change sizes behind the kernel's back -- the flush of a writable
  handle (a view commits, may re-render, may resize the array), a truncate, a rename (another
  node may now serve the path) -- the kernel's cached attributes of that inode, of its
  siblings and of its directory's siblings (each set only if it has at most
  ``SIBLING_INVALIDATION_LIMIT`` entries the kernel knows) are invalidated, so the next
  ``stat``/``read`` sees the committed sizes instead of sizes cached up to the attribute
  timeout, and, since the files' mtimes moved, their cached pages are dropped then
  (``auto_inval_data``): a chunk file's array views, an array view's ``group.nc``. The listings
  the kernel keeps of its directory and of the directories right below are dropped (so is
  that of an array written past its end, which grows ``chunks/``).
- ``release`` invalidates them again only if the handle was written or truncated after its
  last ``flush`` (``mmap`` pages written back after ``close``). The kernel sends ``release``
  after ``close()`` has returned, and it discards a ``getattr`` reply that crosses an
  invalidation of the same inode (``attr_version``), then serves that read with the size and
  pages it had cached: a needless invalidation there made a reader that revalidated right after
  the writer's ``close`` read the array's bytes as they were before the change.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyfuse3

from zarrfs.fuse import nodecalls
from zarrfs.fuse.directories import DirectoryHandlers, kernel_dir_cache_supported
from zarrfs.fuse.errors import fuse_error
from zarrfs.fuse.inodes import Entry, InodeTable, Path
from zarrfs.fuse.metrics import OperationLatency
from zarrfs.fuse.offload import Offload
from zarrfs.fuse.options import MountOptions
from zarrfs.fuse.requests import checked_bytes, fail, mutates, show, translate
from zarrfs.fuse.xattrs import DEFAULT_BLKSIZE, AttributeHandlers
from zarrfs.views.base import MAX_FILE_SIZE, Stat, VDir, VFile, VHandle

log = logging.getLogger(__name__)

#: attribute/entry timeout in seconds, by "is the mount read-only"
DEFAULT_TIMEOUTS = {False: 1.0, True: 60.0}
#: background requests (read-ahead) the kernel may keep in flight, congested at three quarters
MAX_BACKGROUND = 64
#: flush/fsync/release may encode and upload a lot: their deadline is this many request deadlines
FLUSH_DEADLINE_FACTOR = 10
#: a commit also drops the kernel's cached attributes of the file's siblings (an array's views
#: derive their sizes from one another) unless the kernel knows more of them than this (a chunk
#: directory, whose files change size only with the array's metadata, which lives elsewhere)
SIBLING_INVALIDATION_LIMIT = 64


@dataclass(eq=False)
class OpenFile:
    inode: int
    path: Path | None
    handle: VHandle
    writable: bool
    #: ``_listings_recorded`` when a write last dropped the kept listings near this file
    listings_checked: int = -1
    #: writes and truncations through this handle, and how many of them the last ``flush``
    #: had seen when it dropped the kernel's attributes (``release`` drops them again only for
    #: changes made after that)
    changes: int = 0
    flushed_changes: int = 0


def _invalidate_kernel_attrs(inode: int) -> None:
    try:
        pyfuse3.invalidate_inode(inode, attr_only=True)
    except OSError as exc:  # the kernel forgot the inode meanwhile: nothing cached
        log.debug("invalidate_inode(%d): %s", inode, exc)


class ZarrOperations(DirectoryHandlers, AttributeHandlers, pyfuse3.Operations):
    """Serves a ``VDir`` tree through pyfuse3."""

    supports_dot_lookup = False
    enable_writeback_cache = False
    max_background = MAX_BACKGROUND

    def __init__(self, root: VDir, options: MountOptions) -> None:
        super().__init__()
        self.inodes = InodeTable(root)
        self.offload = Offload(options.threads, options.timeout)
        self._flush_deadline = options.timeout * FLUSH_DEADLINE_FACTOR
        self._ro = options.ro
        self._umask = options.umask | (0o222 if options.ro else 0)
        self._uid = os.getuid() if options.uid is None else options.uid
        self._gid = os.getgid() if options.gid is None else options.gid
        timeout = options.attr_timeout
        self._timeout = DEFAULT_TIMEOUTS[options.ro] if timeout is None else timeout
        self._files: dict[int, OpenFile] = {}
        #: per-operation latency histograms (``-o metrics=``; None: not measured)
        self.latency: OperationLatency | None = None
        self._init_directories(self._timeout > 0 and kernel_dir_cache_supported())
        self._generation = 0
        self._handles = itertools.count(1)
        #: replaced in unit tests, which have no kernel to talk to
        self.readdir_reply: Callable[..., bool] = pyfuse3.readdir_reply
        self.invalidate_attrs: Callable[[int], None] = _invalidate_kernel_attrs

    # -- tables -------------------------------------------------------------------------------

    def _entry(self, inode: int) -> Entry:
        entry = self.inodes.get(inode)
        if entry is None:
            raise fail(errno.ESTALE)
        return entry

    def _dir(self, inode: int) -> tuple[Path, VDir]:
        """A directory that still has a path (not removed)."""
        entry = self._entry(inode)
        if not isinstance(entry.node, VDir):
            raise fail(errno.ENOTDIR)
        if entry.path is None:
            raise fail(errno.ENOENT)
        return entry.path, entry.node

    def _file(self, fh: int) -> OpenFile:
        handle = self._files.get(fh)
        if handle is None:
            raise fail(errno.EBADF)
        return handle

    def describe(self, op: str, args: Sequence[Any]) -> str:
        """``"read /a/b"``: the request for log lines."""
        path: Path | None = None
        if args and isinstance(args[0], int):
            if op in ("read", "write", "flush", "fsync", "release"):
                held = self._files.get(args[0])
                path = held.path if held else None
            elif op in ("readdir", "releasedir"):
                listing = self._dirs.get(args[0])
                path = listing.path if listing else None
                if listing is None and op == "readdir" and len(args) > 2:  # opened by the kernel
                    entry = self.inodes.get(getattr(args[2], "inode", 0))
                    path = entry.path if entry else None
            else:
                entry = self.inodes.get(args[0])
                path = entry.path if entry else None
        if path is not None and len(args) > 1 and isinstance(args[1], bytes):
            path = path + (os.fsdecode(args[1]),)
        return f"{op} {show(path)}"

    def attributes(self, inode: int, st: Stat) -> pyfuse3.EntryAttributes:
        if st.size > MAX_FILE_SIZE:
            raise fail(errno.EFBIG)  # (a view larger than any file can be)
        attrs = pyfuse3.EntryAttributes()
        attrs.st_ino = inode
        attrs.generation = 0
        attrs.entry_timeout = self._timeout
        attrs.attr_timeout = self._timeout
        attrs.st_mode = st.mode & ~self._umask
        attrs.st_nlink = 1  # also for directories: "subdirectory count unknown" (no leaf opt.)
        attrs.st_uid = self._uid
        attrs.st_gid = self._gid
        attrs.st_rdev = 0
        attrs.st_size = st.size
        attrs.st_blksize = st.blksize or DEFAULT_BLKSIZE
        stored = st.size if st.stored_bytes is None else st.stored_bytes
        attrs.st_blocks = -(-stored // 512)
        attrs.st_atime_ns = attrs.st_mtime_ns = attrs.st_ctime_ns = st.mtime_ns
        return attrs

    def _mutation(self) -> None:
        self._generation += 1
        self._prelisted.clear()

    async def _changed(self, inode: int) -> None:
        """``inode`` was committed, resized or replaced: the kernel must ask for its attributes
        (and its siblings') again instead of trusting them until the attribute timeout, and
        list again the directories whose listing may have changed with it."""
        self._mutation()
        self._listings_recorded += 1  # paths may have moved: every writer scans again once
        entry = self.inodes.get(inode)
        if entry is not None:
            self.invalidate_attrs(entry.inode)
        path = entry.path if entry else None
        # the files beside it and those beside its directory: a chunk file's array views, an
        # array view's group files (``group.nc``)
        for near in (path, path[:-1]) if path else ():
            siblings = self.inodes.siblings(near)
            if len(siblings) <= SIBLING_INVALIDATION_LIMIT:
                for sibling in siblings:
                    if sibling is not entry:
                        self.invalidate_attrs(sibling.inode)
        await self._drop_listings_near(path)

    def _open_handle(self, entry: Entry, node: VFile, handle: VHandle, flags: int,
                     token: object) -> pyfuse3.FileInfo:  # fmt: skip
        keep = token is not None and token == entry.cache_token
        entry.cache_token = token
        fh = next(self._handles)
        mode = flags & os.O_ACCMODE
        self._files[fh] = OpenFile(entry.inode, entry.path, handle, mode != os.O_RDONLY)
        direct = node.direct_io or mode == os.O_WRONLY
        return pyfuse3.FileInfo(fh=fh, keep_cache=keep, direct_io=direct)

    # -- lookup and attributes ------------------------------------------------------------------

    @translate
    async def lookup(self, parent_inode: int, name: bytes, ctx: Any) -> pyfuse3.EntryAttributes:
        path, parent = self._dir(parent_inode)
        child, st = await self.offload(nodecalls.lookup_child, parent, os.fsdecode(name))
        entry = self.inodes.remember(path + (os.fsdecode(name),), child)
        return self.attributes(entry.inode, st)

    async def forget(self, inode_list: Sequence[tuple[int, int]]) -> None:
        for inode, count in inode_list:
            try:
                self.inodes.forget(inode, count)
            except Exception:  # forget has no request to fail: never let it end the main loop
                log.exception("forget(%d, %d) failed", inode, count)

    @translate
    async def getattr(self, inode: int, ctx: Any) -> pyfuse3.EntryAttributes:
        entry = self._entry(inode)
        return self.attributes(inode, await self.offload(entry.node.stat))

    @translate
    @mutates
    async def setattr(self, inode: int, attr: pyfuse3.EntryAttributes,
                      fields: pyfuse3.SetattrFields, fh: int | None,
                      ctx: Any) -> pyfuse3.EntryAttributes:  # fmt: skip
        entry = self._entry(inode)
        current = self.attributes(inode, await self.offload(entry.node.stat))
        if (
            (fields.update_mode and attr.st_mode & 0o7777 != current.st_mode & 0o7777)
            or (fields.update_uid and attr.st_uid != current.st_uid)
            or (fields.update_gid and attr.st_gid != current.st_gid)
        ):
            raise fail(errno.EPERM)
        if not fields.update_size:
            return current
        if not isinstance(entry.node, VFile):
            raise fail(errno.EISDIR)
        if self._ro:
            raise fail(errno.EROFS)
        held = self._files.get(fh) if fh is not None else None
        truncate_draft = getattr(held.handle, "truncate", None) if held else None
        if truncate_draft is None:
            await self.offload(entry.node.truncate, attr.st_size)
            await self._changed(inode)
            return self.attributes(inode, await self.offload(entry.node.stat))
        assert held is not None
        held.changes += 1
        await self.offload(truncate_draft, attr.st_size)  # the open file's own copy
        result = self.attributes(inode, await self.offload(entry.node.stat))
        result.st_size = attr.st_size
        return result

    # -- files ----------------------------------------------------------------------------------

    @translate
    async def open(self, inode: int, flags: int, ctx: Any) -> pyfuse3.FileInfo:
        entry = self._entry(inode)
        if not isinstance(entry.node, VFile):
            raise fail(errno.EISDIR)
        write = flags & os.O_ACCMODE != os.O_RDONLY
        if write and self._ro:
            raise fail(errno.EROFS)
        if write:
            self._mutation()
        handle, token = await self.offload(
            nodecalls.open_file, entry.node, write, bool(flags & os.O_TRUNC)
        )
        if write:
            self._mutation()
        return self._open_handle(entry, entry.node, handle, flags, token)

    @translate
    @mutates
    async def create(self, parent_inode: int, name: bytes, mode: int, flags: int,
                     ctx: Any) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:  # fmt: skip
        path, parent = self._dir(parent_inode)
        if self._ro:
            raise fail(errno.EROFS)
        write = flags & os.O_ACCMODE != os.O_RDONLY
        node, handle, token, st = await self.offload(
            nodecalls.create_file, parent, os.fsdecode(name), write, bool(flags & os.O_TRUNC)
        )
        entry = self.inodes.remember(path + (os.fsdecode(name),), node)
        return self._open_handle(entry, node, handle, flags, token), self.attributes(
            entry.inode, st
        )

    # pyfuse3 sends any buffer; its stub says bytes
    @translate
    async def read(  # type: ignore[override]
        self, fh: int, off: int, size: int
    ) -> bytes | memoryview:
        handle = self._file(fh).handle
        data = handle.read_cached(off, size)  # answered here when it needs no waiting
        if data is None:
            data = await self.offload(handle.read, off, size)
        return checked_bytes(data, "read")

    @translate
    @mutates
    async def write(self, fh: int, off: int, buf: bytes) -> int:
        held = self._file(fh)
        if not held.writable:
            raise fail(errno.EBADF)
        held.changes += 1
        if held.handle.write_cached(off, buf):  # into memory without waiting: done here
            return len(buf)
        written = await self.offload(held.handle.write, off, buf)
        if type(written) is not int:
            raise TypeError(f"write returned {type(written).__name__}, not int")
        # a write past the end of data.raw grows the array (its chunks/): drop the listings
        # kept near the file, scanning once per listing recorded since its last scan (only a
        # recorded listing can put one back), not once per write
        if self._listed_at and held.listings_checked != self._listings_recorded:
            held.listings_checked = self._listings_recorded
            entry = self.inodes.get(held.inode)
            await self._drop_listings_near(entry.path if entry else None)
        return written

    @translate
    async def flush(self, fh: int) -> None:
        held = self._file(fh)
        if held.writable:
            self._mutation()
            seen = held.changes
            try:
                await self.offload(held.handle.flush, deadline=self._flush_deadline)
            finally:
                await self._changed(held.inode)
                held.flushed_changes = seen

    @translate
    async def fsync(self, fh: int, datasync: bool) -> None:
        held = self._file(fh)
        if held.writable:
            self._mutation()
        try:
            await self.offload(held.handle.flush, deadline=self._flush_deadline)
        finally:
            if held.writable:
                self._mutation()

    @translate
    async def release(self, fh: int) -> None:
        held = self._files.pop(fh, None)
        if held is None:
            return
        if held.writable:
            self._mutation()
        try:
            await self.offload(held.handle.release, deadline=self._flush_deadline)
        except Exception as exc:  # no process waits for this answer: log, never raise
            fuse_error(exc, f"release {show(held.path)} (close() already returned)")
        if held.writable and held.changes != held.flushed_changes:
            await self._changed(held.inode)

    # -- directories ----------------------------------------------------------------------------

    @translate
    @mutates
    async def mkdir(self, parent_inode: int, name: bytes, mode: int,
                    ctx: Any) -> pyfuse3.EntryAttributes:  # fmt: skip
        path, parent = self._dir(parent_inode)
        if self._ro:
            raise fail(errno.EROFS)
        node, st = await self.offload(nodecalls.make_dir, parent, os.fsdecode(name))
        entry = self.inodes.remember(path + (os.fsdecode(name),), node)
        return self.attributes(entry.inode, st)

    @translate
    @mutates
    async def unlink(self, parent_inode: int, name: bytes, ctx: Any) -> None:
        path, parent = self._dir(parent_inode)
        await self.offload(parent.unlink, os.fsdecode(name))
        self.inodes.detach(path + (os.fsdecode(name),))

    @translate
    @mutates
    async def rmdir(self, parent_inode: int, name: bytes, ctx: Any) -> None:
        path, parent = self._dir(parent_inode)
        await self.offload(parent.rmdir, os.fsdecode(name))
        self.inodes.detach(path + (os.fsdecode(name),))

    @translate
    @mutates
    async def rename(self, parent_inode_old: int, name_old: bytes, parent_inode_new: int,
                     name_new: bytes, flags: int, ctx: Any) -> None:  # fmt: skip
        old_path, old_parent = self._dir(parent_inode_old)
        new_path, new_parent = self._dir(parent_inode_new)
        old_name, new_name = os.fsdecode(name_old), os.fsdecode(name_new)
        if flags & pyfuse3.RENAME_EXCHANGE:
            raise fail(errno.EINVAL)
        if flags & pyfuse3.RENAME_NOREPLACE:
            if await self.offload(new_parent.lookup, new_name) is not None:
                raise fail(errno.EEXIST)
        await self.offload(old_parent.rename, old_name, new_parent, new_name)
        target = new_path + (new_name,)
        moved = self.inodes.moved(old_path + (old_name,), target)
        if not moved:
            return
        # the view may serve another node at the new path (a scratch file renamed over a view)
        below = [entry.path[len(target) :] for entry in moved]  # type: ignore[index]
        nodes = await self.offload(nodecalls.resolve_below, new_parent, new_name, below)
        for entry, node in zip(moved, nodes, strict=True):
            if node is not None:
                entry.node = node
            self.invalidate_attrs(entry.inode)
        await self._changed(moved[0].inode)
