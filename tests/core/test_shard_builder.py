"""Parking: the complete inner chunks of a shard not complete yet are appended to the shard's
next file and leave memory (``core/sharding/builder.py``); the flush that stores the shard
finishes that file, so each inner chunk is written once; until then the parked chunks read
back through the array, count as unstored data, and survive a failed commit."""

from __future__ import annotations

import gc
import time

import numpy as np
import pytest
import zarr
from test_group_commit import settle, staged_keys

from zarrfs.core.array import Engine
from zarrfs.core.errors import StoreError
from zarrfs.core.hierarchy import open_array
from zarrfs.core.stores.local import LocalStore
from zarrfs.core.stores.localgroup import TEMP_PREFIX

# 2 shards (8, 8, 64) along y, each 2 x 2 inner chunks (4, 4, 64) of 4 KiB (float32)
SHAPE = (8, 16, 64)
ROW = 64 * 4  # bytes of one (z, y) row


@pytest.fixture
def arr(tmp_path):
    z = zarr.create_array(str(tmp_path / "a"), shape=SHAPE, chunks=(4, 4, 64),
                          shards=(8, 8, 64), dtype="<f4", fill_value=0)  # fmt: skip
    z[...] = 1
    engine = Engine(cache_size=64 << 10, prefetch_bytes=0)
    engine.dirty_limit = 16 << 10  # written behind past 4 KiB dirty
    a = open_array(LocalStore(tmp_path / "a"), "", engine)
    yield a
    engine.close()


def write_rows(arr, zs: range, y0: int, y1: int, value: float) -> None:
    for z_ in zs:
        arr.write((z_ * SHAPE[1] + y0) * ROW, np.full((y1 - y0) * 64, value, "<f4").tobytes())
    settle(arr)


def through(arr) -> np.ndarray:
    return np.frombuffer(arr.read(0, arr.nbytes), "<f4").reshape(SHAPE)


def stored(tmp_path) -> np.ndarray:
    return zarr.open_array(str(tmp_path / "a"), mode="r")[...]


def temps(tmp_path) -> list:
    return list((tmp_path / "a").rglob(f"{TEMP_PREFIX}*"))


def park_three(arr, tmp_path) -> np.ndarray:
    """Inner chunks (0,0) (0,1) of shard 0 and (0,2) of shard 1 complete: all parked."""
    write_rows(arr, range(4), 0, 12, 2)
    want = np.ones(SHAPE, "<f4")
    want[:4, :12] = 2
    return want


def test_complete_inner_chunks_of_unfinished_shards_are_parked(arr, tmp_path):
    with staged_keys() as sets:
        want = park_three(arr, tmp_path)
        assert sets == []  # nothing stored the usual way
    state = arr.dirty_state()
    assert state.nbytes == 0 and state.objects == 2 and arr.dirty  # out of memory, unstored
    assert len(temps(tmp_path)) == 2  # one new file per shard
    assert (stored(tmp_path) == 1).all()  # the store still holds the old shards
    assert (through(arr) == want).all()  # read back from the new files
    arr.flush()
    assert not arr.dirty and temps(tmp_path) == []
    assert (stored(tmp_path) == want).all()


def test_a_shard_complete_with_its_parked_chunks_is_stored_once(arr, tmp_path):
    want = park_three(arr, tmp_path)
    store = LocalStore(tmp_path / "a")
    with staged_keys() as sets:
        write_rows(arr, range(4, 8), 0, 8, 3)  # shard 0: 2 parked + 2 complete = whole
        deadline = time.monotonic() + 10
        while (stored(tmp_path)[4:, :8] != 3).any() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sets == []  # the builder's file, not a rewrite
    want[4:, :8] = 3
    assert (stored(tmp_path)[:, :8] == want[:, :8]).all()  # no flush asked for it
    assert (stored(tmp_path)[:, 8:] == 1).all() and arr.dirty  # shard 1 still parked
    # each inner chunk written once: the shard is its 4 inner chunks and its index, no more
    shard = store.get("c/0/0/0")
    assert shard is not None
    index = np.frombuffer(shard[-(4 * 16 + 4) : -4], "<u8").reshape(4, 2)
    assert len(shard) == int(index[:, 1].sum()) + 4 * 16 + 4
    assert arr.engine.stats.snapshot()["arrays"][""]["bytes_stored"] == len(shard)
    arr.flush()
    assert (stored(tmp_path) == want).all() and temps(tmp_path) == []


def test_a_failed_commit_keeps_the_parked_chunks(arr, tmp_path, monkeypatch):
    want = park_three(arr, tmp_path)

    def failing(self, staged):
        raise StoreError("disk full")

    monkeypatch.setattr(LocalStore, "_commit_staged", failing)
    with pytest.raises(StoreError, match="disk full"):
        arr.flush()
    monkeypatch.undo()
    assert arr.dirty and (through(arr) == want).all()  # the only copy survived
    assert (stored(tmp_path) == 1).all()
    arr.flush()
    assert not arr.dirty and temps(tmp_path) == []
    assert (stored(tmp_path) == want).all()


def test_a_parked_chunk_written_again_stores_its_new_values(arr, tmp_path):
    want = park_three(arr, tmp_path)
    write_rows(arr, range(4), 0, 4, 5)  # inner chunk (0,0) whole again
    arr.write((0 * SHAPE[1] + 4) * ROW + 8, np.full(2, 7, "<f4").tobytes())  # part of (0,1)
    want[:4, :4] = 5
    want[0, 4, 2:4] = 7
    assert (through(arr) == want).all()
    arr.flush()
    assert (stored(tmp_path) == want).all() and temps(tmp_path) == []
    z = zarr.open_array(str(tmp_path / "a"), mode="r")
    assert (z[...] == want).all()


