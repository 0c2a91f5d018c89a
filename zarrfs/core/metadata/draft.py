"""The 2019-2020 Zarr v3 drafts ("core protocol v3.0") -> the model.

Spec: drafts/core-protocol-v3.0-2020.rst ("Entry point metadata", "Array metadata", "Group
metadata", "Storage keys", "Chunk grids", "Chunk memory layouts") and
drafts/core-protocol-v3.0-2019.rst (documents carrying ``zarr_format`` and ``chunk_codecs``);
zarr-python 2.x wrote this layout (its experimental ``zarr_version=3``).

Layout: the entry point ``zarr.json`` names the metadata encoding and the metadata key suffix
(default ``.json``); the node at path ``P`` has its document at ``meta/root/P.array.json`` or
``meta/root/P.group.json`` (the root: ``meta/root.array.json``/``meta/root.group.json``), its
chunks at ``data/root/P/c<i><sep><j>...`` (the 0-d chunk is ``c``); a group without a document
is implicit, implied by nodes below it.

Invariants:
- Only draft entry points are recognised (``zarr_format`` a string naming core protocol 3.x);
  a JSON metadata encoding is required; an extension with ``must_understand`` other than
  ``false`` is ``UnsupportedError``.
- Data types: the draft core names (``bool``, ``i1``, ``u1``, ``<i2`` .. ``>f8``, ``<c8``,
  ``r<bits>``) and, for extension objects, their numpy ``type`` (as zarr-python 2 wrote them)
  or else their ``fallback``. Fill values: null (zeros), numbers, ``"NaN"``,
  ``"+Infinity"``/``"Infinity"``/``"-Infinity"``, and ``"0x..."``/``"0b..."`` bit patterns
  (most significant byte first) of exactly the type's size.
- ``compressor`` (2020: ``{"codec": URI, "configuration": {...}}``) or ``chunk_codecs`` (2019:
  at most one codec, configured inline) maps onto the numcodecs compressor of the v2 pipeline;
  the codec URI's path segment after ``/codec/`` names it. ``chunk_memory_layout`` "C"/"F" is
  the pipeline's order.
- The chunk key separator defaults to ``"/"`` (2020 draft); the ``c`` prefix is always used.
- ``chunk_prefix`` of an array is ``data/root/P/``, so chunk keys are not under the node path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from zarrfs.core.errors import MetadataError, UnsupportedError, ZarrFSError
from zarrfs.core.keys import ChunkKeyEncoding
from zarrfs.core.metadata.model import (
    ArrayMetadata,
    DocumentFormat,
    GroupMetadata,
    check_attributes,
    load_json_object,
    register_document_format,
)
from zarrfs.core.metadata.v2 import VariableLengthArrayError, build_array, int_list
from zarrfs.core.metadata.v2dtypes import NumpyDataType, VariableLengthError, parse_dtype

#: ``zarr_format`` of nodes in the model, and the name of the layout
DRAFT_FORMAT = "v3-draft"
_PROTOCOL = re.compile(r"https?://purl\.org/zarr/spec/protocol/core/3\.[0-9]+(/.*)?")
_CODEC = re.compile(r"https?://purl\.org/zarr/spec/codec/([a-z0-9_-]+)(/.*)?")
_SUFFIX = re.compile(r"[A-Za-z0-9._-]*")
_CORE_TYPES = {"bool": "|b1", "i1": "|i1", "u1": "|u1"}


@dataclass(frozen=True)
class EntryPoint:
    """The parsed ``zarr.json`` of a draft hierarchy."""

    suffix: str
    document: Mapping[str, Any]


@dataclass(frozen=True, eq=False, repr=False)
class DraftArrayMetadata(ArrayMetadata):
    #: the node path and the hierarchy's metadata key suffix (they give the document's key)
    node_path: str = ""
    suffix: str = ".json"


@dataclass(frozen=True, eq=False, repr=False)
class DraftGroupMetadata(GroupMetadata):
    #: the node path and the hierarchy's metadata key suffix (they give the document's key)
    node_path: str = ""
    suffix: str = ".json"


class DraftChunkKeyEncoding(ChunkKeyEncoding):
    """Draft chunk identifiers: ``"c"`` followed by the indices joined by the separator."""

    def __post_init__(self) -> None:
        if self.separator not in ("/", "."):
            raise MetadataError(f"chunk_grid separator must be '/' or '.', got {self.separator!r}")

    def encode(self, coords: tuple[int, ...]) -> str:
        return "c" + self.separator.join(str(int(i)) for i in coords)

    def directory(self, ndim: int) -> str:
        return ""  # the first index is part of the first component ("c0/1")

    def decode(self, key: str, ndim: int | None = None) -> tuple[int, ...] | None:
        if not key.startswith("c"):
            return None
        parts = key[1:].split(self.separator) if len(key) > 1 else []
        if ndim is not None and len(parts) != ndim:
            return None
        for part in parts:
            if not (part.isascii() and part.isdigit()) or (len(part) > 1 and part[0] == "0"):
                return None
        return tuple(int(p) for p in parts)

    def to_json(self) -> dict[str, Any]:
        return {"name": DRAFT_FORMAT, "configuration": {"separator": self.separator}}


class DraftDocumentFormat(DocumentFormat):
    """Draft documents keep attributes inside; written the way zarr-python 2 wrote them."""

    def dumps(self, doc: Mapping[str, Any]) -> bytes:
        text = json.dumps(dict(doc), indent=4, sort_keys=True, ensure_ascii=True, allow_nan=True)
        return text.encode()


register_document_format(DRAFT_FORMAT, DraftDocumentFormat())


# --------------------------------------------------------------------------- keys


def meta_key(path: str, kind: str, suffix: str) -> str:
    """Key of the ``kind`` ("array"/"group") document of the node at ``path``."""
    return f"meta/root{'/' + path if path else ''}.{kind}{suffix}"


def meta_prefix(path: str) -> str:
    """Listing prefix of the documents below the node at ``path``."""
    return f"meta/root/{path}/" if path else "meta/root/"


def data_prefix(path: str) -> str:
    return f"data/root/{path}/" if path else "data/root/"


def document_name(path: str, kind: str, suffix: str) -> str:
    """The document's own file name (``b.array.json`` for ``a/b``, ``root.group.json``)."""
    return f"{path.rsplit('/', 1)[-1] if path else 'root'}.{kind}{suffix}"


