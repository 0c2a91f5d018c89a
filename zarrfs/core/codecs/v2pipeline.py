"""The Zarr v2 chunk pipeline as one array -> bytes codec (also used for v1 and the v3 drafts).

Spec: v2.rst "Chunks", "Filters", "order", "compressor": a chunk is the array's elements in the
stored data type and in C or F order, passed through the ``filters`` in order and then through
the ``compressor``; decoding runs the same steps backwards.
Name: ``zarr_v2`` (internal: never parsed from a v3 document, only built from v2/v1/draft
metadata)
Example configuration: ``{"dtype": ">i4", "order": "F", "filters": [{"id": "delta", "dtype":
">i4"}], "compressor": {"id": "zlib", "level": 1}}``

Invariants:
- The in-memory chunk (``spec.dtype``) is the stored type in native byte order; ``encode``
  converts to the stored byte order and layout, ``decode`` converts back and returns a new
  C-contiguous array.
- Filters are limited to numcodecs' fixed-size transforms: ``delta``, ``shuffle``,
  ``fixedscaleoffset``, ``quantize``, ``packbits``, ``categorize``, ``astype``, ``bitround``.
  For each, the size of its encoded output follows from the chunk size, so the compressor is
  given the exact size its output must have as its bound (``filtered_size``) and bombs never
  allocate more. Object codecs (``vlen-*``, ``json2``, ``pickle``...) are refused: they only
  apply to variable-length data.
- ``decode`` refuses a result whose size is not exactly the chunk's (``CorruptDataError``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from math import ceil, prod
from typing import Any, Literal, cast

import numpy as np
from numcodecs.abc import Codec as NumCodec
from numcodecs.compat import ensure_bytes, ensure_contiguous_ndarray

from zarrfs.core.codecs._filters import encode_trial, filter_output
from zarrfs.core.codecs.base import ArrayBytesCodec, ChunkSpec
from zarrfs.core.codecs.v2compressors import V2Compressor, build_numcodec
from zarrfs.core.errors import CorruptDataError, MetadataError, UnsupportedError


def _retype(decoded: str, encoded: str) -> Callable[[NumCodec, int], int]:
    """Size rule of a filter that views its input as ``decoded`` and outputs ``encoded``."""

    def size(codec: NumCodec, nbytes: int) -> int:
        src = np.dtype(getattr(codec, decoded))
        dst = np.dtype(getattr(codec, encoded))
        if nbytes % src.itemsize:
            raise MetadataError(
                f"filter {codec.codec_id!r}: a chunk of {nbytes} bytes is not a whole number "
                f"of {src} elements"
            )
        return nbytes // src.itemsize * dst.itemsize

    return size


def _shuffled_size(codec: NumCodec, nbytes: int) -> int:
    """numcodecs' shuffle copies for an element size of 0 or 1 and refuses, in both
    directions, bytes that are not whole elements."""
    size = codec.elementsize
    if type(size) is not int or size < 0 or (size > 1 and nbytes % size):
        raise MetadataError(
            f"filter 'shuffle': a chunk of {nbytes} bytes is not a whole number of elements "
            f"of its elementsize {size!r}"
        )
    return nbytes


#: filter id -> size of the filter's output for an input of ``nbytes`` bytes
FILTER_SIZES: dict[str, Callable[[NumCodec, int], int]] = {
    "delta": _retype("dtype", "astype"),
    "fixedscaleoffset": _retype("dtype", "astype"),
    "quantize": _retype("dtype", "astype"),
    "categorize": _retype("dtype", "astype"),
    "astype": _retype("decode_dtype", "encode_dtype"),
    "packbits": lambda codec, nbytes: 1 + ceil(nbytes / 8),
    "shuffle": _shuffled_size,
    "bitround": lambda codec, nbytes: nbytes,
}


def build_filter(config: Mapping[str, Any]) -> NumCodec:
    if not isinstance(config, Mapping) or not isinstance(config.get("id"), str):
        raise MetadataError(f"filter must be an object with a string 'id', got {config!r}")
    if config["id"] not in FILTER_SIZES:
        raise UnsupportedError(
            f"filter {config['id']!r} is not supported (supported: {', '.join(FILTER_SIZES)})"
        )
    return build_numcodec(config, "filter")


def _dtype_json(dtype: np.dtype[Any]) -> Any:
    if dtype.fields is None:
        return dtype.str
    return [list(field) for field in dtype.descr]


def _dtype_from_json(value: Any) -> np.dtype[Any]:
    def fields(v: Any) -> Any:
        if isinstance(v, list):
            return [(f[0], fields(f[1]), *([tuple(f[2])] if len(f) > 2 else [])) for f in v]
        return v

    try:
        return np.dtype(fields(value))
    except (TypeError, ValueError, IndexError) as exc:
        raise MetadataError(f"codec 'zarr_v2': invalid dtype {value!r}: {exc}") from None


class V2PipelineCodec(ArrayBytesCodec):
    """Stored type + memory order + numcodecs filters + numcodecs compressor."""

    name = "zarr_v2"

    def __init__(
        self,
        dtype: np.dtype[Any],
        order: str = "C",
        filters: Sequence[Mapping[str, Any]] | None = None,
        compressor: Mapping[str, Any] | None = None,
    ) -> None:
        if order not in ("C", "F"):
            raise MetadataError(f"order must be 'C' or 'F', got {order!r}")
        if dtype.hasobject:
            raise UnsupportedError("object data types cannot be decoded to fixed-size elements")
        self.dtype = dtype
        self.order = cast(Literal["C", "F"], order)
        self.filter_configs = [dict(f) for f in filters] if filters else None
        self.filters: tuple[NumCodec, ...] = tuple(build_filter(f) for f in filters or ())
        elements = dtype
        for codec in self.filters:  # each filter takes what the one before gives
            elements = filter_output(codec, elements)
        #: the element type the compressor sees (the last filter's output type)
        self._filtered_dtype = elements.newbyteorder("=")
        self.compressor = None if compressor is None else V2Compressor(compressor)

    @classmethod
    def from_config(cls, configuration: Mapping[str, Any]) -> V2PipelineCodec:
        extra = set(configuration) - {"dtype", "order", "filters", "compressor"}
        if extra:
            raise MetadataError(f"codec 'zarr_v2': unknown configuration keys {sorted(extra)}")
        if "dtype" not in configuration:
            raise MetadataError("codec 'zarr_v2': configuration field 'dtype' is required")
        return cls(
            _dtype_from_json(configuration["dtype"]),
            configuration.get("order", "C"),
            configuration.get("filters"),
            configuration.get("compressor"),
        )

    def configuration(self) -> dict[str, Any]:
        return {
            "dtype": _dtype_json(self.dtype),
            "order": self.order,
            "filters": self.filter_configs,
            "compressor": None if self.compressor is None else self.compressor.config,
        }

    # -------------------------------------------------------------- sizes

    def filtered_size(self, nbytes: int) -> int:
        """Size of a chunk of ``nbytes`` decoded bytes after every filter."""
        for codec in self.filters:
            nbytes = FILTER_SIZES[codec.codec_id](codec, nbytes)
        return nbytes

    def filtered_dtype(self) -> np.dtype[Any]:
        """The element type the compressor sees (the last filter's output type)."""
        return self._filtered_dtype

    def validate(self, spec: ChunkSpec) -> None:
        if spec.dtype != self.dtype.newbyteorder("="):
            raise MetadataError(
                f"codec 'zarr_v2': chunks of {spec.dtype} do not match the stored type {self.dtype}"
            )
        self.filtered_size(spec.nbytes)

    def cannot_encode(self, spec: ChunkSpec) -> str | None:
        """The filters on zeros of the stored type, as many as make whole elements of every
        type a filter views them as (``shuffle`` left out: its element size is a size rule of
        the chunk, checked when the array is opened), then the compressor on 64 bytes
        (``pcodec``, which takes numbers only, left out)."""
        sizes = [self.dtype.itemsize, 8]
        for codec in self.filters:
            for attr in ("dtype", "astype", "decode_dtype", "encode_dtype"):
                if getattr(codec, attr, None) is not None:
                    sizes.append(np.dtype(getattr(codec, attr)).itemsize)
        nbytes = math.lcm(*sizes)
        if nbytes > 1 << 20:  # (no trial of the filters: types no numcodecs filter takes)
            return None
        buf: Any = np.zeros(nbytes // self.dtype.itemsize, dtype=self.dtype)
        for codec in self.filters:
            if codec.codec_id == "shuffle":
                continue
            why = encode_trial(codec, buf, "filter")
            if why is not None:
                return why
            buf = codec.encode(buf)
        if self.compressor is None or self.compressor.id == "pcodec":
            return None
        return encode_trial(self.compressor.codec, np.zeros(64, dtype="u1"), "compressor")

    def max_encoded_size(self, spec: ChunkSpec) -> int:
        size = self.filtered_size(spec.nbytes)
        return size if self.compressor is None else self.compressor.max_encoded_size(size)

    # -------------------------------------------------------------- coding

    def encode(self, arr: np.ndarray[Any, Any], spec: ChunkSpec) -> bytes:
        stored = np.asarray(arr, dtype=self.dtype)
        buf: Any = stored.ravel(order=self.order)
        for codec in self.filters:
            buf = codec.encode(buf)
        if self.compressor is not None:
            return self.compressor.encode(buf)
        return ensure_bytes(buf)

    def decode(self, data: bytes | memoryview, spec: ChunkSpec) -> np.ndarray[Any, Any]:
        expected = self.filtered_size(spec.nbytes)
        buf: Any = data
        if self.compressor is not None:
            buf = self.compressor.decode(data, expected, self.filtered_dtype())
        size = memoryview(buf).nbytes
        if size != expected:
            raise CorruptDataError(
                f"chunk holds {size} bytes before the filters, expected {expected}"
            )
        for codec in reversed(self.filters):
            buf = codec.decode(buf)
        raw = ensure_contiguous_ndarray(buf).view(np.uint8)
        if raw.nbytes != spec.nbytes:
            raise CorruptDataError(
                f"chunk decodes to {raw.nbytes} bytes, expected {spec.nbytes} "
                f"for shape {spec.shape} of {self.dtype}"
            )
        flat = np.frombuffer(raw, dtype=self.dtype, count=prod(spec.shape))
        out = np.empty(spec.shape, dtype=spec.dtype)
        out[...] = flat.reshape(spec.shape, order=self.order)
        return out
