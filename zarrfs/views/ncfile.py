"""The ``group.nc`` file node: a rendered :class:`~zarrfs.views.netcdf.Layout` served byte by
byte, metadata from memory and each data extent from its array's read path (the same decoded,
cached bytes ``data.raw`` serves, never a copy of the array).

Invariants:
- a layout is rendered once per group state: the group's metadata node and every child node
  (a resize or metadata change of any child replaces its node, so the state changes and the next
  open re-renders); at most ``_MAX_GROUPS`` layouts are kept;
- an open handle keeps the layout it was opened with (close-to-open, like every view);
- the file is read-only: opening it for writing is refused with ``ReadOnlyError`` (EROFS);
- a read of bytes in a data extent returns the array's bytes or fails with the array's error
  (EIO for a chunk that cannot be loaded); it never returns zeros in their place.
"""

from __future__ import annotations

import bisect
import functools
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from zarrfs.core.errors import ReadOnlyError
from zarrfs.core.metadata.model import ArrayMetadata
from zarrfs.views.base import Stat, VFile, VHandle
from zarrfs.views.legacy import resolve_byte_order
from zarrfs.views.netcdf import Extent, Layout, Member, render, size_bound

if TYPE_CHECKING:
    from zarrfs.views.tree import MountContext

#: most group layouts kept per mount (each is the group's metadata: kilobytes)
_MAX_GROUPS = 64


