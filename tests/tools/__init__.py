"""Tests of the command-line tools; ``build_store`` writes the sample store they share.

The sample store is written by zarr-python (the oracle), never by zarrfs:

    /                 group (attributes: title)
    /temp             float32 (16,32,32), shards (8,32,32) of inner chunks (4,16,16),
                      bytes + blosc(lz4,5,shuffle), crc32c index at the end, dims t,y,x
    /sub              group
    /sub/crc          int16 (10,10), chunks (4,4), bytes + gzip(3) + crc32c, fill -1
    /sub/sparse       uint8 (100,), chunks (30,), zstd; only chunk 0 written (1 of 4 stored)
    /start            uint16 (8,8), shards (4,4) of (2,2), bytes only, index at the start
                      without checksum
    /inner            uint16 (8,8), shards (4,4) of (2,2), bytes + crc32c inner chunks
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

ARRAY_PATHS = ("temp", "sub/crc", "sub/sparse", "start", "inner")


def build_store(path: Path, consolidated: bool = False) -> Path:
    """Write the sample store at ``path`` with zarr-python; returns ``path``."""
    import zarr
    from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, ShardingCodec

    rng = np.random.default_rng(42)
    root = zarr.open_group(str(path), mode="w", attributes={"title": "tools test"})
    temp = root.create_array(
        "temp",
        shape=(16, 32, 32),
        chunks=(4, 16, 16),
        shards=(8, 32, 32),
        dtype="float32",
        compressors=[BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")],
        dimension_names=["t", "y", "x"],
        fill_value=0,
    )
    temp[:] = rng.random((16, 32, 32), dtype="float32")
    sub = root.create_group("sub")
    crc = sub.create_array(
        "crc",
        shape=(10, 10),
        chunks=(4, 4),
        dtype="int16",
        compressors=[GzipCodec(level=3), Crc32cCodec()],
        fill_value=-1,
    )
    crc[:] = np.arange(100, dtype="int16").reshape(10, 10)
    sparse = sub.create_array("sparse", shape=(100,), chunks=(30,), dtype="uint8", fill_value=0)
    sparse[:30] = 7
    start = root.create_array(
        "start",
        shape=(8, 8),
        chunks=(4, 4),
        dtype="uint16",
        serializer=ShardingCodec(
            chunk_shape=(2, 2),
            codecs=[BytesCodec()],
            index_codecs=[BytesCodec()],
            index_location="start",
        ),
        compressors=None,
        fill_value=0,
    )
    start[:] = np.arange(1, 65, dtype="uint16").reshape(8, 8)
    inner = root.create_array(
        "inner",
        shape=(8, 8),
        chunks=(2, 2),
        shards=(4, 4),
        dtype="uint16",
        compressors=[Crc32cCodec()],
        fill_value=0,
    )
    inner[:] = np.arange(1, 65, dtype="uint16").reshape(8, 8)
    if consolidated:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            zarr.consolidate_metadata(str(path))
    return path


def stored_bytes(array_dir: Path) -> int:
    """Bytes of every file under ``array_dir`` except its ``zarr.json`` (the oracle for sizes)."""
    total = 0
    for dirpath, _, files in os.walk(array_dir):
        for name in files:
            if Path(dirpath) == array_dir and name == "zarr.json":
                continue
            total += os.path.getsize(os.path.join(dirpath, name))
    return total


def flip_byte(path: Path, position: int) -> None:
    """Invert every bit of one byte of a file (negative positions count from the end)."""
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def copy_to_memory(src: Path, name: str) -> Any:
    """Copy a directory store into the process-wide memory store ``name``."""
    from zarrfs.core.stores.memory import MemoryStore

    store = MemoryStore.named(name)
    for dirpath, _, files in os.walk(src):
        for fname in files:
            full = Path(dirpath) / fname
            store.set(full.relative_to(src).as_posix(), full.read_bytes())
    return store
