"""Decompression bombs and damaged chunks of every v2 compressor fail with ``CorruptDataError``
and never allocate much more than the chunk's size.

Each bomb is a valid stream of 8 MiB of zeros stored as one chunk of a 64 KiB chunk array (the
compressed bomb is smaller than a valid chunk may be, so only the decoder stands in the way);
the read must fail while the Python heap's peak stays far below the bomb's size. Truncated and
garbage streams fail the same way, and a reader never gets data it could not verify.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import zlib
from collections.abc import Callable
from typing import Any

import numcodecs
import numpy as np
import pytest
from formats_helpers import engine, python_peak_memory

from zarrfs.core import buffers
from zarrfs.core.codecs.v2compressors import V2Compressor
from zarrfs.core.errors import CorruptDataError
from zarrfs.core.hierarchy import open_array
from zarrfs.core.stores.memory import MemoryStore

BOMB = 8 << 20
CHUNK = 64 << 10
_ZEROS = bytes(BOMB)

COMPRESSORS: dict[str, tuple[dict[str, Any], Callable[[bytes], bytes]]] = {
    "zlib": ({"id": "zlib", "level": 1}, lambda b: zlib.compress(b, 1)),
    "gzip": ({"id": "gzip", "level": 1}, lambda b: gzip.compress(b, 1, mtime=0)),
    "bz2": ({"id": "bz2", "level": 1}, lambda b: bz2.compress(b, 1)),
    "lzma": ({"id": "lzma"}, lambda b: lzma.compress(b, preset=0)),
    "lzma-alone": (
        {"id": "lzma", "format": lzma.FORMAT_ALONE},
        lambda b: lzma.compress(b, format=lzma.FORMAT_ALONE, preset=0),
    ),
    "zstd": ({"id": "zstd", "level": 1}, lambda b: bytes(numcodecs.Zstd(1).encode(b))),
    "lz4": ({"id": "lz4"}, lambda b: bytes(numcodecs.LZ4().encode(b))),
    "blosc": (
        {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1},
        lambda b: bytes(numcodecs.Blosc("lz4", 5, 1).encode(b)),
    ),
}


def _array_with_chunk(compressor: dict[str, Any], chunk: bytes) -> Any:
    store = MemoryStore()
    doc = {
        "zarr_format": 2,
        "shape": [CHUNK * 2],
        "chunks": [CHUNK],
        "dtype": "|u1",
        "compressor": compressor,
        "fill_value": 0,
        "order": "C",
        "filters": None,
    }
    store.set(".zarray", json.dumps(doc).encode())
    store.set("0", chunk)
    return open_array(store, "", engine())


@pytest.mark.parametrize("name", COMPRESSORS)
def test_bomb_is_refused_within_the_chunk_bound(name: str) -> None:
    config, compress = COMPRESSORS[name]
    bomb = compress(_ZEROS)
    arr = _array_with_chunk(config, bomb)
    assert len(bomb) < CHUNK  # passes the stored-size check: the decoder must stop it
    with python_peak_memory() as peak:
        with pytest.raises(CorruptDataError, match="0"):
            arr.read(0, CHUNK, "little")
        assert peak() < 2 << 20, f"{name} bomb allocated {peak()} bytes"
    # the second chunk (missing) still reads as the fill value
    assert arr.read(CHUNK, CHUNK, "little") == bytes(CHUNK)


@pytest.mark.parametrize("name", COMPRESSORS)
def test_valid_chunk_reads_and_damaged_ones_fail(name: str) -> None:
    config, compress = COMPRESSORS[name]
    payload = bytes(range(256)) * (CHUNK // 256)
    good = compress(payload)
    assert _array_with_chunk(config, good).read(0, CHUNK, "little") == payload
    for damaged in (good[: len(good) // 2], b"\x00garbage" * 9, good[:3]):
        arr = _array_with_chunk(config, damaged)
        with pytest.raises(CorruptDataError):
            arr.read(0, CHUNK, "little")


@pytest.mark.parametrize("name", COMPRESSORS)
def test_short_stream_is_refused(name: str) -> None:
    """A valid stream of fewer bytes than the chunk is damage, not a short chunk."""
    config, compress = COMPRESSORS[name]
    arr = _array_with_chunk(config, compress(bytes(CHUNK - 1)))
    with pytest.raises(CorruptDataError):
        arr.read(0, CHUNK, "little")


def test_lz4_size_header_lying_small_is_refused() -> None:
    frame = bytearray(numcodecs.LZ4().encode(bytes(CHUNK * 4)))
    frame[:4] = CHUNK.to_bytes(4, "little")  # claims one chunk, the block holds four
    with pytest.raises(CorruptDataError):
        V2Compressor({"id": "lz4"}).decode(bytes(frame), CHUNK)


def test_filters_tighten_the_compressor_bound() -> None:
    """With an ``astype`` filter to 1-byte integers the compressed stream must decode to the
    filtered size (one byte per element), not to the array's 8 bytes per element."""
    store = MemoryStore()
    doc = {
        "zarr_format": 2,
        "shape": [64],
        "chunks": [64],
        "dtype": "<f8",
        "compressor": {"id": "zlib", "level": 1},
        "fill_value": 0,
        "order": "C",
        "filters": [{"id": "astype", "encode_dtype": "|u1", "decode_dtype": "<f8"}],
    }
    store.set(".zarray", json.dumps(doc).encode())
    store.set("0", zlib.compress(bytes(range(64))))
    arr = open_array(store, "", engine())
    assert arr.read(0, 16, "little") == np.array([0.0, 1.0], dtype="<f8").tobytes()
    store.set("0", zlib.compress(bytes(65)))  # one filtered byte too many
    arr.invalidate()
    with pytest.raises(CorruptDataError, match="more than the 64 bytes"):
        arr.read(0, 8, "little")


