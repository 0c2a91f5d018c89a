"""The one frozen metadata model every Zarr format maps into, and the JSON helpers they share.

Spec: v3 core "Metadata" (array and group documents) and "Node names".

Invariants:
- ``ArrayMetadata`` / ``GroupMetadata`` are immutable by convention: their mappings are plain
  dicts (so ``json.dumps`` works on them) that nobody mutates; ``with_*`` return new objects
  with a new ``document`` and ``raw = None``.
- ``fill_value`` is a 0-d array of ``data_type.dtype``; ``chunk_shape`` has one positive entry
  per dimension; ``document`` is the full parsed document, kept in step with the fields.
- ``to_bytes()`` returns ``raw`` when the object was parsed and not changed (byte-stable round
  trip), otherwise the document serialised the way its format writes it. Formats register how
  they patch and serialise documents with :func:`register_document_format`; the default is the
  v3 layout, serialised like zarr-python 3 (``json.dumps(doc, indent=2)``, ASCII escapes, NaN
  literals allowed only where zarr-python writes them: inside attributes).
- :func:`load_json_object` is the only JSON entry point for stored documents: it turns every
  parser failure (syntax, encoding, nesting, duplicate keys, huge numbers) into
  ``MetadataError``.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from math import isfinite, prod
from typing import Any

import numpy as np

from zarrfs.core.codecs.base import ChunkSpec
from zarrfs.core.codecs.chain import CodecChain
from zarrfs.core.dtypes import DataType
from zarrfs.core.errors import InvalidWriteError, MetadataError
from zarrfs.core.keys import ChunkKeyEncoding

#: deepest JSON nesting accepted in a stored document
MAX_JSON_DEPTH = 128
#: most dimensions an array may have
MAX_NDIM = 32
#: largest array or chunk size in bytes (fits an int64 byte offset)
MAX_NBYTES = 2**63 - 1


# --------------------------------------------------------------------------- JSON helpers


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):  # rare: find the first repeated key for the message
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise MetadataError(f"duplicate key {key!r} in JSON object")
            seen.add(key)
    return out


def load_json_object(raw: bytes | bytearray | memoryview, what: str = "metadata") -> dict[str, Any]:
    """Parse a stored JSON document that must be one object; ``MetadataError`` otherwise."""
    try:
        text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MetadataError(f"{what}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    text = text.removeprefix("\ufeff")
    try:
        doc = json.loads(text, object_pairs_hook=_reject_duplicates)
    except MetadataError as exc:
        raise MetadataError(f"{what}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise MetadataError(f"{what}: invalid JSON: {exc}") from None
    except RecursionError:
        raise MetadataError(f"{what}: JSON nested too deeply") from None
    except (ValueError, MemoryError) as exc:  # e.g. integers beyond the digit limit
        raise MetadataError(f"{what}: unreadable JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise MetadataError(f"{what}: expected a JSON object, got {type(doc).__name__}")
    # every level of nesting opens a bracket: fewer brackets than the limit need no walk
    if text.count("{") + text.count("[") > MAX_JSON_DEPTH and json_depth(doc) > MAX_JSON_DEPTH:
        raise MetadataError(f"{what}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
    return doc


#: the scalar types ``json.loads`` makes, checked by identity before the slower ``isinstance``
_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


def json_depth(value: Any) -> int:
    """Nesting depth of a JSON value (scalars 0, ``[]`` 1), computed without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind in _JSON_SCALARS:
            continue
        if kind is dict or isinstance(item, Mapping):
            members = item.values()
        elif kind is list or isinstance(item, (list, tuple)):
            members = item
        else:
            continue
        depth += 1  # a scalar member is as deep as its container
        if depth > deepest:
            deepest = depth
            if deepest > MAX_JSON_DEPTH:
                break
        stack.extend([(v, depth) for v in members])
    return deepest


