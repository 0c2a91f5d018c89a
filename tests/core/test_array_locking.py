"""The lock order of docs/write-path.md, driven by real threads: one test per scenario.

Every scenario runs its threads for a fixed number of rounds and joins them with a deadline; a
thread still running then is a hang (a deadlock), reported as a failure. The threads are daemon
threads so a hang does not keep the test process alive. Data checks follow each run: what was
written last is what the store holds, and nothing is lost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from zarrfs.core.array import Engine
from zarrfs.core.errors import InvalidWriteError
from zarrfs.core.hierarchy import Hierarchy
from zarrfs.core.metadata.v3 import array_metadata_v3
from zarrfs.core.stores.local import LocalStore
from zarrfs.core.stores.memory import MemoryStore
from zarrfs.core.writeback import WriteBack

#: a run that takes longer than this has hung (each normally takes well under a second)
DEADLINE_S = 60.0
ROWS, COLS = 16, 64
ROW = COLS * 4


def run_threads(*bodies: Callable[[], None]) -> None:
    """Run each body in its own thread; fail if one raises or is still running at the deadline."""
    errors: list[BaseException] = []

    def wrap(body: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                body()
            except BaseException as exc:  # reported below
                errors.append(exc)

        return run

    threads = [threading.Thread(target=wrap(b), daemon=True) for b in bodies]
    for t in threads:
        t.start()
    deadline = time.monotonic() + DEADLINE_S
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    hung = [t.name for t in threads if t.is_alive()]
    assert not hung, f"threads still running after {DEADLINE_S} s (deadlock): {hung}"
    if errors:
        raise errors[0]


def make_array(tmp_path: Path, codec: str = "plain", **engine: Any) -> tuple[Hierarchy, Any]:
    """A (ROWS, COLS) float32 array of chunk (4, 32) (or shards of inner chunks), fill -1."""
    kwargs: dict[str, Any] = {"chunks": (4, 32)}
    if codec == "sharded":
        kwargs = {"chunks": (2, 16), "shards": (4, 32)}
    z = zarr.create_array(
        str(tmp_path / "a"), shape=(ROWS, COLS), dtype="<f4", fill_value=-1, **kwargs
    )
    z[...] = np.arange(ROWS * COLS, dtype="f4").reshape(ROWS, COLS)
    h = Hierarchy(LocalStore(tmp_path / "a"), Engine(**engine))
    return h, h.array("")


def stored(tmp_path: Path) -> np.ndarray[Any, Any]:
    return zarr.open_array(str(tmp_path / "a"), mode="r")[...]


def row_bytes(value: float) -> bytes:
    return np.full(COLS, value, dtype="<f4").tobytes()


@pytest.mark.parametrize("codec", ["plain", "sharded"])
def test_resize_against_flush_does_not_deadlock(tmp_path: Path, codec: str) -> None:
    """resize takes _flush_lock before _write_lock, like every flush (it used to hold the
    write lock and then wait for the flush lock while a flush held it and waited for the
    write lock: both threads hung for good)."""
    h, arr = make_array(tmp_path, codec)
    rounds = 200

    def resizer() -> None:
        for n in range(rounds):
            arr.resize((ROWS - 1 - n % 3, COLS))
            arr.resize((ROWS, COLS))

    def flusher() -> None:
        for n in range(rounds):
            try:
                arr.write(0, row_bytes(n))
            except InvalidWriteError:
                pass
            arr.flush()

    run_threads(resizer, flusher)
    arr.flush()
    assert arr.shape == (ROWS, COLS)
    got = stored(tmp_path)
    assert got.shape == (ROWS, COLS)
    assert (got[ROWS - 3 :] == -1).all()  # shrunk away, grown back: fill, never old data
    assert (got[0] == rounds - 1).all()


def test_resize_against_writes_never_lands_outside_the_new_shape(tmp_path: Path) -> None:
    """A write waiting for the write lock while a shrink runs is checked against the new
    shape: it either lands inside it or fails with InvalidWriteError, never outside."""
    h, arr = make_array(tmp_path)
    last = (ROWS - 1) * ROW
    outcomes = {"written": 0, "refused": 0}

    def resizer() -> None:
        for _ in range(100):
            arr.resize((ROWS - 4, COLS))
            arr.resize((ROWS, COLS))

    def writer() -> None:
        for n in range(400):
            try:
                arr.write(last, row_bytes(n))  # the last row: outside while shrunk
                outcomes["written"] += 1
            except InvalidWriteError:
                outcomes["refused"] += 1

    run_threads(resizer, writer)
    arr.resize((ROWS - 4, COLS))  # whatever was written to the last row goes
    arr.resize((ROWS, COLS))
    assert (stored(tmp_path)[ROWS - 4 :] == -1).all()
    assert outcomes["written"] + outcomes["refused"] == 400


def test_resize_against_write_behind_and_write_back(tmp_path: Path) -> None:
    """Write-behind flushes (in the engine's threads) and the write-back timer run while
    another thread resizes: nothing hangs, and every flush sees one consistent shape."""
    h, arr = make_array(tmp_path, "sharded", cache_size=64 * 1024)
    timer = WriteBack(h.open_arrays, 0.001)
    timer.start()
    try:

        def resizer() -> None:
            for _ in range(100):
                arr.resize((ROWS // 2, COLS))
                arr.resize((ROWS, COLS))

        def writer() -> None:
            for n in range(400):
                arr.write((n % (ROWS // 2)) * ROW, row_bytes(n))  # always inside

        run_threads(resizer, writer)
    finally:
        timer.stop()
    arr.flush()
    got = stored(tmp_path)
    assert (got[ROWS // 2 :] == -1).all()
    assert np.array_equal(
        got[: ROWS // 2], np.frombuffer(arr.read(0, ROWS // 2 * ROW), "<f4").reshape(-1, COLS)
    )


def test_reads_against_flushes_see_each_write_whole(tmp_path: Path) -> None:
    """Readers copy a dirty unit under its stripe lock while flushes freeze and store it: a
    read sees each write to a unit whole (one value across the unit's part of the row) or not
    at all, never a mix."""
    h, arr = make_array(tmp_path)
    stop = threading.Event()
    mixed: list[np.ndarray[Any, Any]] = []

    def writer() -> None:
        try:
            for n in range(300):
                arr.write(5 * ROW, row_bytes(n))
        finally:
            stop.set()

    def flusher() -> None:
        while not stop.is_set():
            arr.flush()

    def reader() -> None:
        while not stop.is_set():
            row = np.frombuffer(arr.read(5 * ROW, ROW), "<f4")
            for unit in (row[: COLS // 2], row[COLS // 2 :]):  # the row's two chunks
                if len(set(unit.tolist())) != 1:
                    mixed.append(row)

    run_threads(writer, flusher, reader, reader)
    assert not mixed
    arr.flush()
    assert (stored(tmp_path)[5] == 299).all()


def test_writes_against_flushes_keep_the_last_write(tmp_path: Path) -> None:
    """A write arriving while a flush stores the unit copies the frozen unit first: the flush
    stores a stable array, the unit stays dirty, the next flush stores the newer bytes."""
    h, arr = make_array(tmp_path, "sharded")
    stop = threading.Event()

    def writer() -> None:
        try:
            for n in range(300):
                arr.write(n % ROWS * ROW, row_bytes(n))
        finally:
            stop.set()

    def flusher() -> None:
        while not stop.is_set():
            arr.flush()

    run_threads(writer, flusher, flusher)
    arr.flush()
    got = stored(tmp_path)
    for r in range(ROWS):
        assert (got[r] == max(n for n in range(300) if n % ROWS == r)).all()


def test_forgetting_while_writes_are_buffered_loses_nothing(tmp_path: Path) -> None:
    """``drop_caches`` (``Hierarchy.forget``) while another thread writes through an array it
    looked up: the array stays the one object of its path, so the next flush stores it all."""
    h, _ = make_array(tmp_path)

    def writer() -> None:
        for n in range(300):
            h.array("").write(n % ROWS * ROW, row_bytes(n))

    def dropper() -> None:
        for _ in range(300):
            h.forget("")
            h.engine.chunk_cache.clear()

    run_threads(writer, dropper)
    h.array("").flush()
    h.flush_all()
    got = stored(tmp_path)
    for r in range(ROWS):
        assert (got[r] == max(n for n in range(300) if n % ROWS == r)).all()


def test_stopping_write_back_waits_for_its_flush(tmp_path: Path) -> None:
    """Unmount: the write-back timer is stopped (waiting for a flush in progress) before the
    final flush_all and the engine's shutdown, so no background flush meets a closed engine."""

    class SlowStore(MemoryStore):
        def set(self, key: str, data: bytes | memoryview) -> None:
            time.sleep(0.01)
            super().set(key, data)

    store = SlowStore()
    h = Hierarchy(store, Engine())
    doc = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [ROWS, COLS],
        "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1, COLS]}},
        "chunk_key_encoding": {"name": "default"},
        "fill_value": -1,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
    }
    h.save_metadata("", array_metadata_v3(doc))
    arr = h.array("")
    timer = WriteBack(h.open_arrays, 0.001)
    timer.start()
    for n in range(ROWS):
        arr.write(n * ROW, row_bytes(n))
    time.sleep(0.02)  # the timer is storing rows now

    def unmount() -> None:
        timer.stop()
        h.flush_all()
        h.engine.close()

    run_threads(unmount)
    assert not arr.dirty
    for n in range(ROWS):
        raw = store.get(f"c/{n}/0")
        assert raw is not None and np.frombuffer(raw, "<f4").tolist() == [n] * COLS


def _sparse_array(store: MemoryStore, shape: int, chunk: int) -> Any:
    h = Hierarchy(store, Engine())
    doc = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [shape],
        "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [chunk]}},
        "chunk_key_encoding": {"name": "default"},
        "fill_value": 0,
        "codecs": [{"name": "bytes"}],
    }
    h.save_metadata("", array_metadata_v3(doc))
    return h.array("")