# --------------------------------------------------------------------------- entry point


def _extensions(doc: Mapping[str, Any], what: str) -> None:
    exts = doc.get("extensions", [])
    if not isinstance(exts, list):
        raise MetadataError(f"{what}: extensions must be a list")
    for ext in exts:
        if not isinstance(ext, Mapping):
            raise MetadataError(f"{what}: extension entries must be objects, got {ext!r}")
        if ext.get("must_understand", True) is not False:
            raise UnsupportedError(f"{what}: extension {ext.get('extension')!r} is not supported")


def parse_entry_point(raw: bytes) -> EntryPoint | None:
    """The draft entry point in ``zarr.json`` bytes; None if the document is not one."""
    try:
        doc = load_json_object(raw, "zarr.json")
    except MetadataError:
        return None
    fmt = doc.get("zarr_format")
    if not isinstance(fmt, str) or not _PROTOCOL.fullmatch(fmt):
        return None
    encoding = doc.get("metadata_encoding", fmt)
    if not isinstance(encoding, str) or not _PROTOCOL.fullmatch(encoding):
        raise UnsupportedError(f"zarr.json: metadata_encoding {encoding!r} is not JSON")
    suffix = doc.get("metadata_key_suffix", ".json")
    if not isinstance(suffix, str) or not _SUFFIX.fullmatch(suffix):
        raise MetadataError(f"zarr.json: invalid metadata_key_suffix {suffix!r}")
    _extensions(doc, "zarr.json")
    return EntryPoint(suffix, doc)


# --------------------------------------------------------------------------- documents


def _check_document(doc: Mapping[str, Any], what: str) -> None:
    fmt = doc.get("zarr_format")  # present in 2019-style documents
    if fmt is not None and not (isinstance(fmt, str) and _PROTOCOL.fullmatch(fmt)):
        raise MetadataError(f"{what}: zarr_format {fmt!r} is not a v3 draft protocol URI")
    _extensions(doc, what)
    transformers = doc.get("storage_transformers")
    if transformers:
        raise UnsupportedError(f"{what}: storage transformers are not supported")


def parse_group(
    raw: bytes | None, path: str, suffix: str = ".json", doc: dict[str, Any] | None = None
) -> DraftGroupMetadata:
    """A group from its stored document (``raw``) or from ``doc``; ``raw`` and ``doc`` both
    None make an implicit group."""
    what = meta_key(path, "group", suffix)
    if doc is None:
        doc = {"attributes": {}} if raw is None else load_json_object(raw, what)
    _check_document(doc, what)
    attrs = check_attributes(doc.get("attributes", {}), f"{what}: attributes")
    return DraftGroupMetadata(DRAFT_FORMAT, attrs, doc, raw, node_path=path, suffix=suffix)


def parse_array(
    raw: bytes | None, path: str, suffix: str = ".json", doc: dict[str, Any] | None = None
) -> DraftArrayMetadata:
    """An array from its stored document (``raw``) or from ``doc``."""
    what = meta_key(path, "array", suffix)
    if doc is None:
        if raw is None:
            raise MetadataError(f"{what}: no document")
        doc = load_json_object(raw, what)
    try:
        return _array(doc, raw, path, suffix, what)
    except ZarrFSError:
        raise
    except (RecursionError, MemoryError):
        raise MetadataError(f"{what} exhausted resources while parsing") from None
    except Exception as exc:  # numpy or numcodecs refusing a value in an unforeseen way
        raise MetadataError(f"{what}: invalid metadata: {type(exc).__name__}: {exc}") from exc


