"""How each Zarr format stores node metadata: v3, v2, v1 and the 2019-2020 v3 drafts.

Spec: v2.rst "Hierarchies" and "Attributes" (``.zarray``/``.zgroup``/``.zattrs`` under the node
path), v1.rst (``meta``/``attrs``), drafts/core-protocol-v3.0-2020.rst "Storage keys" and
"Protocol operations" (``zarr.json`` entry point, ``meta/root/<path>.array.json``, implicit
groups); v3 core "Metadata" (``zarr.json``). ``hierarchy`` tries the formats of ``FORMATS`` in
order; ``register_format`` adds one after them.

Invariants:
- Each format's ``read`` returns None when no node of that format is at the path, so formats
  are tried in turn; it raises ``MetadataError`` when one is there but invalid.
- The metadata files a node shows (``metadata_keys``) are its native documents: ``.zarray``
  or ``.zgroup``, plus ``.zattrs`` when stored or non-empty; ``meta`` plus ``attrs``; for the
  drafts the document's own file name (``b.array.json``) and, at the root, ``zarr.json``.
- ``write`` stores only the documents whose content changed, keeps a node one kind (writing an
  array removes a ``.zgroup`` there and vice versa), and keeps v2 consolidated metadata
  (``.zmetadata`` of the node's ancestors) in step, so zarr-python opening the store
  consolidated sees the same shapes and attributes.
- The draft entry point is cached per store (it describes the whole hierarchy); reading the
  root node always re-reads it. The v3 reader yields a draft ``zarr.json`` to the draft format.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from zarrfs.core.errors import MetadataError, ZarrFSError
from zarrfs.core.metadata import draft, v1, v2
from zarrfs.core.metadata.model import ArrayMetadata, GroupMetadata, load_json_object
from zarrfs.core.metadata.v3 import parse_v3
from zarrfs.core.stores.base import Store

Metadata = ArrayMetadata | GroupMetadata


@dataclass(frozen=True)
class NodeFormat:
    """How one Zarr format stores a node's metadata."""

    name: str
    #: key (relative to the node path) whose presence marks a node of this format
    marker_keys: tuple[str, ...]
    #: read and parse a node's metadata at ``path``; None if no node of this format is there
    read: Callable[[Store, str], Metadata | None]
    #: write ``metadata`` of the node at ``path``
    write: Callable[[Store, str, Metadata], None]
    #: keys (relative to the node path) holding this node's metadata documents
    metadata_keys: Callable[[Metadata], tuple[str, ...]]
    #: parse new content written to metadata document ``name`` of a node whose metadata is
    #: ``old``; returns the complete new metadata (None: editing not supported)
    parse_document: Callable[[str, bytes, Metadata], Metadata] | None = None
    #: names of the children of the group at ``path`` on a listable store, for layouts whose
    #: child nodes are not sub-prefixes of the node path (None: list the path's sub-prefixes)
    list_children: Callable[[Store, str], list[str]] | None = None


def join(path: str, name: str) -> str:
    return f"{path}/{name}" if path else name


def _v3_read(store: Store, path: str) -> Metadata | None:
    raw = store.get(join(path, "zarr.json"))
    if raw is None:
        return None
    return parse_v3(raw)


def _v3_write(store: Store, path: str, metadata: Metadata) -> None:
    store.set(join(path, "zarr.json"), metadata.to_bytes())


def _v3_parse(name: str, content: bytes, old: Metadata) -> Metadata:
    return parse_v3(content)


V3_FORMAT = NodeFormat(
    "v3", ("zarr.json",), _v3_read, _v3_write, lambda m: ("zarr.json",), _v3_parse
)


def register_format(fmt: NodeFormat) -> None:
    """Add a node format (tried after those already registered)."""
    FORMATS.append(fmt)


def _json_equal(raw: bytes | None, doc: Any) -> bool:
    if raw is None:
        return False
    try:
        return load_json_object(raw) == doc
    except MetadataError:
        return False


def _store_document(store: Store, key: str, meta: Metadata) -> None:
    """Write ``meta``'s document at ``key`` unless the stored one already says the same."""
    current = store.get(key)
    if current is not None and (current == meta.raw or _json_equal(current, meta.document)):
        return
    store.set(key, meta.to_bytes())


def _store_attributes(store: Store, key: str, attributes: Any, always: bool) -> None:
    current = store.get(key)
    if current is None and not attributes and not always:
        return
    if not _json_equal(current, dict(attributes)):
        store.set(key, v2.dumps_attributes(attributes))


# --------------------------------------------------------------------------- v2


