"""Zarr v3 ``zarr.json`` documents -> :mod:`zarrfs.core.metadata.model`.

Spec: v3 core "Metadata" (array and group metadata), "Extensions" (objects, short-hand names,
``must_understand``), ``chunk-grid-regular.rst``; zarr-python's inline
``consolidated_metadata`` group member.

Invariants:
- Every problem with a document is a ``MetadataError`` (``UnsupportedError`` for valid
  metadata this engine does not implement) naming the field; nothing else escapes.
- Accepted arrays are bounded: at most ``MAX_NDIM`` dimensions, and the array and one chunk each
  fit ``MAX_NBYTES`` bytes; chunk shapes are positive ints (booleans are not ints).
- The codec chain is validated against the regular chunk spec (``CodecChain.prepare``).
- NaN/Infinity JSON literals are refused everywhere but inside ``attributes`` (zarr-python
  writes them there).
- Unknown top-level keys are refused unless their value is an object with
  ``"must_understand": false``; ``storage_transformers`` must be absent or contain only such
  ignorable entries.
- Consolidated metadata is an optional accelerator: if it is present but unusable, the group is
  still returned, with ``consolidated=None`` and ``consolidated_error`` saying why; an invalid
  entry is left out of ``consolidated`` and listed in ``consolidated_skipped`` with the reason.
  Each group entry's own ``consolidated`` is the part of the flat map below it (zarr-python
  stores the whole subtree flat in the top group and empty maps in nested group entries).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from math import prod
from typing import Any

from zarrfs.core.codecs.chain import CodecChain
from zarrfs.core.dtypes import DataType, parse_data_type
from zarrfs.core.errors import MetadataError, UnsupportedError, ZarrFSError
from zarrfs.core.extensions import parse_extension
from zarrfs.core.keys import parse_chunk_key_encoding
from zarrfs.core.metadata.model import (
    MAX_NBYTES,
    ArrayMetadata,
    GroupMetadata,
    check_attributes,
    check_node_name,
    find_non_finite,
    int_list,
    load_json_object,
)

_ARRAY_REQUIRED = ("shape", "data_type", "chunk_grid", "chunk_key_encoding", "fill_value", "codecs")
_ARRAY_KNOWN = frozenset(
    {
        "zarr_format",
        "node_type",
        *_ARRAY_REQUIRED,
        "attributes",
        "storage_transformers",
        "dimension_names",
    }
)
_GROUP_KNOWN = frozenset({"zarr_format", "node_type", "attributes", "consolidated_metadata"})


#: parsed documents kept by their bytes (``parse_v3``): how many, the largest kept, and the
#: bytes all kept documents may hold together (their parsed objects take a few times that)
PARSED_KEPT = 1024
PARSED_MAX_BYTES = 64 << 10
PARSED_TOTAL_BYTES = 4 << 20
_parsed: dict[bytes, ArrayMetadata | GroupMetadata] = {}
_parsed_bytes = 0
_parsed_lock = threading.Lock()


def parse_v3(raw: bytes | bytearray | memoryview) -> ArrayMetadata | GroupMetadata:
    """Parse and validate a stored ``zarr.json``; the result keeps ``raw`` for ``to_bytes``.

    Equal documents give the same object: the metadata model is immutable, and a hierarchy
    often holds many arrays with one document (the levels of an image repeated per well and
    field, tiles, labels), whose parsing and validation would otherwise be repeated for each.
    The last ``PARSED_KEPT`` documents of at most ``PARSED_MAX_BYTES`` each and
    ``PARSED_TOTAL_BYTES`` together are kept; a document that fails is never kept (each read
    reports its error)."""
    global _parsed_bytes
    data = bytes(raw)
    hit = _parsed.get(data)  # one dict lookup is atomic: no lock on the hit path
    if hit is not None:
        return hit
    node = _node(load_json_object(data, "zarr.json"), data)
    if len(data) <= PARSED_MAX_BYTES:
        with _parsed_lock:
            if data not in _parsed:
                _parsed[data] = node
                _parsed_bytes += len(data)
            while len(_parsed) > PARSED_KEPT or _parsed_bytes > PARSED_TOTAL_BYTES:
                oldest = next(iter(_parsed))  # the oldest first
                del _parsed[oldest]
                _parsed_bytes -= len(oldest)
    return node


def array_metadata_v3(doc: Mapping[str, Any]) -> ArrayMetadata:
    """Validate an array document given as a mapping (e.g. when creating an array)."""
    clean = check_attributes(doc, "array metadata")
    node = _node(clean, None)
    if not isinstance(node, ArrayMetadata):
        raise MetadataError("array metadata: node_type must be 'array'")
    return node


def group_metadata_v3(doc: Mapping[str, Any]) -> GroupMetadata:
    """Validate a group document given as a mapping."""
    clean = check_attributes(doc, "group metadata")
    node = _node(clean, None)
    if not isinstance(node, GroupMetadata):
        raise MetadataError("group metadata: node_type must be 'group'")
    return node


def new_group_v3(attributes: Mapping[str, Any] | None = None) -> GroupMetadata:
    """Metadata of a new group, laid out as zarr-python writes it."""
    return group_metadata_v3(
        {"attributes": dict(attributes or {}), "zarr_format": 3, "node_type": "group"}
    )


def new_array_v3(
    shape: Sequence[int],
    data_type: str | Mapping[str, Any],
    chunk_shape: Sequence[int],
    *,
    fill_value: Any = None,
    codecs: Sequence[Any] | None = None,
    chunk_key_encoding: str | Mapping[str, Any] = "default",
    dimension_names: Sequence[str | None] | None = None,
    attributes: Mapping[str, Any] | None = None,
) -> ArrayMetadata:
    """Metadata of a new array, laid out as zarr-python writes it.

    ``fill_value`` is the JSON encoding (default: zero bits); ``codecs`` defaults to a
    little-endian ``bytes`` codec alone.
    """
    dt = parse_data_type(data_type)
    if fill_value is None:
        fill_value = dt.fill_value_to_json(dt.default_fill_value())
    doc: dict[str, Any] = {
        "shape": list(shape),
        "data_type": data_type if isinstance(data_type, str) else dict(data_type),
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunk_shape)}},
        "chunk_key_encoding": parse_chunk_key_encoding(chunk_key_encoding).to_json(),
        "fill_value": fill_value,
        "codecs": list(codecs)
        if codecs is not None
        else [{"name": "bytes", "configuration": {"endian": "little"}}],
        "attributes": dict(attributes or {}),
    }
    if dimension_names is not None:
        doc["dimension_names"] = list(dimension_names)
    doc.update({"zarr_format": 3, "node_type": "array", "storage_transformers": []})
    return array_metadata_v3(doc)


# --------------------------------------------------------------------------- documents


def _node(doc: dict[str, Any], raw: bytes | None) -> ArrayMetadata | GroupMetadata:
    try:
        fmt = doc.get("zarr_format")
        if type(fmt) is not int or fmt != 3:
            raise MetadataError(f"zarr_format must be 3, got {fmt!r}")
        node_type = doc.get("node_type")
        if node_type == "array":
            return _array(doc, raw)
        if node_type == "group":
            return _group(doc, raw)
        raise MetadataError(f"node_type must be 'array' or 'group', got {node_type!r}")
    except ZarrFSError:
        raise
    except (RecursionError, MemoryError):
        raise MetadataError("metadata exhausted resources while parsing") from None
    except Exception as exc:  # a codec or numpy refusing a value in an unforeseen way
        raise MetadataError(f"invalid metadata: {type(exc).__name__}: {exc}") from exc


def _check_members(doc: Mapping[str, Any], known: frozenset[str], skip: set[str]) -> None:
    for key, value in doc.items():
        if key not in known:
            if isinstance(value, Mapping) and value.get("must_understand") is False:
                continue
            raise UnsupportedError(
                f'unknown metadata key {key!r} (not marked "must_understand": false)'
            )
        if key not in skip:
            where = find_non_finite(value)
            if where is not None:
                raise MetadataError(
                    f"{key}: NaN/Infinity literal at {where!r} (only allowed in attributes; "
                    'fill values use the strings "NaN", "Infinity", "-Infinity")'
                )


def _attributes(doc: Mapping[str, Any]) -> dict[str, Any]:
    attrs = doc.get("attributes", {})
    if not isinstance(attrs, dict):
        raise MetadataError(f"attributes must be a JSON object, got {type(attrs).__name__}")
    return attrs


def _group(doc: dict[str, Any], raw: bytes | None) -> GroupMetadata:
    _check_members(doc, _GROUP_KNOWN, {"attributes", "consolidated_metadata"})
    attrs = _attributes(doc)
    consolidated, error, skipped = _consolidated(doc.get("consolidated_metadata"))
    return GroupMetadata(3, attrs, doc, raw, consolidated, error, skipped)


def _array(doc: dict[str, Any], raw: bytes | None) -> ArrayMetadata:
    missing = [k for k in _ARRAY_REQUIRED if k not in doc]
    if missing:
        raise MetadataError(f"array metadata lacks required keys {missing}")
    _check_members(doc, _ARRAY_KNOWN, {"attributes"})
    shape = int_list(doc["shape"], "shape", minimum=0)
    data_type = parse_data_type(doc["data_type"])
    chunk_shape = _chunk_grid(doc["chunk_grid"], len(shape))
    _check_size(shape, data_type, "array")
    _check_size(chunk_shape, data_type, "chunk")
    key_encoding = parse_chunk_key_encoding(doc["chunk_key_encoding"])
    fill_value = data_type.parse_fill_value(doc["fill_value"])
    codecs = _codecs(doc["codecs"])
    _check_value_codecs(data_type, codecs)
    _storage_transformers(doc.get("storage_transformers"))
    meta = ArrayMetadata(
        zarr_format=3,
        shape=shape,
        data_type=data_type,
        chunk_shape=chunk_shape,
        chunk_key_encoding=key_encoding,
        fill_value=fill_value,
        codecs=codecs,
        dimension_names=_dimension_names(doc.get("dimension_names"), len(shape)),
        attributes=_attributes(doc),
        document=doc,
        raw=raw,
    )
    codecs.prepare(meta.chunk_spec())  # validates every codec against the chunk spec
    return meta


def _check_value_codecs(data_type: DataType, codecs: CodecChain) -> None:
    """Refuse codecs that compute with element values (``scale_offset``, ``cast_value``,
    ``numcodecs.fixedscaleoffset`` ...) on a type held as raw bits in a carrier dtype
    (``bfloat16`` as ``uint16``): they would compute with the carrier's integers."""
    if getattr(data_type, "numpy_views", True):
        return
    chain: CodecChain | None = codecs
    while chain is not None:
        for codec in chain.array_array:
            if codec.computes_with_values:
                raise UnsupportedError(
                    f"codec {codec.name!r} on data type {data_type.name!r} is not supported: "
                    "zarrfs holds its elements as raw bits, not as numbers to compute with"
                )
        inner = getattr(chain.array_bytes, "codecs", None)
        chain = inner if isinstance(inner, CodecChain) else None


