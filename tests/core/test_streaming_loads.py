"""Streaming loads: a chunk of the ``bytes`` codec alone is read straight into its unit array
and served piece by piece while the rest of it is still being read."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
import zarr
from gated_store import GatedStore

from zarrfs.core.array import Engine
from zarrfs.core.errors import CorruptDataError
from zarrfs.core.hierarchy import open_array
from zarrfs.core.stores.local import LocalStore
from zarrfs.core.units import STREAM_PIECE

SHAPE = (8, 256, 256)  # one float32 chunk of 2 MiB: two streamed pieces


def _array(tmp_path, data=None):
    z = zarr.create_array(str(tmp_path / "a"), shape=SHAPE, chunks=SHAPE, dtype="<f4",
                          compressors=None)  # fmt: skip
    z[...] = np.arange(np.prod(SHAPE), dtype="f4").reshape(SHAPE) if data is None else data
    return z


def test_the_loaded_part_of_a_chunk_is_served_while_the_rest_is_read(tmp_path):
    z = _array(tmp_path)
    want = z[...].tobytes()
    store = GatedStore(tmp_path / "a")
    engine = Engine(threads=2, prefetch_bytes=0, direct_reads=False)
    arr = open_array(store, "", engine)
    try:
        assert arr._units.streams
        got: list[bytes] = []
        first = threading.Thread(target=lambda: got.append(arr.read(0, 65536)))
        first.start()
        first.join(10)
        # served from the first piece while the load waits before the second one
        assert not first.is_alive() and got == [want[:65536]]
        assert arr.read_cached(4096, 4096) == want[4096:8192]  # in the event loop, no wait
        assert arr.read_cached(STREAM_PIECE, 4096) is None  # not loaded yet: a worker's job
        later: list[bytes] = []
        second = threading.Thread(target=lambda: later.append(arr.read(STREAM_PIECE, 8192)))
        second.start()
        second.join(0.3)
        assert second.is_alive()  # waits for its piece
        store.gate.set()
        second.join(10)
        assert later == [want[STREAM_PIECE : STREAM_PIECE + 8192]]
        assert arr.read(0, len(want)) == want
        assert store.opened == ["c/0/0/0"]  # one load of the chunk, joined by every reader
        deadline = time.monotonic() + 10  # the load ends just after publishing its last piece
        while arr._inflight and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not arr._inflight and arr.read_cached(0, 4096) == want[:4096]
        snap = engine.stats.snapshot()["arrays"][""]
        assert snap["chunks_decoded"] == 1 and snap["bytes_fetched"] >= len(want)
        assert engine.work_bytes == 0
    finally:
        store.gate.set()
        engine.close()


@pytest.mark.parametrize("extra", [-4, 4])
def test_a_chunk_file_of_the_wrong_size_is_refused_before_anything_is_served(tmp_path, extra):
    _array(tmp_path)
    path = tmp_path / "a" / "c" / "0" / "0" / "0"
    size = path.stat().st_size
    os.truncate(path, size + extra)
    engine = Engine(threads=2, prefetch_bytes=0)
    arr = open_array(LocalStore(tmp_path / "a"), "", engine)
    try:
        with pytest.raises(CorruptDataError, match="c/0/0/0"):
            arr.read(0, 4096)
        assert arr.read_cached(0, 4096) is None
        assert engine.work_bytes == 0
    finally:
        engine.close()


def test_a_chunk_file_that_shrinks_while_it_is_read_fails_the_reads_beyond(tmp_path):
    _array(tmp_path)
    store = GatedStore(tmp_path / "a")
    engine = Engine(threads=2, prefetch_bytes=0, direct_reads=False)
    arr = open_array(store, "", engine)
    try:
        errors: list[BaseException] = []

        def read_beyond() -> None:
            try:
                arr.read(STREAM_PIECE, 4096)
            except BaseException as exc:
                errors.append(exc)

        t = threading.Thread(target=read_beyond)
        t.start()
        t.join(0.3)
        os.truncate(tmp_path / "a" / "c" / "0" / "0" / "0", STREAM_PIECE)
        store.gate.set()
        t.join(10)
        assert len(errors) == 1 and isinstance(errors[0], CorruptDataError)
        assert "c/0/0/0" in str(errors[0])
        assert arr.read_cached(0, 4096) is None  # the failed load is not cached
    finally:
        store.gate.set()
        engine.close()


@pytest.mark.parametrize("chain", [
    {"serializer": zarr.codecs.BytesCodec(endian="big"), "compressors": None},
    {"compressors": zarr.codecs.Crc32cCodec()},
    {"filters": zarr.codecs.TransposeCodec(order=(1, 0)), "compressors": None},
])  # fmt: skip
def test_only_the_bytes_codec_alone_in_native_order_streams(tmp_path, chain):
    data = np.arange(16, dtype="i4").reshape(4, 4)
    z = zarr.create_array(str(tmp_path / "b"), shape=(4, 4), chunks=(2, 4), dtype="i4", **chain)
    z[...] = data
    engine = Engine(threads=2, prefetch_bytes=0)
    arr = open_array(LocalStore(tmp_path / "b"), "", engine)
    assert not arr._units.streams
    assert arr.read(0, 64) == data.astype("<i4").tobytes()
    engine.close()
