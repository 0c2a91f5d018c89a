"""The ``bytes`` codec (array -> bytes): elements in C order, in a fixed byte order.

Spec: https://zarr-specs.readthedocs.io/en/latest/v3/codecs/bytes/ (specs/v3/codecs/bytes.rst)
Name: ``bytes``
Example: ``{"name": "bytes", "configuration": {"endian": "little"}}``

Invariants:
- ``endian`` is ``"little"`` or ``"big"``; it may be absent only for data types where byte order
  does not apply (one-byte types, ``null_terminated_bytes`` and raw ``r<N>`` types, held in
  memory as numpy ``S<n>``/``V<n>``); ``validate`` refuses a multi-byte numeric type without
  it. A ``structured`` record without it is stored little-endian, field by field (what
  zarr-python 3 writes and reads).
- The encoded size is exactly ``prod(shape) * itemsize``; ``decode`` refuses any other length
  and returns a new, writable, C-contiguous array in native byte order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

from zarrfs.core.codecs._config import choice_field, refuse_unknown_keys
from zarrfs.core.codecs.base import ArrayBytesCodec, ChunkSpec, register_codec
from zarrfs.core.errors import CorruptDataError, MetadataError

Endian = Literal["little", "big"]
_ORDER_CHAR: dict[str, Literal["<", ">"]] = {"little": "<", "big": ">"}


def _byte_order_applies(dtype: np.dtype[Any]) -> bool:
    """True for data types whose encoding depends on ``endian``: multi-byte numbers and UTF-32
    code units, and records with such a field (not bytes: ``null_terminated_bytes``, raw)."""
    if dtype.fields is not None:
        return any(_byte_order_applies(f[0]) for f in dtype.fields.values())
    if dtype.subdtype is not None:
        return _byte_order_applies(dtype.subdtype[0])
    return dtype.itemsize > 1 and dtype.kind not in "VS"


class BytesCodec(ArrayBytesCodec):
    """Plain little- or big-endian element encoding."""

    name = "bytes"

    def __init__(self, endian: Endian | None = "little") -> None:
        if endian is not None:
            choice_field(self.name, {"endian": endian}, "endian", _ORDER_CHAR)
        self.endian: Endian | None = endian

    @classmethod
    def from_config(cls, configuration: Mapping[str, Any]) -> BytesCodec:
        refuse_unknown_keys(cls.name, configuration, ("endian",))
        # an explicit null is read as absent, as zarr-python does
        return cls(configuration.get("endian"))

    def configuration(self) -> dict[str, Any] | None:
        return None if self.endian is None else {"endian": self.endian}

    def validate(self, spec: ChunkSpec) -> None:
        # a record without ``endian`` is stored little-endian, as zarr-python writes it
        if self.endian is None and spec.dtype.fields is None and _byte_order_applies(spec.dtype):
            raise MetadataError(
                f"codec 'bytes': 'endian' is required for the {spec.dtype.itemsize}-byte "
                f"data type {spec.dtype}"
            )

    def stored_dtype(self, dtype: np.dtype[Any]) -> np.dtype[Any]:
        """The data type of the stored elements of a chunk of ``dtype``."""
        if not _byte_order_applies(dtype):
            return dtype
        if self.endian is None and dtype.fields is not None:
            return dtype.newbyteorder("<")
        if self.endian is None:
            raise MetadataError(f"codec 'bytes': 'endian' is required for data type {dtype}")
        return dtype.newbyteorder(_ORDER_CHAR[self.endian])

    def encode(self, arr: np.ndarray[Any, Any], spec: ChunkSpec) -> bytes:
        return bytes(self.encode_buffer(arr, spec))

    def encode_buffer(self, arr: np.ndarray[Any, Any], spec: ChunkSpec) -> memoryview:
        # a chunk in the stored byte order already is its own encoding: no copy
        stored = self.stored_dtype(spec.dtype)
        flat = np.ascontiguousarray(arr, dtype=stored).reshape(-1).view(np.uint8)
        return memoryview(flat.data)

    def decode(self, data: bytes | memoryview, spec: ChunkSpec) -> np.ndarray[Any, Any]:
        expected = spec.nbytes
        if len(data) != expected:
            raise CorruptDataError(
                f"codec 'bytes': chunk is {len(data)} bytes, expected {expected} "
                f"for shape {spec.shape} of {spec.dtype}"
            )
        stored = self.stored_dtype(spec.dtype)
        flat = np.frombuffer(data, dtype=stored)
        # no copy when the stored order is the native one: a (read-only) view of the bytes
        return flat.astype(spec.dtype, copy=False).reshape(spec.shape)

    def max_encoded_size(self, spec: ChunkSpec) -> int:
        return spec.nbytes


register_codec(BytesCodec)
