"""Write-through (core/writethrough.py): units filled front to back are stored while written.

Every test checks the stored bytes against what was written (and zarr-python reads them), the
counter ``units_written_through`` for which path stored each unit, and that no temporary file
is left in the store.
"""

from __future__ import annotations

import gc
import os
import threading
import time

import numpy as np
import pytest
import zarr

from zarrfs.core import writethrough
from zarrfs.core.array import Engine
from zarrfs.core.hierarchy import open_array
from zarrfs.core.stores.local import LocalStore
from zarrfs.core.stores.localgroup import TEMP_PREFIX, LocalTemp

SHAPE, CHUNKS = (8, 512, 512), (2, 512, 256)  # 1 MiB chunks of float32: 4 layers of 2
PLANE = 512 * 512 * 4


def _make(path, fill=0.0):
    zarr.create_array(
        str(path), shape=SHAPE, chunks=CHUNKS, dtype="<f4", compressors=None, fill_value=fill
    )
    return path


def _data(seed=1):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(SHAPE, dtype=np.float32)


def _through(engine) -> int:
    return engine.stats.snapshot()["total"].get("units_written_through", 0)


def _temps(path) -> list[str]:
    return [f for _, _, files in os.walk(path) for f in files if f.startswith(TEMP_PREFIX)]


def _stored(path) -> np.ndarray:
    return zarr.open_array(str(path), mode="r")[...]


@pytest.fixture
def engine():
    eng = Engine(cache_size=256 << 20, threads=2, prefetch_bytes=0)
    yield eng
    eng.close()


def _write_sequentially(arr, data, step=1 << 20):
    raw = data.tobytes()
    for off in range(0, len(raw), step):
        arr.write(off, raw[off : off + step])


def test_a_sequential_overwrite_is_stored_through_the_streams(tmp_path, engine):
    path = _make(tmp_path / "a")
    arr = open_array(LocalStore(path), "", engine)
    assert arr._units.write_through is not None
    data = _data()
    _write_sequentially(arr, data)
    arr.flush()
    assert _through(engine) == 8  # every chunk
    assert np.array_equal(_stored(path), data)
    assert _temps(path) == []
    # the chunk files are exactly the units' elements (the bytes codec alone)
    chunk = np.fromfile(path / "c" / "1" / "0" / "1", dtype="<f4").reshape(CHUNKS)
    assert np.array_equal(chunk, data[2:4, :, 256:512])


def test_small_writes_in_order_and_writes_that_are_not(tmp_path, engine):
    """Writes of 12 KiB (pieces within rows, 3 per chunk row, each continuing the last) stream;
    a unit whose first piece does not start at its beginning is stored the usual way."""
    path = _make(tmp_path / "a")
    arr = open_array(LocalStore(path), "", engine)
    data = _data(2)
    raw = data.tobytes()
    half = len(raw) // 2
    _write_sequentially(arr, data[:4], step=12 << 10)  # the first layer, front to back
    # the second layer back to front: no unit's first piece starts at its beginning
    step = 1 << 20
    for off in reversed(range(half, len(raw), step)):
        arr.write(off, raw[off : off + step])
    arr.flush()
    assert _through(engine) == 4
    assert np.array_equal(_stored(path), data)
    assert _temps(path) == []


def test_a_rewrite_of_streamed_bytes_ends_the_stream_and_the_newer_bytes_win(tmp_path, engine):
    path = _make(tmp_path / "a")
    arr = open_array(LocalStore(path), "", engine)
    data = _data(3)
    raw = data.tobytes()
    _write_sequentially(arr, data)
    # rewrite a row of chunk (0, 0, 0) that its stream already holds
    patch = np.full(256, 7.5, dtype="<f4")
    off = (1 * 512 + 3) * 512 * 4  # plane 1, row 3, columns 0:256
    arr.write(off, patch.tobytes())
    expected = np.frombuffer(raw, "<f4").reshape(SHAPE).copy()
    expected[1, 3, :256] = patch
    arr.flush()
    assert _through(engine) == 7  # all but the rewritten unit
    assert np.array_equal(_stored(path), expected)
    assert _temps(path) == []


def test_a_flush_of_a_partly_written_unit_discards_its_stream(tmp_path, engine):
    """The unit stored before it is complete (its other rows merged from the store) and then
    completed: stored right both times, no temporary left."""
    path = _make(tmp_path / "a", fill=0.0)
    old = _data(4)
    zarr.open_array(str(path), mode="r+")[...] = old
    arr = open_array(LocalStore(path), "", engine)
    new = _data(5)
    raw = new.tobytes()
    arr.write(0, raw[:PLANE])  # one of the first layer's two planes
    arr.flush()
    assert _through(engine) == 0
    half = old.copy()
    half[:1] = new[:1]
    assert np.array_equal(_stored(path), half)
    arr.write(PLANE, raw[PLANE:])
    arr.flush()
    assert np.array_equal(_stored(path), new)
    assert _through(engine) == 6  # the other layers, written front to back
    assert _temps(path) == []


def test_a_unit_of_fill_values_is_deleted_not_stored(tmp_path, engine):
    path = _make(tmp_path / "a", fill=0.0)
    zarr.open_array(str(path), mode="r+")[...] = _data(6)
    arr = open_array(LocalStore(path), "", engine)
    data = _data(7)
    data[:2, :, :256] = 0.0  # chunk (0, 0, 0): all fill value
    _write_sequentially(arr, data)
    arr.flush()
    assert not (path / "c" / "0" / "0" / "0").exists()
    assert _through(engine) == 7
    assert np.array_equal(_stored(path), data)
    assert _temps(path) == []


