"""The ``gzip`` codec (bytes -> bytes): DEFLATE in the gzip file format (RFC 1951, RFC 1952).

Spec: https://zarr-specs.readthedocs.io/en/latest/v3/codecs/gzip/ (specs/v3/codecs/gzip.rst)
Name: ``gzip``
Example: ``{"name": "gzip", "configuration": {"level": 5}}``

Invariants:
- ``level`` is an integer in 0..9 (absent means 5, as zarr-python reads it).
- ``encode`` writes one gzip member with a zeroed timestamp, so equal input gives equal bytes.
- ``decode`` reads what zarr-python reads: one or more gzip members, optionally followed by
  zero padding; a zlib-wrapped or raw DEFLATE stream, a truncated stream, a bad CRC/length
  trailer or trailing garbage is ``CorruptDataError``. Output is produced incrementally and
  the decoder stops as soon as it would exceed ``max_size`` (decompression bombs never
  allocate more than ``max_size + 1`` bytes of output).
- The DEFLATE work goes to ISA-L (``isal``) when it is installed: its inflate is ~1.6x zlib's
  on array data, and for ``level`` 1..3 its deflate (ISA-L's levels 1..3: faster than zlib's
  level 1, compressing about as well as zlib's levels 1..6) is used too. Level 0 (stored
  blocks) and 4..9 stay with zlib, so a high level keeps zlib's ratio. Either way the output
  is standard gzip that every reader decodes; without ``isal`` everything is zlib.
- A stream of one gzip member whose trailer's length (ISIZE) fits ``max_size`` is first
  inflated by libdeflate (the system's ``libdeflate.so.0``, through ctypes) straight into a
  buffer of exactly that length from ``buffers.take`` (a reused block for a chunk of 1 MiB or
  more, ``core/buffers.py``): ISA-L and zlib only return fresh memory, whose first touch
  costs ~20% of the decode on the benchmark machine. libdeflate checks the CRC and the
  length itself. Anything it does not take whole (several members, padding, a damaged
  stream, a length over ``max_size``) is decoded again by the streaming path above, which
  alone decides what is an error, so both paths accept the same streams.
"""

from __future__ import annotations

import ctypes
import threading
import zlib
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import numpy as np

from zarrfs.core import buffers
from zarrfs.core.codecs._bounded import decompress_streams, encoded_size_bound
from zarrfs.core.codecs._config import int_field, refuse_unknown_keys
from zarrfs.core.codecs.base import BytesBytesCodec, register_codec
from zarrfs.core.errors import CorruptDataError
from zarrfs.core.libc import function
from zarrfs.core.pages import prefault

_GZIP_WBITS = 16 + zlib.MAX_WBITS  # gzip header and trailer only
_GZIP_MAGIC = b"\x1f\x8b"


def _isal() -> ModuleType | None:
    try:
        from isal import isal_zlib
    except ImportError:  # optional speed-up: zlib does the same work, slower
        return None
    return isal_zlib


_ISAL = _isal()
#: the deflate implementation and its error class for decoding
_INFLATE: Any = _ISAL or zlib
_INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error,) + (
    (_ISAL.error,) if _ISAL is not None else ()
)


class GzipCodec(BytesBytesCodec):
    """gzip compression at ``level`` 0..9."""

    name = "gzip"
    decodes_buffers = True

    def __init__(self, level: int = 5) -> None:
        self.level = int_field(self.name, {"level": level}, "level", low=0, high=9)

    @classmethod
    def from_config(cls, configuration: Mapping[str, Any]) -> GzipCodec:
        refuse_unknown_keys(cls.name, configuration, ("level",))
        return cls(int_field(cls.name, configuration, "level", low=0, high=9, default=5))

    def configuration(self) -> dict[str, Any]:
        return {"level": self.level}

    def encode(self, data: bytes | memoryview) -> bytes:
        impl = _ISAL if _ISAL is not None and 1 <= self.level <= 3 else zlib
        # one call: no second copy of the output to join a compress() and a flush() result
        return impl.compress(data, self.level, _GZIP_WBITS)

    def decode(self, data: bytes | memoryview, max_size: int) -> bytes | memoryview:
        return gzip_decompress_bounded(data, max_size)

    def max_encoded_size(self, size: int) -> int:
        return encoded_size_bound(size)


def gzip_decompress_bounded(data: bytes | memoryview, max_size: int) -> bytes | memoryview:
    """Decode concatenated gzip members into at most ``max_size`` bytes."""
    # a memoryview is decoded in place (the engine may read chunks into reused buffers)
    pending = data if isinstance(data, bytes) else memoryview(data).cast("B")
    if not pending:
        raise CorruptDataError("gzip: empty stream")
    whole = _inflate_into_block(pending, max_size)
    if whole is not None:
        return whole
    return decompress_streams(
        "gzip",
        lambda: _INFLATE.decompressobj(_GZIP_WBITS),
        _INFLATE_ERRORS,
        pending,
        max_size,
        check=_check_magic,
        padding=b"\x00",
    )


def _check_magic(pending: bytes | memoryview) -> None:
    if bytes(pending[: len(_GZIP_MAGIC)]) != _GZIP_MAGIC:
        raise CorruptDataError("gzip: not a gzip stream (bad magic bytes)")


#: libdeflate's result codes (``enum libdeflate_result``)
_LIBDEFLATE_SUCCESS = 0
#: ``libdeflate_gzip_decompress_ex(d, in, in_nbytes, out, out_nbytes_avail, &in_used,
#: &out_written)``: one gzip member, CRC and length checked, into the caller's buffer
_SizeP = ctypes.POINTER(ctypes.c_size_t)
_gzip_decompress_ex = function(
    "libdeflate_gzip_decompress_ex",
    [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
     _SizeP, _SizeP],
    library="libdeflate.so.0",
)  # fmt: skip
_alloc_decompressor = function(
    "libdeflate_alloc_decompressor", [], ctypes.c_void_p, library="libdeflate.so.0"
)
#: a libdeflate decompressor is not thread-safe: each thread keeps its own (~32 KiB, for the
#: thread's life: libdeflate's own free function is not needed for so few)
_local = threading.local()


def libdeflate_available() -> bool:
    """Whether single-member streams are inflated by libdeflate into reused blocks."""
    return _gzip_decompress_ex is not None and _alloc_decompressor is not None


def _inflate_into_block(data: bytes | memoryview, max_size: int) -> memoryview | None:
    """``data`` inflated into a reused block if it is one gzip member, CRC and length right,
    whose trailer's length fits ``max_size``; None for anything else (left to the streaming
    path, which tells a damaged stream from several members or padding)."""
    if not libdeflate_available() or len(data) < 18:
        return None
    size = int.from_bytes(data[-4:], "little")  # ISIZE: the length modulo 2**32
    if size > max_size:
        return None
    decompressor = getattr(_local, "decompressor", None)
    if decompressor is None:
        decompressor = _local.decompressor = _alloc_decompressor()
        if not decompressor:
            return None
    src = np.frombuffer(data, dtype=np.uint8)
    out = buffers.take(size)
    prefault(out.data)  # a fresh block is faulted in with one call, not a page at a time
    used, written = ctypes.c_size_t(), ctypes.c_size_t()
    result = _gzip_decompress_ex(
        decompressor, src.ctypes.data, len(src), out.ctypes.data, size,
        ctypes.byref(used), ctypes.byref(written),
    )  # fmt: skip
    if result != _LIBDEFLATE_SUCCESS or used.value != len(src) or written.value != size:
        return None
    return out.data


register_codec(GzipCodec)
