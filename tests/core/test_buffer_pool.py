"""The engine's reusable buffers for encoded chunk bytes (``bufferpool``) and the loads that
read into them: same bytes decoded, buffers reused, memory counted, corruption still refused."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from zarrfs.core.bufferpool import BufferPool, detach
from zarrfs.core.engine import Engine
from zarrfs.core.errors import CorruptDataError
from zarrfs.core.hierarchy import open_array
from zarrfs.core.stores.local import LocalStore


def test_a_returned_buffer_is_lent_again_and_the_limit_holds() -> None:
    changes: list[int] = []
    pool = BufferPool(limit=10_000, on_change=changes.append)
    a = pool.borrow(4000)
    assert a.nbytes == 4000 and pool.retained == 0
    pool.give_back(a)
    assert pool.retained == 4000 and changes == [4000]
    b = pool.borrow(3000)  # the idle one fits: lent again, not a new buffer
    assert b is a and pool.retained == 0 and changes == [4000, -4000]
    c = pool.borrow(8000)
    pool.give_back(b)
    pool.give_back(c)  # 4000 + 8000 > 10000: the smallest is dropped
    assert pool.retained == 8000
    pool.give_back(np.empty(20_000, np.uint8))  # larger than the limit: never kept
    assert pool.retained == 8000
    pool.clear()
    assert pool.retained == 0 and sum(changes) == 0


def test_detach_copies_only_a_result_that_points_into_the_buffer() -> None:
    buf = np.arange(16, dtype=np.uint8)
    view = buf[4:8]
    own = np.arange(4, dtype=np.uint8)
    assert detach(own, buf) is own
    got = detach(view, buf)
    assert got is not view and np.array_equal(got, view)
    buf[:] = 0
    assert list(got) == [4, 5, 6, 7]


def test_idle_buffers_shrink_the_chunk_cache() -> None:
    engine = Engine(cache_size=16 << 20, threads=1)
    try:
        buf = engine.buffers.borrow(512 << 10)
        engine.buffers.give_back(buf)
        assert engine.chunk_cache.capacity == (16 << 20) - (512 << 10)
        engine.buffers.clear()
        assert engine.chunk_cache.capacity == 16 << 20
    finally:
        engine.close()


def _arrays(tmp_path, data):
    plain = zarr.create_array(str(tmp_path / "plain"), shape=data.shape, chunks=(8, 32, 32),
                              dtype=data.dtype, compressors=[zarr.codecs.BloscCodec(cname="lz4")])  # fmt: skip
    plain[...] = data
    sharded = zarr.create_array(str(tmp_path / "sharded"), shape=data.shape, chunks=(4, 16, 32),
                                shards=(8, 32, 32), dtype=data.dtype,
                                compressors=[zarr.codecs.BloscCodec(cname="zstd")])  # fmt: skip
    sharded[...] = data
    crc = zarr.create_array(str(tmp_path / "crc"), shape=data.shape, chunks=(4, 16, 32),
                            shards=(8, 32, 32), dtype=data.dtype,
                            compressors=[zarr.codecs.Crc32cCodec()])  # fmt: skip
    crc[...] = data


@pytest.mark.parametrize("name,pooled", [("plain", True), ("sharded", True), ("crc", False)])
def test_pooled_loads_read_what_zarr_python_wrote(tmp_path, name, pooled) -> None:
    data = np.random.default_rng(1).random((16, 64, 96), dtype="f4")
    _arrays(tmp_path, data)
    engine = Engine(cache_size=1 << 20, threads=2, prefetch_bytes=0)  # the cache holds 4 units
    try:
        arr = open_array(LocalStore(tmp_path / name), "", engine)
        assert arr._units.pooled is pooled
        want = data.tobytes()
        for _ in range(2):  # units evicted and loaded again into reused buffers
            assert arr.read(0, len(want)) == want
        if pooled:
            assert engine.buffers.retained > 0
    finally:
        engine.close()


def test_a_chunk_whose_pooled_bytes_are_corrupt_is_refused(tmp_path) -> None:
    data = np.random.default_rng(2).random((16, 64, 96), dtype="f4")
    _arrays(tmp_path, data)
    path = tmp_path / "plain" / "c" / "0" / "0" / "0"
    raw = bytearray(path.read_bytes())
    raw[20:40] = b"\xff" * 20
    path.write_bytes(bytes(raw))
    engine = Engine(cache_size=1 << 20, threads=2, prefetch_bytes=0)
    try:
        arr = open_array(LocalStore(tmp_path / "plain"), "", engine)
        with pytest.raises(CorruptDataError, match="c/0/0/0"):
            arr.read(0, 4096)
        assert engine.work_bytes == 0
    finally:
        engine.close()
