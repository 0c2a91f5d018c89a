"""Codec interfaces and the codec registry (Zarr v3 core, "Codecs" section).

A codec is stateless configuration: it holds no store and no per-chunk state. The per-chunk
information travels in a :class:`ChunkSpec` (shape, in-memory data type, fill value), so one codec
object serves every chunk of an array. Three kinds, applied in this order when encoding:

    array -> array  (zero or more: transpose)
    array -> bytes  (exactly one: bytes, sharding_indexed)
    bytes -> bytes  (zero or more: gzip, blosc, zstd, crc32c)

Invariants every codec keeps:
- in-memory arrays are C-contiguous numpy arrays in *native* byte order with ``spec.dtype``;
  decoded arrays may be read-only views of the stored bytes (no copy), so nobody modifies one
  in place;
- ``decode`` never returns data it could not verify and never allocates more than the bound it
  is given (``max_size``) or can derive from the spec; bad input raises ``CorruptDataError``;
- ``from_config`` validates the configuration and raises ``MetadataError`` naming the field;
- ``to_json`` returns the canonical ``{"name": ..., "configuration": {...}}`` document.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from math import prod
from typing import Any, ClassVar

import numpy as np

from zarrfs.core import buffers
from zarrfs.core.errors import UnsupportedError
from zarrfs.core.extensions import parse_extension

#: unsigned integer types used to compare items of these sizes bit for bit
_WORDS: dict[int, Any] = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
#: bytes compared at a time by ``ChunkSpec.is_fill``
_FILL_BLOCK = 1 << 20


@dataclass(frozen=True, eq=False)
class ChunkSpec:
    """What a codec needs to know about one chunk: its shape, data type and fill value.

    ``dtype`` is the in-memory numpy dtype in native byte order (``V<n>`` for raw types).
    ``fill_value`` is a 0-d numpy array of ``dtype`` (bit-exact, NaN payloads included).
    """

    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    fill_value: np.ndarray[Any, Any]

    def _key(self) -> tuple[Any, ...]:
        return (tuple(self.shape), self.dtype, np.ascontiguousarray(self.fill_value).tobytes())

    def __eq__(self, other: object) -> bool:
        # Bit-exact on the fill value (a NaN fill equals itself), hashable so that prepared
        # chains can be cached per spec.
        return isinstance(other, ChunkSpec) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * self.dtype.itemsize

    def with_shape(self, shape: tuple[int, ...]) -> ChunkSpec:
        return ChunkSpec(tuple(shape), self.dtype, self.fill_value)

    def fill_array(self) -> np.ndarray[Any, Any]:
        """A new, writable chunk filled with the fill value."""
        out = buffers.empty(self.shape, self.dtype)
        out[...] = self.fill_value
        return out

    def is_fill(self, arr: np.ndarray[Any, Any]) -> bool:
        """True when every element equals the fill value bit for bit (NaN payloads included).

        Compares whole machine words where the item size allows, block by block, and stops at
        the first differing block (most data chunks differ in their first element)."""
        if arr.size == 0:
            return True
        flat = np.ascontiguousarray(arr).reshape(-1)
        fill = np.ascontiguousarray(self.fill_value).tobytes()
        word = _WORDS.get(self.dtype.itemsize)
        if word is not None:
            items = flat.view(word)
            target: Any = np.frombuffer(fill, dtype=word)[0]
        else:
            items = flat.view(np.uint8).reshape(-1, self.dtype.itemsize)
            target = np.frombuffer(fill, dtype=np.uint8)
        if not (items[:1] == target).all():
            return False
        step = max(1, _FILL_BLOCK // self.dtype.itemsize)
        for start in range(0, len(items), step):
            if not (items[start : start + step] == target).all():
                return False
        return True


class Codec(ABC):
    """Base of all codecs. Subclasses set ``name`` and implement one of the three kinds."""

    name: ClassVar[str]

    @classmethod
    @abstractmethod
    def from_config(cls, configuration: Mapping[str, Any]) -> Codec:
        """Build from the ``configuration`` object; raise ``MetadataError`` if invalid."""

    @abstractmethod
    def configuration(self) -> dict[str, Any] | None:
        """The configuration object (None when the codec has none)."""

    def to_json(self) -> dict[str, Any]:
        conf = self.configuration()
        doc: dict[str, Any] = {"name": self.name}
        if conf is not None:
            doc["configuration"] = conf
        return doc

    def validate(self, spec: ChunkSpec) -> None:
        """Raise ``MetadataError`` if this codec cannot handle chunks described by ``spec``."""

    def cannot_encode(self, spec: ChunkSpec) -> str | None:
        """Why this codec's configuration cannot encode chunks of ``spec`` though it decodes
        them (a numcodecs codec fails only when used), or None. Checked once per array, at
        its first write (``PreparedChain.cannot_encode``): reads never pay for it."""
        return None

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.to_json() == other.to_json()  # type: ignore[union-attr]

    def __hash__(self) -> int:
        return hash(repr(self.to_json()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.configuration()!r})"


class ArrayArrayCodec(Codec):
    """array -> array. ``spec`` arguments describe the decoded (input) side."""

    #: True for codecs that compute with the element values (not only move them): they need
    #: the values themselves, which an extension type held as raw bits in a carrier dtype
    #: (``bfloat16`` as ``uint16``) does not give them
    computes_with_values: ClassVar[bool] = False

    @abstractmethod
    def resolve_spec(self, spec: ChunkSpec) -> ChunkSpec:
        """The spec of the encoded array produced from a decoded array described by ``spec``."""

    @abstractmethod
    def encode(self, arr: np.ndarray[Any, Any], spec: ChunkSpec) -> np.ndarray[Any, Any]: ...

    @abstractmethod
    def decode(self, arr: np.ndarray[Any, Any], spec: ChunkSpec) -> np.ndarray[Any, Any]:
        """Inverse of ``encode``: ``arr`` has ``resolve_spec(spec).shape``; returns
        ``spec.shape``."""


class ArrayBytesCodec(Codec):
    """array -> bytes."""

    @abstractmethod
    def encode(self, arr: np.ndarray[Any, Any], spec: ChunkSpec) -> bytes | None:
        """Encode a chunk; None means "nothing to store" (a shard whose chunks are all empty)."""

    def encode_buffer(
        self, arr: np.ndarray[Any, Any], spec: ChunkSpec
    ) -> bytes | memoryview | None:
        """``encode``, possibly as a view of ``arr``'s memory instead of a copy (valid while
        ``arr`` is neither changed nor freed)."""
        return self.encode(arr, spec)

    @abstractmethod
    def decode(self, data: bytes | memoryview, spec: ChunkSpec) -> np.ndarray[Any, Any]:
        """Decode to a C-contiguous array of ``spec.shape`` and ``spec.dtype`` (possibly a
        read-only view of ``data``: callers copy before they modify)."""

    @abstractmethod
    def max_encoded_size(self, spec: ChunkSpec) -> int:
        """An upper bound of the encoded size of a chunk described by ``spec``."""


class BytesBytesCodec(Codec):
    """bytes -> bytes."""

    #: ``decode`` takes a ``memoryview`` as it is (no copy of it) and returns memory of its
    #: own, never a view of its input: the engine may read stored objects for it into
    #: buffers it reuses once the object is decoded (``core/buffers.py``)
    decodes_buffers: bool = False

    @abstractmethod
    def encode(self, data: bytes | memoryview) -> bytes: ...

    def encode_buffer(self, data: bytes | memoryview) -> bytes | memoryview:
        """``encode``, possibly as a read-only view of memory of the codec's own (a reused
        block, ``core/buffers.py``), valid for as long as the caller holds it."""
        return self.encode(data)

    @abstractmethod
    def decode(self, data: bytes | memoryview, max_size: int) -> bytes | memoryview:
        """Decode; raise ``CorruptDataError`` rather than produce more than ``max_size`` bytes."""

    @abstractmethod
    def max_encoded_size(self, size: int) -> int:
        """An upper bound of the encoded size of ``size`` input bytes."""


_REGISTRY: dict[str, type[Codec]] = {}


def register_codec(cls: type[Codec], *aliases: str) -> type[Codec]:
    """Register a codec class under its ``name`` (and optional aliases)."""
    for name in (cls.name, *aliases):
        _REGISTRY[name] = cls
    return cls


def codec_class(name: str) -> type[Codec]:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnsupportedError(f"unknown codec {name!r}") from None


def parse_codec(doc: Any) -> Codec | None:
    """Build a codec from its metadata entry: a name string or a ``{"name", "configuration"}``
    object. Returns None for an unknown codec marked ``"must_understand": false``."""
    ext = parse_extension(doc, "codec")
    try:
        cls = codec_class(ext.name)
    except UnsupportedError:
        if not ext.must_understand:
            return None
        raise
    return cls.from_config(ext.configuration or {})
