"""Node discovery: groups and arrays of a store, by listing or by consolidated metadata.

Spec: Zarr v3 core, "Hierarchy", "Node names", "Storage keys"; consolidated metadata as written
by zarr-python (``consolidated_metadata`` inside a group's ``zarr.json``).

A node path is ``""`` for the root or ``"a/b"``; its metadata document lives at a
format-specific key (``a/b/zarr.json`` for v3). Format readers are tried in order, so the other
formats (v3, v2, v1, the v3 drafts: ``formats.FORMATS``) are tried in turn.

Discovery rules:
- on a listable store, the children of a group are the sub-prefixes that hold a node;
- on a store that cannot list, they come from the nearest ancestor's consolidated metadata;
- a folder with no metadata document but Zarr nodes below it (found by listing, or in the
  consolidated metadata) is an implicit group (format ``IMPLICIT_FORMAT``), so every node a
  listing or the consolidated metadata names is reachable;
- a child whose metadata is invalid or unreadable is skipped with one log line (the rest of
  the tree still mounts) and reported through ``Hierarchy.problems``;
- node metadata is cached with the store's version token of its document, so ``revalidate``
  (close-to-open) costs one ``version`` request per node;
- metadata documents are read through ``documents`` (``DocumentReads``): none longer than
  ``MAX_DOCUMENT_BYTES`` is ever read whole.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from zarrfs.core.array import Engine, ZarrArray
from zarrfs.core.engine import one_by_one_until_slow
from zarrfs.core.errors import (
    MetadataError,
    NodeNotFound,
    StoreError,
    VariableLengthElements,
    ZarrFSError,
)
from zarrfs.core.formats import FORMATS, NodeFormat, join
from zarrfs.core.implicit import IMPLICIT_FORMAT_NAME, implicit_group, implies_nodes
from zarrfs.core.metadata.model import (
    ArrayMetadata,
    GroupMetadata,
    check_node_name,
    reencoding_needed,
)
from zarrfs.core.metadata.v3 import array_metadata_v3
from zarrfs.core.stores.base import Store
from zarrfs.core.stores.wrapper import DocumentReads, RecordingVersions

log = logging.getLogger(__name__)

Metadata = ArrayMetadata | GroupMetadata

#: largest metadata document read (``zarr.json``, ``.zarray``, ``.zmetadata``, ...): a longer one
#: is refused with ``MetadataError`` after reading at most this many bytes + 1 (the same bound
#: as an edit of a metadata view)
MAX_DOCUMENT_BYTES = 64 << 20


def _implicit_write(store: Store, path: str, metadata: Metadata) -> None:
    raise MetadataError(
        f"/{path} is an implicit group (a folder with Zarr nodes below it and no metadata "
        "document): it has no metadata to edit"
    )


#: the format of implicit groups (never tried by ``_read_node``'s loop: it has no document)
IMPLICIT_FORMAT = NodeFormat(
    IMPLICIT_FORMAT_NAME, (), lambda store, path: None, _implicit_write, lambda m: ()
)


@dataclass
class Node:
    path: str
    metadata: Metadata
    format: NodeFormat
    #: version tokens of the metadata documents when read
    token: tuple[Any, ...]
    #: when this metadata was read or written (the metadata files' mtime)
    mtime_ns: int = field(default_factory=time.time_ns)
    #: ``time.monotonic()`` when this metadata was read or written
    read_at: float = field(default_factory=time.monotonic)

    @property
    def is_array(self) -> bool:
        return isinstance(self.metadata, ArrayMetadata)

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


class Hierarchy:
    """The nodes of one store, with cached metadata and open arrays. Thread-safe."""

    def __init__(self, store: Store, engine: Engine | None = None) -> None:
        self.store = store
        #: what metadata documents are read through (bounded reads)
        self.documents = DocumentReads(store, MAX_DOCUMENT_BYTES)
        self.engine = engine or Engine()
        self._lock = threading.Lock()
        #: path -> the lock of every read-modify-write of that node's metadata (``edit_lock``)
        self._edit_locks: dict[str, threading.RLock] = {}
        self._nodes: dict[str, Node] = {}
        self._arrays: dict[str, ZarrArray] = {}
        #: open arrays whose node was forgotten: ``array`` re-reads the node and keeps the
        #: object when its metadata is unchanged (so no write is ever split between two objects)
        self._recheck: set[str] = set()
        self._consolidated: dict[str, Metadata] = {}
        #: path -> reason, for nodes skipped because their metadata is invalid or unsupported
        #: (listed in the mount and by ``zarrfs info`` with the reason)
        self.problems: dict[str, str] = {}
        #: path -> reason, for nodes whose documents the store refused or failed to read
        self.unreadable: dict[str, str] = {}
        #: path -> summary, for arrays that exist but cannot be shown as raw bytes
        #: (variable-length elements); the views list them with an explanatory info.json
        self.opaque: dict[str, dict[str, Any]] = {}

    # -------------------------------------------------------------- nodes

    def _token(
        self,
        path: str,
        fmt: NodeFormat,
        metadata: Metadata,
        known: dict[str, str | None] | None = None,
    ) -> tuple[Any, ...]:
        """The versions of the node's metadata documents: those ``known`` from the reads the
        metadata was parsed from, the others asked of the store."""
        known = known or {}
        try:
            keys = [join(path, k) for k in fmt.metadata_keys(metadata)]
            return tuple(known[k] if k in known else self.store.version(k) for k in keys)
        except ZarrFSError:
            return ()

    def node(self, path: str) -> Node:
        """The node at ``path`` (cached). NodeNotFound if none; MetadataError if invalid."""
        hit = self._nodes.get(path)  # one dict lookup is atomic: no lock on the hit path
        if hit is not None:
            return hit
        node = self._read_node(path)
        with self._lock:
            self._nodes[path] = node
        return node

    def _read_node(self, path: str) -> Node:
        for fmt in FORMATS:
            reads = RecordingVersions(self.documents)
            metadata = fmt.read(reads, path)
            if metadata is not None:
                return Node(path, metadata, fmt, self._token(path, fmt, metadata, reads.versions))
        consolidated = self._consolidated.get(path)
        if consolidated is not None:
            return Node(path, consolidated, FORMATS[0], ())
        below = f"{path}/"
        if (path and any(p.startswith(below) for p in list(self._consolidated))) or implies_nodes(
            self.documents, path
        ):
            return Node(path, implicit_group(), IMPLICIT_FORMAT, ())
        raise NodeNotFound(f"no Zarr node at {path or '/'}")

    def revalidate(self, path: str, read_since: float | None = None) -> bool:
        """Close-to-open check: re-read the node's metadata if its documents changed.
        Returns True if it changed (cached chunks of the array are then dropped). A node read
        at or after ``read_since`` is not checked: it was read during the caller's request."""
        with self._lock:
            node = self._nodes.get(path)
        if node is None or not node.token:
            return False
        if read_since is not None and node.read_at >= read_since:
            return False
        if self._token(path, node.format, node.metadata) == node.token:
            return False
        with self._lock:
            self._nodes.pop(path, None)
            arr = self._arrays.get(path)
            if arr is not None:  # (as ``forget``: never dropped with writes it still holds)
                self._recheck.add(path)
        if arr is not None:
            arr.invalidate()
            arr.mtime_ns = time.time_ns()  # changed behind us: the kernel's pages go too
        return True

    def forget(self, path: str) -> None:
        """Drop cached state of ``path`` and everything below it: node metadata and the clean
        caches of open arrays. An open array stays the one object of its path until ``array``
        finds that its metadata changed, so a write running meanwhile (even one that looked the
        array up before) is never lost: forgetting never drops data."""
        with self._lock:
            for p in [p for p in self._nodes if p == path or p.startswith(path + "/") or not path]:
                self._nodes.pop(p, None)
            arrays = [
                a
                for p, a in self._arrays.items()
                if p == path or p.startswith(path + "/") or not path
            ]
            self._recheck.update(a.path for a in arrays)
        for arr in arrays:
            arr.invalidate()

    def children(self, path: str) -> list[Node]:
        """The child nodes of the group at ``path``, sorted by name; invalid ones skipped."""
        names: list[str]
        if self.store.listable:
            prefix = f"{path}/" if path else ""
            try:
                lister = self._lister(path)
                names = lister(self.documents, path) if lister else self.store.list_dir(prefix)[1]
            except StoreError as exc:
                log.warning("cannot list %s: %s", path or "/", exc)
                names = []
        else:
            names = self._consolidated_children(path)
        out: list[Node] = []
        candidates = []
        for name in names:
            try:
                check_node_name(name)
            except MetadataError:
                continue
            candidates.append(join(path, name))
        if self.store.listable:  # a tree walk lists these next: the store may read ahead
            self.store.read_ahead(candidates)
        for node in self._read_nodes(candidates):
            if node is not None:
                out.append(node)
        return sorted(out, key=lambda n: n.name)

    def _read_nodes(self, paths: list[str]) -> list[Node | None]:
        """``_try_node`` of each path: one after the other while each is quick, the rest
        through the engine's threads once the store shows latency (``one_by_one_until_slow``)."""

        def concurrently(rest: Sequence[Callable[[], Node | None]]) -> list[Node | None]:
            return [f.result() for f in self.engine.run_all(rest)]

        calls = [functools.partial(self._try_node, p) for p in paths]
        return one_by_one_until_slow(calls, concurrently)

    def _lister(self, path: str) -> Callable[[Store, str], list[str]] | None:
        """The format's own child listing for the node at ``path``, if it has one."""
        try:
            return self.node(path).format.list_children
        except ZarrFSError:
            return None

    def _try_node(self, path: str) -> Node | None:
        try:
            return self.node(path)
        except NodeNotFound:
            return None
        except StoreError as exc:
            # the store refused or failed to read the document (a link it does not follow, a
            # key it cannot hold, an I/O error): no node is shown, the log says why
            with self._lock:
                first = path not in self.unreadable
                self.unreadable[path] = str(exc)
            if first:
                log.warning("skipping %s: %s", path, exc)
            return None
        except ZarrFSError as exc:
            summary = getattr(exc, "summary", None)
            with self._lock:
                first = path not in self.problems
                self.problems[path] = str(exc)
                if isinstance(summary, dict):
                    self.opaque[path] = {**summary, "reason": str(exc)}
            if first and isinstance(exc, VariableLengthElements):
                log.info("%s: variable-length elements, shown as data.txt and data.json", path)
            elif first:
                log.warning("skipping %s: %s", path, exc)
            return None

    def _consolidated_children(self, path: str) -> list[str]:
        """Child names from consolidated metadata of ``path`` or an ancestor group."""
        try:
            node = self.node(path)
        except ZarrFSError:
            return []
        meta = node.metadata
        if isinstance(meta, GroupMetadata) and meta.consolidated:
            for rel, child in meta.consolidated.items():
                self._consolidated.setdefault(join(path, rel), child)
        prefix = f"{path}/" if path else ""
        names = set()
        for p in list(self._consolidated):
            if p.startswith(prefix) and p != path:
                rest = p[len(prefix) :]
                if rest:  # a deeper path implies its first folder (an implicit group)
                    names.add(rest.split("/", 1)[0])
        return sorted(names)

    # -------------------------------------------------------------- arrays

    def cached_array(self, path: str) -> ZarrArray | None:
        """The array already open at ``path``, or None; never touches the store."""
        return self._arrays.get(path)  # atomic

    def array(self, path: str) -> ZarrArray:
        """The open array at ``path`` (one ZarrArray per path while its metadata is unchanged)."""
        arr = self._arrays.get(path)  # atomic: no lock on the hit path
        if arr is not None and path not in self._recheck:
            return arr
        node = self.node(path)
        if arr is not None:  # forgotten: keep the object unless the metadata changed
            with self._lock:
                self._recheck.discard(path)
            if arr.metadata == node.metadata or _adopt(arr, node.metadata):
                return arr
            with self._lock:
                if self._arrays.get(path) is arr:
                    del self._arrays[path]
            arr.flush()  # what was written through it goes to the store first
        if not isinstance(node.metadata, ArrayMetadata):
            raise NodeNotFound(f"{path or '/'} is a group, not an array")
        fmt = node.format

        def save(own: ArrayMetadata, shape: tuple[int, ...]) -> ArrayMetadata:
            """Store ``own`` resized to ``shape`` (under the node's edit lock), on top of the
            node's current document: an edit committed since this array object opened (new
            attributes or dimension names, which need no re-encoding) is kept, not undone."""
            with self._lock:
                node = self._nodes.get(path)
            latest = node.metadata if node is not None else None
            base = latest if _stored_like(latest, own) else own
            metadata = base.with_shape(shape)
            fmt.write(self.store, path, metadata)
            with self._lock:
                self._nodes[path] = Node(path, metadata, fmt, self._token(path, fmt, metadata))
            return metadata

        arr = ZarrArray(
            self.store, path, node.metadata, self.engine, save_metadata=save,
            edit_lock=self.edit_lock(path),
        )  # fmt: skip
        with self._lock:
            return self._arrays.setdefault(path, arr)

    def edit_lock(self, path: str) -> threading.RLock:
        """The lock held across every read-modify-write of node ``path``'s metadata: an edit of
        a metadata view (read, change, ``save_metadata``) and an array's ``resize``. Taken
        before any lock of the array (docs/write-path.md); never released by another thread."""
        with self._lock:
            return self._edit_locks.setdefault(path, threading.RLock())

    def save_metadata(self, path: str, metadata: Metadata, fmt: NodeFormat | None = None) -> None:
        """Write a node's metadata (validated by the caller) and refresh the cache."""
        if fmt is None:
            try:
                fmt = self.node(path).format
            except ZarrFSError:
                fmt = FORMATS[0]
        fmt.write(self.store, path, metadata)
        with self._lock:
            self._nodes[path] = Node(path, metadata, fmt, self._token(path, fmt, metadata))
            arr = self._arrays.get(path)
        if arr is not None and isinstance(metadata, ArrayMetadata) and arr.metadata != metadata:
            if _adopt(arr, metadata):
                return
            with self._lock:
                self._arrays.pop(path, None)
            arr.flush()
            arr.invalidate()

    def flush_all(self) -> None:
        """Flush every open array; raise the first error after trying all."""
        with self._lock:
            arrays = list(self._arrays.values())
        first: BaseException | None = None
        for arr in arrays:
            try:
                arr.flush()
            except ZarrFSError as exc:
                log.error("flush of %s failed: %s", arr.path or "/", exc)
                first = first or exc
        if first is not None:
            raise first

    def open_arrays(self) -> list[ZarrArray]:
        with self._lock:
            return list(self._arrays.values())