def test_shrinking_a_huge_sparse_grid_deletes_only_what_exists() -> None:
    """resize lists the chunk keys (the store can list) instead of walking a grid of 2**40
    chunks: it returns at once and deletes exactly the stored chunks outside the new shape."""
    store = MemoryStore()
    arr = _sparse_array(store, 1 << 40, 1)
    for pos in (0, 5, 1 << 20, (1 << 40) - 1):
        arr.write(pos, b"\x07")
    arr.flush()
    deleted: list[str] = []
    real_delete = store.delete
    store.delete = lambda key: (deleted.append(key), real_delete(key))[1]  # type: ignore[method-assign]
    run_threads(lambda: arr.resize((16,)))
    assert sorted(deleted) == sorted([f"c/{1 << 20}", f"c/{(1 << 40) - 1}"])
    assert arr.read(0, 16) == b"\x07" + 4 * b"\0" + b"\x07" + 10 * b"\0"
    assert store.get("c/0") is not None and store.get("c/5") is not None


class NoListing(MemoryStore):
    listable = False


def test_shrinking_without_listing_deletes_the_grid_difference_only() -> None:
    """A store that cannot list: the chunks of the difference are deleted one by one (never
    the kept ones); a difference too large to walk is refused before anything changes."""
    store = NoListing()
    arr = _sparse_array(store, 1000, 10)
    arr.write(0, bytes(range(1, 101)) * 10)
    arr.flush()
    deleted: list[str] = []
    real_delete = store.delete
    store.delete = lambda key: (deleted.append(key), real_delete(key))[1]  # type: ignore[method-assign]
    arr.resize((95,))
    assert sorted(deleted) == sorted(f"c/{i}" for i in range(10, 100))
    assert arr.read(0, 95) == (bytes(range(1, 101)) * 10)[:95]
    huge = _sparse_array(NoListing(), 1 << 40, 1)
    with pytest.raises(InvalidWriteError, match="cannot list"):
        huge.resize((16,))
    assert huge.shape == (1 << 40,)