def _any_non_finite(value: Any) -> bool:
    """Whether a NaN/Infinity number is inside ``value`` (the quick test before
    ``find_non_finite`` builds paths)."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is float:
            if not isfinite(item):
                return True
        elif kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif kind in _JSON_SCALARS:
            continue
        elif isinstance(item, float):
            if not np.isfinite(item):
                return True
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return False


def find_non_finite(value: Any) -> str | None:
    """The JSON path of the first NaN/Infinity number inside ``value``, else None."""
    if not _any_non_finite(value):
        return None
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, float) and not np.isfinite(item):
            return path or "(value)"
        if isinstance(item, Mapping):
            stack.extend((v, f"{path}.{k}" if path else str(k)) for k, v in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(item))
    return None


def check_attributes(attrs: Any, what: str = "attributes") -> dict[str, Any]:
    """A deep copy of user attributes after checking they are JSON: an object with string keys
    whose values are null, booleans, numbers, strings, lists and objects."""
    if not isinstance(attrs, Mapping):
        raise MetadataError(f"{what} must be a JSON object, got {type(attrs).__name__}")
    stack: list[tuple[Any, int]] = [(attrs, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (Mapping, list, tuple)):
            if depth > MAX_JSON_DEPTH - 1:
                raise MetadataError(f"{what}: nested deeper than {MAX_JSON_DEPTH - 1} levels")
            if isinstance(item, Mapping):
                for key in item:
                    if not isinstance(key, str):
                        raise MetadataError(f"{what}: object key {key!r} is not a string")
                values = list(item.values())
            else:
                values = list(item)
            stack.extend((v, depth + 1) for v in values)
        elif not (item is None or isinstance(item, (bool, int, float, str))):
            raise MetadataError(f"{what}: {type(item).__name__} value {item!r} is not JSON")
    return _copy_doc(attrs)


def check_node_name(name: str) -> str:
    """A valid node name (core spec, "Node names"), returned unchanged; ``MetadataError`` else."""
    if not isinstance(name, str) or not name:
        raise MetadataError("node name must be a non-empty string")
    if "/" in name:
        raise MetadataError(f"node name {name!r} must not contain '/'")
    if set(name) == {"."}:
        raise MetadataError(f"node name {name!r} must not consist only of periods")
    if name.startswith("__"):
        raise MetadataError(f"node name {name!r} must not start with the reserved prefix '__'")
    return name


# --------------------------------------------------------------------------- document formats


class DocumentFormat:
    """How one metadata format patches and serialises its document (default: Zarr v3)."""

    def set_shape(self, doc: dict[str, Any], shape: tuple[int, ...]) -> None:
        doc["shape"] = list(shape)

    def set_attributes(self, doc: dict[str, Any], attributes: dict[str, Any]) -> None:
        doc["attributes"] = attributes

    def dumps(self, doc: Mapping[str, Any]) -> bytes:
        return json.dumps(doc, indent=2, allow_nan=True).encode()


_FORMATS: dict[int | str, DocumentFormat] = {}
_DEFAULT_FORMAT = DocumentFormat()


def register_document_format(zarr_format: int | str, fmt: DocumentFormat) -> None:
    _FORMATS[zarr_format] = fmt


def document_format(zarr_format: int | str) -> DocumentFormat:
    return _FORMATS.get(zarr_format, _DEFAULT_FORMAT)


def _copy_doc(doc: Mapping[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(doc, allow_nan=True))  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- the model


class _NodeDocument:
    """What array and group metadata share: the stored document, its serialisation, and
    equality by format and document."""

    zarr_format: int | str
    attributes: Mapping[str, Any]
    document: Mapping[str, Any]
    raw: bytes | None

    def with_attributes(self, attrs: Mapping[str, Any]) -> Any:
        """The same node with its user attributes replaced (validated, deep-copied)."""
        clean = check_attributes(attrs)
        doc = _copy_doc(self.document)
        document_format(self.zarr_format).set_attributes(doc, clean)
        return replace(self, attributes=clean, document=doc, raw=None)  # type: ignore[type-var]

    def to_bytes(self) -> bytes:
        if self.raw is not None:
            return self.raw
        return document_format(self.zarr_format).dumps(self.document)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, _NodeDocument)
            and getattr(other, "node_type", None) == getattr(self, "node_type", None)
            and self.zarr_format == other.zarr_format
            and self.document == other.document
        )

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True, eq=False)
class ArrayMetadata(_NodeDocument):
    """An array node's metadata, whatever format it was stored in."""

    zarr_format: int | str
    shape: tuple[int, ...]
    data_type: DataType
    chunk_shape: tuple[int, ...]
    chunk_key_encoding: ChunkKeyEncoding
    fill_value: np.ndarray[Any, Any]
    codecs: CodecChain
    dimension_names: tuple[str | None, ...] | None
    attributes: Mapping[str, Any]
    document: Mapping[str, Any]
    raw: bytes | None = None
    #: store key prefix of the chunks when it is not the node's own path (the v3 draft layout
    #: keeps them under ``data/root/<path>/``); None: ``<path>/``
    chunk_prefix: str | None = None

    node_type = "array"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.data_type.dtype

    @property
    def nbytes(self) -> int:
        """Decoded size of the whole array in bytes."""
        return prod(self.shape) * self.data_type.itemsize

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """Number of chunks along each dimension."""
        return tuple(-(-s // c) for s, c in zip(self.shape, self.chunk_shape, strict=True))

    def chunk_key(self, coords: tuple[int, ...]) -> str:
        """Store key of chunk ``coords``, relative to the array's prefix."""
        return self.chunk_key_encoding.encode(coords)

    def chunk_store_prefix(self, path: str) -> str:
        """Store key prefix of the chunks of this array at node ``path`` (``""`` or ``"a/"``)."""
        if self.chunk_prefix is not None:
            return self.chunk_prefix
        return f"{path}/" if path else ""

    def chunk_listing_prefix(self, path: str) -> str:
        """The narrowest store prefix holding every chunk key of this array (its chunk folder,
        ``"a/c/"``, where the encoding has one; else ``chunk_store_prefix``)."""
        return self.chunk_store_prefix(path) + self.chunk_key_encoding.directory(self.ndim)

    def chunk_store_key(self, path: str, coords: tuple[int, ...]) -> str:
        """Full store key of chunk ``coords`` of this array at node ``path``."""
        return self.chunk_store_prefix(path) + self.chunk_key_encoding.encode(coords)

    def chunk_spec(self, shape: tuple[int, ...] | None = None) -> ChunkSpec:
        """The codec spec of a chunk (default: the regular chunk shape)."""
        return ChunkSpec(
            tuple(self.chunk_shape if shape is None else shape),
            self.data_type.dtype,
            self.fill_value,
        )

    def with_shape(self, shape: tuple[int, ...] | list[int]) -> ArrayMetadata:
        """The same array resized to ``shape`` (same rank); ``InvalidWriteError`` otherwise."""
        try:
            if any(isinstance(s, bool) for s in shape):
                raise TypeError("booleans are not sizes")
            new = tuple(operator.index(s) for s in shape)
        except TypeError:
            raise InvalidWriteError(f"shape {shape!r} must hold non-negative integers") from None
        if len(new) != self.ndim:
            raise InvalidWriteError(f"cannot change the rank of a {self.ndim}-d array to {new}")
        if any(s < 0 for s in new):
            raise InvalidWriteError(f"shape {new} must hold non-negative integers")
        if prod(new) * self.data_type.itemsize > MAX_NBYTES:
            raise InvalidWriteError(f"shape {new} is too large ({MAX_NBYTES} bytes at most)")
        doc = _copy_doc(self.document)
        document_format(self.zarr_format).set_shape(doc, new)
        return replace(self, shape=new, document=doc, raw=None)

    def __repr__(self) -> str:
        return (
            f"ArrayMetadata(zarr_format={self.zarr_format!r}, shape={self.shape}, "
            f"data_type={self.data_type.name}, chunk_shape={self.chunk_shape}, "
            f"codecs={self.codecs!r})"
        )


@dataclass(frozen=True, eq=False)
class GroupMetadata(_NodeDocument):
    """A group node's metadata, whatever format it was stored in.

    ``consolidated`` maps paths relative to this group (``"a"``, ``"a/b"``) to child metadata
    when the document carries usable consolidated metadata; ``consolidated_error`` says why
    present-but-unusable consolidated metadata was ignored (callers then list the store), and
    ``consolidated_skipped`` maps entries left out of ``consolidated`` to the reason.
    """

    zarr_format: int | str
    attributes: Mapping[str, Any]
    document: Mapping[str, Any]
    raw: bytes | None = None
    consolidated: Mapping[str, ArrayMetadata | GroupMetadata] | None = None
    consolidated_error: str | None = None
    consolidated_skipped: Mapping[str, str] = field(default_factory=dict)

    node_type = "group"

    def __repr__(self) -> str:
        n = None if self.consolidated is None else len(self.consolidated)
        return f"GroupMetadata(zarr_format={self.zarr_format!r}, consolidated={n})"


def int_list(value: Any, what: str, minimum: int) -> tuple[int, ...]:
    """A JSON list of integers in ``[minimum, 2^63)`` of at most ``MAX_NDIM`` items (a shape,
    a chunk shape) as a tuple; anything else is ``MetadataError`` naming ``what``."""
    if not isinstance(value, list):
        raise MetadataError(f"{what} must be a list of integers, got {value!r}")
    if len(value) > MAX_NDIM:
        raise MetadataError(f"{what} has {len(value)} dimensions; at most {MAX_NDIM} supported")
    for n in value:
        if type(n) is not int or not minimum <= n <= MAX_NBYTES:
            raise MetadataError(
                f"{what} must hold integers in [{minimum}, 2^63), got {n!r} in {value!r}"
            )
    return tuple(value)


def reencoding_needed(old: ArrayMetadata, new: ArrayMetadata) -> str | None:
    """Why ``new`` would need the stored chunks of ``old`` re-encoded, or None (the edits
    that need none: shape, attributes, dimension names)."""
    if old.data_type.name != new.data_type.name:
        return f"data type {old.data_type.name} -> {new.data_type.name}"
    if old.codecs.to_json() != new.codecs.to_json():
        return "codecs"
    if old.chunk_shape != new.chunk_shape:
        return f"chunk grid {old.chunk_shape} -> {new.chunk_shape}"
    if old.chunk_key_encoding.to_json() != new.chunk_key_encoding.to_json():
        return "chunk key encoding"
    if old.fill_value.tobytes() != new.fill_value.tobytes():
        return "fill value"
    return None