def test_a_failed_append_stores_the_unit_the_usual_way(tmp_path, engine, monkeypatch):
    path = _make(tmp_path / "a")
    arr = open_array(LocalStore(path), "", engine)
    calls = []
    real = LocalTemp.append

    def failing(self, data):
        calls.append(self.key)
        if self.key.endswith("0/0/1"):
            raise OSError(28, "No space left on device")
        real(self, data)

    monkeypatch.setattr(LocalTemp, "append", failing)
    data = _data(8)
    _write_sequentially(arr, data)
    arr.flush()
    assert any(k.endswith("0/0/1") for k in calls)
    assert _through(engine) == 7
    assert np.array_equal(_stored(path), data)
    assert _temps(path) == []


def test_a_store_that_observes_sets_is_never_bypassed(tmp_path, engine):
    class Observed(LocalStore):
        def set_stream(self, key, pieces):
            self.seen = getattr(self, "seen", 0) + 1
            super().set_stream(key, pieces)

    path = _make(tmp_path / "a")
    store = Observed(path)
    arr = open_array(store, "", engine)
    data = _data(9)
    _write_sequentially(arr, data)
    arr.flush()
    assert _through(engine) == 0
    assert store.seen == 8
    assert np.array_equal(_stored(path), data)


def test_streams_are_bounded_and_writers_at_the_bound_store_the_usual_way(
    tmp_path, engine, monkeypatch
):
    gc.collect()  # streams of arrays other tests dropped: reaped by the first write below
    writethrough._reap()
    before = writethrough._open_count
    monkeypatch.setattr(writethrough, "MAX_OPEN", before + 2)
    path = _make(tmp_path / "a")
    arr = open_array(LocalStore(path), "", engine)
    data = _data(10)
    _write_sequentially(arr, data)
    arr.flush()
    # the first layer's two units take both streams, open until the flush at the end
    assert _through(engine) == 2
    assert writethrough._open_count == before
    assert np.array_equal(_stored(path), data)
    assert _temps(path) == []


def test_concurrent_writers_of_the_same_units_store_the_last_bytes(tmp_path, engine):
    path = _make(tmp_path / "a")
    arr = open_array(LocalStore(path), "", engine)
    first, second = _data(11), _data(12)
    done = threading.Barrier(2)

    def writer(data):
        done.wait()
        _write_sequentially(arr, data, step=256 << 10)

    threads = [threading.Thread(target=writer, args=(d,)) for d in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    _write_sequentially(arr, second)  # whatever interleaving: these bytes are the last
    arr.flush()
    assert np.array_equal(_stored(path), second)
    assert _temps(path) == []


def test_each_streamed_file_is_fsynced_once_by_its_writer_and_renamed_without_more(
    tmp_path, engine, record_fsyncs
):
    path = _make(tmp_path / "a")
    zarr.open_array(str(path), mode="r+")[...] = _data(0)  # every directory exists
    arr = open_array(LocalStore(path), "", engine)
    synced = record_fsyncs()
    _write_sequentially(arr, _data(13))
    arr.flush()
    assert _through(engine) == 8
    # the paths as fsynced: temporaries (renamed since, so by their old names) and directories
    temps = [p for p in synced if os.path.basename(p).startswith(TEMP_PREFIX)]
    dirs = [p for p in synced if p not in temps]
    assert len(temps) == 8 and len(set(temps)) == 8  # each once, before the commit
    chunk_dirs = {str(p.parent.resolve()) for p in (path / "c").rglob("*") if p.is_file()}
    assert set(dirs) == chunk_dirs and len(dirs) == len(chunk_dirs)  # each directory once
    assert max(synced.index(t) for t in temps) < min(synced.index(d) for d in dirs)


def test_the_streams_of_an_array_collected_unflushed_are_discarded(tmp_path):
    """An array dropped with streams it never stored (the engine keeps arrays for the life of
    the mount, so this is a failure path): once it is collected, the next writer discards
    its objects and frees their places in the bound."""
    gc.collect()
    writethrough._reap()
    before = writethrough._open_count
    store = LocalStore(_make(tmp_path / "a"))
    shape, itemsize = (2, 512, 256), 4

    def key(unit):
        return "c/" + "/".join(map(str, unit))

    dropped = writethrough.UnitStreams(store, key, shape, itemsize)
    units = [np.full(shape, k, dtype="<f4") for k in range(2)]
    for k, unit in enumerate(units):  # whole units: each appended and fsynced
        dropped.wrote((0, 0, k), unit, (slice(0, 2), slice(0, 512), slice(0, 256)))
    half = np.zeros(shape, dtype="<f4")  # half a unit: a stream with nothing appended yet
    dropped.wrote((1, 0, 0), half, (slice(0, 1), slice(0, 512), slice(0, 256)))
    assert writethrough._open_count == before + 3
    deadline = time.monotonic() + 10
    while len(_temps(tmp_path / "a")) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(_temps(tmp_path / "a")) == 2
    del dropped
    gc.collect()
    other = writethrough.UnitStreams(store, key, shape, itemsize)
    other.wrote((2, 0, 0), half, (slice(0, 1), slice(0, 512), slice(0, 256)))  # reaps them
    assert writethrough._open_count == before + 1
    deadline = time.monotonic() + 10
    while _temps(tmp_path / "a") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _temps(tmp_path / "a") == []
    other.drop((2, 0, 0))
    assert writethrough._open_count == before
