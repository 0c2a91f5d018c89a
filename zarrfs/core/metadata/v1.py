"""Zarr v1 documents (``meta`` and ``attrs`` keys) -> the model.

Spec: v1.rst "Metadata", "Data type encoding", "Chunks", "Attributes". A v1 store holds one
array: ``meta`` (JSON: ``zarr_format`` 1, ``shape``, ``chunks``, ``dtype``, ``compression``,
``compression_opts``, ``fill_value``, ``order``), ``attrs`` (the user attributes) and chunks
under dot-separated keys (``"0.0"``). v1 has no groups.

Invariants:
- ``compression``/``compression_opts`` map onto the v2 pipeline's numcodecs compressor:
  ``blosc`` (options object ``cname``/``clevel``/``shuffle``), ``zlib`` and ``bz2`` (an integer
  level), ``lzma`` (options object), ``none``/null (no compressor). Absent options take the
  defaults of zarr 1 (blosc lz4/5/shuffle, level 1, lzma xz). Others are ``UnsupportedError``.
- ``fill_value`` null reads missing chunks as zeros; a NaN literal (zarr 1 wrote one) and the
  v2 spellings are accepted. Other members may be present and are ignored (v1 allows it).
- ``document`` is the ``meta`` object; attributes stay in ``attrs`` (``attrs_stored`` says it
  exists); new documents are written the way zarr 1 wrote them (sorted keys, indent 4).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zarrfs.core.errors import MetadataError, UnsupportedError, ZarrFSError
from zarrfs.core.metadata.model import (
    ArrayMetadata,
    DocumentFormat,
    load_json_object,
    register_document_format,
)
from zarrfs.core.metadata.v2 import VariableLengthArrayError, build_array, int_list
from zarrfs.core.metadata.v2dtypes import VariableLengthError, parse_dtype

_DEFAULT_OPTS: dict[str, Any] = {
    "blosc": {"cname": "lz4", "clevel": 5, "shuffle": 1},
    "zlib": 1,
    "bz2": 1,
    "lzma": {"format": 1, "check": -1, "preset": None, "filters": None},
}


@dataclass(frozen=True, eq=False, repr=False)
class V1ArrayMetadata(ArrayMetadata):
    #: True when the store holds the ``attrs`` object
    attrs_stored: bool = False


class V1DocumentFormat(DocumentFormat):
    """``meta`` documents: attributes live in ``attrs``; written like zarr 1 wrote them."""

    def set_attributes(self, doc: dict[str, Any], attributes: dict[str, Any]) -> None:
        pass

    def dumps(self, doc: Mapping[str, Any]) -> bytes:
        return dumps_v1(doc)


def dumps_v1(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(
        dict(doc), indent=4, sort_keys=True, ensure_ascii=True, allow_nan=True
    ).encode()


register_document_format(1, V1DocumentFormat())


def compressor_config(compression: Any, opts: Any) -> dict[str, Any] | None:
    """The numcodecs compressor configuration of v1 ``compression``/``compression_opts``."""
    if compression is None or compression == "none":
        return None
    if not isinstance(compression, str):
        raise MetadataError(f"compression must be a string, got {compression!r}")
    if compression not in _DEFAULT_OPTS:
        raise UnsupportedError(f"v1 compression {compression!r} is not supported")
    if opts is None:
        opts = _DEFAULT_OPTS[compression]
    if isinstance(_DEFAULT_OPTS[compression], dict):
        if not isinstance(opts, Mapping):
            raise MetadataError(f"compression_opts of {compression!r} must be an object")
        return {"id": compression, **dict(opts)}
    if type(opts) is not int:
        raise MetadataError(f"compression_opts of {compression!r} must be an integer level")
    return {"id": compression, "level": opts}


def parse_v1(
    raw: bytes, attributes: Mapping[str, Any] | None = None, attrs_stored: bool = False
) -> V1ArrayMetadata:
    """An array from stored ``meta`` bytes and its (already parsed) attributes."""
    data = bytes(raw)
    doc = load_json_object(data, "meta")
    try:
        return _array(doc, dict(attributes or {}), data, attrs_stored)
    except ZarrFSError:
        raise
    except (RecursionError, MemoryError):
        raise MetadataError("meta exhausted resources while parsing") from None
    except Exception as exc:  # numpy or numcodecs refusing a value in an unforeseen way
        raise MetadataError(f"meta: invalid metadata: {type(exc).__name__}: {exc}") from exc


def array_metadata_v1(
    doc: Mapping[str, Any], attributes: Mapping[str, Any] | None = None
) -> V1ArrayMetadata:
    """Validate a ``meta`` object given as a mapping (e.g. to create an array)."""
    return parse_v1(dumps_v1(doc), attributes)


def _array(
    doc: dict[str, Any], attrs: dict[str, Any], raw: bytes, attrs_stored: bool
) -> V1ArrayMetadata:
    fmt = doc.get("zarr_format")
    if type(fmt) is not int or fmt != 1:
        raise MetadataError(f"meta: zarr_format must be 1, got {fmt!r}")
    missing = [k for k in ("shape", "chunks", "dtype") if k not in doc]
    if missing:
        raise MetadataError(f"meta lacks required members {missing}")
    shape = int_list(doc["shape"], "shape", 0)
    chunks = int_list(doc["chunks"], "chunks", 1)
    if len(chunks) != len(shape):
        raise MetadataError(f"chunks {list(chunks)} and shape {list(shape)} differ in length")
    compressor = compressor_config(doc.get("compression"), doc.get("compression_opts"))
    try:
        data_type = parse_dtype(doc["dtype"])
    except VariableLengthError as exc:
        summary = {"zarr_format": 1, "shape": list(shape), "chunks": list(chunks)}
        summary.update(dtype=doc["dtype"], reason="variable-length elements")
        raise VariableLengthArrayError(str(exc), summary) from None
    return build_array(
        V1ArrayMetadata,
        {"attrs_stored": attrs_stored},
        zarr_format=1,
        shape=shape,
        data_type=data_type,
        chunks=chunks,
        order=doc.get("order", "C"),
        filters=None,
        compressor=compressor,
        fill_value=doc.get("fill_value"),
        separator=".",
        attributes=attrs,
        document=doc,
        raw=raw,
    )
