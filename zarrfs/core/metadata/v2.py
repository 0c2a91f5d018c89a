"""Zarr v2 documents (``.zarray``, ``.zgroup``, ``.zattrs``, ``.zmetadata``) -> the model.

Spec: v2.rst "Metadata", "Data type encoding", "Fill value encoding", "Chunks", "Filters",
"Hierarchies", "Attributes"; consolidated metadata as zarr-python writes it (``.zmetadata``:
``{"zarr_consolidated_format": 1, "metadata": {"<path>/.zarray": {...}, ...}}``).

Invariants:
- ``document`` is the ``.zarray``/``.zgroup`` object and ``raw`` its stored bytes; the user
  attributes live in ``attributes`` (from ``.zattrs``), so ``with_attributes`` leaves the
  document alone and the writer stores ``.zattrs``. ``zattrs_stored`` records whether a
  ``.zattrs`` object exists, so it is shown (and watched) only when it does.
- The chunk pipeline is one :class:`V2PipelineCodec` (stored type, order, filters,
  compressor); chunk keys use the ``v2`` key encoding with ``dimension_separator``.
- ``fill_value: null`` reads missing chunks as zeros (like zarr-python); the document keeps
  ``null``. The xarray convention ``_ARRAY_DIMENSIONS`` in ``.zattrs`` gives dimension names.
- Object (variable-length) types raise :class:`VariableLengthArrayError` carrying a summary, so
  callers can list such an array without data views.
- Missing optional members take zarr-python's defaults (``compressor``/``filters``/
  ``fill_value`` null, ``order`` "C", separator "."); other unknown members are ignored, as v2
  says they SHOULD be.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import prod
from typing import Any, TypeVar

from zarrfs.core.codecs.chain import CodecChain
from zarrfs.core.codecs.v2pipeline import V2PipelineCodec
from zarrfs.core.errors import MetadataError, UnsupportedError, VariableLengthElements, ZarrFSError
from zarrfs.core.keys import ChunkKeyEncoding
from zarrfs.core.metadata.model import (
    MAX_NBYTES,
    ArrayMetadata,
    DocumentFormat,
    GroupMetadata,
    check_attributes,
    check_node_name,
    int_list,
    load_json_object,
    register_document_format,
)
from zarrfs.core.metadata.v2dtypes import NumpyDataType, VariableLengthError, parse_dtype

Metadata = ArrayMetadata | GroupMetadata
A = TypeVar("A", bound=ArrayMetadata)


class VariableLengthArrayError(VariableLengthElements):
    """A valid array whose elements have variable length (numpy object type, with an object
    codec such as ``vlen-utf8``): it exists, but has no raw-file views. ``summary`` is a JSON
    object describing it (shape, chunks, dtype, filters, compressor, reason)."""

    def __init__(self, message: str, summary: dict[str, Any]) -> None:
        super().__init__(message)
        self.summary = summary


@dataclass(frozen=True, eq=False, repr=False)
class V2ArrayMetadata(ArrayMetadata):
    #: True when the node has a stored ``.zattrs`` object
    zattrs_stored: bool = False


@dataclass(frozen=True, eq=False, repr=False)
class V2GroupMetadata(GroupMetadata):
    #: True when the node has a stored ``.zattrs`` object
    zattrs_stored: bool = False


class V2DocumentFormat(DocumentFormat):
    """``.zarray``/``.zgroup`` documents: attributes are kept out of them (``.zattrs``)."""

    def set_attributes(self, doc: dict[str, Any], attributes: dict[str, Any]) -> None:
        pass

    def dumps(self, doc: Mapping[str, Any]) -> bytes:
        return json.dumps(doc, indent=2, allow_nan=True).encode()


register_document_format(2, V2DocumentFormat())


def dumps_attributes(attributes: Mapping[str, Any]) -> bytes:
    """``.zattrs`` bytes as zarr-python writes them."""
    return json.dumps(dict(attributes), indent=2, allow_nan=True).encode()


# --------------------------------------------------------------------------- parsing


def load_attributes(raw: bytes | None, what: str = ".zattrs") -> dict[str, Any]:
    if raw is None:
        return {}
    return check_attributes(load_json_object(raw, what), what)


def parse_zarray(
    raw: bytes, attributes: Mapping[str, Any] | None = None, zattrs_stored: bool = False
) -> V2ArrayMetadata:
    """An array from stored ``.zarray`` bytes and its (already parsed) attributes."""
    data = bytes(raw)
    return array_metadata_v2(load_json_object(data, ".zarray"), attributes, data, zattrs_stored)


def parse_zgroup(
    raw: bytes, attributes: Mapping[str, Any] | None = None, zattrs_stored: bool = False
) -> V2GroupMetadata:
    data = bytes(raw)
    doc = load_json_object(data, ".zgroup")
    _check_format(doc, ".zgroup")
    return V2GroupMetadata(2, dict(attributes or {}), doc, data, zattrs_stored=zattrs_stored)


def _check_format(doc: Mapping[str, Any], what: str) -> None:
    fmt = doc.get("zarr_format")
    if type(fmt) is not int or fmt != 2:
        raise MetadataError(f"{what}: zarr_format must be 2, got {fmt!r}")


def array_metadata_v2(
    doc: Mapping[str, Any],
    attributes: Mapping[str, Any] | None = None,
    raw: bytes | None = None,
    zattrs_stored: bool = False,
) -> V2ArrayMetadata:
    """Validate a ``.zarray`` object; every problem is a ``MetadataError`` naming the member."""
    try:
        return _array(dict(doc), dict(attributes or {}), raw, zattrs_stored)
    except ZarrFSError:
        raise
    except (RecursionError, MemoryError):
        raise MetadataError(".zarray exhausted resources while parsing") from None
    except Exception as exc:  # numpy or numcodecs refusing a value in an unforeseen way
        raise MetadataError(f".zarray: invalid metadata: {type(exc).__name__}: {exc}") from exc


def _array(
    doc: dict[str, Any], attrs: dict[str, Any], raw: bytes | None, zattrs_stored: bool
) -> V2ArrayMetadata:
    _check_format(doc, ".zarray")
    missing = [k for k in ("shape", "chunks", "dtype") if k not in doc]
    if missing:
        raise MetadataError(f".zarray lacks required members {missing}")
    shape = int_list(doc["shape"], "shape", 0)
    chunks = int_list(doc["chunks"], "chunks", 1)
    if len(chunks) != len(shape):
        raise MetadataError(f"chunks {list(chunks)} and shape {list(shape)} differ in length")
    filters = doc.get("filters")
    if filters is not None and not isinstance(filters, list):
        raise MetadataError(f"filters must be a list or null, got {filters!r}")
    compressor = doc.get("compressor")
    try:
        data_type = parse_dtype(doc["dtype"])
    except VariableLengthError as exc:
        raise VariableLengthArrayError(
            f"{exc}: such arrays have no raw-file views",
            {
                "zarr_format": 2,
                "shape": list(shape),
                "chunks": list(chunks),
                "dtype": doc["dtype"],
                "filters": filters,
                "compressor": compressor,
                "reason": "variable-length elements (numpy object type) have no raw bytes",
            },
        ) from None
    separator = doc.get("dimension_separator") or "."
    if separator not in (".", "/"):
        raise MetadataError(f"dimension_separator must be '.' or '/', got {separator!r}")
    return build_array(
        V2ArrayMetadata,
        {"zattrs_stored": zattrs_stored},
        zarr_format=2,
        shape=shape,
        data_type=data_type,
        chunks=chunks,
        order=doc.get("order", "C"),
        filters=filters or None,
        compressor=compressor,
        fill_value=doc.get("fill_value"),
        separator=separator,
        attributes=attrs,
        document=doc,
        raw=raw,
    )


def build_array(
    cls: type[A],
    extra: Mapping[str, Any] | None = None,
    *,
    zarr_format: int | str,
    shape: tuple[int, ...],
    data_type: NumpyDataType,
    chunks: tuple[int, ...],
    order: Any,
    filters: Sequence[Mapping[str, Any]] | None,
    compressor: Mapping[str, Any] | None,
    fill_value: Any,
    separator: str,
    attributes: dict[str, Any],
    document: dict[str, Any],
    raw: bytes | None,
    key_encoding: ChunkKeyEncoding | None = None,
    chunk_prefix: str | None = None,
) -> A:
    """The model (of class ``cls``, with the ``extra`` fields) of a numpy-style array: v2, v1
    and the v3 drafts share it."""
    for what, dims in (("array", shape), ("chunk", chunks)):
        if prod(dims) * data_type.itemsize > MAX_NBYTES:
            raise MetadataError(f"{what} shape {list(dims)} of {data_type.name} is too large")
    if order not in ("C", "F"):
        raise MetadataError(f"order must be 'C' or 'F', got {order!r}")
    if compressor is not None and not isinstance(compressor, Mapping):
        raise MetadataError(f"compressor must be an object or null, got {compressor!r}")
    codecs = CodecChain([V2PipelineCodec(data_type.stored, order, filters, compressor)])
    meta = cls(
        zarr_format=zarr_format,
        shape=shape,
        data_type=data_type,
        chunk_shape=chunks,
        chunk_key_encoding=key_encoding or ChunkKeyEncoding("v2", separator),
        fill_value=data_type.parse_fill_value(fill_value),
        codecs=codecs,
        dimension_names=_dimension_names(attributes, len(shape)),
        attributes=attributes,
        document=document,
        raw=raw,
        chunk_prefix=chunk_prefix,
        **dict(extra or {}),
    )
    codecs.prepare(meta.chunk_spec())  # validates the filters against the chunk size
    return meta


def _dimension_names(attrs: Mapping[str, Any], ndim: int) -> tuple[str | None, ...] | None:
    names = attrs.get("_ARRAY_DIMENSIONS")
    if isinstance(names, list) and len(names) == ndim and all(isinstance(n, str) for n in names):
        return tuple(names)
    return None


# --------------------------------------------------------------------------- new documents


def new_array_v2(
    shape: Sequence[int],
    dtype: Any,
    chunks: Sequence[int],
    *,
    fill_value: Any = None,
    order: str = "C",
    filters: Sequence[Mapping[str, Any]] | None = None,
    compressor: Mapping[str, Any] | None = None,
    dimension_separator: str = ".",
    attributes: Mapping[str, Any] | None = None,
) -> V2ArrayMetadata:
    """Metadata of a new array, laid out as zarr-python 3 writes ``.zarray``.

    ``dtype`` is the v2 ``dtype`` member (``"<f8"`` or a structured list); ``fill_value`` its
    JSON encoding.
    """
    doc: dict[str, Any] = {
        "shape": list(shape),
        "chunks": list(chunks),
        "dtype": dtype,
        "fill_value": fill_value,
        "order": order,
        "filters": [dict(f) for f in filters] if filters else None,
        "dimension_separator": dimension_separator,
        "compressor": None if compressor is None else dict(compressor),
        "zarr_format": 2,
    }
    return array_metadata_v2(doc, attributes)


def new_group_v2(attributes: Mapping[str, Any] | None = None) -> V2GroupMetadata:
    return V2GroupMetadata(2, check_attributes(dict(attributes or {})), {"zarr_format": 2})


# --------------------------------------------------------------------------- consolidated


def parse_zmetadata(
    raw: bytes,
) -> tuple[dict[str, Metadata] | None, str | None, dict[str, str]]:
    """(entries, error, skipped) of a ``.zmetadata`` document: entries map paths relative to
    its group (never ``""``) to metadata; ``error`` says why an unusable document was ignored;
    ``skipped`` maps invalid entries to the reason."""
    try:
        doc = load_json_object(raw, ".zmetadata")
        if doc.get("zarr_consolidated_format") != 1:
            raise UnsupportedError(
                f"zarr_consolidated_format {doc.get('zarr_consolidated_format')!r} is not 1"
            )
        metadata = doc.get("metadata")
        if not isinstance(metadata, Mapping):
            raise MetadataError("'metadata' must be an object")
    except MetadataError as exc:
        return None, f".zmetadata ignored: {exc}", {}
    by_path: dict[str, dict[str, Any]] = {}
    for key, value in metadata.items():
        path, _, name = key.rpartition("/")
        by_path.setdefault(path, {})[name] = value
    entries: dict[str, Metadata] = {}
    skipped: dict[str, str] = {}
    for path, docs in by_path.items():
        if not path or not ({".zarray", ".zgroup"} & set(docs)):
            continue
        try:
            for segment in path.split("/"):
                check_node_name(segment)
            entries[path] = _consolidated_node(docs)
        except MetadataError as exc:
            skipped[path] = str(exc)
    return entries, None, skipped


def _consolidated_node(docs: Mapping[str, Any]) -> Metadata:
    attrs = docs.get(".zattrs")
    stored = attrs is not None
    attrs = check_attributes(attrs if stored else {}, ".zattrs")
    if ".zarray" in docs:
        doc = docs[".zarray"]
        if not isinstance(doc, dict):
            raise MetadataError(".zarray entry is not an object")
        return array_metadata_v2(doc, attrs, None, stored)
    doc = docs[".zgroup"]
    if not isinstance(doc, dict):
        raise MetadataError(".zgroup entry is not an object")
    _check_format(doc, ".zgroup")
    return V2GroupMetadata(2, attrs, doc, None, zattrs_stored=stored)
