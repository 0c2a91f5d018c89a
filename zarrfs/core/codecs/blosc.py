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
- ``decode_progressively`` writes only decoded bytes to its output, front to back, and tells
  how far they are final; it hands c-blosc a stream whose header claims only the bytes read so
  far (c-blosc checks every block against that claim), so no block is decoded from bytes not
  yet read; a stream it cannot take that way is left to ``decode`` before anything is written.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping
from typing import Any

import numcodecs.blosc
import numpy as np

from zarrfs.core import buffers
from zarrfs.core.codecs._bounded import (
    check_claimed_size,
    decompress_into_block,
    encoded_size_bound,
)
from zarrfs.core.codecs._config import choice_field, int_field, refuse_unknown_keys
from zarrfs.core.codecs.base import BytesBytesCodec, register_codec
from zarrfs.core.errors import CorruptDataError, UnsupportedError
from zarrfs.core.libc import function

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
        # a reused block, or fresh memory faulted in with one call (ordinary pages: numpy's
        # huge-page advice made a process compact memory, decoding a 512 MiB array took 1.5 s
        # of CPU instead of 0.5 s); c-blosc writes exactly the header's claim or fails
        return decompress_into_block("blosc", numcodecs.blosc.decompress, data, header.nbytes)

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


#: c-blosc's ``blosc_getitem`` (decodes the blocks holding a range of items, in the calling
#: thread, with a context of its own) in numcodecs' copy of the library; None where absent
_getitem = function(
    "blosc_getitem",
    [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p],
    library=numcodecs.blosc.__file__,
)

#: the only header format ``blosc_getitem`` of c-blosc 1.x reads
_FORMAT_VERSION = 2


def progressive_available() -> bool:
    """True if ``decode_progressively`` can decode here (c-blosc's entry point was found)."""
    return _getitem is not None


def decode_progressively(
    encoded: np.ndarray[Any, Any],
    size: int,
    read_to: Callable[[int], None],
    out: np.ndarray[Any, Any],
    piece: int,
    done: Callable[[int], None],
) -> bool:
    """Decode the blosc stream of ``size`` bytes that is being read into ``encoded`` (uint8,
    at least ``size`` long; ``read_to(n)`` returns once its first ``n`` bytes are there) into
    ``out`` (uint8, contiguous, exactly the stream's decoded size), a run of blocks of about
    ``piece`` bytes at a time, calling ``done(k)`` once the first ``k`` bytes of ``out`` are
    final. The GIL is released while c-blosc decodes.

    False, with nothing written to ``out``, when the stream is not one this can decode so (no
    c-blosc entry point, another header format, an uncompressed payload, block starts that
    overlap or leave the stream, a size that is not whole items): the caller decodes it
    whole. Raises
    ``CorruptDataError`` on a damaged stream (``out`` may then hold a final prefix)."""
    if _getitem is None or size < HEADER_SIZE:
        return False
    read_to(HEADER_SIZE)
    header = BloscHeader(encoded[:HEADER_SIZE].tobytes())
    ts, bs, nbytes = header.typesize, header.blocksize, header.nbytes
    if (
        header.version != _FORMAT_VERSION
        or header.flags & _MEMCPYED
        or header.cbytes != size
        or nbytes != len(out)
        or nbytes == 0
        or ts == 0
        or bs <= 0
        or bs % ts
        or nbytes % ts
    ):
        return False
    nblocks = -(-nbytes // bs)
    first_data = HEADER_SIZE + 4 * nblocks
    if first_data >= size:
        return False
    read_to(first_data)
    starts = encoded[HEADER_SIZE:first_data].view("<i4").astype(np.int64)
    # c-blosc's threads store blocks in the order they finish, so a block's bytes run from
    # its start to the next start in the stream (or its end): distinct starts, all within it
    order = np.argsort(starts, kind="stable")
    placed = starts[order]
    if placed[0] < first_data or placed[-1] >= size or np.any(np.diff(placed) <= 0):
        return False
    ends = np.empty_like(starts)
    ends[order] = np.append(placed[1:], size)
    # the bytes to have read before blocks [0, j] can all be decoded
    needed = np.maximum.accumulate(ends)
    per = max(1, piece // bs)
    src, dest = encoded.ctypes.data, out.ctypes.data
    claimed = encoded[12:16].view("<u4")
    try:
        for j0 in range(0, nblocks, per):
            j1 = min(nblocks, j0 + per)
            have = int(needed[j1 - 1])
            read_to(have)
            claimed[0] = have  # c-blosc refuses any block that would read past it
            lo, hi = j0 * bs, min(nbytes, j1 * bs)
            got = _getitem(src, lo // ts, (hi - lo) // ts, dest + lo)
            if got != hi - lo:
                raise CorruptDataError(
                    f"blosc: blocks {j0}-{j1 - 1} of {nblocks} do not decode ({got})"
                )
            done(hi)
    finally:
        claimed[0] = size
    return True


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
