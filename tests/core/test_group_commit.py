"""Group commit of a flush on the directory store: the objects of one flush are staged as
fsynced temporary files, renamed together, each directory fsynced once; nothing is marked
clean before the commit, and a failed commit leaves every object old or new and every unit
dirty (docs/write-path.md, "Atomic set")."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
import zarr

from zarrfs.core.array import Engine
from zarrfs.core.errors import StoreError
from zarrfs.core.hierarchy import open_array
from zarrfs.core.stores.local import LocalStore
from zarrfs.core.stores.localgroup import TEMP_PREFIX, LocalGroup

SHAPE = (8, 8, 8)


@contextlib.contextmanager
def staged_keys() -> Iterator[list[str]]:
    """The keys every ``LocalStore`` stages while the block runs, in order."""
    sets: list[str] = []
    real_stage = LocalStore._stage

    def counting_stage(self, key, pieces):
        sets.append(key)
        return real_stage(self, key, pieces)

    LocalStore._stage = counting_stage  # type: ignore[method-assign]
    try:
        yield sets
    finally:
        LocalStore._stage = real_stage  # type: ignore[method-assign]


def settle(arr) -> None:
    """Wait for the array's write-behind flush, if one is queued or running."""
    deadline = time.monotonic() + 10
    while arr._behind and time.monotonic() < deadline:
        time.sleep(0.01)


def make(tmp_path, sharded: bool):
    # 8 objects, two in each of 4 directories (c/z/y/x)
    kwargs: dict = {"chunks": (4, 4, 4), "compressors": None}
    if sharded:
        kwargs = {"chunks": (2, 2, 4), "shards": (4, 4, 4)}
    z = zarr.create_array(str(tmp_path / "a"), shape=SHAPE, dtype="<f4", fill_value=0, **kwargs)
    z[...] = np.full(SHAPE, 1, "f4")
    return z


def chunk_dirs(root) -> set[str]:
    return {str(p.parent.resolve()) for p in (root / "c").rglob("*") if p.is_file()}


@pytest.mark.parametrize("sharded", [False, True])
def test_a_flush_fsyncs_each_object_then_each_directory_once(
    tmp_path, monkeypatch, record_fsyncs, sharded
):
    make(tmp_path, sharded)
    arr = open_array(LocalStore(tmp_path / "a"), "", Engine(prefetch_bytes=0))
    new = np.arange(np.prod(SHAPE), dtype="<f4").reshape(SHAPE)
    arr.write(0, new.tobytes())  # every outer chunk
    synced = record_fsyncs()
    arr.flush()
    monkeypatch.undo()
    temps = [p for p in synced if os.path.basename(p).startswith(TEMP_PREFIX)]
    dirs = [p for p in synced if p not in temps]
    assert len(temps) == 8  # one per object
    assert sorted(dirs) == sorted(chunk_dirs(tmp_path / "a"))  # each directory once
    assert len(dirs) == 4 and len(set(dirs)) == 4
    # per directory: its two temporaries, then the directory (after the renames)
    for d in dirs:
        at = synced.index(d)
        assert [os.path.dirname(p) for p in synced[at - 2 : at]] == [d, d]
    assert (zarr.open_array(str(tmp_path / "a"))[...] == new).all()


@pytest.mark.parametrize("sharded", [False, True])
def test_nothing_is_marked_clean_before_the_commit(tmp_path, monkeypatch, sharded):
    make(tmp_path, sharded)
    arr = open_array(LocalStore(tmp_path / "a"), "", Engine(prefetch_bytes=0))
    arr.write(0, np.full(SHAPE, 5, "<f4").tobytes())
    seen: list[tuple[int, list[str]]] = []
    real_commit = LocalGroup.commit

    def checking_commit(self: LocalGroup) -> None:
        seen.append((arr.dirty_state().nbytes, os.listdir(tmp_path / "a" / "c" / "0" / "0")))
        real_commit(self)

    monkeypatch.setattr(LocalGroup, "commit", checking_commit)
    arr.flush()
    assert len(seen) == 1
    dirty, listing = seen[0]
    assert dirty == np.prod(SHAPE) * 4  # every unit still dirty while the group is staged
    assert any(n.startswith(TEMP_PREFIX) for n in listing)  # staged, not renamed yet
    assert not arr.dirty
    assert (zarr.open_array(str(tmp_path / "a"))[...] == 5).all()