def test_an_array_dropped_with_parked_chunks_leaves_no_files(tmp_path):
    z = zarr.create_array(str(tmp_path / "a"), shape=SHAPE, chunks=(4, 4, 64),
                          shards=(8, 8, 64), dtype="<f4", fill_value=0)  # fmt: skip
    z[...] = 1
    engine = Engine(cache_size=64 << 10, prefetch_bytes=0)
    engine.dirty_limit = 16 << 10
    arr = open_array(LocalStore(tmp_path / "a"), "", engine)
    park_three(arr, tmp_path)
    assert len(temps(tmp_path)) == 2
    del arr
    gc.collect()
    assert temps(tmp_path) == []
    engine.close()


def test_a_failed_append_leaves_its_units_dirty(arr, tmp_path, monkeypatch):
    from zarrfs.core.stores.localgroup import LocalTemp

    def failing(self, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(LocalTemp, "append", failing)
    want = park_three(arr, tmp_path)  # the write-behind fails, quietly (a warning)
    assert arr.dirty_state().nbytes == 3 * (4 << 10)  # nothing left memory
    assert (through(arr) == want).all() and (stored(tmp_path) == 1).all()
    monkeypatch.undo()
    arr.flush()
    assert not arr.dirty and temps(tmp_path) == []
    assert (stored(tmp_path) == want).all()


def test_a_resize_stores_the_parked_chunks_first(arr, tmp_path):
    want = park_three(arr, tmp_path)
    arr.resize((12,) + SHAPE[1:])  # grows axis 0: every shard is stored first
    assert not arr.dirty and temps(tmp_path) == []
    grown = zarr.open_array(str(tmp_path / "a"), mode="r")[...]
    assert grown.shape == (12,) + SHAPE[1:]
    assert (grown[:8] == want).all() and (grown[8:] == 0).all()


def test_chunks_parked_again_and_again_keep_the_file_about_their_size(arr, tmp_path, monkeypatch):
    from zarrfs.core.sharding import builder

    monkeypatch.setattr(builder, "COMPACT_MIN", 0)
    rng = np.random.default_rng(5)
    want = np.ones(SHAPE, "<f4")
    for _ in range(12):  # the same 3 inner chunks (random: 4 KiB each stored), parked again
        values = rng.random((4, 12, 64), dtype="f4")
        for z_ in range(4):
            arr.write(z_ * SHAPE[1] * ROW, values[z_].tobytes())
        settle(arr)
        want[:4, :12] = values
        assert len(temps(tmp_path)) == 2  # (one new file per shard, never more)
    assert (through(arr) == want).all()
    arr.flush()
    assert (stored(tmp_path) == want).all() and temps(tmp_path) == []
    shard = LocalStore(tmp_path / "a").get("c/0/0/0")  # 2 parked chunks, 2 kept, the index
    assert shard is not None and len(shard) <= 4 * (4 << 10) + 4 * 16 + 4


@pytest.mark.parametrize("layout", ["sharded", "sharded, no parking", "plain"])
def test_readers_beside_a_writer_never_see_older_values(tmp_path, monkeypatch, layout):
    """A writer fills the array with 1, then 2, ... front to back in whole rows (parking as
    it goes, the cache evicting); a reader beside it reads random ranges: every value it sees
    is that of the pass before the one running when its read began, or a later one. Never
    older, never invented: not the unwritten rows of a unit a row writer just made dirty
    (uninitialized memory), not a shard's chunks read at the offsets of the index of the
    shard a flush just replaced, not a stale cached copy."""
    import threading

    if layout == "sharded, no parking":
        monkeypatch.setattr(LocalStore, "builds_objects", property(lambda self: False))
    shape = (16, 32, 64)  # sharded: 2 shards (16, 16, 64) spanning the depth, inner (2, 4, 64)
    kwargs: dict = {"chunks": (2, 4, 64)}
    if layout != "plain":
        kwargs["shards"] = (16, 16, 64)
    z = zarr.create_array(str(tmp_path / "a"), shape=shape, dtype="<f4", fill_value=0, **kwargs)
    z[...] = 0
    engine = Engine(cache_size=96 << 10, prefetch_bytes=0)  # dirty limit 72 KiB, of 128 KiB
    arr = open_array(LocalStore(tmp_path / "a"), "", engine)
    passes, done, seen, failed = [0], threading.Event(), [], []
    rng = np.random.default_rng(7)

    def read() -> None:
        try:
            while not done.is_set():
                start = passes[0]
                off = int(rng.integers(0, arr.nbytes // 4 - 1024)) * 4
                values = np.frombuffer(arr.read(off, 4096), "<f4")
                seen.append((start, float(values.min()), float(values.max()), passes[0]))
        except Exception as exc:  # reported below
            failed.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        row = shape[2] * 4
        for k in range(1, 7):
            passes[0] = k
            for r in range(shape[0] * shape[1]):
                arr.write(r * row, np.full(shape[2], k, "<f4").tobytes())
            settle(arr)
    finally:
        done.set()
        reader.join()
    assert not failed, failed
    assert len(seen) > 50
    for start, lo, hi, end in seen:
        assert lo >= start - 1 and hi <= end, (start, lo, hi, end)
    arr.flush()
    assert (stored(tmp_path) == 6).all() and temps(tmp_path) == []
    engine.close()