class LayoutCache:
    """group path -> (state, layout), the most recently used ``_MAX_GROUPS`` groups."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[Any, Layout]] = OrderedDict()
        #: group path -> (state, size) of groups stat'ed but not rendered
        self._sizes: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        #: serialises renderings (libhdf5 is not re-entrant)
        self._render_lock = threading.Lock()

    def size(self, ctx: MountContext, path: str) -> tuple[Any, int]:
        """(state, file size) without rendering: what ``stat`` (``ls -l``) needs."""
        state, members, attrs, excluded = _group_state(ctx, path)
        with self._lock:
            hit = self._entries.get(path)
            if hit is not None and hit[0] == state:
                return state, hit[1].size
            known = self._sizes.get(path)
            if known is not None and known[0] == state:
                return known
        size = size_bound(members, attrs, resolve_byte_order(ctx.byte_order), excluded)
        with self._lock:
            self._sizes[path] = (state, size)
            self._sizes.move_to_end(path)
            while len(self._sizes) > _MAX_GROUPS * 16:
                self._sizes.popitem(last=False)
        return state, size

    def get(self, ctx: MountContext, path: str) -> tuple[Any, Layout]:
        state, members, attrs, excluded = _group_state(ctx, path)
        with self._lock:
            hit = self._entries.get(path)
            if hit is not None and hit[0] == state:
                self._entries.move_to_end(path)
                return hit
        with self._render_lock:
            order = resolve_byte_order(ctx.byte_order)
            layout = render(members, attrs, order, excluded)
        with self._lock:
            self._entries[path] = (state, layout)
            self._entries.move_to_end(path)
            while len(self._entries) > _MAX_GROUPS:
                self._entries.popitem(last=False)
        return state, layout


def _group_state(
    ctx: MountContext, path: str
) -> tuple[Any, list[Member], dict[str, Any], dict[str, str]]:
    """(state token, array members, group attributes, arrays left out with the reason)."""
    h = ctx.hierarchy
    group = h.node(path)
    members: list[Member] = []
    children: list[tuple[str, int, int]] = []
    for node in h.children(path):
        children.append((node.path, id(node), node.mtime_ns))
        if isinstance(node.metadata, ArrayMetadata):
            members.append(Member(node.name, node.path, node.metadata))
    prefix = f"{path}/" if path else ""
    excluded: dict[str, str] = {}
    for table in (h.opaque, h.problems):
        for p in list(table):
            rest = p[len(prefix) :] if p.startswith(prefix) else ""
            if rest and "/" not in rest and rest not in excluded:
                entry: Any = table.get(p)
                why = entry.get("reason", "") if isinstance(entry, dict) else str(entry)
                excluded[rest] = why or "unreadable"
    token = (ctx.byte_order, id(group), group.mtime_ns, tuple(children), tuple(excluded.items()))
    return token, members, dict(group.metadata.attributes), excluded


_CACHE_LOCK = threading.Lock()


def group_file(ctx: MountContext, path: str) -> GroupFile:
    """The ``group.nc`` node of the group at ``path`` (its mount's layout cache made on first
    use)."""
    with _CACHE_LOCK:
        if ctx.group_files is None:
            ctx.group_files = LayoutCache()
    return GroupFile(ctx, path, ctx.group_files)


class GroupFile(VFile):
    """``<group>/group.nc``."""

    def __init__(self, ctx: MountContext, path: str, cache: LayoutCache) -> None:
        self.ctx = ctx
        self.path = path
        self.cache = cache

    def layout(self) -> tuple[Any, Layout]:
        return self.cache.get(self.ctx, self.path)

    def _open_arrays(self, state: Any) -> list[Any]:
        """The arrays of the group already open (their data may change through the mount)."""
        h = self.ctx.hierarchy
        arrays = [h.cached_array(child[0]) for child in state[3]]
        return [a for a in arrays if a is not None]

    def stat(self) -> Stat:
        state, size = self.cache.size(self.ctx, self.path)
        mtime = self.ctx.hierarchy.node(self.path).mtime_ns
        for arr in self._open_arrays(state):
            mtime = max(mtime, arr.mtime_ns)
        return Stat(is_dir=False, size=size, blksize=1 << 20, mtime_ns=mtime)

    def cache_token(self) -> object:
        state, _ = self.cache.size(self.ctx, self.path)
        return (state, tuple((a.uid, a.mtime_ns) for a in self._open_arrays(state)))

    def open(self, write: bool, truncate: bool) -> VHandle:
        if write:
            raise ReadOnlyError(f"{self.path or '/'}/group.nc is read-only")
        h = self.ctx.hierarchy
        h.revalidate(self.path)
        # close-to-open for every array of the group, concurrently (one request each on an
        # object store); a failure surfaces when the layout reads that node
        paths = [node.path for node in h.children(self.path)]
        h.engine.run_all([functools.partial(h.revalidate, p) for p in paths])
        return GroupFileHandle(self.ctx, self.layout()[1])


class GroupFileHandle(VHandle):
    """Reads of one open ``group.nc``: pieces are metadata segments and data extents sorted
    by offset; bytes in neither read as zero."""

    def __init__(self, ctx: MountContext, layout: Layout) -> None:
        self.ctx = ctx
        self.layout = layout
        self.byte_order = resolve_byte_order(ctx.byte_order)
        pieces: list[tuple[int, int, bytes | Extent]] = [
            (o, o + len(d), d) for o, d in layout.segments
        ]
        pieces += [(e.start, e.stop, e) for e in layout.extents]
        pieces.sort(key=lambda p: p[0])
        self.pieces = pieces
        self.starts = [p[0] for p in pieces]

    def _parts(self, offset: int, size: int, cached: bool) -> list[Any] | None:
        end = min(offset + size, self.layout.size)
        if offset >= end:
            return []
        parts: list[Any] = []
        pos = offset
        i = max(0, bisect.bisect_right(self.starts, offset) - 1)
        while pos < end:
            if i < len(self.pieces) and self.pieces[i][1] <= pos:
                i += 1
                continue
            if i >= len(self.pieces) or self.pieces[i][0] > pos:  # a gap: zeros
                stop = end if i >= len(self.pieces) else min(end, self.pieces[i][0])
                parts.append(bytes(stop - pos))
                pos = stop
                continue
            start, stop, what = self.pieces[i]
            stop = min(stop, end)
            if isinstance(what, bytes):
                parts.append(what[pos - start : stop - start])
            else:
                data = self._data(what, pos - start, stop - pos, cached)
                if data is None:
                    return None
                parts.append(data)
            pos = stop
            i += 1
        return parts

    def _data(self, extent: Extent, offset: int, size: int, cached: bool) -> Any:
        h = self.ctx.hierarchy
        if cached:
            arr = h.cached_array(extent.path)
            if arr is None:
                return None
            data = arr.read_cached(offset, size, self.byte_order)
            if data is None:
                return None
        else:
            data = h.array(extent.path).read_buffer(offset, size, self.byte_order)
        if len(data) < size:  # the array shrank since this handle was opened
            return bytes(data) + bytes(size - len(data))
        return data

    @staticmethod
    def _join(parts: list[Any]) -> bytes | memoryview:
        if len(parts) == 1:
            return parts[0]  # type: ignore[no-any-return]
        return b"".join(parts)

    def read(self, offset: int, size: int) -> bytes | memoryview:
        parts = self._parts(offset, size, cached=False)
        assert parts is not None
        return self._join(parts)

    def read_cached(self, offset: int, size: int) -> bytes | memoryview | None:
        parts = self._parts(offset, size, cached=True)
        return None if parts is None else self._join(parts)
