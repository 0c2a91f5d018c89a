"""ZarrArray behaviour beyond byte-identity (which tests/interop covers): what is fetched,
what a failed write leaves behind, and what concurrent readers see."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import zarr

from zarrfs.core.array import Engine
from zarrfs.core.errors import CorruptDataError, InvalidWriteError
from zarrfs.core.hierarchy import Hierarchy, open_array
from zarrfs.core.stores.local import LocalStore


class CountingStore(LocalStore):
    def __init__(self, root):
        super().__init__(root)
        self.requests: list[tuple[str, object, int]] = []

    def get(self, key, byte_range=None):
        data = super().get(key, byte_range)
        self.requests.append((key, byte_range, 0 if data is None else len(data)))
        return data

    def get_many(self, requests):
        return [self.get(k, r) for k, r in requests]

    def open_reader(self, key):  # a streaming load: recorded as one request of the whole file
        reader = super().open_reader(key)
        self.requests.append((key, None, 0 if reader is None else reader.size))
        return reader


def test_sharded_4k_read_fetches_only_the_index_and_one_inner_chunk(tmp_path):
    # inner chunks span the last axis, so one aligned 4 KiB row lies in exactly one of them
    z = zarr.create_array(
        str(tmp_path / "a"),
        shape=(64, 64, 1024),
        chunks=(16, 16, 1024),
        shards=(32, 32, 1024),
        dtype="<f4",
        compressors=[zarr.codecs.BloscCodec(cname="lz4")],
    )
    z[...] = np.random.default_rng(0).random((64, 64, 1024), dtype="f4")
    store = CountingStore(tmp_path / "a")
    engine = Engine(prefetch_bytes=0)
    arr = open_array(store, "", engine)
    store.requests.clear()
    start = 4 * 1024 * (64 * 40 + 20)  # row (40, 20): shard (1, 0, 0), inner chunk (0, 1, 0)
    out = arr.read(start, 4096)
    assert out == z[40, 20].astype("<f4").tobytes()
    assert {k for k, _, _ in store.requests} == {"c/1/0/0"}
    index_bytes = 4 * 16 + 4  # 2x2x1 inner chunks x (offset, nbytes) + crc32c
    shard = (tmp_path / "a" / "c" / "1" / "0" / "0").read_bytes()
    idx = np.frombuffer(shard[-index_bytes:-4], "<u8").reshape(2, 2, 1, 2)
    # the shard opened once (recorded whole) and read for its index, then for that inner
    # chunk alone: the bytes read are the index and that inner chunk
    assert [(r, n) for _, r, n in store.requests] == [(None, len(shard))]
    assert engine.stats.snapshot()["total"]["bytes_fetched"] == index_bytes + int(idx[0, 1, 0, 1])


def test_missing_chunks_read_as_fill_without_decoding(tmp_path):
    zarr.create_array(str(tmp_path / "a"), shape=(10,), chunks=(5,), dtype="<i2", fill_value=-3)
    engine = Engine()
    arr = open_array(LocalStore(tmp_path / "a"), "", engine)
    assert arr.read(0, 20) == np.full(10, -3, "<i2").tobytes()
    assert engine.stats.snapshot()["total"].get("chunks_decoded", 0) == 0


@pytest.mark.parametrize("sharded", [False, True])
def test_write_over_a_corrupt_chunk_fails_and_changes_nothing(tmp_path, sharded):
    kw = dict(shards=(8, 8)) if sharded else {}
    z = zarr.create_array(
        str(tmp_path / "a"),
        shape=(16, 8),
        chunks=(4, 8),
        dtype="<u4",
        compressors=[zarr.codecs.Crc32cCodec()],
        **kw,
    )
    z[...] = np.arange(128, dtype="u4").reshape(16, 8)
    # plain: chunk rows 4-7; sharded: the index checksum of the shard holding rows 0-7
    victim = tmp_path / "a" / "c" / ("0" if sharded else "1") / "0"
    blob = bytearray(victim.read_bytes())
    blob[-1 if sharded else 10] ^= 1
    victim.write_bytes(bytes(blob))
    before = {p: p.read_bytes() for p in (tmp_path / "a" / "c").rglob("*") if p.is_file()}
    arr = open_array(LocalStore(tmp_path / "a"), "", Engine())
    row = 8 * 4
    # a write spanning a good chunk (rows 0-3 or shard 0) and a corrupt one, ending inside
    # an element of it: the element's other bytes must be read first
    with pytest.raises(CorruptDataError):
        arr.write(2 * row, b"\xff" * (row * 3 + 6))
    arr.flush()
    after = {p: p.read_bytes() for p in (tmp_path / "a" / "c").rglob("*") if p.is_file()}
    assert after == before
    assert not arr.dirty


def test_readers_never_see_a_torn_write(tmp_path):
    zarr.create_array(
        str(tmp_path / "a"),
        shape=(64, 64),
        chunks=(16, 16),
        dtype="<u8",
        compressors=[zarr.codecs.ZstdCodec()],
    )
    arr = open_array(LocalStore(tmp_path / "a"), "", Engine())
    n = 64 * 64 * 8
    stop = threading.Event()
    bad: list[str] = []

    pattern = 0x0101010101010101  # a torn element would mix bytes of two values

    def reader():
        while not stop.is_set():
            data = np.frombuffer(arr.read(0, n), "<u8").reshape(64, 64)
            if (data % pattern).any():
                bad.append("an element mixes bytes of two writes")
                return
            # each chunk is copied whole: one write's value per chunk
            blocks = data.reshape(4, 16, 4, 16).transpose(0, 2, 1, 3).reshape(16, 256)
            if (blocks != blocks[:, :1]).any():
                bad.append("a chunk mixes two writes")
                return

    def flusher():
        while not stop.is_set():
            arr.flush()

    threads = [threading.Thread(target=reader) for _ in range(3)] + [
        threading.Thread(target=flusher)
    ]
    for t in threads:
        t.start()
    try:
        for v in range(1, 60):
            arr.write(0, np.full(64 * 64, v * pattern, "<u8").tobytes())
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not bad, bad[0]
    arr.flush()
    assert (
        np.frombuffer(open_array(LocalStore(tmp_path / "a"), "").read(0, n), "<u8").tolist()
        == [59 * pattern] * 4096
    )


def test_resize_shrink_then_grow_shows_fill_not_old_data(tmp_path):
    z = zarr.create_array(
        str(tmp_path / "a"), shape=(10, 3), chunks=(4, 3), dtype="<i4", fill_value=-1
    )
    z[...] = np.arange(30, dtype="i4").reshape(10, 3)
    h = Hierarchy(LocalStore(tmp_path / "a"))
    arr = h.array("")
    arr.resize((5, 3))
    arr.resize((10, 3))
    got = np.frombuffer(arr.read(0, 120), "<i4").reshape(10, 3)
    assert got[:5].tolist() == np.arange(15).reshape(5, 3).tolist()
    assert (got[5:] == -1).all()
    assert (zarr.open_array(str(tmp_path / "a"))[...] == got).all()
    with pytest.raises(InvalidWriteError):
        arr.write(119, b"ab")


def test_many_readers_joining_one_queued_prefetch_all_get_the_data(tmp_path):
    z = zarr.create_array(
        str(tmp_path / "a"),
        shape=(64, 256),
        chunks=(8, 256),
        dtype="<f8",
        compressors=[zarr.codecs.ZstdCodec()],
    )
    z[...] = np.arange(64 * 256, dtype="f8").reshape(64, 256)
    want = z[...].astype("<f8").tobytes()

    class SlowStore(LocalStore):  # keeps a taken-back job running while other readers join it
        def get(self, key, byte_range=None):
            time.sleep(0.05)
            return super().get(key, byte_range)

    engine = Engine(threads=1, prefetch_bytes=1 << 20)
    arr = open_array(SlowStore(tmp_path / "a"), "", engine)
    gate = threading.Event()
    engine.executor.submit(gate.wait)  # the only pool thread is busy: prefetches stay queued
    arr.read(0, 4096)
    arr.read(4096, 4096)  # sequential: queues prefetch jobs for the following chunks
    errors: list[BaseException] = []

    def reader():
        try:
            assert arr.read(5 * 16384, 16384) == want[5 * 16384 : 6 * 16384]
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gate.set()
    engine.close()
    assert not errors, repr(errors[0])


def test_dirty_bytes_are_bounded_per_mount_and_return_to_zero(tmp_path):
    for name in ("a", "b"):
        zarr.create_array(str(tmp_path / name), shape=(64, 1024), chunks=(8, 1024), dtype="<f8")
    engine = Engine(cache_size=1 << 20)  # dirty limit: three quarters, 768 KiB = 12 chunks
    a = open_array(LocalStore(tmp_path / "a"), "", engine)
    b = open_array(LocalStore(tmp_path / "b"), "", engine)
    assert engine.dirty_limit == 768 << 10
    peak, flushed_at = 0, None
    for i in range(8):  # 16 chunks of 64 KiB written across two arrays
        for arr in (a, b):
            arr.write(i * 65536, np.full(8192, i + 1, "<f8").tobytes())
            peak = max(peak, engine.dirty_bytes)
            # decoded chunks get what dirty chunks leave
            # (and what work in flight in the background leaves)
            assert engine.chunk_cache.capacity <= (1 << 20) - engine.dirty_bytes
            if flushed_at is None and (tmp_path / "a" / "c" / "0" / "0").exists():
                flushed_at = (i, engine.dirty_bytes)
    assert peak <= engine.dirty_limit + 65536
    # the first flush wrote the oldest units only, down to half the limit
    assert flushed_at is not None and 0 < flushed_at[1] <= engine.dirty_limit // 2 + 65536
    a.flush()
    b.flush()
    assert engine.dirty_bytes == 0
    assert engine.chunk_cache.capacity == 1 << 20
    for arr in (a, b):
        got = np.frombuffer(arr.read(0, 8 * 65536), "<f8").reshape(8, 8192)
        assert got[:, 0].tolist() == [float(i + 1) for i in range(8)]


@pytest.mark.parametrize("behind", [4, 0])
def test_a_writer_through_over_the_limit_waits_for_the_flush_in_progress_and_no_more(
    tmp_path, monkeypatch, behind
):
    """An array written through (core/writethrough.py): the writer that passed the limit
    waits for the flush in progress (a write-behind), then stores the complete units left if
    the dirty bytes are still over the limit, and never the partly written one (it would be
    stored now and again once complete)."""
    zarr.create_array(str(tmp_path / "a"), shape=(2048, 1024), chunks=(128, 1024), dtype="<f8",
                      compressors=None)  # fmt: skip
    engine = Engine(cache_size=16 << 20)  # dirty limit 12 MiB = 12 chunks of 1 MiB
    a = open_array(LocalStore(tmp_path / "a"), "", engine)
    assert a._units.write_through is not None
    monkeypatch.setattr(a, "_write_behind", lambda: None)  # the test plays the write-behind
    unit = 1 << 20
    for i in range(12):  # complete units, up to the limit
        a.write(i * unit, np.full(unit // 8, i + 1, "<f8").tobytes())
    assert engine.dirty_bytes == engine.dirty_limit
    with a._flush_lock:  # a flush in progress
        writer = threading.Thread(target=a.write, args=(12 * unit, b"\1" * 8192))
        writer.start()
        deadline = time.monotonic() + 10
        while engine.dirty_bytes <= engine.dirty_limit and time.monotonic() < deadline:
            time.sleep(0.001)
        a._flush_locked(only=[(i, 0) for i in range(behind)])  # stores complete units
    writer.join(10)
    assert not writer.is_alive()
    stored = [i for i in range(16) if (tmp_path / "a" / "c" / str(i) / "0").exists()]
    if behind:  # under the limit again: nothing more stored
        assert engine.dirty_bytes == 9 * unit  # 8 complete units and the partial one
        assert stored == [0, 1, 2, 3]
    else:  # still over the limit: the complete units, not the partial one
        assert engine.dirty_bytes == unit
        assert stored == list(range(12))
    a.flush()
    got = np.frombuffer(a.read(0, 13 * unit), "<f8").reshape(13, -1)
    assert got[:12, 0].tolist() == [float(i + 1) for i in range(12)]
    engine.close()


@pytest.mark.parametrize("sharded", [False, True])
def test_read_cached_answers_only_from_clean_cached_units_and_never_touches_the_store(
    tmp_path, sharded
):
    extra = {"shards": (8, 16)} if sharded else {}
    z = zarr.create_array(str(tmp_path / "a"), shape=(16, 24), chunks=(4, 8), dtype="<i4",
                          fill_value=-1, **extra)  # fmt: skip
    data = np.arange(16 * 24, dtype="<i4").reshape(16, 24)
    z[:12] = data[:12]  # rows 12.. stay missing (fill)
    store = CountingStore(tmp_path / "a")
    arr = open_array(store, "", Engine(prefetch_bytes=0))
    store.requests.clear()  # the metadata read
    row = 24 * 4
    assert arr.read_cached(0, 2 * row) is None  # nothing cached yet: the caller must offload
    assert store.requests == []
    assert bytes(arr.read_buffer(0, 2 * row)) == data[:2].tobytes()  # loads chunk row 0
    store.requests.clear()
    got = arr.read_cached(3, 2 * row)  # unaligned, inside the cached units
    assert got is not None and bytes(got) == data.tobytes()[3 : 3 + 2 * row]
    assert got.readonly
    assert arr.read_cached(4 * row, 10) is None  # next chunk row: not cached
    big = arr.read_cached(0, 1 << 20)  # clipped at the end; needs every unit
    assert big is None
    assert bytes(arr.read_buffer(0, 1 << 20)) == np.concatenate(
        [data[:12], np.full((4, 24), -1, "<i4")]).tobytes()  # fmt: skip
    store.requests.clear()
    whole = arr.read_cached(0, 1 << 20)
    assert whole is not None and bytes(whole) == arr.read(0, 1 << 20)
    assert bytes(arr.read_cached(0, 8, "big")) == data.ravel()[:2].astype(">i4").tobytes()
    width = 16 if sharded else 8  # chunks/ files are outer chunks (shards)
    assert bytes(arr.read_chunk_cached((0, 1), 0, 8)) == data[0, width : width + 2].tobytes()
    assert store.requests == []  # every cached read stayed off the store
    arr.write(0, np.array([7], "<i4").tobytes())  # unit (0, 0) is now dirty
    assert arr.read_cached(0, 4) is None
    assert arr.read_cached(8 * 4, 4) is not None  # another unit stays answerable
    arr.flush()
    assert arr.read(0, 4) == np.array([7], "<i4").tobytes()


def _stored_16x16(tmp_path, sharded):
    """A stored (16, 16) array of chunks (4, 8) (in shards (8, 16)), opened with a counting
    store: its values, the values to write, the store (no request recorded yet), the array."""
    extra = {"shards": (8, 16)} if sharded else {}
    z = zarr.create_array(str(tmp_path / "a"), shape=(16, 16), chunks=(4, 8), dtype="<i4",
                          fill_value=0, **extra)  # fmt: skip
    old = np.arange(256, dtype="<i4").reshape(16, 16)
    z[...] = old
    store = CountingStore(tmp_path / "a")
    arr = open_array(store, "", Engine(prefetch_bytes=0))
    store.requests.clear()
    return old, -np.arange(256, dtype="<i4").reshape(16, 16), store, arr


@pytest.mark.parametrize("sharded", [False, True])
def test_units_written_in_whole_rows_are_not_loaded_until_needed(tmp_path, sharded):
    old, new, store, arr = _stored_16x16(tmp_path, sharded)
    row = 16 * 4
    arr.write(0, new[:3].tobytes())  # rows 0-2: whole rows of units (0, 0) and (0, 1)
    arr.write(4 * row, new[4:8].tobytes())  # rows 4-7: units (1, *) completely
    assert store.requests == []  # nothing loaded for either
    # a read of the half-written unit merges its old row 3 in first
    assert arr.read(2 * row, 2 * row) == np.concatenate([new[2], old[3]]).tobytes()
    arr.write(8 * row, new[8:10].tobytes())  # rows 8-9 of units (2, *): merged at flush
    arr.flush()
    expect = old.copy()
    expect[:3], expect[4:10] = new[:3], new[4:10]
    assert np.array_equal(zarr.open_array(str(tmp_path / "a"))[...], expect)
    if not sharded:  # units (1, *) were never read, the partially written ones once each
        assert sorted(k for k, _, _ in store.requests) == ["c/0/0", "c/0/1", "c/2/0", "c/2/1"]


@pytest.mark.parametrize("sharded", [False, True])
def test_units_written_in_parts_of_rows_are_not_loaded_until_needed(tmp_path, sharded):
    """Requests that start and end inside rows (a writer whose buffer is not page-aligned,
    through a write-only descriptor) load nothing; what they leave of a row keeps its stored
    values, also in a row written in part and then whole, and in a unit begun so that gets a
    part of another row."""
    old, new, store, arr = _stored_16x16(tmp_path, sharded)
    flat, row = new.tobytes(), 16 * 4
    for start in range(0, 8 * row, 100):  # rows 0-7 in 100-byte requests (25 elements)
        arr.write(start, flat[start : min(start + 100, 8 * row)])
    arr.write(8 * row, flat[8 * row : 8 * row + 48])  # row 8 to 12: (2, 1) from its start
    arr.write(8 * row + 48, flat[8 * row + 48 : 9 * row + 20])  # the rest, and row 9 to 5
    arr.write(9 * row, flat[9 * row : 10 * row])  # row 9 again, whole
    assert store.requests == []  # nothing loaded for any of them
    expect = old.copy()
    expect[:10] = new[:10]
    got = np.frombuffer(arr.read(8 * row, 3 * row), "<i4").reshape(3, 16)  # merges (2, *)
    assert np.array_equal(got, expect[8:11])
    arr.write(12 * row, flat[12 * row : 12 * row + 24])  # row 12, 0-5: merged at flush
    expect[12, :6] = new[12, :6]
    arr.write(13 * row + 4, flat[13 * row + 4 : 13 * row + 8])  # row 13, 1 of (3, 0): as well
    expect[13, 1] = new[13, 1]
    arr.flush()
    assert np.array_equal(zarr.open_array(str(tmp_path / "a"))[...], expect)
    if not sharded:  # the units written completely were never read
        assert sorted(k for k, _, _ in store.requests) == ["c/2/0", "c/2/1", "c/3/0"]


def test_rows_of_an_edge_unit_begun_in_part_are_merged_before_more_rows(tmp_path):
    """An edge unit (past the array's last column) begun with the start of one row is not
    loaded; a later write of several rows of it, each in part, merges its old content first
    (recording only parts of rows cannot say which elements of several rows were written):
    every written element is kept, every other one is as stored."""
    z = zarr.create_array(str(tmp_path / "a"), shape=(8, 12), chunks=(4, 8), dtype="<i4",
                          fill_value=0)  # fmt: skip
    old = np.arange(96, dtype="<i4").reshape(8, 12)
    z[...] = old
    arr = open_array(LocalStore(tmp_path / "a"), "", Engine(prefetch_bytes=0))
    new = -old - 1
    arr.write(0, new[0].tobytes())  # row 0: the start of row 0 of the edge unit (0, 1)
    arr.write(12 * 4, new[1:3].tobytes())  # rows 1-2: cols 0-3 of two rows of (0, 1)
    expect = old.copy()
    expect[:3] = new[:3]
    assert np.array_equal(np.frombuffer(arr.read(0, 96 * 4), "<i4").reshape(8, 12), expect)
    arr.flush()
    assert np.array_equal(zarr.open_array(str(tmp_path / "a"))[...], expect)


def test_parts_of_one_dimensional_units_are_merged_with_what_was_stored(tmp_path):
    """A 1-d unit is one row: the parts of it written are recorded, the rest merged at the
    flush, also in the edge unit that reaches past the array's end."""
    z = zarr.create_array(str(tmp_path / "a"), shape=(20,), chunks=(8,), dtype="<i2")
    old = np.arange(20, dtype="<i2")
    z[...] = old
    store = CountingStore(tmp_path / "a")
    arr = open_array(store, "", Engine(prefetch_bytes=0))
    store.requests.clear()
    new = -np.arange(20, dtype="<i2") - 100
    for lo, hi in ((0, 3), (2, 5), (6, 7), (8, 12), (12, 16), (16, 19)):
        arr.write(2 * lo, new[lo:hi].tobytes())
    assert store.requests == []
    expect = old.copy()
    for lo, hi in ((0, 5), (6, 7), (8, 16), (16, 19)):
        expect[lo:hi] = new[lo:hi]
    assert arr.read(0, 40) == expect.tobytes()
    arr.write(10, new[5:6].tobytes())  # unit 0 is merged now: the rest of it as usual
    expect[5] = new[5]
    arr.flush()
    assert np.array_equal(zarr.open_array(str(tmp_path / "a"))[...], expect)


def test_a_read_never_serves_the_unwritten_rows_of_a_unit_made_dirty_meanwhile(
    tmp_path, monkeypatch
):
    """A reader merges the deferred units it needs before it takes the dirty ones; a writer
    that makes one of them dirty in whole rows in between (its other rows not loaded yet)
    must not have those rows served: the reader merges again. The writer's timing is
    simulated by a first merge that finds nothing to do."""
    z = zarr.create_array(str(tmp_path / "a"), shape=(8, 64), chunks=(4, 64), dtype="<f4",
                          fill_value=0)  # fmt: skip
    z[...] = 5
    arr = open_array(LocalStore(tmp_path / "a"), "", Engine(prefetch_bytes=0))
    arr.write(0, np.full(64, 7, "<f4").tobytes())  # row 0 of unit (0, 0): deferred
    unit = (0, 0)
    rows = arr._unknown[unit]
    arr._dirty[unit][~rows] = np.nan  # its unwritten rows: whatever the memory held
    real = arr._merge_unknown
    calls = []

    def racing(units):  # the first merge ran before the writer made the unit dirty
        calls.append(list(units))
        if len(calls) > 1:
            real(units)

    monkeypatch.setattr(arr, "_merge_unknown", racing)
    got = np.frombuffer(arr.read(0, 4 * 64 * 4), "<f4").reshape(4, 64)
    assert (got[0] == 7).all() and (got[1:] == 5).all()
    assert len(calls) == 2


@pytest.mark.parametrize("part", [False, True])
def test_a_deferred_unit_whose_old_content_is_corrupt_fails_at_flush_and_keeps_the_write(
    tmp_path, part
):
    z = zarr.create_array(str(tmp_path / "a"), shape=(8, 8), chunks=(4, 8), dtype="<i4",
                          compressors=[zarr.codecs.GzipCodec()])  # fmt: skip
    z[...] = 1
    (tmp_path / "a" / "c" / "0" / "0").write_bytes(b"\x1f\x8bgarbage")
    arr = open_array(LocalStore(tmp_path / "a"), "", Engine(prefetch_bytes=0))
    # row 0 of the corrupt unit, whole or its first 3 elements: not loaded yet
    arr.write(0, np.full(3 if part else 8, 5, "<i4").tobytes())
    with pytest.raises(CorruptDataError):
        arr.flush()
    assert arr.dirty  # the written row is kept, not dropped
    with pytest.raises(CorruptDataError):
        arr.read(0, 4)  # never the fill value in place of the unreadable rows
    arr.write(0, np.full(32, 6, "<i4").tobytes())  # now the whole unit: nothing to merge
    arr.flush()
    assert not arr.dirty
    assert (zarr.open_array(str(tmp_path / "a"))[:4] == 6).all()


def test_completely_written_units_are_stored_in_the_background(tmp_path):
    zarr.create_array(str(tmp_path / "a"), shape=(64, 1024), chunks=(8, 1024), dtype="<f8")
    engine = Engine(cache_size=1 << 20)  # limit 768 KiB; write-behind past 192 KiB dirty
    arr = open_array(LocalStore(tmp_path / "a"), "", engine)
    half = np.full(4 * 1024, 3.0, "<f8").tobytes()
    arr.write(0, half)  # half of chunk 0: not complete, never written behind
    for i in range(1, 4):  # chunks 1-3 complete: 64 KiB each, 224 KiB dirty in total
        arr.write(i * 65536, np.full(8192, float(i), "<f8").tobytes())
    deadline = time.monotonic() + 10
    # the three jobs run in parallel: wait for all of them, not only the last one queued
    stored = [tmp_path / "a" / "c" / str(i) / "0" for i in range(1, 4)]
    while not all(p.exists() for p in stored) and time.monotonic() < deadline:
        time.sleep(0.01)
    for i in range(1, 4):
        assert (tmp_path / "a" / "c" / str(i) / "0").exists()
    while arr._behind and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not (tmp_path / "a" / "c" / "0" / "0").exists()  # the half-written one waits
    assert arr.dirty and engine.dirty_bytes == 65536
    arr.flush()
    assert (zarr.open_array(str(tmp_path / "a"))[:4, 0] == 3.0).all()


@pytest.mark.parametrize(
    "order", [list(range(8)), list(range(7, -1, -1)), [0, 7, 3, 1, 6, 2, 5, 4]]
)
def test_a_unit_written_row_by_row_is_complete_exactly_with_its_last_row(tmp_path, order):
    zarr.create_array(str(tmp_path / "a"), shape=(64, 1024), chunks=(8, 1024), dtype="<f8")
    arr = open_array(LocalStore(tmp_path / "a"), "", Engine(cache_size=64 << 20))
    row = 1024 * 8
    for n, r in enumerate(order):  # rows of chunk 1 (array rows 8-15), in this order
        arr.write((8 + r) * row, np.full(1024, float(r), "<f8").tobytes())
        assert ((1, 0) in arr._complete) == (n == len(order) - 1), (order, n)
    arr.flush()
    assert (zarr.open_array(str(tmp_path / "a"))[8:16, 5] == np.arange(8.0)).all()


def test_all_written_looks_at_every_row():
    from zarrfs.core.writepath import _all_written

    rows = np.ones((4, 8), dtype=bool)
    assert _all_written(rows)
    rows[2, 3] = False  # first and last written, one in the middle not
    assert not _all_written(rows)
    rows[2, 3] = True
    rows[0, 0] = False
    assert not _all_written(rows)
    assert _all_written(np.ones((), dtype=bool)) and not _all_written(np.zeros((), dtype=bool))
    assert _all_written(np.zeros((0, 3), dtype=bool))


class _SlowSets(LocalStore):
    """A store whose writes take a while, so that flush jobs overlap."""

    def set_stream(self, key, parts):
        time.sleep(0.01)
        super().set_stream(key, parts)


@pytest.mark.parametrize("layout", ["bytes", "gzip", "sharded"])
def test_overwrite_memory_stays_within_cache_size(tmp_path, monkeypatch, layout):
    """Dirty chunks, cached chunks and the buffers of encodes in flight (encoded bytes, codec
    intermediates, shard rewrites) together stay within ``cache_size``, however large the
    array: flush jobs reserve what they hold and wait when the budget is taken."""
    import tracemalloc

    from zarrfs.core.sharding import access

    shape, chunks = (64, 256, 256), (16, 64, 256)  # 16 MiB of float32, 1 MiB chunks
    kwargs: dict = {"compressors": None}
    if layout == "gzip":
        kwargs = {"compressors": [zarr.codecs.GzipCodec(level=1)]}
    elif layout == "sharded":
        kwargs = {"shards": (32, 128, 256), "compressors": [zarr.codecs.GzipCodec(level=1)]}
        monkeypatch.setattr(access, "COPY_SPAN", 256 << 10, raising=False)
    zarr.create_array(str(tmp_path / "a"), shape=shape, chunks=chunks, dtype="<f4", **kwargs)
    budget = 8 << 20  # half the array; the dirty limit (6 MiB) holds a layer of chunks (4 MiB)
    engine = Engine(cache_size=budget, prefetch_bytes=0)
    arr = open_array(_SlowSets(tmp_path / "a"), "", engine)
    data = np.random.default_rng(0).random(shape, dtype="f4").tobytes()
    step = 16 << 10  # each write dirties at most one new chunk
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        for offset in range(0, len(data), step):
            arr.write(offset, data[offset : offset + step])
        arr.flush()
        peak = tracemalloc.get_traced_memory()[1] - start
        tracemalloc.stop()
        assert engine.dirty_bytes == 0 and engine.work_bytes == 0
        # slack: the dirty chunks one write adds before the writer flushes, small objects
        assert peak <= budget + (2 << 20), f"peak {peak / 2**20:.1f} MiB"
        assert arr.read(0, len(data)) == data
    finally:
        tracemalloc.stop()
        engine.close()


def test_overlapping_loads_of_one_shard_decode_each_inner_chunk_once(tmp_path):
    z = zarr.create_array(str(tmp_path / "a"), shape=(8, 8), chunks=(2, 8), shards=(8, 8),
                          dtype="<f4", compressors=None)  # fmt: skip
    z[...] = np.arange(64, dtype="f4").reshape(8, 8)

    class SlowStore(LocalStore):  # keeps the first load in flight while the second one comes
        def get(self, key, byte_range=None):
            time.sleep(0.1)
            return super().get(key, byte_range)

    engine = Engine(threads=2, prefetch_bytes=0)
    arr = open_array(SlowStore(tmp_path / "a"), "", engine)
    first = threading.Thread(target=arr.read, args=(0, 32))  # row 0: inner chunk 0
    first.start()
    time.sleep(0.03)
    assert arr.read(0, 128) == z[:4].tobytes()  # rows 0-3: joins chunk 0, loads chunk 1
    first.join()
    assert engine.stats.snapshot()["total"]["chunks_decoded"] == 2
    engine.close()


def test_sequential_reader_gets_the_next_chunk_layer_ahead_without_reloading(tmp_path):
    # layers of 4 chunks (16 KiB each); a row-major reader uses a whole layer at once and meets
    # the next one only after 64 KiB of bytes: far beyond a 16 KiB read-ahead window
    z = zarr.create_array(str(tmp_path / "a"), shape=(8, 64, 64), chunks=(4, 32, 32), dtype="<f4",
                          compressors=None)  # fmt: skip
    z[...] = np.arange(8 * 64 * 64, dtype="f4").reshape(8, 64, 64)
    want = z[...].tobytes()
    store = CountingStore(tmp_path / "a")
    engine = Engine(cache_size=9 * 16384, threads=1, prefetch_bytes=16384, direct_reads=False)
    arr = open_array(store, "", engine)

    def settle() -> None:  # one worker thread: a job queued now runs after every prefetch
        engine.executor.submit(lambda: None).result()

    got = b""
    while len(got) < 40 * 1024:  # layer 0 only (its planes 0-2)
        got += arr.read(len(got), 4096)
        settle()
    layer1 = {f"c/1/{i}/{j}" for i in range(2) for j in range(2)}
    assert layer1 & {k for k, _, _ in store.requests}  # loading while layer 0 is served
    while len(got) < len(want):
        got += arr.read(len(got), 4096)
        settle()
    assert got == want
    keys = [k for k, _, _ in store.requests if k.startswith("c/")]
    assert sorted(keys) == sorted(set(keys)) and len(keys) == 8  # each chunk loaded once
    engine.close()


class _SlowGets(LocalStore):
    """Loads take a while, so many are in flight at once."""

    def get(self, key, byte_range=None):
        time.sleep(0.01)
        return super().get(key, byte_range)


def test_read_memory_stays_within_cache_size(tmp_path):
    """Loads in flight hold their encoded input and decoded output before the result is
    cached: they reserve it, so the cached and in-flight chunks stay within ``cache_size``."""
    import tracemalloc

    shape, chunks = (64, 256, 256), (16, 64, 256)  # 16 MiB of float32, 1 MiB chunks
    z = zarr.create_array(str(tmp_path / "a"), shape=shape, chunks=chunks, dtype="<f4",
                          compressors=[zarr.codecs.GzipCodec(level=1)])  # fmt: skip
    z[...] = np.random.default_rng(0).random(shape, dtype="f4")
    budget, piece = 4 << 20, 4 << 20  # each read needs a layer of four chunks
    engine = Engine(cache_size=budget, threads=8, prefetch_bytes=piece)
    arr = open_array(_SlowGets(tmp_path / "a"), "", engine)
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        for offset in range(0, 16 << 20, piece):
            assert len(arr.read(offset, piece)) == piece
        peak = tracemalloc.get_traced_memory()[1] - start
        tracemalloc.stop()
        assert engine.work_bytes == 0
        # slack: the piece being returned (gathered, then as bytes), small objects
        assert peak <= budget + 2 * piece + (2 << 20), f"peak {peak / 2**20:.1f} MiB"
    finally:
        tracemalloc.stop()
        engine.close()


def test_a_pressure_flush_stores_completely_written_units_before_older_partial_ones(tmp_path):
    # a row-major writer has the next layer of units partly written when the dirty limit is
    # reached: storing those would load their old content and store them twice
    z = zarr.create_array(str(tmp_path / "a"), shape=(8, 64), chunks=(4, 64), dtype="<u4",
                          compressors=None)  # fmt: skip
    z[...] = 5
    store = CountingStore(tmp_path / "a")
    engine = Engine(cache_size=1 << 20)
    arr = open_array(store, "", engine)
    row = 64 * 4
    arr.write(4 * row, np.ones(64, "<u4").tobytes())  # unit 1: one row of four (oldest)
    arr.write(0, np.full(4 * 64, 2, "<u4").tobytes())  # unit 0: whole
    store.requests.clear()
    arr.flush(down_to=engine.dirty_bytes - 4 * row)  # room for one unit
    assert arr._dirty.keys() == {(1, 0)}  # the complete one went, the partial one stays
    assert store.requests == []  # nothing loaded to merge
    assert np.array_equal(zarr.open_array(str(tmp_path / "a"))[:4], np.full((4, 64), 2))
    arr.flush()
    want = np.full((8, 64), 5, "<u4")
    want[:4] = 2
    want[4] = 1
    assert np.array_equal(zarr.open_array(str(tmp_path / "a"))[...], want)
    engine.close()


def test_inline_writes_only_when_nothing_needs_waiting(tmp_path):
    z = zarr.create_array(str(tmp_path / "a"), shape=(8, 64), chunks=(4, 64), dtype="<u4",
                          compressors=None, fill_value=7)  # fmt: skip
    z[...] = np.arange(8 * 64, dtype="u4").reshape(8, 64)
    engine = Engine(cache_size=1 << 20)
    arr = open_array(LocalStore(tmp_path / "a"), "", engine)
    row = 64 * 4
    ones = np.ones(64, "<u4").tobytes()
    # part of a row of a unit never loaded, not from the row's start: needs the stored bytes,
    # so not inline; no change
    assert not arr.write_cached(4, ones[:8])
    assert not arr.write_cached(1, ones[:8])  # partial elements: never inline
    assert engine.dirty_bytes == 0
    # whole rows, or the start of a row: done inline (the rest is merged in later)
    assert arr.write_cached(row, ones)
    assert engine.dirty_bytes == 4 * row
    assert arr.write_cached(0, ones[:8])
    # any part of one row of that unit is recorded so too
    assert arr.write_cached(2 * row + 4, ones[:8])
    arr.write(3 * row + 8, ones[:8])  # the writer that may wait: the same
    want = z[...].copy()
    want[0, :2] = 1
    want[1] = 1
    want[2, 1:3] = 1
    want[3, 2:4] = 1
    assert arr.read(0, 8 * row) == want.tobytes()  # merged for the read
    assert arr.write_cached(3 * row + 16, ones[:8])  # dirty and merged: inline
    want[3, 4:6] = 1
    arr.flush()
    assert np.array_equal(zarr.open_array(str(tmp_path / "a"))[...], want)
    # a write that would pass the dirty limit is left to the writer that flushes
    engine.dirty_limit = 4 * row
    assert arr.write_cached(0, ones)  # the first unit is in the cache since the flush
    assert not arr.write_cached(4 * row, ones)  # a second dirty unit would pass the limit
    engine.close()


def test_bytes_chunks_are_stored_from_a_view_of_the_unit(tmp_path):
    from zarrfs.core.codecs.chain import CodecChain  # noqa: F401  (the chain under test)

    for endian in ("little", "big"):
        z = zarr.create_array(str(tmp_path / endian), shape=(4, 4), chunks=(4, 4), dtype="u2",
                              serializer=zarr.codecs.BytesCodec(endian=endian),
                              compressors=None)  # fmt: skip
        arr = open_array(LocalStore(tmp_path / endian), "", Engine())
        unit = np.arange(16, dtype="u2").reshape(4, 4)
        data = arr._prepared.encode_buffer(unit)
        assert bytes(data) == arr._prepared.encode(unit)
        assert bytes(data) == unit.astype("<u2" if endian == "little" else ">u2").tobytes()
        if endian == "little":  # the stored byte order already: no copy
            assert np.shares_memory(np.frombuffer(data, "u1"), unit)
        del z
