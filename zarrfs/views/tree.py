"""The mounted tree: groups as directories, arrays as view directories, ``/.zarrfs`` control.

``open_tree(url, options)`` opens the store and returns the root directory. The options object
is the mount's parsed ``-o`` options (attributes read here: ``read_only``, ``byte_order``,
``cache_size``, ``threads``, ``prefetch``, ``writeback``, ``views``); anything missing takes its
default, so the views never depend on the FUSE layer's types.
"""

from __future__ import annotations

import importlib
import itertools
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from zarrfs.core import buffers
from zarrfs.core.array import Engine
from zarrfs.core.errors import NodeNotFound, StoreError, ZarrFSError
from zarrfs.core.hierarchy import Hierarchy, Node, join
from zarrfs.core.implicit import IMPLICIT_FORMAT_NAME
from zarrfs.core.metadata.model import ArrayMetadata
from zarrfs.core.writeback import WriteBack
from zarrfs.views.arrays import ArrayDir
from zarrfs.views.base import BytesHandle, GeneratedFile, Stat, VDir, VFile, VHandle, VNode
from zarrfs.views.editing import (  # noqa: F401  (MetadataFile: also imported from here)
    EditableDirMixin,
    MetadataFile,
    ScratchSpace,
    make_group,
    metadata_file,
    metadata_names,
)
from zarrfs.views.info import render_json
from zarrfs.views.skipped import implicit_info, unshown_node_dir

log = logging.getLogger(__name__)

_NO_MEMO = object()
#: rendered views kept per mount (``MountContext.memo``)
MEMO_ENTRIES = 8192

ALL_VIEWS = (
    "data.raw",
    "data.npy",
    "data.hdr",
    "data.mhd",
    "data.nhdr",
    "data.tif",
    "data.btf",
    "data.nii",
    "data.vrt",
    "group.nc",
)
#: the netCDF-4 view of a group (``zarrfs.views.ncfile``, imported on first use: libhdf5)
GROUP_FILE = "group.nc"


_WARMED = threading.Event()


def _warm_group_files() -> None:
    """Import the ``group.nc`` renderer (h5py and libhdf5 take ~0.3 s and ~11 MiB) in the
    background the first time a group is listed, so the first ``ncdump -h`` does not wait for
    it; mounts that never list a group (or list no ``group.nc``) never load it."""
    if not _WARMED.is_set():
        _WARMED.set()
        threading.Thread(
            target=importlib.import_module,
            args=("zarrfs.views.ncfile",),
            name="zarrfs-netcdf-import",
            daemon=True,
        ).start()