def _v2_read(store: Store, path: str) -> Metadata | None:
    raw = store.get(join(path, ".zarray"))
    kind = ".zarray"
    if raw is None:
        raw, kind = store.get(join(path, ".zgroup")), ".zgroup"
        if raw is None:
            return None
    zattrs = store.get(join(path, ".zattrs"))
    attrs = v2.load_attributes(zattrs, join(path, ".zattrs"))
    if kind == ".zarray":
        return v2.parse_zarray(raw, attrs, zattrs is not None)
    group = v2.parse_zgroup(raw, attrs, zattrs is not None)
    if not store.listable:  # children can only be found through consolidated metadata
        zmeta = store.get(join(path, ".zmetadata"))
        if zmeta is not None:
            entries, error, skipped = v2.parse_zmetadata(zmeta)
            group = replace(
                group, consolidated=entries, consolidated_error=error, consolidated_skipped=skipped
            )
    return group


def _v2_kind(meta: Metadata) -> tuple[str, str]:
    """(this node's document name, the other kind's)."""
    return (".zarray", ".zgroup") if isinstance(meta, ArrayMetadata) else (".zgroup", ".zarray")


def _v2_write(store: Store, path: str, meta: Metadata) -> None:
    name, other = _v2_kind(meta)
    _store_document(store, join(path, name), meta)
    if store.get(join(path, other)) is not None:
        store.delete(join(path, other))
    _store_attributes(store, join(path, ".zattrs"), meta.attributes, always=False)
    _update_consolidated(store, path, meta)


def _update_consolidated(store: Store, path: str, meta: Metadata) -> None:
    """Refresh the node's entries in every ``.zmetadata`` of it and its ancestors."""
    name, other = _v2_kind(meta)
    parts = path.split("/") if path else []
    for depth in range(len(parts) + 1):
        key = join("/".join(parts[:depth]), ".zmetadata")
        raw = store.get(key)
        if raw is None:
            continue
        try:
            doc = load_json_object(raw, key)
        except MetadataError:
            continue
        entries = doc.get("metadata")
        if not isinstance(entries, dict):
            continue
        rel = "/".join(parts[depth:])
        prefix = f"{rel}/" if rel else ""
        new = dict(entries)
        new.pop(prefix + other, None)
        new[prefix + name] = dict(meta.document)
        new[prefix + ".zattrs"] = dict(meta.attributes)
        if new != entries:
            store.set(key, json.dumps({**doc, "metadata": new}, allow_nan=True).encode())


def _v2_keys(meta: Metadata) -> tuple[str, ...]:
    name, _ = _v2_kind(meta)
    if getattr(meta, "zattrs_stored", False) or meta.attributes:
        return (name, ".zattrs")
    return (name,)


def _v2_parse(name: str, content: bytes, old: Metadata) -> Metadata:
    stored = getattr(old, "zattrs_stored", False)
    if name == ".zattrs":
        return old.with_attributes(load_json_object(content, ".zattrs"))
    if name == ".zarray" and isinstance(old, ArrayMetadata):
        return v2.parse_zarray(content, old.attributes, stored)
    if name == ".zgroup" and isinstance(old, GroupMetadata):
        return v2.parse_zgroup(content, old.attributes, stored)
    raise MetadataError(f"{name} is not a metadata document of this v2 {old.node_type}")


V2_FORMAT = NodeFormat("v2", (".zarray", ".zgroup"), _v2_read, _v2_write, _v2_keys, _v2_parse)


# --------------------------------------------------------------------------- v1


def _v1_read(store: Store, path: str) -> Metadata | None:
    raw = store.get(join(path, "meta"))
    if raw is None:
        return None
    attrs_raw = store.get(join(path, "attrs"))
    attrs = v2.load_attributes(attrs_raw, join(path, "attrs"))
    return v1.parse_v1(raw, attrs, attrs_raw is not None)


def _v1_write(store: Store, path: str, meta: Metadata) -> None:
    if not isinstance(meta, ArrayMetadata):
        raise MetadataError("Zarr v1 stores hold arrays only")
    _store_document(store, join(path, "meta"), meta)
    _store_attributes(store, join(path, "attrs"), meta.attributes, always=True)


def _v1_keys(meta: Metadata) -> tuple[str, ...]:
    return (
        ("meta", "attrs") if getattr(meta, "attrs_stored", False) or meta.attributes else ("meta",)
    )


def _v1_parse(name: str, content: bytes, old: Metadata) -> Metadata:
    if name == "attrs":
        return old.with_attributes(load_json_object(content, "attrs"))
    if name == "meta":
        return v1.parse_v1(content, old.attributes, getattr(old, "attrs_stored", False))
    raise MetadataError(f"{name} is not a v1 metadata document")


V1_FORMAT = NodeFormat("v1", ("meta",), _v1_read, _v1_write, _v1_keys, _v1_parse)