@pytest.mark.parametrize("sharded", [False, True])
def test_a_failed_commit_leaves_old_or_new_objects_and_every_unit_dirty(
    tmp_path, monkeypatch, sharded
):
    make(tmp_path, sharded)
    arr = open_array(LocalStore(tmp_path / "a"), "", Engine(prefetch_bytes=0))
    new = np.arange(np.prod(SHAPE), dtype="<f4").reshape(SHAPE)
    arr.write(0, new.tobytes())
    real_replace = os.replace
    renamed: list[str] = []

    def failing_replace(src, dst, **kw):
        if renamed:  # the first rename works, the second fails
            raise OSError(5, "Input/output error")
        real_replace(src, dst, **kw)
        renamed.append(dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(StoreError, match="Input/output error"):
        arr.flush()
    monkeypatch.undo()
    assert arr.dirty_state().nbytes == np.prod(SHAPE) * 4  # nothing marked clean
    assert arr.read(0, new.nbytes) == new.tobytes()  # the writes are still there
    stored = zarr.open_array(str(tmp_path / "a"))[...]
    corners = [(z, y, x) for z in (0, 4) for y in (0, 4) for x in (0, 4)]
    blocks = [stored[z : z + 4, y : y + 4, x : x + 4] for z, y, x in corners]
    wanted = [new[z : z + 4, y : y + 4, x : x + 4] for z, y, x in corners]
    state = [(b == w).all() for b, w in zip(blocks, wanted)]
    assert sum(state) == 1  # one object new, the others old (all ones), none torn
    assert all(s or (b == 1).all() for s, b in zip(state, blocks))
    assert not list((tmp_path / "a").rglob(f"{TEMP_PREFIX}*"))
    arr.flush()  # the next flush stores them all
    assert not arr.dirty
    assert (zarr.open_array(str(tmp_path / "a"))[...] == new).all()


def test_a_failed_job_keeps_its_units_dirty_and_commits_the_others(tmp_path, monkeypatch):
    make(tmp_path, sharded=False)
    arr = open_array(LocalStore(tmp_path / "a"), "", Engine(prefetch_bytes=0))
    new = np.arange(np.prod(SHAPE), dtype="<f4").reshape(SHAPE)
    arr.write(0, new.tobytes())
    real_stage = LocalStore._stage

    def failing_stage(self, key, pieces):
        if key == "c/1/1/1":
            raise StoreError("disk full")
        return real_stage(self, key, pieces)

    monkeypatch.setattr(LocalStore, "_stage", failing_stage)
    with pytest.raises(StoreError, match="disk full"):
        arr.flush()
    monkeypatch.undo()
    assert arr.dirty_state().nbytes == 4 * 4 * 4 * 4  # only the failed chunk
    stored = zarr.open_array(str(tmp_path / "a"))[...]
    assert (stored[4:, 4:, 4:] == 1).all()
    stored[4:, 4:, 4:] = new[4:, 4:, 4:]
    assert (stored == new).all()
    arr.flush()
    assert (zarr.open_array(str(tmp_path / "a"))[...] == new).all()


def test_inner_chunks_are_written_behind_when_worth_a_shard_rewrite(tmp_path, monkeypatch):
    """On a store that cannot build a shard in its new file (``sharding/builder.py``), a
    complete inner chunk of a shard waits for the rest of its shard, or until the complete
    units take half the dirty limit: each shard rewrite copies the shard's other inner
    chunks, so writing each layer behind would rewrite a shard once per layer."""
    monkeypatch.setattr(LocalStore, "builds_objects", property(lambda self: False))
    # 2 shards (8, 8, 64) of 4 inner chunks (4, 4, 64) of 4 KiB: 32 KiB of float32
    z = zarr.create_array(str(tmp_path / "a"), shape=(8, 16, 64), chunks=(4, 4, 64),
                          shards=(8, 8, 64), dtype="<f4", fill_value=0)  # fmt: skip
    z[...] = 1
    engine = Engine(cache_size=64 << 10, prefetch_bytes=0)  # dirty limit 48 KiB
    arr = open_array(LocalStore(tmp_path / "a"), "", engine)
    row = 64 * 4  # bytes of one (z, y) row
    with staged_keys() as sets:
        # z 0-3, y 0-11: inner chunks (0,0) (0,1) of shard 0 and (0,2) of shard 1 complete,
        # 12 KiB, past a quarter of the limit but under half: nothing is written behind
        for z_ in range(4):
            arr.write((z_ * 16) * row, np.full(12 * 64, 2, "<f4").tobytes())
        settle(arr)
        assert sets == []
        # z 4-7, y 0-7: shard 0 is complete (4 inner chunks): written behind at once, alone
        for z_ in range(4, 8):
            arr.write((z_ * 16) * row, np.full(8 * 64, 3, "<f4").tobytes())
        settle(arr)
        assert sets == ["c/0/0/0"]
        assert arr.dirty_state().nbytes == 4 << 10  # inner chunk (0,2) of shard 1 waits
        # half the limit (24 KiB) of complete units: written behind although incomplete
        big = Engine(cache_size=64 << 10, prefetch_bytes=0)
        big.dirty_limit = 16 << 10  # half: 8 KiB; inner chunk (0,2) + (0,3) make 8 KiB
        arr2 = open_array(LocalStore(tmp_path / "a"), "", big)
        for z_ in range(4):
            arr2.write((z_ * 16 + 8) * row, np.full(8 * 64, 4, "<f4").tobytes())
        settle(arr2)
        deadline = time.monotonic() + 10
        while "c/0/1/0" not in sets and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sets == ["c/0/0/0", "c/0/1/0"]
    arr.flush()  # its inner chunk (0,2) of shard 1; (0,3) keeps what arr2 stored
    stored = zarr.open_array(str(tmp_path / "a"))[...]
    assert (stored[:4, :12] == 2).all() and (stored[4:, :8] == 3).all()
    assert (stored[:4, 12:] == 4).all() and (stored[4:, 8:] == 1).all()
    engine.close()
    big.close()


def test_small_temporary_files_are_written_by_at_most_one_thread_per_cpu(tmp_path, monkeypatch):
    # page-cache copies from more threads than CPUs only contend in the kernel (objects below
    # ``directio.DIRECT_MIN`` go through the page cache)
    from zarrfs.core.stores import directio

    store = LocalStore(tmp_path)
    lock = threading.Lock()
    busy, peak = [0], [0]
    real_write = os.write

    def write(fd, data):
        with lock:
            busy[0] += 1
            peak[0] = max(peak[0], busy[0])
        try:
            time.sleep(0.01)  # long enough for every thread to be in a write at once
            return real_write(fd, data)
        finally:
            with lock:
                busy[0] -= 1

    monkeypatch.setattr(directio.os, "write", write)
    monkeypatch.setattr(directio, "_BUFFERED_WRITERS", threading.BoundedSemaphore(2))
    group = store.group()
    threads = [
        threading.Thread(target=group.set, args=(f"k/{n}", bytes([n]) * 4096)) for n in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    monkeypatch.undo()
    group.commit()
    assert peak[0] == 2
    assert all(store.get(f"k/{n}") == bytes([n]) * 4096 for n in range(8))


def test_a_flush_down_to_a_limit_takes_the_whole_shard_of_the_units_it_stores(tmp_path):
    """Storing part of a shard's complete units rewrites the shard; its other complete units
    go with them instead of costing another rewrite in a later flush."""
    # 2 shards (8, 8, 64) of 4 inner chunks (4, 4, 64) of 4 KiB: 32 KiB of float32
    z = zarr.create_array(str(tmp_path / "a"), shape=(8, 16, 64), chunks=(4, 4, 64),
                          shards=(8, 8, 64), dtype="<f4", fill_value=0)  # fmt: skip
    z[...] = 1
    engine = Engine(cache_size=1 << 20, prefetch_bytes=0)  # nothing is written behind
    arr = open_array(LocalStore(tmp_path / "a"), "", engine)
    row = 64 * 4  # bytes of one (z, y) row

    def write_unit(z0: int, y0: int, value: float) -> None:
        for z_ in range(z0, z0 + 4):
            arr.write((z_ * 16 + y0) * row, np.full(4 * 64, value, "<f4").tobytes())

    write_unit(0, 0, 2)  # shard 0, the oldest dirty unit
    write_unit(0, 8, 3)  # shard 1
    write_unit(0, 4, 4)  # shard 0
    write_unit(4, 0, 5)  # shard 0
    assert arr.dirty_state().nbytes == 4 * (4 << 10)
    with staged_keys() as sets:
        arr.flush(down_to=engine.dirty_bytes - 1)  # the oldest unit alone would do
    assert sets == ["c/0/0/0"]  # shard 0 once, with its three complete units
    assert arr.dirty_state().nbytes == 4 << 10  # shard 1's unit waits
    stored = zarr.open_array(str(tmp_path / "a"))[...]
    assert (stored[:4, :4] == 2).all() and (stored[:4, 4:8] == 4).all()
    assert (stored[4:, :4] == 5).all() and (stored[:4, 8:12] == 1).all()
    arr.flush()
    assert (zarr.open_array(str(tmp_path / "a"))[:4, 8:12] == 3).all()
    engine.close()


def test_a_shard_still_being_written_into_is_not_written_behind(tmp_path, monkeypatch):
    """Past half the dirty limit of complete units, the complete units of a shard that also
    holds a unit still being written wait (on a store that cannot build a shard in its new
    file): the writer completes it soon, and writing the shard now would rewrite it again
    then."""
    monkeypatch.setattr(LocalStore, "builds_objects", property(lambda self: False))
    z = zarr.create_array(str(tmp_path / "a"), shape=(8, 16, 64), chunks=(4, 4, 64),
                          shards=(8, 8, 64), dtype="<f4", fill_value=0)  # fmt: skip
    z[...] = 1
    engine = Engine(cache_size=64 << 10, prefetch_bytes=0)
    engine.dirty_limit = 16 << 10  # written behind past 4 KiB dirty, any shard from 8 KiB
    arr = open_array(LocalStore(tmp_path / "a"), "", engine)
    row = 64 * 4  # bytes of one (z, y) row

    def write_rows(zs: range, y0: int, value: float) -> None:
        for z_ in zs:
            arr.write((z_ * 16 + y0) * row, np.full(4 * 64, value, "<f4").tobytes())
            settle(arr)

    with staged_keys() as sets:
        write_rows(range(4), 8, 2)  # shard 1: inner chunk (0,2) complete
        write_rows(range(2), 12, 3)  # shard 1: inner chunk (0,3) half written
        write_rows(range(4), 0, 4)  # shard 0: inner chunk (0,0) complete; 8 KiB complete
        assert sets == ["c/0/0/0"]  # shard 1 waits for its unit being written
        write_rows(range(2, 4), 12, 3)  # (0,3) complete: shard 1 is written behind now
        assert sets == ["c/0/0/0", "c/0/1/0"]
    assert not arr.dirty
    stored = zarr.open_array(str(tmp_path / "a"))[...]
    assert (stored[:4, 8:12] == 2).all() and (stored[:4, 12:16] == 3).all()
    assert (stored[:4, :4] == 4).all() and (stored[4:] == 1).all() and (stored[:4, 4:8] == 1).all()
    engine.close()


class _CountingSets(LocalStore):
    """A store whose sets take a while and count how many run at once."""

    def __init__(self, root, width):
        super().__init__(root)
        self._width, self.peak, self._busy, self._lock = width, 0, 0, threading.Lock()

    @property
    def set_width(self):
        return self._width

    def _stage(self, key, pieces):
        with self._lock:
            self._busy += 1
            self.peak = max(self.peak, self._busy)
        try:
            time.sleep(0.01)
            return super()._stage(key, pieces)
        finally:
            with self._lock:
                self._busy -= 1


@pytest.mark.parametrize("width", [1, 2, None])
def test_a_flush_stores_at_most_the_stores_set_width_objects_at_once(tmp_path, width):
    zarr.create_array(str(tmp_path / "a"), shape=(16, 64), chunks=(1, 64), dtype="<f8")
    store = _CountingSets(tmp_path / "a", width)
    engine = Engine(cache_size=16 << 20, threads=6)
    try:
        arr = open_array(store, "", engine)
        arr.write(0, np.arange(16 * 64, dtype="<f8").tobytes())
        arr.flush()
    finally:
        engine.close()
    if width is None:
        assert store.peak > 2  # the engine's threads and the caller
    else:
        assert store.peak == width
    assert (zarr.open_array(str(tmp_path / "a"))[...] == np.arange(16 * 64).reshape(16, 64)).all()


def test_the_directory_store_bounds_its_sets_on_a_local_disk(tmp_path):
    from zarrfs.core.stores.directio import direct_capable

    store = LocalStore(tmp_path)
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        local = direct_capable(fd)
    finally:
        os.close(fd)
    assert store.set_width == (2 * (os.cpu_count() or 1) if local else None)
