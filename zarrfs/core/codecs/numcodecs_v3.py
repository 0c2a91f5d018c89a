"""``numcodecs.*`` codecs in Zarr v3 metadata, through numcodecs' own registry.

Spec: not in the v3 core spec; the convention zarr-python 3 writes when a numcodecs codec is
given to a v3 array (``zarr.codecs.numcodecs``): the name is ``numcodecs.<id>`` and the
configuration is the numcodecs configuration without ``id``.
Names: ``numcodecs.<id>`` for every id below.
Example: ``{"name": "numcodecs.zlib", "configuration": {"level": 1}}``

Kinds (as zarr-python 3 uses them):
- bytes -> bytes: ``blosc``, ``zlib``, ``gzip``, ``zstd``, ``lz4``, ``bz2``, ``lzma`` and the
  checksums ``crc32``, ``crc32c``, ``adler32``, ``fletcher32``, ``jenkins_lookup3`` (decoded
  by the bounded decoders of ``v2compressors``), ``shuffle`` and ``base64`` (output no longer
  than the input);
- array -> array: ``delta``, ``fixedscaleoffset``, ``quantize``, ``bitround``, ``astype``,
  ``packbits`` (each output has a size fixed by the chunk; ``resolve_spec`` follows
  zarr-python's ``resolve_metadata``: ``astype`` of delta/fixedscaleoffset, ``encode_dtype``
  of astype, ``packbits`` -> ``(1 + ceil(n / 8),)`` uint8);
- array -> bytes: ``pcodec``, decoded into an array of exactly the chunk's element count.

Invariants:
- The configuration is handed to ``numcodecs.get_codec``; numcodecs refusing it (or a missing
  optional library such as ``zfpy``) is a ``MetadataError``/``UnsupportedError`` naming it.
- Decoding is bounded: no decoder produces or allocates more than the chunk's bound; a bomb or
  a stream claiming more is a ``CorruptDataError`` (through the chain's error mapping).
- Encoding is numcodecs' own, so what zarrfs writes reads back in zarr-python.
- Object codecs (``vlen-*``, ``json2``, ``msgpack2``, ``pickle``, ``categorize``) are not
  ``numcodecs.*`` codecs in v3 (zarr-python uses ``vlen-utf8``/``vlen-bytes``): refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from math import ceil, prod
from typing import Any, ClassVar

import numcodecs
import numpy as np
from numcodecs.abc import Codec as NumCodec
from numcodecs.compat import ensure_bytes, ensure_contiguous_ndarray

from zarrfs.core.codecs._bounded import encoded_size_bound
from zarrfs.core.codecs._filters import encode_trial, filter_output
from zarrfs.core.codecs.base import (
    ArrayArrayCodec,
    ArrayBytesCodec,
    BytesBytesCodec,
    ChunkSpec,
    Codec,
    register_codec,
)
from zarrfs.core.codecs.v2compressors import DECODERS, decode_pcodec
from zarrfs.core.errors import CorruptDataError, MetadataError, UnsupportedError

PREFIX = "numcodecs."

BYTES_IDS = (*DECODERS, "shuffle", "base64")
ARRAY_IDS = ("delta", "fixedscaleoffset", "quantize", "bitround", "astype", "packbits")
SERIALIZER_IDS = ("pcodec",)


def _numcodec(name: str, configuration: Mapping[str, Any]) -> NumCodec:
    if "id" in configuration:
        raise MetadataError(f"codec {name!r}: 'id' is implied by the name, not configured")
    config = {"id": name.removeprefix(PREFIX), **configuration}
    try:
        return numcodecs.get_codec(config)
    except (TypeError, ValueError, KeyError, ImportError) as exc:
        if isinstance(exc, ValueError) and "not available" in str(exc):
            raise UnsupportedError(f"codec {name!r}: numcodecs cannot load it: {exc}") from None
        raise MetadataError(f"codec {name!r}: {exc}") from None


class _Numcodecs:
    """What the three kinds share: the numcodecs codec and its configuration."""

    name: ClassVar[str]

    def __init__(self, configuration: Mapping[str, Any]) -> None:
        self.config = dict(configuration)
        self.codec = _numcodec(self.name, self.config)
        #: the configuration as numcodecs (and the v2 decoders) spell it, with its ``id``
        self.numcodecs_config = {"id": self.codec.codec_id, **self.config}

    @classmethod
    def from_config(cls, configuration: Mapping[str, Any]) -> Any:
        return cls(configuration)

    def configuration(self) -> dict[str, Any]:
        return dict(self.config)


class NumcodecsBytesCodec(_Numcodecs, BytesBytesCodec):
    """A numcodecs compressor, checksum or byte shuffle as a v3 bytes -> bytes codec."""

    def encode(self, data: bytes | memoryview) -> bytes:
        return ensure_bytes(self.codec.encode(ensure_contiguous_ndarray(data)))

    def decode(self, data: bytes | memoryview, max_size: int) -> bytes | memoryview:
        cid = self.codec.codec_id
        decoder = DECODERS.get(cid)
        if decoder is not None:
            return decoder(self.numcodecs_config, bytes(data), max_size)
        # shuffle keeps the size, base64 shrinks it: the input bounds the output
        if cid == "shuffle" and len(data) > max_size:
            raise CorruptDataError(f"shuffle: {len(data)} bytes, more than {max_size} allowed")
        out = ensure_bytes(self.codec.decode(bytes(data)))
        if len(out) > max_size:
            raise CorruptDataError(f"{self.name}: decodes to more than {max_size} bytes")
        return out

    def cannot_encode(self, spec: ChunkSpec) -> str | None:
        if self.codec.codec_id in ("shuffle", "base64"):  # (no configuration to refuse)
            return None
        return encode_trial(self.codec, np.zeros(64, dtype="u1"), "codec")

    def max_encoded_size(self, size: int) -> int:
        if self.codec.codec_id == "base64":
            return 4 * ceil(size / 3) + 4
        return encoded_size_bound(size + 16)


def _dtype_attr(codec: NumCodec, attr: str, default: np.dtype[Any]) -> np.dtype[Any]:
    value = getattr(codec, attr, None)
    return default if value is None else np.dtype(value).newbyteorder("=")


class NumcodecsArrayCodec(_Numcodecs, ArrayArrayCodec):
    """A numcodecs filter as a v3 array -> array codec (output size fixed by the chunk)."""

    computes_with_values: ClassVar[bool] = True

    def encoded_dtype(self, dtype: np.dtype[Any]) -> np.dtype[Any]:
        cid = self.codec.codec_id
        if cid in ("delta", "fixedscaleoffset"):
            return _dtype_attr(self.codec, "astype", dtype)
        if cid == "astype":
            return _dtype_attr(self.codec, "encode_dtype", dtype)
        if cid == "packbits":
            return np.dtype("u1")
        return dtype

    def validate(self, spec: ChunkSpec) -> None:
        cid = self.codec.codec_id
        if cid == "packbits" and spec.dtype != np.dtype("?"):
            raise MetadataError(f"codec {self.name!r} needs a bool data type, not {spec.dtype}")
        if spec.dtype.kind not in "biufc":
            raise MetadataError(f"codec {self.name!r} applies to numbers, not {spec.dtype}")
        filter_output(self.codec, spec.dtype)

    def cannot_encode(self, spec: ChunkSpec) -> str | None:
        return encode_trial(self.codec, np.zeros(8, dtype=spec.dtype), "codec")

    def resolve_spec(self, spec: ChunkSpec) -> ChunkSpec:
        dtype = self.encoded_dtype(spec.dtype)
        shape = (
            (1 + ceil(prod(spec.shape) / 8),) if self.codec.codec_id == "packbits" else spec.shape
        )
        fill = np.zeros((), dtype=dtype)
        if self.codec.codec_id != "packbits":
            try:
                fill = np.asarray(self.codec.encode(spec.fill_value.reshape(1))).view(dtype)
                fill = fill.reshape(())
            except (TypeError, ValueError):
                fill = np.zeros((), dtype=dtype)
        return ChunkSpec(tuple(shape), dtype, fill)

    def encode(self, arr: np.ndarray[Any, Any], spec: ChunkSpec) -> np.ndarray[Any, Any]:
        out = np.asarray(self.codec.encode(np.ascontiguousarray(arr)))
        target = self.resolve_spec(spec)
        return out.view(target.dtype).reshape(target.shape)

    def decode(self, arr: np.ndarray[Any, Any], spec: ChunkSpec) -> np.ndarray[Any, Any]:
        out = np.asarray(self.codec.decode(np.ascontiguousarray(arr)))
        if out.dtype != spec.dtype:
            out = out.astype(spec.dtype)
        if out.size != prod(spec.shape):
            raise CorruptDataError(
                f"{self.name}: decoded {out.size} elements, expected {prod(spec.shape)}"
            )
        return out.reshape(spec.shape)


class NumcodecsSerializer(_Numcodecs, ArrayBytesCodec):
    """``numcodecs.pcodec``: numbers -> a pcodec stream, decoded into exactly one chunk."""

    def validate(self, spec: ChunkSpec) -> None:
        if spec.dtype.kind not in "iuf" or spec.dtype.itemsize not in (2, 4, 8):
            raise MetadataError(f"codec {self.name!r} cannot encode {spec.dtype}")

    def encode(self, arr: np.ndarray[Any, Any], spec: ChunkSpec) -> bytes:
        return ensure_bytes(self.codec.encode(np.ascontiguousarray(arr).reshape(-1)))

    def decode(self, data: bytes | memoryview, spec: ChunkSpec) -> np.ndarray[Any, Any]:
        return decode_pcodec(bytes(data), spec.dtype, prod(spec.shape)).reshape(spec.shape)

    def max_encoded_size(self, spec: ChunkSpec) -> int:
        return encoded_size_bound(spec.nbytes + 1024)


_KINDS: dict[tuple[str, ...], type[Codec]] = {
    BYTES_IDS: NumcodecsBytesCodec,
    ARRAY_IDS: NumcodecsArrayCodec,
    SERIALIZER_IDS: NumcodecsSerializer,
}

#: numcodecs codecs zarr-python accepts in v3 that zarrfs refuses, and why
REFUSED = {
    "zfpy": "zfpy is not installed with zarrfs (its 1.0.1.post0 wheel makes numcodecs 0.16 fail "
    "to import), and a zfp stream's header alone sets the decoded size",
}


class RefusedNumcodecs(NumcodecsSerializer):
    """A ``numcodecs.*`` name zarrfs knows but does not read: refused with the reason."""

    @classmethod
    def from_config(cls, configuration: Mapping[str, Any]) -> Any:
        reason = REFUSED[cls.name.removeprefix(PREFIX)]
        raise UnsupportedError(f"codec {cls.name!r} is not supported: {reason}")


for _cid in REFUSED:
    register_codec(type(f"Numcodecs_{_cid}", (RefusedNumcodecs,), {"name": PREFIX + _cid}))

for _ids, _base in _KINDS.items():
    for _cid in _ids:
        register_codec(type(f"Numcodecs_{_cid}", (_base,), {"name": PREFIX + _cid}))
