"""The ``blosc`` codec (bytes -> bytes): the c-blosc (version 1 format) meta-compressor.

Spec: https://zarr-specs.readthedocs.io/en/latest/v3/codecs/blosc/ (specs/v3/codecs/blosc.rst)
Name: ``blosc``
Example: ``{"name": "blosc", "configuration": {"cname": "lz4", "clevel": 1,
"shuffle": "shuffle", "typesize": 4, "blocksize": 0}}``

Invariants:
- ``cname`` is one of the compressors the installed c-blosc provides (``snappy`` is valid
  metadata but refused with ``UnsupportedError`` when the build lacks it); ``clevel`` 0..9;
  ``shuffle`` ``noshuffle``/``shuffle``/``bitshuffle``; ``blocksize`` >= 0 (0 = automatic,
  absent means 0); ``typesize`` >= 1.
- ``typesize`` may be absent (zarr-python reads such documents and fills it from the data
  type). Decoding never needs it (the blosc header records it); encoding then uses 1, which
  gives a valid stream (shuffling with a 1-byte stride is a no-op for byte shuffle), and
  ``configuration()`` keeps it absent so the document is not rewritten.
- ``decode`` reads the 16-byte header first and refuses, before decompressing anything, a
  header that claims more than ``max_size`` bytes or more compressed bytes than the buffer
  holds; c-blosc writes exactly the header's claim into a buffer of that size (it fails
  otherwise), which ``decode`` returns as a view.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from typing import Any

import numcodecs.blosc
import numpy as np

from zarrfs.core import buffers
from zarrfs.core.codecs._bounded import check_claimed_size, encoded_size_bound
from zarrfs.core.codecs._config import choice_field, int_field, refuse_unknown_keys
from zarrfs.core.codecs.base import BytesBytesCodec, register_codec
from zarrfs.core.errors import CorruptDataError, UnsupportedError
from zarrfs.core.libc import function
from zarrfs.core.pages import prefault

CNAMES = ("blosclz", "lz4", "lz4hc", "snappy", "zlib", "zstd")
SHUFFLES = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}
HEADER_SIZE = 16
_MEMCPYED = 0x02  # header flag: the payload is stored uncompressed


def available_cnames() -> tuple[str, ...]:
    """The blosc compressors the installed c-blosc library provides."""
    return tuple(numcodecs.blosc.list_compressors())


class BloscHeader:
    """The fields of a c-blosc version 1 format header (16 bytes, little endian)."""

    __slots__ = ("version", "flags", "typesize", "nbytes", "blocksize", "cbytes")

    def __init__(self, data: bytes | memoryview) -> None:
        if len(data) < HEADER_SIZE:
            raise CorruptDataError(
                f"blosc: stream of {len(data)} bytes is shorter than the {HEADER_SIZE}-byte header"
            )
        head = bytes(data[:HEADER_SIZE])
        self.version = head[0]
        self.flags = head[2]
        self.typesize = head[3]
        self.nbytes = int.from_bytes(head[4:8], "little")
        self.blocksize = int.from_bytes(head[8:12], "little")
        self.cbytes = int.from_bytes(head[12:16], "little")


class BloscCodec(BytesBytesCodec):
    """Blosc compression; see the module docstring for the configuration."""

    name = "blosc"
    decodes_buffers = True

    def __init__(
        self,
        cname: str,
        clevel: int,
        shuffle: str,
        typesize: int | None = None,
        blocksize: int = 0,
    ) -> None:
        conf: dict[str, Any] = {"cname": cname, "clevel": clevel, "shuffle": shuffle}
        conf["blocksize"] = blocksize
        if typesize is not None:
            conf["typesize"] = typesize
        self.cname, self.clevel, self.shuffle, self.typesize, self.blocksize = _parse(conf)
        self._compressor = numcodecs.blosc.Blosc(
            cname=self.cname,
            clevel=self.clevel,
            shuffle=SHUFFLES[self.shuffle],
            blocksize=self.blocksize,
            typesize=self.typesize or 1,
        )

    @classmethod
    def from_config(cls, configuration: Mapping[str, Any]) -> BloscCodec:
        return cls(*_parse(configuration))

    def configuration(self) -> dict[str, Any]:
        conf: dict[str, Any] = {"cname": self.cname, "clevel": self.clevel, "shuffle": self.shuffle}
        if self.typesize is not None:
            conf["typesize"] = self.typesize
        conf["blocksize"] = self.blocksize
        return conf

    def encode(self, data: bytes | memoryview) -> bytes:
        return bytes(self._compressor.encode(data))

    def encode_buffer(self, data: bytes | memoryview) -> bytes | memoryview:
        encoded = compress_into_block(
            data, self.cname, self.clevel, SHUFFLES[self.shuffle], self.typesize or 1,
            self.blocksize,
        )  # fmt: skip
        return self.encode(data) if encoded is None else encoded

    def decode(self, data: bytes | memoryview, max_size: int) -> bytes | memoryview:
        header = BloscHeader(data)
        check_claimed_size("blosc", header.nbytes, max_size)
        if header.cbytes < HEADER_SIZE or header.cbytes > len(data):
            raise CorruptDataError(
                f"blosc: header claims {header.cbytes} compressed bytes, the stream has {len(data)}"
            )
        if header.flags & _MEMCPYED and header.cbytes != HEADER_SIZE + header.nbytes:
            raise CorruptDataError(
                f"blosc: uncompressed payload of {header.cbytes - HEADER_SIZE} bytes, "
                f"header claims {header.nbytes}"
            )
        if header.nbytes == 0:
            return b""
        # a reused block, or fresh memory faulted in with one call rather than a page at a
        # time as c-blosc writes it (ordinary pages: numpy's huge-page advice made a process
        # compact memory, decoding a 512 MiB array took 1.5 s of CPU instead of 0.5 s)
        out = buffers.take(header.nbytes)
        prefault(out.data)
        try:
            numcodecs.blosc.decompress(data, out)
        except (RuntimeError, ValueError) as exc:
            raise CorruptDataError(f"blosc: {exc}") from None
        return out.data

    def max_encoded_size(self, size: int) -> int:
        return encoded_size_bound(size + HEADER_SIZE)


#: ``BLOSC_MAX_OVERHEAD``: a blosc stream is at most this much longer than its input
_MAX_OVERHEAD = 16


#: c-blosc's ``blosc_compress_ctx`` in the copy of the library numcodecs' blosc extension
#: carries: the call numcodecs itself makes from threads other than the main one, with the
#: same arguments, so its output is byte for byte numcodecs' ``Blosc.encode`` there; None
#: where that copy does not export it
_compress_ctx = function(
    "blosc_compress_ctx",
    [ctypes.c_int, ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p,
     ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int],
    library=numcodecs.blosc.__file__,
)  # fmt: skip


def compress_into_block(
    data: bytes | memoryview, cname: str, clevel: int, shuffle: int, typesize: int, blocksize: int
) -> memoryview | None:
    """``data`` blosc-compressed into a reused block (``core/buffers.py``) rather than into
    fresh memory, as a read-only view; None when the library cannot be reached (the caller
    then compresses through numcodecs). The GIL is released while c-blosc works."""
    compress = _compress_ctx
    if compress is None:
        return None
    src = np.frombuffer(data, dtype=np.uint8)
    capacity = len(src) + _MAX_OVERHEAD
    dest = buffers.take(capacity)
    written = compress(
        clevel, shuffle, typesize, len(src), src.ctypes.data, dest.ctypes.data, capacity,
        cname.encode("ascii"), blocksize, 1,
    )  # fmt: skip
    if written <= 0:
        raise RuntimeError(f"blosc: compression failed ({written})")
    out = dest[:written]
    out.flags.writeable = False
    return memoryview(out.data)


def _parse(configuration: Mapping[str, Any]) -> tuple[str, int, str, int | None, int]:
    name = BloscCodec.name
    refuse_unknown_keys(
        name, configuration, ("cname", "clevel", "shuffle", "typesize", "blocksize")
    )
    cname = choice_field(name, configuration, "cname", CNAMES)
    if cname not in available_cnames():
        raise UnsupportedError(
            f"codec 'blosc': compressor {cname!r} is not available in this blosc build "
            f"(available: {', '.join(available_cnames())})"
        )
    clevel = int_field(name, configuration, "clevel", low=0, high=9)
    shuffle = choice_field(name, configuration, "shuffle", tuple(SHUFFLES))
    typesize: int | None = None
    if "typesize" in configuration:
        typesize = int_field(name, configuration, "typesize", low=1)
    blocksize = int_field(name, configuration, "blocksize", low=0, default=0)
    return cname, clevel, shuffle, typesize, blocksize


register_codec(BloscCodec)
