"""A sequential reader's units (``readpath._maybe_prefetch``): loaded a layer of units (or a
window, where layers are thinner) ahead, never the whole cache's worth, and dropped from the
cache once the reader has passed them, so their memory takes the next ones; dirty units and a
reader that turns back keep what they need."""

from __future__ import annotations

import numpy as np
import zarr
from zarr.codecs import ZstdCodec

from zarrfs.core import buffers
from zarrfs.core.array import Engine
from zarrfs.core.hierarchy import open_array
from zarrfs.core.stores.local import LocalStore

# 16 layers of 8 chunks of 64 KiB (thin layers: a layer is 512 KiB of the view)
SHAPE, CHUNKS = (64, 128, 256), (4, 64, 64)
LAYER = 4 * 128 * 256 * 4
WINDOW = 1 << 20
STEP = 64 << 10


def _make(path):
    z = zarr.create_array(
        str(path), shape=SHAPE, chunks=CHUNKS, dtype="<f4", compressors=[ZstdCodec(level=1)]
    )
    data = np.arange(np.prod(SHAPE), dtype="<f4").reshape(SHAPE)
    z[...] = data
    return data


def _open(tmp_path):
    engine = Engine(cache_size=64 << 20, threads=2, prefetch_bytes=WINDOW)
    return open_array(LocalStore(tmp_path / "a"), "", engine), engine


def _held(arr, engine):
    """The layers (first chunk index) of the units cached or being loaded."""
    engine.executor.submit(lambda: None).result()  # (a job queued behind the loads)
    with arr._lock:
        loading = set(arr._inflight)
    cached = {k[1] for k in list(engine.chunk_cache._entries) if k[0] == arr.uid}
    return {u[0] for u in cached | loading}


def _settle(arr, engine):
    """Wait until no load of the array is in flight."""
    for _ in range(1000):
        with arr._lock:
            if not arr._inflight:
                return
        engine.executor.submit(lambda: None).result()
    raise AssertionError("loads still in flight")