def _check_size(shape: tuple[int, ...], data_type: DataType, what: str) -> None:
    if prod(shape) * data_type.itemsize > MAX_NBYTES:
        raise MetadataError(
            f"{what} shape {list(shape)} of {data_type.name} exceeds {MAX_NBYTES} bytes"
        )


def _extension(value: Any, what: str) -> tuple[str, Mapping[str, Any]]:
    """(name, configuration) of an extension object or short-hand name."""
    ext = parse_extension(value, what, null_configuration=False)
    return ext.name, ext.configuration or {}


def _chunk_grid(value: Any, ndim: int) -> tuple[int, ...]:
    name, conf = _extension(value, "chunk_grid")
    if name != "regular":
        raise UnsupportedError(f"unknown chunk grid {name!r} (only 'regular' is supported)")
    extra = set(conf) - {"chunk_shape"}
    if extra:
        raise MetadataError(f"chunk_grid 'regular': unknown configuration keys {sorted(extra)}")
    if "chunk_shape" not in conf:
        raise MetadataError("chunk_grid 'regular' needs configuration.chunk_shape")
    chunk_shape = int_list(conf["chunk_shape"], "chunk_grid chunk_shape", minimum=1)
    if len(chunk_shape) != ndim:
        raise MetadataError(
            f"chunk_grid chunk_shape {list(chunk_shape)} has {len(chunk_shape)} dimensions, "
            f"the array has {ndim}"
        )
    return chunk_shape


