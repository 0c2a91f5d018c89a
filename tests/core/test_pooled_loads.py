"""Chunk loads and dirty units in reused blocks (core/buffers.py): the bytes stay right."""

from __future__ import annotations

import gc
import time

import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec

from zarrfs.core import buffers
from zarrfs.core.array import Engine
from zarrfs.core.errors import CorruptDataError
from zarrfs.core.hierarchy import open_array
from zarrfs.core.stores.local import LocalStore

SHAPE, CHUNKS = (8, 512, 512), (2, 512, 512)  # 2 MiB chunks of float32: pool blocks


def _make(path, compressor):
    z = zarr.create_array(
        str(path), shape=SHAPE, chunks=CHUNKS, dtype="<f4", compressors=[compressor]
    )
    rng = np.random.default_rng(5)
    data = np.cumsum(rng.standard_normal(SHAPE, dtype=np.float32), axis=2)
    z[...] = data
    return data


def _scribble_idle_blocks() -> int:
    """Take every idle block of the pool and fill it with garbage; returns how many."""
    taken = []
    assert buffers.pool.idle_bytes >= 0  # the blocks returned so far are idle now
    for size, kept in list(buffers.pool._idle.items()):
        for _ in range(len(kept)):
            arr = buffers.pool.take(size)
            arr[:] = 0xA5
            taken.append(arr)
    return len(taken)


@pytest.mark.parametrize(
    "compressor",
    [
        BloscCodec(cname="zstd", clevel=3, shuffle="shuffle"),
        GzipCodec(level=1),
        ZstdCodec(level=1),
        ZstdCodec(level=1, checksum=True),
    ],
    ids=["blosc", "gzip", "zstd", "zstd-checksum"],
)
def test_compressed_chunks_are_read_into_reused_blocks_and_decode_right(tmp_path, compressor):
    data = _make(tmp_path / "a", compressor)
    engine = Engine(cache_size=256 << 20, threads=2, prefetch_bytes=0)
    try:
        arr = open_array(LocalStore(tmp_path / "a"), "", engine)
        assert arr._units.reads_encoded_into
        reused = buffers.pool.reused
        got = np.frombuffer(arr.read(0, data.nbytes), "<f4").reshape(SHAPE)
        assert np.array_equal(got, data)
        # four chunks read one after the other: the encoded bytes of the later ones went
        # into the block the earlier ones used
        assert buffers.pool.reused > reused
        # a streaming load (blosc) caches its unit just after publishing its last piece
        deadline = time.monotonic() + 10
        while arr._inflight and time.monotonic() < deadline:
            time.sleep(0.01)
        # the decoded units (cached) never share a block that is idle again
        assert _scribble_idle_blocks() > 0
        again = np.frombuffer(arr.read(0, data.nbytes), "<f4").reshape(SHAPE)
        assert np.array_equal(again, data)
        assert engine.chunk_cache.stats()["hits"] >= 4
    finally:
        engine.close()


def test_an_oversized_stored_chunk_is_refused_without_reading_it(tmp_path):
    _make(tmp_path / "a", BloscCodec(cname="lz4", clevel=1, shuffle="shuffle"))
    chunk = tmp_path / "a" / "c" / "0" / "0" / "0"
    with open(chunk, "r+b") as f:
        f.truncate(64 << 20)  # sparse: far more than any valid chunk of 1 MiB
    engine = Engine(cache_size=256 << 20, threads=1, prefetch_bytes=0)
    try:
        arr = open_array(LocalStore(tmp_path / "a"), "", engine)
        taken = buffers.pool.created
        with pytest.raises(CorruptDataError, match="more than the .* any valid chunk"):
            arr.read(0, 4096)
        assert buffers.pool.created == taken  # no block was made for it
    finally:
        engine.close()


def test_dirty_units_in_reused_blocks_store_what_was_written(tmp_path):
    _make(tmp_path / "a", BloscCodec(cname="lz4", clevel=1, shuffle="shuffle"))
    engine = Engine(cache_size=256 << 20, threads=2, prefetch_bytes=0)
    new = np.full(SHAPE, 3.5, dtype="<f4")
    new[:, ::7, ::3] = -1.25
    try:
        arr = open_array(LocalStore(tmp_path / "a"), "", engine)
        arr.read(0, 4096)  # a cached unit, then dropped: its block is idle
        engine.chunk_cache.clear()
        gc.collect()
        assert buffers.pool.idle_bytes > 0
        arr.write(0, new.tobytes())  # whole units: written into blocks, maybe reused ones
        _scribble_idle_blocks()
        arr.flush()
    finally:
        engine.close()
    stored = zarr.open_array(str(tmp_path / "a"), mode="r")[...]
    assert np.array_equal(stored, new)


@pytest.mark.parametrize(
    "compressors",
    [[BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")], None],
    ids=["blosc", "uncompressed"],
)
def test_inner_chunks_of_shards_are_read_into_reused_blocks(tmp_path, compressors):
    # inner chunks of 2 MiB, 4 to a shard, of noise that stays above 1 MiB compressed (pool
    # blocks); uncompressed ones decode to a view of their block, which must be copied
    # before the block is taken again
    shape, shards, inner = (16, 512, 512), (8, 512, 512), (2, 512, 512)
    z = zarr.create_array(str(tmp_path / "s"), shape=shape, chunks=inner, shards=shards,
                          dtype="<f4", compressors=compressors)  # fmt: skip
    data = np.random.default_rng(7).standard_normal(shape, dtype=np.float32)
    z[...] = data
    engine = Engine(cache_size=256 << 20, threads=1, prefetch_bytes=0)
    try:
        arr = open_array(LocalStore(tmp_path / "s"), "", engine)
        reused = buffers.pool.reused
        got = np.frombuffer(arr.read(0, data.nbytes), "<f4").reshape(shape)
        assert np.array_equal(got, data)
        # the inner chunks of a shard are read one after the other into one block
        assert buffers.pool.reused > reused
        assert _scribble_idle_blocks() > 0  # cached inner chunks never share an idle block
        again = np.frombuffer(arr.read(0, data.nbytes), "<f4").reshape(shape)
        assert np.array_equal(again, data)
        assert engine.chunk_cache.stats()["hits"] >= 8
    finally:
        engine.close()


def test_a_shard_shorter_than_its_index_says_is_refused(tmp_path):
    shape = (4, 512, 512)
    z = zarr.create_array(str(tmp_path / "s"), shape=shape, chunks=(1, 512, 512),
                          shards=shape, dtype="<f4", compressors=None)  # fmt: skip
    z[...] = 1.5
    shard = tmp_path / "s" / "c" / "0" / "0" / "0"
    raw = shard.read_bytes()
    index = raw[-(4 * 16 + 4) :]  # 4 inner chunks x (offset, nbytes) + crc32c, at the end
    shard.write_bytes(raw[: 2 << 20] + index)  # the last two inner chunks cut off
    engine = Engine(cache_size=256 << 20, threads=1, prefetch_bytes=0)
    try:
        arr = open_array(LocalStore(tmp_path / "s"), "", engine)
        assert arr.read(0, 4096) == np.full(1024, 1.5, "<f4").tobytes()
        with pytest.raises(CorruptDataError, match="shard ends at"):
            arr.read(3 << 20, 4096)
    finally:
        engine.close()