class _GatedSets(LocalStore):
    """Stores of chunk objects wait for ``gate`` once ``entered`` is set (the flush has
    encoded the units it froze and holds no array lock but ``_flush_lock``)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.entered = threading.Event()
        self.gate = threading.Event()

    def set_stream(self, key: str, pieces: Any) -> None:
        if key.startswith("c/"):
            self.entered.set()
            assert self.gate.wait(DEADLINE_S), "the test never opened the gate"
        super().set_stream(key, pieces)


@pytest.mark.parametrize("inline", [True, False])
def test_a_write_into_a_unit_being_stored_stays_dirty(tmp_path: Path, inline: bool) -> None:
    """A flush stores the units it froze; a write to one of them meanwhile (a unit that is
    dirty already, so nothing to load) copies the frozen unit first: the flush stores the
    bytes it froze, the unit stays dirty, and the next flush stores the new write (none of
    it is lost), from the event loop's inline path and a worker thread's alike."""
    make_array(tmp_path)
    store = _GatedSets(tmp_path / "a")
    arr = Hierarchy(store, Engine()).array("")
    arr.write(5 * ROW, row_bytes(1.0))  # row 5 of units (1, 0) and (1, 1): dirty
    flusher = threading.Thread(target=arr.flush, daemon=True)
    flusher.start()
    assert store.entered.wait(DEADLINE_S)
    if inline:
        assert arr.write_cached(5 * ROW, row_bytes(2.0))
    else:
        arr.write(5 * ROW, row_bytes(2.0))
    store.gate.set()
    flusher.join(DEADLINE_S)
    assert not flusher.is_alive()
    assert (stored(tmp_path)[5] == 1.0).all()  # what the flush froze
    assert arr.dirty
    assert (np.frombuffer(arr.read(5 * ROW, ROW), "<f4") == 2.0).all()
    arr.flush()
    assert (stored(tmp_path)[5] == 2.0).all()
