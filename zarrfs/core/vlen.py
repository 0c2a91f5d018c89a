"""Arrays of variable-length elements (strings, byte strings, Python objects), read-only.

Spec: v3 ``string`` and ``variable_length_bytes`` data types with the ``vlen-utf8`` and
``vlen-bytes`` array -> bytes codecs (zarr-extensions; numcodecs' VLen framing: a little-endian
u32 item count, then per item a u32 length and the bytes); v2 object arrays (``dtype "|O"``)
whose first filter is an object codec: ``vlen-utf8``, ``vlen-bytes``, ``vlen-array``,
``json2`` or ``msgpack2``; after it any bytes -> bytes codecs / the v2 compressor.

These arrays have no fixed element size, so they are not ``ZarrArray``s: ``VlenArray`` reads
them chunk by chunk for the text views (``views/text.py``).

Invariants:
- Read-only: nothing here writes to the store.
- Bounded: one stored chunk is read at a time; no decoder produces more than
  ``MAX_CHUNK_BYTES`` decoded bytes (compressors are given that bound, a larger chunk is
  ``CorruptDataError``), and an item count in a chunk's header other than the chunk's element
  count is refused before anything is allocated for the items.
- A missing chunk reads as the fill value; a chunk that fails to decode raises
  ``CorruptDataError`` naming its key (never made-up elements).
- ``pickle`` is refused: decoding it would run code chosen by whoever wrote the store.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from math import ceil, prod
from typing import Any, Literal

import numcodecs
import numpy as np
from numcodecs.abc import Codec as NumCodec

from zarrfs.core.codecs.base import BytesBytesCodec, parse_codec
from zarrfs.core.codecs.v2compressors import V2Compressor
from zarrfs.core.errors import CorruptDataError, MetadataError, UnsupportedError, ZarrFSError
from zarrfs.core.keys import ChunkKeyEncoding, parse_chunk_key_encoding
from zarrfs.core.metadata.model import load_json_object
from zarrfs.core.stores.base import Store

#: largest decoded chunk of a variable-length array (all its items and their framing)
MAX_CHUNK_BYTES = 256 << 20

V3_TYPES = {"string": "str", "variable_length_bytes": "bytes"}
V3_CODECS = {"vlen-utf8": "str", "vlen-bytes": "bytes"}
V2_OBJECT_CODECS = {
    "vlen-utf8": "str",
    "vlen-bytes": "bytes",
    "vlen-array": "array",
    "json2": "object",
    "msgpack2": "object",
}


@dataclass(frozen=True)
class VlenArray:
    """One variable-length array: geometry, element kind, and how to decode a chunk."""

    path: str
    zarr_format: int
    shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]
    #: ``str``, ``bytes``, ``array`` (numpy arrays, from ``vlen-array``) or ``object`` (JSON-like)
    element: str
    data_type: Any
    fill_value: Any
    key_encoding: ChunkKeyEncoding
    codecs: tuple[Any, ...]
    object_codec: NumCodec
    compressors: tuple[BytesBytesCodec | V2Compressor, ...]
    order: str = "C"

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return tuple(ceil(s / c) for s, c in zip(self.shape, self.chunk_shape, strict=True))

    def summary(self) -> dict[str, Any]:
        return {
            "zarr_format": self.zarr_format,
            "shape": list(self.shape),
            "chunk_shape": list(self.chunk_shape),
            "data_type": self.data_type,
            "element": self.element,
            "fill_value": self.fill_value,
            "codecs": list(self.codecs),
        }

    def chunk_key(self, coords: tuple[int, ...]) -> str:
        key = self.key_encoding.encode(coords)
        return f"{self.path}/{key}" if self.path else key

    def read_chunk(self, store: Store, coords: tuple[int, ...]) -> np.ndarray[Any, Any]:
        """The chunk at ``coords`` as an object array of the chunk shape (C order)."""
        n = prod(self.chunk_shape)
        key = self.chunk_key(coords)
        data = store.get(key)
        if data is None:
            out = np.empty(self.chunk_shape, dtype=object)
            out[...] = self.fill_element()
            return out
        try:
            order: Literal["C", "F"] = "F" if self.order == "F" else "C"
            return self._decode(bytes(data), n).reshape(self.chunk_shape, order=order)
        except ZarrFSError as exc:
            raise CorruptDataError(str(exc), key) from None
        except (ValueError, TypeError, RuntimeError, struct.error, UnicodeDecodeError) as exc:
            raise CorruptDataError(f"decode failed: {type(exc).__name__}: {exc}", key) from None

    def fill_element(self) -> Any:
        fill = self.fill_value
        if fill is None:
            return "" if self.element == "str" else b"" if self.element == "bytes" else None
        if self.element == "bytes" and isinstance(fill, str):
            return fill.encode("utf-8")
        return fill

    def _decode(self, data: bytes, n: int) -> np.ndarray[Any, Any]:
        for codec in reversed(self.compressors):
            data = bytes(codec.decode(data, MAX_CHUNK_BYTES))
        cid = self.object_codec.codec_id
        if cid.startswith("vlen-"):
            if len(data) < 4:
                raise CorruptDataError(f"{cid}: chunk shorter than its item count")
            count = int.from_bytes(data[:4], "little")
            if count != n:
                raise CorruptDataError(f"{cid}: chunk holds {count} items, expected {n}")
        out = np.asarray(self.object_codec.decode(data), dtype=object)
        if out.size != n:
            raise CorruptDataError(f"{cid}: chunk holds {out.size} items, expected {n}")
        return out.reshape(-1)

    def iter_chunk_rows(self, store: Store) -> Iterator[np.ndarray[Any, Any]]:
        """The array in C order, one row of chunks at a time (the chunks sharing an axis-0
        chunk index): each yielded object array is a slab of the array."""
        if not self.shape:
            yield self.read_chunk(store, ())
            return
        if prod(self.shape) == 0:
            return
        grid = self.grid_shape
        for i0 in range(grid[0]):
            rows = min(self.chunk_shape[0], self.shape[0] - i0 * self.chunk_shape[0])
            slab = np.empty((rows, *self.shape[1:]), dtype=object)
            for rest in np.ndindex(*grid[1:]):
                coords = (i0, *rest)
                chunk = self.read_chunk(store, coords)
                dst = tuple(
                    slice(c * cs, min((c + 1) * cs, s))
                    for c, cs, s in zip(rest, self.chunk_shape[1:], self.shape[1:], strict=True)
                )
                src = tuple(slice(0, d.stop - d.start) for d in dst)
                slab[(slice(None), *dst)] = chunk[(slice(0, rows), *src)]
            yield slab


# --------------------------------------------------------------------------- metadata


def _object_codec(config: Mapping[str, Any]) -> NumCodec:
    cid = config.get("id")
    if cid == "pickle":
        raise UnsupportedError(
            "object codec 'pickle' is not read: decoding it would run code stored in the array"
        )
    if cid not in V2_OBJECT_CODECS:
        raise UnsupportedError(f"object codec {cid!r} is not supported")
    try:
        return numcodecs.get_codec(dict(config))
    except (TypeError, ValueError, KeyError, ImportError) as exc:
        raise UnsupportedError(f"object codec {cid!r}: {exc}") from None


def vlen_from_v3(path: str, doc: Mapping[str, Any]) -> VlenArray | None:
    """The variable-length array described by a v3 ``zarr.json`` document, None if it is not
    one; ``MetadataError`` if it is one zarrfs cannot read."""
    data_type = doc.get("data_type")
    name = data_type.get("name") if isinstance(data_type, Mapping) else data_type
    if doc.get("node_type") != "array" or name not in V3_TYPES:
        return None
    shape = tuple(doc.get("shape") or ())
    grid = doc.get("chunk_grid") or {}
    chunk_shape = tuple((grid.get("configuration") or {}).get("chunk_shape") or ())
    codecs = doc.get("codecs") or []
    names = [c if isinstance(c, str) else c.get("name") for c in codecs]
    if not names or names[0] not in V3_CODECS:
        raise UnsupportedError(
            f"{name} array: the array -> bytes codec must be vlen-utf8 or vlen-bytes, got {names}"
        )
    compressors = []
    for entry in codecs[1:]:
        codec = parse_codec(entry)
        if codec is None:
            continue
        if not isinstance(codec, BytesBytesCodec):
            raise UnsupportedError(f"{name} array: codec {codec.name!r} is not bytes -> bytes")
        compressors.append(codec)
    return _checked(
        VlenArray(
            path,
            3,
            shape,
            chunk_shape,
            V3_TYPES[name],
            data_type,
            doc.get("fill_value"),
            parse_chunk_key_encoding(doc.get("chunk_key_encoding", "default")),
            tuple(names),
            numcodecs.get_codec({"id": names[0]}),
            tuple(compressors),
        )
    )


def vlen_from_v2(path: str, doc: Mapping[str, Any]) -> VlenArray | None:
    """The object array described by a v2 ``.zarray`` document, None if it is not one."""
    if doc.get("dtype") not in ("|O", "O"):
        return None
    filters = list(doc.get("filters") or [])
    if not filters:
        raise UnsupportedError("object array without an object codec in its filters")
    codec = _object_codec(filters[0])
    if len(filters) > 1:
        raise UnsupportedError(f"object array: filters {filters[1:]!r} after the object codec")
    compressors: list[V2Compressor] = []
    if doc.get("compressor") is not None:
        compressors.append(V2Compressor(doc["compressor"]))
    separator = doc.get("dimension_separator") or "."
    return _checked(
        VlenArray(
            path,
            2,
            tuple(doc.get("shape") or ()),
            tuple(doc.get("chunks") or ()),
            V2_OBJECT_CODECS[codec.codec_id],
            "|O",
            doc.get("fill_value"),
            ChunkKeyEncoding("v2", separator),
            tuple([codec.codec_id] + ([doc["compressor"]["id"]] if compressors else [])),
            codec,
            tuple(compressors),
            order=doc.get("order", "C"),
        )
    )


def _checked(arr: VlenArray) -> VlenArray:
    for what, shape, low in (("shape", arr.shape, 0), ("chunk shape", arr.chunk_shape, 1)):
        if not all(type(n) is int and n >= low for n in shape):
            raise MetadataError(f"variable-length array: invalid {what} {list(shape)}")
    if len(arr.shape) != len(arr.chunk_shape) or arr.order not in ("C", "F"):
        raise MetadataError("variable-length array: shape and chunks do not match")
    return arr


def open_vlen(store: Store, path: str) -> VlenArray | None:
    """The variable-length array at ``path`` (v3 or v2), or None if there is none."""
    prefix = f"{path}/" if path else ""
    raw = store.get(prefix + "zarr.json")
    if raw is not None:
        return vlen_from_v3(path, load_json_object(raw, "zarr.json"))
    raw = store.get(prefix + ".zarray")
    if raw is not None:
        return vlen_from_v2(path, load_json_object(raw, ".zarray"))
    return None


def element_json(value: Any) -> Any:
    """One element as JSON: strings as strings, bytes as base64, arrays as lists."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=True, default=str)
