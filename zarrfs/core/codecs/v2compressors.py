"""Zarr v2 compressors (numcodecs ids) with bounded decoding.

Spec: v2.rst "compressor" (a numcodecs configuration object with an ``"id"``). Supported ids and
the stored formats they read:

- ``blosc``: a c-blosc frame (16-byte header) — decoded by zarrfs' blosc codec;
- ``zlib``: one RFC 1950 stream (bytes after its end are ignored, as ``zlib.decompress`` does);
- ``gzip``: RFC 1952 members — decoded by zarrfs' gzip codec;
- ``zstd``: RFC 8878 frames — decoded by zarrfs' zstd codec;
- ``lz4``: numcodecs' framing: the decoded size as 4 little-endian bytes, then one LZ4 block
  (1 MiB or more: decoded into a reused block, ``core/buffers.py``, like blosc, gzip and zstd);
- ``bz2``: one or more bzip2 streams;
- ``lzma``: xz, lzma-alone or raw streams (configuration ``format`` and ``filters``);
- ``crc32``, ``crc32c``, ``adler32``, ``fletcher32``, ``jenkins_lookup3``: the data with a
  4-byte checksum, verified and stripped by numcodecs (the output is shorter than the input);
- ``pcodec``: a pcodec stream of numbers, decoded into exactly the expected element count.

Invariants:
- Encoding uses numcodecs itself, so what zarrfs writes is what zarr-python writes.
- ``decode(data, max_size)`` never produces (nor allocates for output) more than ``max_size + 1``
  bytes: formats with a size header are checked before decompressing; streaming formats are
  decompressed with an output limit. A larger, truncated or malformed stream raises
  ``CorruptDataError``.
- A configuration numcodecs refuses, or an unknown id, raises ``MetadataError`` /
  ``UnsupportedError`` when the compressor is built.
"""

from __future__ import annotations

import bz2
import lzma
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import numcodecs
import numcodecs.lz4
import numpy as np
from numcodecs.abc import Codec as NumCodec
from pcodec import standalone as pcodec_standalone

from zarrfs.core import buffers
from zarrfs.core.codecs._bounded import (
    check_claimed_size,
    decompress_into_block,
    decompress_streams,
    encoded_size_bound,
)
from zarrfs.core.codecs.blosc import BloscCodec
from zarrfs.core.codecs.gzip import gzip_decompress_bounded
from zarrfs.core.codecs.zstd import ZstdCodec
from zarrfs.core.errors import CorruptDataError, MetadataError, UnsupportedError

#: memory the lzma decoder may use for its dictionary and state (preset 9 needs about 65 MiB)
LZMA_MEMLIMIT = 256 << 20

Decoder = Callable[[Mapping[str, Any], bytes, int], bytes | memoryview]


# zarrfs' own blosc and zstd codecs check headers and frames before decompressing; their
# configuration only matters for encoding, so one instance of each serves every v2 chunk
_BLOSC = BloscCodec("blosclz", 5, "noshuffle")
_ZSTD = ZstdCodec()


def _decode_blosc(config: Mapping[str, Any], data: bytes, max_size: int) -> bytes | memoryview:
    return _BLOSC.decode(data, max_size)


def _decode_gzip(config: Mapping[str, Any], data: bytes, max_size: int) -> bytes | memoryview:
    return gzip_decompress_bounded(data, max_size)


def _decode_zstd(config: Mapping[str, Any], data: bytes, max_size: int) -> bytes | memoryview:
    return _ZSTD.decode(data, max_size)


def _decode_zlib(config: Mapping[str, Any], data: bytes, max_size: int) -> bytes:
    stream = zlib.decompressobj()
    try:
        out = stream.decompress(data, max_size + 1)
    except zlib.error as exc:
        raise CorruptDataError(f"zlib: {exc}") from None
    if len(out) > max_size:
        raise CorruptDataError(f"zlib: stream decodes to more than the {max_size} bytes allowed")
    if not stream.eof:
        raise CorruptDataError("zlib: truncated stream")
    return out


def _decode_lz4(config: Mapping[str, Any], data: bytes, max_size: int) -> bytes | memoryview:
    if len(data) < 4:
        raise CorruptDataError("lz4: stream shorter than its 4-byte size header")
    claimed = int.from_bytes(data[:4], "little")
    check_claimed_size("lz4", claimed, max_size)
    if claimed >= buffers.MIN_BLOCK:
        # into a reused block, not fresh memory; numcodecs fails a block that decodes to any
        # other size than its header claims, so no byte of the block is left undecoded
        return decompress_into_block("lz4", numcodecs.lz4.decompress, data, claimed)
    try:
        out = bytes(numcodecs.lz4.decompress(data))
    except (RuntimeError, ValueError) as exc:
        raise CorruptDataError(f"lz4: {exc}") from None
    if len(out) != claimed:
        raise CorruptDataError(f"lz4: decoded {len(out)} bytes, header claims {claimed}")
    return out