@dataclass
class MountContext:
    """What every node of one mount shares."""

    hierarchy: Hierarchy
    read_only: bool = False
    byte_order: str = "little"
    views: frozenset[str] = frozenset(ALL_VIEWS)
    started: float = field(default_factory=time.time)
    scratch: ScratchSpace = field(default_factory=ScratchSpace)
    #: the rendered ``group.nc`` layouts (a ``zarrfs.views.ncfile.LayoutCache``, made on first use)
    group_files: Any = None
    _memo: dict[Any, Any] = field(default_factory=dict)
    _memo_trim: threading.Lock = field(default_factory=threading.Lock)

    def memo(self, key: Any, compute: Any) -> Any:
        """``compute()`` cached under ``key`` (keys carry the state they depend on, so entries
        never go stale). Past ``MEMO_ENTRIES`` entries the oldest half is dropped: a listing
        renders an array's views when its group is listed and reads them back when the array
        is listed, a hundred arrays later, so emptying the whole table would drop some
        between the two. Trimming is serialised; a ``dict`` keeps its own consistency for the
        lookups and stores of other threads meanwhile (an entry trimmed twice is ignored)."""
        hit = self._memo.get(key, _NO_MEMO)
        if hit is _NO_MEMO:
            hit = compute()
            if len(self._memo) > MEMO_ENTRIES:
                with self._memo_trim:
                    for old in list(itertools.islice(self._memo, len(self._memo) // 2)):
                        self._memo.pop(old, None)
            self._memo[key] = hit
        return hit

    def memo_of(self, obj: Any, key: Any, compute: Any) -> Any:
        """``memo`` of ``compute()`` for the object ``obj`` itself (its identity, not its
        value: a metadata object shared by every array parsed from equal documents). The
        entry holds ``obj``, so while it exists no other object can have its ``id``."""
        return self.memo((key, id(obj)), lambda: (obj, compute()))[1]

    @property
    def writable(self) -> bool:
        return not self.read_only and self.hierarchy.store.writable

    def view_enabled(self, name: str) -> bool:
        return name in self.views


# ----------------------------------------------------------------------------- groups


def node_dir(ctx: MountContext, node: Node) -> VDir:
    if isinstance(node.metadata, ArrayMetadata):
        return ArrayDir(ctx, node.path)
    return GroupDir(ctx, node.path)


class GroupDir(EditableDirMixin, VDir):
    def __init__(self, ctx: MountContext, path: str) -> None:
        self.ctx = ctx
        self.path = path

    def stat(self) -> Stat:
        return Stat(is_dir=True, writable=self.ctx.writable)

    def _as_array(self) -> VDir | None:
        """The array view, if this node has become an array (an array zarr.json was written
        into an empty group): the kernel keeps this object for the directory's inode."""
        node = self._node()
        if node is None or not isinstance(node.metadata, ArrayMetadata):
            return None
        return ArrayDir(self.ctx, self.path)

    def _node(self) -> Node | None:
        """This group's node; None for a store root holding no node at all (an empty store)."""
        try:
            return self.ctx.hierarchy.node(self.path)
        except NodeNotFound:
            if self.path:
                raise
            return None

    def names(self) -> list[str]:
        array = self._as_array()
        if array is not None:
            return array.names()
        node = self._node()
        h = self.ctx.hierarchy
        children = [n.name for n in h.children(self.path)] if node is not None else []
        prefix = f"{self.path}/" if self.path else ""
        skipped = [
            p[len(prefix) :]
            for p in list(h.problems)
            if p.startswith(prefix) and p != self.path and "/" not in p[len(prefix) :]
        ]
        own = [] if node is None else metadata_names(self.ctx, node)
        if node is not None and node.format.name == IMPLICIT_FORMAT_NAME:
            own.append("info.json")
        if node is not None and self.ctx.view_enabled(GROUP_FILE):
            own.append(GROUP_FILE)  # a child node of that name wins (lookup finds it first)
            _warm_group_files()
        return sorted({*children, *skipped, *own, *self.scratch_names()})

    def lookup(self, name: str) -> VNode | None:
        array = self._as_array()
        if array is not None:
            return array.lookup(name)
        f = metadata_file(self.ctx, self.path, name) or self.scratch_lookup(name)
        if f is not None:
            return f
        if name == "info.json":
            node = self._node()
            if node is not None and node.format.name == IMPLICIT_FORMAT_NAME:
                return GeneratedFile(lambda: implicit_info(self.path))
        if name in (".", "..") or "/" in name:
            return None
        child = join(self.path, name)
        h = self.ctx.hierarchy
        try:
            node = h.node(child)
        except NodeNotFound:
            if name == GROUP_FILE and self.ctx.view_enabled(name) and self._node() is not None:
                from zarrfs.views.ncfile import group_file

                return group_file(self.ctx, self.path)
            return None
        except StoreError:  # the store refused the document (a link it does not follow)
            return None
        except ZarrFSError as exc:
            return unshown_node_dir(self.ctx, child, exc)
        return node_dir(self.ctx, node)

    def refresh(self, read_since: float | None = None) -> None:
        self.ctx.hierarchy.revalidate(self.path, read_since)

    def mkdir(self, name: str) -> VDir:
        return GroupDir(self.ctx, make_group(self.ctx, self.path, name))


# ----------------------------------------------------------------------------- control


class ControlFile(VFile):
    """``echo 1 > /.zarrfs/flush`` flushes every array; ``drop_caches`` empties the caches."""

    direct_io = True

    def __init__(self, ctx: MountContext, action: str, help_text: str) -> None:
        self.ctx = ctx
        self.action = action
        self.help = help_text.encode()

    def stat(self) -> Stat:
        return Stat(is_dir=False, size=len(self.help), writable=True)

    def open(self, write: bool, truncate: bool) -> VHandle:
        return ControlHandle(self)


class ControlHandle(BytesHandle):
    def __init__(self, file: ControlFile) -> None:
        super().__init__(file.help)
        self.file = file

    def write(self, offset: int, data: bytes) -> int:
        h = self.file.ctx.hierarchy
        if self.file.action == "flush":
            h.flush_all()
        else:
            h.engine.chunk_cache.clear()
            h.engine.index_cache.clear()
            h.forget("")
            buffers.pool.trim()  # the blocks the cleared units held
        return len(data)


class ControlDir(VDir):
    def __init__(self, ctx: MountContext) -> None:
        self.ctx = ctx

    def stat(self) -> Stat:
        return Stat(is_dir=True)

    def names(self) -> list[str]:
        return ["drop_caches", "flush", "stats.json"]

    def lookup(self, name: str) -> VNode | None:
        if name == "stats.json":
            return GeneratedFile(self._stats)
        if name == "flush":
            return ControlFile(self.ctx, "flush", "write anything here to flush all dirty data\n")
        if name == "drop_caches":
            return ControlFile(self.ctx, "drop", "write anything here to empty the caches\n")
        return None

    def _stats(self) -> bytes:
        h = self.ctx.hierarchy
        states = [(a.path, a.dirty_state()) for a in h.open_arrays()]
        doc: dict[str, Any] = {
            "store": h.store.url,
            "uptime_s": round(time.time() - self.ctx.started, 3),
            "chunk_cache": h.engine.chunk_cache.stats(),
            "index_cache": h.engine.index_cache.stats(),
            "buffers": buffers.pool.stats(),
            "dirty": {
                "bytes": sum(d.nbytes for _, d in states),
                "objects": sum(d.objects for _, d in states),
                "writes_in_flight": sum(d.writing for _, d in states),
                "oldest_age_s": round(max((d.oldest_age_s for _, d in states), default=0.0), 3),
            },
            "dirty_arrays": [path for path, d in states if d.objects],
            "skipped_nodes": {**h.unreadable, **h.problems},
            **h.engine.stats.snapshot(),
        }
        return render_json(doc)


# ----------------------------------------------------------------------------- root


class RootDir(VDir):
    """The mount root: the root node's directory plus the hidden ``.zarrfs`` control folder."""

    def __init__(self, ctx: MountContext, writeback: float = 5.0) -> None:
        self.ctx = ctx
        self.control = ControlDir(ctx)
        #: the write-back timer; the mount's lifecycle starts and stops it
        self.writeback = WriteBack(ctx.hierarchy.open_arrays, writeback if ctx.writable else 0)

    def _root(self) -> VDir:
        h = self.ctx.hierarchy
        try:
            node = h.node("")
        except NodeNotFound:  # an empty store: an empty group (mkdir creates the first node)
            return GroupDir(self.ctx, "")
        except ZarrFSError as exc:  # a root node zarrfs cannot show: explained, not hidden
            return unshown_node_dir(self.ctx, "", exc)
        return node_dir(self.ctx, node)

    def stat(self) -> Stat:
        return Stat(is_dir=True, writable=self.ctx.writable)

    def names(self) -> list[str]:
        return [".zarrfs", *self._root().names()]

    def lookup(self, name: str) -> VNode | None:
        if name == ".zarrfs":
            return self.control
        return self._root().lookup(name)

    def refresh(self, read_since: float | None = None) -> None:
        self.ctx.hierarchy.revalidate("", read_since)

    def mkdir(self, name: str) -> VDir:
        return self._root().mkdir(name)

    def create(self, name: str) -> VFile:
        return self._root().create(name)

    def unlink(self, name: str) -> None:
        self._root().unlink(name)

    def rmdir(self, name: str) -> None:
        self._root().rmdir(name)

    def rename(self, name: str, new_parent: VDir, new_name: str) -> None:
        if isinstance(new_parent, RootDir):
            new_parent = new_parent._root()
        self._root().rename(name, new_parent, new_name)

    @property
    def path(self) -> str:
        return ""

    def start(self) -> None:
        """Start the background work of the mount (the write-back timer)."""
        self.writeback.start()

    def stop(self) -> None:
        """Stop the background work, waiting for a flush in progress (before ``flush_all``)."""
        self.writeback.stop()

    def flush_all(self) -> None:
        self.ctx.hierarchy.flush_all()

    def discarded_scratch(self) -> list[str]:
        """The scratch files the mount holds: memory only, so its unmount drops them."""
        return self.ctx.scratch.describe()

    def close(self) -> None:
        self.stop()
        try:
            self.flush_all()
        finally:
            self.ctx.hierarchy.engine.close()
            self.ctx.hierarchy.store.close()


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(value: Any, default: int) -> int:
    """``"512M"``, ``"1.5G"``, ``"4096"`` or an int -> bytes."""
    if value is None:
        return default
    if isinstance(value, int):
        return value
    m = _SIZE.match(str(value))
    if not m:
        raise ValueError(f"invalid size {value!r}")
    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m.group(2).upper()]
    return int(float(m.group(1)) * mult)


def open_tree(url: str, options: Any = None) -> RootDir:
    """Open the store at ``url`` and build the root of the mounted tree."""
    from zarrfs.core.stores.registry import open_store

    opt = (
        (lambda name, default: getattr(options, name, default))
        if options
        else (lambda name, default: default)
    )
    read_only = bool(opt("read_only", False))
    store = open_store(url, read_only=read_only, **(opt("store_options", None) or {}))
    if opt("readahead_listing", False) and hasattr(store, "enable_read_ahead"):
        store.enable_read_ahead()
    engine = Engine(
        cache_size=parse_size(opt("cache_size", None), 1 << 30),
        threads=int(opt("threads", None) or 8),
        prefetch_bytes=parse_size(opt("prefetch", None), 64 << 20),
        read_only=read_only,
        direct_reads=bool(opt("direct_reads", True)),
    )
    views = opt("views", None)
    ctx = MountContext(
        Hierarchy(store, engine),
        read_only=read_only,
        byte_order=opt("byte_order", None) or "little",
        views=frozenset(views) if views else frozenset(ALL_VIEWS),
    )
    writeback = opt("writeback", None)
    root = RootDir(ctx, writeback=5.0 if writeback is None else float(writeback))
    # fail early (before the mount goes live) if the store root is unreadable
    try:
        node = ctx.hierarchy.node("")
    except NodeNotFound as exc:
        if not store.listable:
            root.close()
            raise
        log.info("store root holds no Zarr node (%s); showing an empty group", exc)
    except ZarrFSError as exc:
        log.warning(
            "store root: not shown: %s (its metadata documents, info.json and ERROR.txt "
            "are listed at the mount root)",
            exc,
        )
    else:
        if node.format.name == IMPLICIT_FORMAT_NAME:
            log.info("store root has no metadata document: showing it as an implicit group")
    return root