# --------------------------------------------------------------------------- v3 drafts

_entry_points: weakref.WeakKeyDictionary[Store, draft.EntryPoint | None] = (
    weakref.WeakKeyDictionary()
)
_entry_lock = threading.Lock()


def draft_entry_point(store: Store, refresh: bool = False) -> draft.EntryPoint | None:
    """The store's draft entry point (None: not a draft hierarchy), cached per store."""
    with _entry_lock:
        if not refresh and store in _entry_points:
            return _entry_points[store]
    raw = store.get("zarr.json")
    entry = None if raw is None else draft.parse_entry_point(raw)
    with _entry_lock:
        _entry_points[store] = entry
    return entry


def _draft_read(store: Store, path: str) -> Metadata | None:
    entry = draft_entry_point(store, refresh=not path)
    if entry is None:
        return None
    suffix = entry.suffix
    raw = store.get(draft.meta_key(path, "array", suffix))
    if raw is not None:
        return draft.parse_array(raw, path, suffix)
    raw = store.get(draft.meta_key(path, "group", suffix))
    if raw is not None or not path:
        return draft.parse_group(raw, path, suffix)  # the root group may be implicit
    if store.listable:
        keys, prefixes = store.list_dir(draft.meta_prefix(path))
        if keys or prefixes:
            return draft.parse_group(None, path, suffix)  # implicit: implied by descendants
    return None


def _draft_children(store: Store, path: str) -> list[str]:
    entry = draft_entry_point(store)
    if entry is None:
        return []
    keys, prefixes = store.list_dir(draft.meta_prefix(path))
    names = set(prefixes)
    for key in keys:
        for kind in ("array", "group"):
            end = f".{kind}{entry.suffix}"
            if key.endswith(end) and len(key) > len(end):
                names.add(key[: -len(end)])
    return sorted(names)


def _draft_kind(meta: Metadata) -> tuple[str, str]:
    return ("array", "group") if isinstance(meta, ArrayMetadata) else ("group", "array")


def _draft_location(meta: Metadata) -> tuple[str, str]:
    path, suffix = getattr(meta, "node_path", None), getattr(meta, "suffix", None)
    if path is None or suffix is None:
        raise MetadataError("metadata of another format cannot be written in the v3 draft layout")
    return path, suffix


def _draft_write(store: Store, path: str, meta: Metadata) -> None:
    node_path, suffix = _draft_location(meta)
    if node_path != path:
        raise MetadataError(f"metadata of node {node_path!r} written at {path!r}")
    kind, other = _draft_kind(meta)
    _store_document(store, draft.meta_key(path, kind, suffix), meta)
    if store.get(draft.meta_key(path, other, suffix)) is not None:
        store.delete(draft.meta_key(path, other, suffix))


def _draft_keys(meta: Metadata) -> tuple[str, ...]:
    path, suffix = _draft_location(meta)
    name = draft.document_name(path, _draft_kind(meta)[0], suffix)
    return (name,) if path else ("zarr.json", name)


def _draft_parse(name: str, content: bytes, old: Metadata) -> Metadata:
    path, suffix = _draft_location(old)
    if name == "zarr.json":
        raise MetadataError("the entry point zarr.json cannot be edited through the mount")
    kind = _draft_kind(old)[0]
    if name != draft.document_name(path, kind, suffix):
        raise MetadataError(f"{name} is not the metadata document of this {old.node_type}")
    if kind == "array":
        return draft.parse_array(content, path, suffix)
    return draft.parse_group(content, path, suffix)


DRAFT_FORMAT = NodeFormat(
    draft.DRAFT_FORMAT,
    ("zarr.json",),
    _draft_read,
    _draft_write,
    _draft_keys,
    _draft_parse,
    list_children=_draft_children,
)


def _yield_draft_entry_point(fmt: NodeFormat) -> NodeFormat:
    """The v3 format, made to leave a root ``zarr.json`` that is a draft entry point alone."""
    read = fmt.read

    def v3_read(store: Store, path: str) -> Metadata | None:
        if not path:
            raw = store.get("zarr.json")
            if raw is None:
                return None
            try:
                if draft.parse_entry_point(raw) is not None:
                    return None
            except ZarrFSError:
                return None  # a draft entry point the draft format will report on
            return parse_v3(raw)
        return read(store, path)

    return replace(fmt, read=v3_read)


#: the node formats, tried in this order (the v3 reader leaves a draft entry point to the
#: draft format, which comes last)
FORMATS: list[NodeFormat] = [
    _yield_draft_entry_point(V3_FORMAT),
    V2_FORMAT,
    V1_FORMAT,
    DRAFT_FORMAT,
]
