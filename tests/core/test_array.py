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


def test_sharded_4k_read_fetches_only_the_index_and_one_inner_chunk(tmp_path):
    # inner chunks span the last axis, so one aligned 4 KiB row lies in exactly one of them
    z = zarr.create_array(str(tmp_path / "a"), shape=(64, 64, 1024), chunks=(16, 16, 1024),
                          shards=(32, 32, 1024), dtype="<f4",
                          compressors=[zarr.codecs.BloscCodec(cname="lz4")])
    z[...] = np.random.default_rng(0).random((64, 64, 1024), dtype="f4")
    store = CountingStore(tmp_path / "a")
    engine = Engine(prefetch_bytes=0)
    arr = open_array(store, "", engine)
    store.requests.clear()
    start = 4 * 1024 * (64 * 40 + 20)  # row (40, 20): shard (1, 0, 0), inner chunk (0, 1, 0)
    out = arr.read(start, 4096)
    assert out == z[40, 20].astype("<f4").tobytes()
    assert {k for k, _, _ in store.requests} == {"c/1/0/0"}
    sizes = [n for _, _, n in store.requests]
    index_bytes = 4 * 16 + 4  # 2x2x1 inner chunks x (offset, nbytes) + crc32c
    inner = zarr.open_array(str(tmp_path / "a"))  # size of that inner chunk from the shard index
    shard = (tmp_path / "a" / "c" / "1" / "0" / "0").read_bytes()
    idx = np.frombuffer(shard[-index_bytes:-4], "<u8").reshape(2, 2, 1, 2)
    assert sizes == [index_bytes, int(idx[0, 1, 0, 1])]
    assert engine.stats.snapshot()["total"]["bytes_fetched"] == sum(sizes)
    del inner


def test_missing_chunks_read_as_fill_without_decoding(tmp_path):
    zarr.create_array(str(tmp_path / "a"), shape=(10,), chunks=(5,), dtype="<i2", fill_value=-3)
    engine = Engine()
    arr = open_array(LocalStore(tmp_path / "a"), "", engine)
    assert arr.read(0, 20) == np.full(10, -3, "<i2").tobytes()
    assert engine.stats.snapshot()["total"].get("chunks_decoded", 0) == 0


@pytest.mark.parametrize("sharded", [False, True])
def test_write_over_a_corrupt_chunk_fails_and_changes_nothing(tmp_path, sharded):
    kw = dict(shards=(8, 8)) if sharded else {}
    z = zarr.create_array(str(tmp_path / "a"), shape=(16, 8), chunks=(4, 8), dtype="<u4",
                          compressors=[zarr.codecs.Crc32cCodec()], **kw)
    z[...] = np.arange(128, dtype="u4").reshape(16, 8)
    # plain: chunk rows 4-7; sharded: the index checksum of the shard holding rows 0-7
    victim = tmp_path / "a" / "c" / ("0" if sharded else "1") / "0"
    blob = bytearray(victim.read_bytes())
    blob[-1 if sharded else 10] ^= 1
    victim.write_bytes(bytes(blob))
    before = {p: p.read_bytes() for p in (tmp_path / "a" / "c").rglob("*") if p.is_file()}
    arr = open_array(LocalStore(tmp_path / "a"), "", Engine())
    row = 8 * 4
    # a write spanning a good chunk (rows 0-3 or shard 0) and a partial corrupt one
    with pytest.raises(CorruptDataError):
        arr.write(2 * row, b"\xff" * (row * 3 + 4))
    arr.flush()
    after = {p: p.read_bytes() for p in (tmp_path / "a" / "c").rglob("*") if p.is_file()}
    assert after == before
    assert not arr.dirty


def test_readers_never_see_a_torn_write(tmp_path):
    zarr.create_array(str(tmp_path / "a"), shape=(64, 64), chunks=(16, 16), dtype="<u8",
                      compressors=[zarr.codecs.ZstdCodec()])
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

    threads = [threading.Thread(target=reader) for _ in range(3)] + [threading.Thread(target=flusher)]
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
    assert np.frombuffer(open_array(LocalStore(tmp_path / "a"), "").read(0, n), "<u8").tolist() == [59 * pattern] * 4096


def test_resize_shrink_then_grow_shows_fill_not_old_data(tmp_path):
    z = zarr.create_array(str(tmp_path / "a"), shape=(10, 3), chunks=(4, 3), dtype="<i4", fill_value=-1)
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
    z = zarr.create_array(str(tmp_path / "a"), shape=(64, 256), chunks=(8, 256), dtype="<f8",
                          compressors=[zarr.codecs.ZstdCodec()])
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
    engine = Engine(cache_size=1 << 20)  # dirty limit: a quarter, 256 KiB = 4 chunks
    a = open_array(LocalStore(tmp_path / "a"), "", engine)
    b = open_array(LocalStore(tmp_path / "b"), "", engine)
    assert engine.dirty_limit == 256 << 10
    assert engine.chunk_cache.capacity == (1 << 20) - (256 << 10)
    peak = 0
    for i in range(8):  # 16 chunks of 64 KiB written across two arrays
        for arr in (a, b):
            arr.write(i * 65536, np.full(8192, i + 1, "<f8").tobytes())
            peak = max(peak, engine.dirty_bytes)
    assert peak <= engine.dirty_limit + 65536
    a.flush()
    b.flush()
    assert engine.dirty_bytes == 0
    for arr in (a, b):
        got = np.frombuffer(arr.read(0, 8 * 65536), "<f8").reshape(8, 8192)
        assert got[:, 0].tolist() == [float(i + 1) for i in range(8)]


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