def test_units_behind_the_reader_leave_the_cache_and_loads_reach_a_layer_past_a_window(
    tmp_path,
):
    data = _make(tmp_path / "a")
    arr, engine = _open(tmp_path)
    try:
        got = b""
        for off in range(0, arr.nbytes // 2, STEP):
            got += arr.read(off, STEP)
        assert got == data.tobytes()[: arr.nbytes // 2]
        _settle(arr, engine)
        held = _held(arr, engine)
        end = arr.nbytes // 2  # layer 8 starts here
        # nothing more than a window behind the last plan (made every half window) before
        # the reader, nothing further than a window and a layer ahead
        assert min(held) >= (end - WINDOW - WINDOW // 2) // LAYER
        assert max(held) < (end + WINDOW + LAYER) // LAYER + 1
        assert max(held) >= end // LAYER + 1  # (but ahead it does load)
        # the rest reads right, and a reader that starts again finds the first layers loaded
        rest = b"".join(arr.read(o, STEP) for o in range(end, arr.nbytes, STEP))
        assert got + rest == data.tobytes()
        assert arr.read(0, STEP) == data.tobytes()[:STEP]
    finally:
        engine.close()


def test_replanning_at_one_place_loads_no_further_than_a_window_and_a_layer(tmp_path):
    # concurrent kernel read-ahead makes the reader look non-sequential now and then, and the
    # next sequential read plans again from where it is: that must not reach further
    _make(tmp_path / "a")
    arr, engine = _open(tmp_path)
    try:
        end = 2 * LAYER
        arr.read(end - STEP, STEP)
        for _ in range(12):
            arr._prefetch_end = end  # (where a non-sequential read leaves it)
            arr._maybe_prefetch(end - STEP, STEP)
            _settle(arr, engine)
        held = _held(arr, engine)
        assert max(held) <= (end + WINDOW + LAYER) // LAYER
        assert max(held) >= (end + WINDOW) // LAYER - 1
    finally:
        engine.close()


def test_a_reader_that_jumps_ahead_scans_no_more_than_a_window_behind_it(tmp_path, monkeypatch):
    _make(tmp_path / "a")
    arr, engine = _open(tmp_path)
    try:
        scans: list[tuple[int, int]] = []
        real = arr._units_in

        def units_in(start, stop):
            scans.append((start, stop))
            return real(start, stop)

        monkeypatch.setattr(arr, "_units_in", units_in)
        arr._release_behind(6 * LAYER)  # far from the start: one window of it is scanned
        assert scans == [(6 * LAYER - WINDOW, 6 * LAYER)]
        scans.clear()
        arr._release_behind(6 * LAYER + STEP)  # then only what is new
        assert scans == [(6 * LAYER, 6 * LAYER + STEP)]
        scans.clear()
        arr._release_behind(LAYER)  # behind what was released: nothing
        assert scans == []
    finally:
        engine.close()


def test_dirty_units_behind_the_reader_stay(tmp_path):
    data = _make(tmp_path / "a")
    arr, engine = _open(tmp_path)
    try:
        new = -data[:4]  # layer 0, written but not stored
        arr.write(0, new.tobytes())
        want = new.tobytes() + data[4:].tobytes()
        got = b"".join(arr.read(o, STEP) for o in range(0, arr.nbytes, STEP))
        assert got == want
        assert arr.read(0, LAYER) == new.tobytes()  # still dirty, still served
        arr.flush()
        assert bytes(zarr.open_array(str(tmp_path / "a"))[:4].tobytes()) == new.tobytes()
    finally:
        engine.close()


def test_a_scalar_array_of_loaded_units_reads_with_prefetching_on(tmp_path):
    z = zarr.create_array(str(tmp_path / "s"), shape=(), dtype="<i8", compressors=[ZstdCodec()])
    z[...] = 7
    engine = Engine(cache_size=64 << 20, threads=2, prefetch_bytes=WINDOW)
    arr = open_array(LocalStore(tmp_path / "s"), "", engine)
    try:
        want = np.int64(7).tobytes()
        assert arr.read(0, 3) == want[:3]  # a part: the reader goes on, prefetching plans
        assert arr.read(3, 5) == want[3:]
    finally:
        engine.close()


def test_the_layer_after_next_takes_the_blocks_of_the_layer_the_reader_left(tmp_path):
    # layers thicker than the window: 8 layers of 2 units of 1 MiB (pool-sized blocks); the
    # loads reach one layer ahead, so the layer after next is loaded only once the layer the
    # reader left is released, and its units are decoded into that layer's blocks, kept idle
    # in the part of the chunk cache nothing uses (the pool's own share is a single block)
    shape, chunks = (64, 256, 256), (8, 128, 256)
    z = zarr.create_array(
        str(tmp_path / "t"), shape=shape, chunks=chunks, dtype="<f4",
        compressors=[ZstdCodec(level=1)],
    )  # fmt: skip
    data = np.arange(np.prod(shape), dtype="<f4").reshape(shape)
    z[...] = data
    engine = Engine(cache_size=8 << 20, threads=2, prefetch_bytes=1 << 20)
    assert engine.pool_bytes == 1 << 20
    arr = open_array(LocalStore(tmp_path / "t"), "", engine)
    layer = 2 << 20
    try:
        # three quarters into layer 2 (a reader slower than the loads): layer 3 is loaded
        # ahead, layer 4 not yet
        for o in range(0, 2 * layer + 3 * layer // 4, STEP):
            arr.read(o, STEP)
            _settle(arr, engine)
        _settle(arr, engine)
        assert max(_held(arr, engine)) == 3
        engine.chunk_cache.clear()
        buffers.pool.trim()
        arr._last_end = arr._prefetch_end = arr._release_from = 0
        created = buffers.pool.created
        got = b"".join(arr.read(o, STEP) for o in range(0, arr.nbytes, STEP))
        assert got == data.tobytes()
        fresh = buffers.pool.created - created
        # two layers of decoded units (4 blocks) and the encoded chunks being read (one per
        # thread, alike in size) at most; without the reuse, all 16 units take fresh blocks
        assert fresh <= 4 + 2 + 1, fresh
    finally:
        engine.close()