def _codecs(value: Any) -> CodecChain:
    if not isinstance(value, list):
        raise MetadataError(f"codecs must be a list, got {type(value).__name__}")
    return CodecChain.from_json(value)


def _storage_transformers(value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, list):
        raise MetadataError("storage_transformers must be a list")
    for entry in value:
        name, _ = _extension(entry, "storage transformer")
        if isinstance(entry, Mapping) and entry.get("must_understand") is False:
            continue
        raise UnsupportedError(f"storage transformer {name!r} is not supported")


def _dimension_names(value: Any, ndim: int) -> tuple[str | None, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != ndim:
        raise MetadataError(f"dimension_names must be a list of {ndim} names, got {value!r}")
    for name in value:
        if name is not None and not isinstance(name, str):
            raise MetadataError(f"dimension_names entries must be strings or null, got {name!r}")
    return tuple(value)


# --------------------------------------------------------------------------- consolidated


def _consolidated(
    value: Any,
) -> tuple[dict[str, ArrayMetadata | GroupMetadata] | None, str | None, dict[str, str]]:
    """(entries, error, skipped): entries None with an error when the member is present but
    unusable, (None, None, {}) when absent; ``skipped`` maps invalid entries to the reason."""
    if value is None:
        return None, None, {}
    skipped: dict[str, str] = {}
    try:
        return _consolidated_entries(value, skipped), None, skipped
    except MetadataError as exc:
        return None, f"consolidated_metadata ignored: {exc}", {}


def _consolidated_entries(
    value: Any, skipped: dict[str, str]
) -> dict[str, ArrayMetadata | GroupMetadata]:
    if not isinstance(value, Mapping):
        raise MetadataError("must be an object")
    if value.get("kind") != "inline":
        raise UnsupportedError(f"unknown kind {value.get('kind')!r}")
    metadata = value.get("metadata")
    if not isinstance(metadata, Mapping):
        raise MetadataError("'metadata' must be an object")
    flat: dict[str, ArrayMetadata | GroupMetadata] = {}
    for path, child in metadata.items():
        try:
            for segment in path.split("/"):
                check_node_name(segment)
            if not isinstance(child, dict):
                raise MetadataError("not an object")
            flat[path] = _node(child, None)
        except MetadataError as exc:
            skipped[path] = str(exc)
    # entries may nest their own consolidated metadata; fold it into the flat map
    for path, node in list(flat.items()):
        if isinstance(node, GroupMetadata) and node.consolidated:
            for sub, child_node in node.consolidated.items():
                flat.setdefault(f"{path}/{sub}", child_node)
            for sub, reason in node.consolidated_skipped.items():
                skipped.setdefault(f"{path}/{sub}", reason)
    # each group entry's consolidated view is the part of the flat map below it; build the
    # deepest groups first so their parents hold the rebuilt objects
    below: dict[str, list[str]] = {p: [] for p, n in flat.items() if isinstance(n, GroupMetadata)}
    for path in flat:
        parts = path.split("/")
        for i in range(1, len(parts)):
            ancestor = "/".join(parts[:i])
            if ancestor in below:
                below[ancestor].append(path)
    for path in sorted(below, key=lambda p: -p.count("/")):
        group = flat[path]
        start = len(path) + 1
        children = {k[start:]: flat[k] for k in below[path]}
        lost = {k[start:]: v for k, v in skipped.items() if k.startswith(path + "/")}
        flat[path] = GroupMetadata(
            group.zarr_format, group.attributes, group.document, None, children, None, lost
        )
    return flat