@pytest.mark.parametrize("name", COMPRESSORS)
def test_big_chunks_read_and_damaged_ones_fail(name: str) -> None:
    """Chunks of 1 MiB or more (decoded into reused blocks by blosc, gzip, zstd and lz4)."""
    config, compress = COMPRESSORS[name]
    big = 2 << 20
    payload = bytes(range(251)) * (big // 251) + bytes(big % 251)
    good = compress(payload)
    raw = V2Compressor(config).decode(good, big)
    assert bytes(raw) == payload
    for damaged in (good[: len(good) // 2], good[:-1] if name != "zlib" else good[:-5]):
        with pytest.raises(CorruptDataError):
            V2Compressor(config).decode(damaged, big)


@pytest.mark.parametrize("delta", [-1, 1])
def test_big_lz4_size_header_lying_is_refused(delta: int) -> None:
    big = 2 << 20
    frame = bytearray(numcodecs.LZ4().encode(bytes(range(256)) * (big // 256)))
    frame[:4] = (big + delta).to_bytes(4, "little")
    with pytest.raises(CorruptDataError, match="lz4"):
        V2Compressor({"id": "lz4"}).decode(bytes(frame), big + 1)


def test_big_lz4_chunks_decode_into_reused_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    big = 2 << 20
    payload = bytes(range(256)) * (big // 256)
    frame = bytes(numcodecs.LZ4().encode(payload))
    # room for idle blocks, whatever pool bound and idle blocks other tests left
    monkeypatch.setattr(buffers.pool, "limit", buffers.DEFAULT_LIMIT)
    buffers.pool.trim()
    first = V2Compressor({"id": "lz4"}).decode(frame, big)
    assert isinstance(first, memoryview) and bytes(first) == payload
    reused = buffers.pool.reused
    del first
    assert bytes(V2Compressor({"id": "lz4"}).decode(frame, big)) == payload
    assert buffers.pool.reused == reused + 1
