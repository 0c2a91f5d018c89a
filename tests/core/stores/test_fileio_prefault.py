"""``pages.prefault``: the destination of a chunk read is faulted in with one call, without
changing its bytes, and reads through ``FileReader`` stay byte-exact."""

from __future__ import annotations

import mmap
import os
import resource

import numpy as np
import pytest

from zarrfs.core import pages
from zarrfs.core.errors import StoreError
from zarrfs.core.stores import fileio

PAGE = mmap.PAGESIZE


def _fresh(nbytes: int) -> mmap.mmap:
    """Anonymous private memory none of whose pages has been touched yet."""
    return mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt


@pytest.mark.skipif(pages._madvise is None, reason="no madvise in this C library")
def test_prefault_makes_the_pages_present():
    nbytes = 8 << 20
    plain, advised = _fresh(nbytes), _fresh(nbytes)
    try:
        before = _minor_faults()
        np.frombuffer(plain, dtype=np.uint8)[:] = 1  # faulted page by page while written
        untouched = _minor_faults() - before

        pages.prefault(memoryview(advised))
        if pages._madvise is None:
            pytest.skip("this kernel has no MADV_POPULATE_WRITE")
        before = _minor_faults()
        np.frombuffer(advised, dtype=np.uint8)[:] = 1
        prefaulted = _minor_faults() - before
    finally:
        plain.close()
        advised.close()
    assert untouched >= nbytes // PAGE // 2  # the baseline really faults (THP off for it)
    assert prefaulted <= untouched // 16


def test_prefault_keeps_the_bytes_and_the_pages_around_the_buffer():
    data = np.random.default_rng(0).integers(0, 256, 3 << 20, dtype=np.uint8)
    before = data.copy()
    view = memoryview(data)[123 : (2 << 20) + 4567]  # neither end on a page boundary
    pages.prefault(view)
    pages.prefault(memoryview(data)[:100])  # smaller than PREFAULT_MIN: nothing to do
    assert np.array_equal(data, before)


def test_file_reader_reads_exactly_into_fresh_memory(tmp_path):
    payload = np.random.default_rng(1).integers(0, 256, (3 << 20) + 777, dtype=np.uint8)
    path = tmp_path / "chunk"
    path.write_bytes(payload.tobytes())
    fd = os.open(path, os.O_RDONLY)
    reader = fileio.FileReader(fd, len(payload), lambda exc: StoreError(str(exc)))
    dest = _fresh(len(payload) + PAGE)
    try:
        out = memoryview(dest)
        got = 0
        for start in range(0, len(payload), 1 << 20):  # pieces as a streaming load reads them
            got += reader.readinto(out[start : min(len(payload), start + (1 << 20))], start)
        assert got == len(payload)
        assert reader.readinto(out[len(payload) :], len(payload)) == 0  # at the end: nothing
        assert np.array_equal(np.frombuffer(dest, dtype=np.uint8)[: len(payload)], payload)
        del out
    finally:
        reader.close()
        dest.close()