def _array(
    doc: dict[str, Any], raw: bytes | None, path: str, suffix: str, what: str
) -> DraftArrayMetadata:
    _check_document(doc, what)
    missing = [k for k in ("shape", "data_type", "chunk_grid") if k not in doc]
    if missing:
        raise MetadataError(f"{what} lacks required members {missing}")
    shape = int_list(doc["shape"], "shape", 0)
    grid = doc["chunk_grid"]
    if not isinstance(grid, Mapping) or grid.get("type") != "regular":
        raise UnsupportedError(f"{what}: only the regular chunk grid is supported, got {grid!r}")
    chunks = int_list(grid.get("chunk_shape"), "chunk_grid.chunk_shape", 1)
    if len(chunks) != len(shape):
        raise MetadataError(f"chunk_shape {list(chunks)} and shape {list(shape)} differ in length")
    layout = doc.get("chunk_memory_layout", "C")
    if layout not in ("C", "F"):
        raise UnsupportedError(f"{what}: chunk_memory_layout {layout!r} is not supported")
    try:
        data_type = _data_type(doc["data_type"])
    except VariableLengthError as exc:
        summary = {"zarr_format": DRAFT_FORMAT, "shape": list(shape), "chunks": list(chunks)}
        summary.update(dtype=doc["data_type"], reason="variable-length elements")
        raise VariableLengthArrayError(str(exc), summary) from None
    attrs = check_attributes(doc.get("attributes", {}), f"{what}: attributes")
    separator = grid.get("separator", "/")
    return build_array(
        DraftArrayMetadata,
        {"node_path": path, "suffix": suffix},
        zarr_format=DRAFT_FORMAT,
        shape=shape,
        data_type=data_type,
        chunks=chunks,
        order=layout,
        filters=None,
        compressor=_compressor(doc, what),
        fill_value=_fill_value(data_type, doc.get("fill_value")),
        separator=separator,
        attributes=attrs,
        document=doc,
        raw=raw,
        key_encoding=DraftChunkKeyEncoding(DRAFT_FORMAT, separator),
        chunk_prefix=data_prefix(path),
    )


def _data_type(value: Any) -> NumpyDataType:
    if isinstance(value, Mapping):  # an extension type: its numpy type, else its fallback
        try:
            return parse_dtype(value.get("type"))
        except VariableLengthError:
            raise
        except MetadataError:
            if "fallback" not in value or value["fallback"] is None:
                raise UnsupportedError(f"data_type extension {value!r} is not supported") from None
            return _data_type(value["fallback"])
    if isinstance(value, str):
        raw = re.fullmatch(r"r([1-9][0-9]*)", value)
        if raw:
            bits = int(raw.group(1))
            if bits % 8:
                raise MetadataError(f"data_type {value!r}: raw types need a multiple of 8 bits")
            return replace(parse_dtype(f"|V{bits // 8}"), name=value)
        return replace(parse_dtype(_CORE_TYPES.get(value, value)), name=value)
    raise MetadataError(f"data_type must be a string or an extension object, got {value!r}")


def _fill_value(dt: NumpyDataType, value: Any) -> Any:
    """The fill value in the v2 spelling the shared parser reads (bit patterns decoded)."""
    if not isinstance(value, str) or not value.startswith(("0x", "0b")):
        return value
    digits, base = value[2:], 16 if value[1] == "x" else 2
    width = dt.itemsize * (2 if base == 16 else 8)
    if len(digits) != width or not re.fullmatch("[0-9a-fA-F]+" if base == 16 else "[01]+", digits):
        raise MetadataError(f"fill_value {value!r} must have exactly {width} digits")
    data = int(digits, base).to_bytes(dt.itemsize, "big")
    arr = np.frombuffer(data, dtype=dt.stored.newbyteorder(">")).astype(dt.stored)
    return dt.fill_value_to_json(arr.reshape(()).astype(dt.dtype))


def _compressor(doc: Mapping[str, Any], what: str) -> dict[str, Any] | None:
    entry = doc.get("compressor")
    inline = False
    if "chunk_codecs" in doc:
        codecs = doc["chunk_codecs"]
        if not isinstance(codecs, list) or len(codecs) > 1:
            raise UnsupportedError(f"{what}: chunk_codecs must list at most one codec")
        entry, inline = (codecs[0] if codecs else None), True
    if entry is None:
        return None
    if not isinstance(entry, Mapping) or not isinstance(entry.get("codec"), str):
        raise MetadataError(f"{what}: codec entries need a 'codec' URI, got {entry!r}")
    match = _CODEC.fullmatch(entry["codec"])
    if match is None:
        raise UnsupportedError(f"{what}: unknown codec {entry['codec']!r}")
    if inline:
        conf = {k: v for k, v in entry.items() if k != "codec"}
    else:
        conf = entry.get("configuration", {})
        if not isinstance(conf, Mapping):
            raise MetadataError(f"{what}: codec configuration must be an object")
    return {**dict(conf), "id": match.group(1)}
