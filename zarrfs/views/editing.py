"""Editing through the mount: metadata views, scratch files, new groups and arrays.

- A metadata view (``zarr.json``, ``attributes.json``; other formats' names through their
  ``NodeFormat``) opened for writing edits an in-memory copy; the copy is validated and stored
  when the file is flushed (every ``close``). Invalid JSON, a different node type, or a change
  that would need re-encoding (data type, codecs, chunk grid, key encoding, fill value) is
  refused with ``MetadataError`` (EINVAL) and a log line saying why. A shape change resizes.
- Any other file created in a node directory is a *scratch file*: it lives in memory only
  (editor swap files, ``sed -i`` and ``jq > tmp`` temporaries). Renaming a scratch file over a
  metadata view commits its content to that view. Scratch memory is bounded per mount.
- ``mkdir`` makes a child group; writing an array ``zarr.json`` into an empty group turns it into
  an array. Deleting or renaming a view is refused (EPERM).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from zarrfs.core.errors import (
    InvalidWriteError,
    MetadataError,
    NodeNotFound,
    NotPermittedError,
    ReadOnlyError,
    ZarrFSError,
)
from zarrfs.core.hierarchy import Hierarchy, Node, join
from zarrfs.core.metadata.model import (
    ArrayMetadata,
    GroupMetadata,
    check_node_name,
    load_json_object,
    reencoding_needed,
)
from zarrfs.core.metadata.v3 import parse_v3
from zarrfs.views.base import BytesHandle, Stat, VFile, VHandle
from zarrfs.views.info import json_size, render_json

if TYPE_CHECKING:
    from zarrfs.views.tree import MountContext

log = logging.getLogger(__name__)

#: total bytes all scratch files of one mount may hold
SCRATCH_LIMIT = 64 << 20


# ----------------------------------------------------------------------------- validation


def commit_metadata(ctx: MountContext, path: str, name: str, content: bytes) -> None:
    """Validate ``content`` written to metadata view ``name`` of node ``path`` and store it."""
    h = ctx.hierarchy
    where = f"/{join(path, name)}"
    with h.edit_lock(path):  # a resize of the array cannot cross this read-modify-write
        _commit_locked(h, path, name, content, where)


def _commit_locked(h: Hierarchy, path: str, name: str, content: bytes, where: str) -> None:
    try:
        node = h.node(path)
        old = node.metadata
        if name == "attributes.json":
            attrs = load_json_object(content, "attributes.json")
            h.save_metadata(path, old.with_attributes(attrs), node.format)
            return
        parse = node.format.parse_document
        if parse is None:
            raise MetadataError(f"editing {node.format.name} metadata is not supported")
        new = parse(name, content, old)
        if isinstance(old, GroupMetadata) and isinstance(new, ArrayMetadata):
            if h.children(path):
                raise MetadataError("a group with children cannot become an array")
            h.save_metadata(path, new, node.format)
            h.forget(path)
            return
        if type(old) is not type(new):
            raise MetadataError(f"node type cannot change ({old.node_type} -> {new.node_type})")
        if isinstance(old, ArrayMetadata) and isinstance(new, ArrayMetadata):
            why = reencoding_needed(old, new)
            if why is not None:
                raise MetadataError(f"change needs re-encoding every chunk: {why}")
            if new.shape != old.shape:
                h.array(path).resize(new.shape)
        h.save_metadata(path, new, node.format)
    except (MetadataError, InvalidWriteError) as exc:
        log.warning("%s: change refused: %s", where, exc)
        raise


class MetadataEditHandle(VHandle):
    """An open-for-writing metadata view: edits a copy, commits it on flush/close."""

    def __init__(self, file: MetadataFile, initial: bytes) -> None:
        self.file = file
        self.buf = bytearray(initial)
        self.dirty = initial == b""  # O_TRUNC then close writes an empty document: refused
        self._lock = threading.Lock()

    def read(self, offset: int, size: int) -> bytes:
        with self._lock:
            return bytes(self.buf[offset : offset + size])

    def write(self, offset: int, data: bytes) -> int:
        if offset + len(data) > SCRATCH_LIMIT:
            raise InvalidWriteError("metadata documents are limited to 64 MiB")
        with self._lock:
            if offset > len(self.buf):
                self.buf.extend(b" " * (offset - len(self.buf)))
            self.buf[offset : offset + len(data)] = data
            self.dirty = True
        return len(data)

    def truncate(self, size: int) -> None:
        with self._lock:
            del self.buf[size:]
            self.dirty = True

    def flush(self) -> None:
        with self._lock:
            if not self.dirty:
                return
            content = bytes(self.buf)
            self.dirty = False
        commit_metadata(self.file.ctx, self.file.path, self.file.name, content)

    def release(self) -> None:
        self.flush()


# ----------------------------------------------------------------------------- metadata files


def metadata_names(ctx: MountContext, node: Node) -> list[str]:
    return [*node.format.metadata_keys(node.metadata), "attributes.json"]


class MetadataFile(VFile):
    """A stored metadata document (byte-exact) or ``attributes.json`` (the user attributes)."""

    direct_io = True

    def __init__(self, ctx: MountContext, path: str, name: str) -> None:
        self.ctx = ctx
        self.path = path
        self.name = name

    def content(self) -> bytes:
        node = self.ctx.hierarchy.node(self.path)
        key = ("meta", self.path, self.name, id(node), node.mtime_ns)
        return self.ctx.memo(key, lambda: self._content(node))  # type: ignore[no-any-return]

    def _content(self, node: Node) -> bytes:
        if self.name == "attributes.json":
            return render_json(dict(node.metadata.attributes))
        if self.name == "zarr.json" and node.format.name == "v3" and node.metadata.raw:
            return node.metadata.raw  # the document the node was read from, byte for byte
        raw = self.ctx.hierarchy.documents.get(join(self.path, self.name))
        return node.metadata.to_bytes() if raw is None else raw

    def size(self) -> int:
        """``len(self.content())``; ``attributes.json`` is measured without rendering it, once
        per metadata object (``memo_of``: arrays with equal documents share one)."""
        if self.name != "attributes.json":
            return len(self.content())
        meta = self.ctx.hierarchy.node(self.path).metadata
        size = self.ctx.memo_of(
            meta, "attributes.json size", lambda: json_size(dict(meta.attributes))
        )
        return size  # type: ignore[no-any-return]

    def stat(self) -> Stat:
        mtime = self.ctx.hierarchy.node(self.path).mtime_ns
        return Stat(is_dir=False, size=self.size(), writable=self.ctx.writable, mtime_ns=mtime)

    def open(self, write: bool, truncate: bool) -> VHandle:
        self.ctx.hierarchy.revalidate(self.path)
        if write:
            if not self.ctx.writable:
                raise ReadOnlyError("read-only mount")
            return MetadataEditHandle(self, b"" if truncate else self.content())
        return BytesHandle(self.content())


def metadata_file(ctx: MountContext, path: str, name: str) -> VFile | None:
    try:
        node = ctx.hierarchy.node(path)
    except ZarrFSError:
        return None
    if name in metadata_names(ctx, node):
        return MetadataFile(ctx, path, name)
    return None


# ----------------------------------------------------------------------------- scratch files


class ScratchSpace:
    """In-memory files of one mount, keyed by (directory path, name)."""

    def __init__(self, limit: int = SCRATCH_LIMIT) -> None:
        self.limit = limit
        self.files: dict[tuple[str, str], bytearray] = {}
        self.mtimes: dict[tuple[str, str], int] = {}
        self.lock = threading.Lock()

    def names(self, path: str) -> list[str]:
        with self.lock:
            return [n for (p, n) in self.files if p == path]

    def used(self) -> int:
        return sum(len(b) for b in self.files.values())

    def describe(self, limit: int = 20) -> list[str]:
        """The files held, as ``/path (N bytes)`` (at most ``limit``, then how many more)."""
        with self.lock:
            items = sorted((k, len(b)) for k, b in self.files.items())
        shown = [f"/{join(*key)} ({size} bytes)" for key, size in items[:limit]]
        if len(items) > limit:
            shown.append(f"and {len(items) - limit} more")
        return shown


class ScratchFile(VFile):
    def __init__(self, ctx: MountContext, path: str, name: str) -> None:
        self.ctx = ctx
        self.key = (path, name)

    def _buf(self) -> bytearray:
        buf = self.ctx.scratch.files.get(self.key)
        if buf is None:
            raise NodeNotFound(f"/{join(*self.key)} no longer exists")
        return buf

    def stat(self) -> Stat:
        s = self.ctx.scratch
        with s.lock:
            return Stat(
                is_dir=False,
                size=len(self._buf()),
                writable=True,
                mtime_ns=s.mtimes.get(self.key, time.time_ns()),
            )

    def open(self, write: bool, truncate: bool) -> VHandle:
        if truncate:
            self.truncate(0)
        return ScratchHandle(self)

    def truncate(self, size: int) -> None:
        s = self.ctx.scratch
        with s.lock:
            buf = self._buf()
            if size > len(buf) and s.used() + size - len(buf) > s.limit:
                raise InvalidWriteError("scratch space full")
            if size < len(buf):
                del buf[size:]
            else:
                buf.extend(bytes(size - len(buf)))
            s.mtimes[self.key] = time.time_ns()


class ScratchHandle(VHandle):
    def __init__(self, file: ScratchFile) -> None:
        self.file = file

    def read(self, offset: int, size: int) -> bytes:
        with self.file.ctx.scratch.lock:
            return bytes(self.file._buf()[offset : offset + size])

    def write(self, offset: int, data: bytes) -> int:
        s = self.file.ctx.scratch
        with s.lock:
            buf = self.file._buf()
            grow = max(0, offset + len(data) - len(buf))
            if grow and s.used() + grow > s.limit:
                raise InvalidWriteError("scratch space full (64 MiB per mount)")
            if offset > len(buf):
                buf.extend(bytes(offset - len(buf)))
            buf[offset : offset + len(data)] = data
            s.mtimes[self.file.key] = time.time_ns()
        return len(data)


# ----------------------------------------------------------------------------- directory ops


class EditableDirMixin:
    """Directory operations shared by group and array directories."""

    ctx: MountContext
    path: str

    def _check_writable(self) -> None:
        if not self.ctx.writable:
            raise ReadOnlyError("read-only mount")

    def scratch_names(self) -> list[str]:
        return self.ctx.scratch.names(self.path)

    def scratch_lookup(self, name: str) -> ScratchFile | None:
        with self.ctx.scratch.lock:
            present = (self.path, name) in self.ctx.scratch.files
        return ScratchFile(self.ctx, self.path, name) if present else None

    def create(self, name: str) -> VFile:
        self._check_writable()
        if "/" in name or name in (".", "..") or "\x00" in name:
            raise InvalidWriteError(f"invalid file name {name!r}")
        s = self.ctx.scratch
        with s.lock:
            s.files.setdefault((self.path, name), bytearray())
            s.mtimes[(self.path, name)] = time.time_ns()
        return ScratchFile(self.ctx, self.path, name)

    def unlink(self, name: str) -> None:
        self._check_writable()
        s = self.ctx.scratch
        with s.lock:
            if s.files.pop((self.path, name), None) is not None:
                s.mtimes.pop((self.path, name), None)
                return
        raise NotPermittedError(
            f"/{join(self.path, name)}: views cannot be deleted (use zarrfs rm)"
        )

    def rmdir(self, name: str) -> None:
        raise NotPermittedError("nodes are removed with `zarrfs rm`, not rmdir")

    def rename(self, name: str, new_parent: object, new_name: str) -> None:
        self._check_writable()
        s = self.ctx.scratch
        with s.lock:
            data = s.files.get((self.path, name))
        if data is None:
            raise NotPermittedError(f"/{join(self.path, name)}: views cannot be renamed")
        target_path = getattr(new_parent, "path", None)
        if target_path is None:
            raise NotPermittedError("scratch files can only be renamed within the mount's nodes")
        lookup = getattr(new_parent, "lookup", None)
        target = lookup(new_name) if lookup else None
        if isinstance(target, MetadataFile):
            commit_metadata(self.ctx, target_path, new_name, bytes(data))
            with s.lock:
                s.files.pop((self.path, name), None)
                s.mtimes.pop((self.path, name), None)
            return
        if target is not None and not isinstance(target, ScratchFile):
            raise NotPermittedError(f"/{join(target_path, new_name)}: cannot replace a view")
        with s.lock:
            buf = s.files.pop((self.path, name))
            s.mtimes.pop((self.path, name), None)
            s.files[(target_path, new_name)] = buf
            s.mtimes[(target_path, new_name)] = time.time_ns()


def make_group(ctx: MountContext, path: str, name: str) -> str:
    """Create child group ``name`` of ``path`` (v3); returns its path."""
    if not ctx.writable:
        raise ReadOnlyError("read-only mount")
    check_node_name(name)
    child = join(path, name)
    try:
        ctx.hierarchy.node(child)
    except NodeNotFound:
        pass
    except ZarrFSError:
        raise InvalidWriteError(f"/{child} exists and is not a valid node") from None
    else:
        raise InvalidWriteError(f"/{child} already exists")
    doc = b'{\n  "zarr_format": 3,\n  "node_type": "group",\n  "attributes": {}\n}'
    ctx.hierarchy.save_metadata(child, parse_v3(doc))
    return child
