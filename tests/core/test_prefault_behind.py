"""``pages.prefault_behind``: a fresh dirty unit is faulted in by a background thread while
the writer fills it, without changing a byte, and the write path hands it every fresh unit."""

from __future__ import annotations

import mmap
import resource
import threading

import numpy as np
import pytest
import zarr

from zarrfs.core import pages, writepath
from zarrfs.core.array import Engine
from zarrfs.core.hierarchy import open_array
from zarrfs.core.stores.local import LocalStore

PAGE = mmap.PAGESIZE


def _fresh_array(nbytes: int) -> tuple[mmap.mmap, np.ndarray]:
    """A float32 array over anonymous memory none of whose pages has been touched yet."""
    mem = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return mem, np.frombuffer(mem, dtype=np.float32)


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt


@pytest.mark.skipif(pages._madvise is None, reason="no madvise in this C library")
def test_the_pages_are_faulted_in_by_another_thread():
    nbytes = 8 << 20
    mem_plain, plain = _fresh_array(nbytes)
    mem_ahead, ahead = _fresh_array(nbytes)
    try:
        before = _minor_faults()
        plain[:] = 1  # faulted page by page by this thread while written
        untouched = _minor_faults() - before

        pages.wait_behind()  # nothing queued by earlier tests: this one is not skipped
        pages.prefault_behind(ahead)
        pages.wait_behind()
        if pages._madvise is None:
            pytest.skip("this kernel has no MADV_POPULATE_WRITE")
        before = _minor_faults()
        ahead[:] = 1
        faulted_here = _minor_faults() - before
    finally:
        del plain, ahead
        mem_plain.close()
        mem_ahead.close()
    assert untouched >= nbytes // PAGE // 2  # the baseline really faults (THP off for it)
    assert faulted_here <= untouched // 16


def test_writes_while_the_pages_are_faulted_in_keep_every_byte():
    nbytes = 16 << 20
    rng = np.random.default_rng(3)
    mems, arrays = zip(*(_fresh_array(nbytes) for _ in range(4)), strict=True)
    want = [rng.random(nbytes // 4, dtype=np.float32) for _ in arrays]
    try:
        for arr in arrays:
            pages.prefault_behind(arr)
        step = (1 << 20) // 4
        for arr, values in zip(arrays, want, strict=True):  # 1 MiB pieces, as faulting goes on
            for start in range(0, arr.size, step):
                arr[start : start + step] = values[start : start + step]
        pages.wait_behind()
        for arr, values in zip(arrays, want, strict=True):
            assert np.array_equal(arr, values)
        pages.prefault_behind(np.zeros(10, dtype=np.float32))  # small: nothing queued
        pages.wait_behind()
    finally:
        del arrays, arr
        for mem in mems:
            mem.close()


def test_the_write_path_hands_fresh_whole_units_to_the_background_thread(tmp_path, monkeypatch):
    shape, chunks = (4, 512, 512), (2, 512, 512)  # two float32 units of 2 MiB
    zarr.create_array(str(tmp_path / "a"), shape=shape, chunks=chunks, dtype="<f4",
                      compressors=None)  # fmt: skip
    handed: list[int] = []
    monkeypatch.setattr(writepath, "prefault_behind", lambda arr: handed.append(arr.nbytes))
    engine = Engine(threads=2, prefetch_bytes=0)
    try:
        arr = open_array(LocalStore(tmp_path / "a"), "", engine)
        data = np.arange(np.prod(shape), dtype="<f4")
        row = 512 * 512 * 4
        for z in range(shape[0]):  # one plane at a time, as dd writes it
            arr.write(z * row, data[z * 512 * 512 : (z + 1) * 512 * 512].tobytes())
        arr.flush()
        assert handed == [2 << 20, 2 << 20]  # each unit once, when it was made dirty
    finally:
        engine.close()
    got = zarr.open_array(str(tmp_path / "a"), mode="r")[...]
    assert np.array_equal(got.reshape(-1), data)


def test_the_background_thread_faults_in_a_piece_at_a_time(monkeypatch):
    """One ``madvise`` per ``BEHIND_STEP`` bytes, so a new mapping made meanwhile (the next
    fresh unit) never waits for a whole unit's pages."""
    calls: list[tuple[int, int]] = []

    def recording(addr: int, length: int, advice: int) -> int:
        calls.append((addr, length))
        return 0

    pages.wait_behind()
    monkeypatch.setattr(pages, "_madvise", recording)
    mem, arr = _fresh_array(16 * pages.BEHIND_STEP + 32 * PAGE)
    try:
        pages.prefault_behind(arr)
        pages.wait_behind()
        assert [n for _, n in calls] == [pages.BEHIND_STEP] * 16 + [32 * PAGE]
        start = arr.ctypes.data
        assert [a - start for a, _ in calls] == [k * pages.BEHIND_STEP for k in range(17)]
    finally:
        del arr
        mem.close()


def test_queued_buffers_are_faulted_in_a_step_of_each_in_turn(monkeypatch):
    """A writer over rows needs the front of every unit of a layer before the back of any:
    the buffers queued together are faulted in round by round, a step of each per round
    (an eighth of a 4 MiB unit)."""
    calls: list[int] = []
    entered, release = threading.Event(), threading.Event()

    def recording(addr: int, length: int, advice: int) -> int:
        if not entered.is_set():  # the first buffer holds the thread until the rest are queued
            entered.set()
            assert release.wait(10)
        calls.append(addr)
        return 0

    pages.wait_behind()
    monkeypatch.setattr(pages, "_madvise", recording)
    unit = 4 << 20
    step = pages.behind_step(unit)
    assert step == unit // 8
    first_mem, first = _fresh_array(64 << 10)
    mems, units = zip(*(_fresh_array(unit) for _ in range(3)), strict=True)
    try:
        pages.prefault_behind(first)
        assert entered.wait(10)
        for arr in units:
            pages.prefault_behind(arr)
        release.set()
        pages.wait_behind()
        starts = [arr.ctypes.data for arr in units]
        want = [s + k * step for k in range(8) for s in starts]
        assert calls[1:] == want
    finally:
        release.set()
        del first, units, arr
        first_mem.close()
        for mem in mems:
            mem.close()