def _decode_bz2(config: Mapping[str, Any], data: bytes, max_size: int) -> bytes:
    return decompress_streams("bz2", bz2.BZ2Decompressor, (OSError, ValueError), data, max_size)


def _decode_lzma(config: Mapping[str, Any], data: bytes, max_size: int) -> bytes:
    fmt = config.get("format", lzma.FORMAT_XZ)
    filters = config.get("filters")

    def make() -> lzma.LZMADecompressor:
        if fmt == lzma.FORMAT_RAW:
            return lzma.LZMADecompressor(fmt, filters=filters)
        return lzma.LZMADecompressor(fmt, memlimit=LZMA_MEMLIMIT)

    return decompress_streams("lzma", make, (lzma.LZMAError, ValueError), data, max_size)


def _decode_checksum(config: Mapping[str, Any], data: bytes, max_size: int) -> bytes:
    """A numcodecs checksum codec: numcodecs verifies and strips the checksum (the output is
    shorter than the input)."""
    if len(data) > max_size + 64:
        raise CorruptDataError(f"{config['id']}: {len(data)} bytes, more than {max_size} allowed")
    try:
        out = bytes(build_numcodec(config, "compressor").decode(data))
    except (RuntimeError, ValueError) as exc:
        raise CorruptDataError(f"{config['id']}: {exc}") from None
    if len(out) > max_size:
        raise CorruptDataError(f"{config['id']}: decodes to more than {max_size} bytes")
    return out


def decode_pcodec(data: bytes, dtype: np.dtype[Any], count: int) -> np.ndarray[Any, Any]:
    """A pcodec stream decoded into ``count`` elements of ``dtype``: a stream holding fewer, or
    another number type, is corrupt; numbers beyond ``count`` are never decoded."""
    out = np.empty(count, dtype=dtype)
    if count == 0:
        return out
    try:
        progress = pcodec_standalone.simple_decompress_into(data, out)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise CorruptDataError(f"pcodec: {exc}") from None
    if progress.n_processed != count or not progress.finished:
        raise CorruptDataError(f"pcodec: stream does not hold exactly {count} elements")
    return out


DECODERS: dict[str, Decoder] = {
    "blosc": _decode_blosc,
    "zlib": _decode_zlib,
    "gzip": _decode_gzip,
    "zstd": _decode_zstd,
    "lz4": _decode_lz4,
    "bz2": _decode_bz2,
    "lzma": _decode_lzma,
    **dict.fromkeys(
        ("crc32", "crc32c", "adler32", "fletcher32", "jenkins_lookup3"), _decode_checksum
    ),
}
#: compressors that need the element type to decode (numbers in, numbers out)
TYPED_DECODERS = ("pcodec",)


class V2Compressor:
    """One v2 ``compressor`` object: numcodecs encodes, a bounded decoder decodes."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        if not isinstance(config, Mapping) or not isinstance(config.get("id"), str):
            raise MetadataError(f"compressor must be an object with a string 'id', got {config!r}")
        self.id: str = config["id"]
        if self.id not in DECODERS and self.id not in TYPED_DECODERS:
            known = ", ".join([*DECODERS, *TYPED_DECODERS])
            raise UnsupportedError(f"compressor {self.id!r} is not supported (supported: {known})")
        self.config: dict[str, Any] = dict(config)
        self.codec: NumCodec = build_numcodec(self.config, "compressor")

    def encode(self, buf: Any) -> bytes:
        return bytes(self.codec.encode(buf))

    def decode(
        self, data: bytes | memoryview, max_size: int, dtype: np.dtype[Any] | None = None
    ) -> bytes | memoryview:
        """Decode within ``max_size`` bytes; ``dtype`` is the type of the compressor's input
        elements (needed by pcodec, which stores numbers)."""
        if self.id == "pcodec":
            dtype = np.dtype("u1") if dtype is None else dtype
            return decode_pcodec(bytes(data), dtype, max_size // dtype.itemsize).tobytes()
        return DECODERS[self.id](self.config, bytes(data), max_size)

    def max_encoded_size(self, size: int) -> int:
        return encoded_size_bound(size + 16)


def build_numcodec(config: Mapping[str, Any], what: str) -> NumCodec:
    """A numcodecs codec from its configuration; ``MetadataError`` if numcodecs refuses it."""
    try:
        return numcodecs.get_codec(dict(config))
    except (TypeError, ValueError, KeyError) as exc:
        raise MetadataError(f"{what} {dict(config)!r}: {exc}") from None