def _stored_like(new: Metadata | None, old: ArrayMetadata) -> TypeGuard[ArrayMetadata]:
    """``new`` is array metadata whose chunks are stored, encoded and found as ``old``'s (it may
    differ in shape, attributes, dimension names)."""
    return (
        isinstance(new, ArrayMetadata)
        and new.zarr_format == old.zarr_format
        and new.chunk_prefix == old.chunk_prefix
        and reencoding_needed(old, new) is None
    )


def _adopt(arr: ZarrArray, metadata: Metadata) -> bool:
    """Give ``arr`` the new ``metadata`` in place when it changes neither the shape nor how
    chunks are stored (attributes, dimension names): the object, and the writes it holds, stay
    the array's. False when it would need a new object."""
    if not _stored_like(metadata, arr.metadata) or metadata.shape != arr.metadata.shape:
        return False
    arr.metadata = metadata
    return True


def open_array(store: Store, path: str = "", engine: Engine | None = None) -> ZarrArray:
    """Open the array at ``path`` of ``store``."""
    return Hierarchy(store, engine).array(path)


def create_array(
    store: Store, path: str, document: dict[str, Any], engine: Engine | None = None
) -> ZarrArray:
    """Create an array from a v3 ``zarr.json`` document (validated) and open it."""
    if path:
        for part in path.split("/"):
            check_node_name(part)
    metadata = array_metadata_v3(document)
    hierarchy = Hierarchy(store, engine)
    hierarchy.save_metadata(path, metadata, FORMATS[0])
    return hierarchy.array(path)
