"""Direct reads (``core/direct.py``): large or sequential reads of plain-bytes chunks come from
the stored files into the reader's buffer, without loading units into the cache."""

from __future__ import annotations

import os

import numpy as np
import pytest
import zarr

from zarrfs.core import direct
from zarrfs.core.array import Engine
from zarrfs.core.direct import OpenChunks, span_of, worth
from zarrfs.core.errors import CorruptDataError, MemoryLimitError
from zarrfs.core.hierarchy import open_array
from zarrfs.core.stores.base import ObjectReader
from zarrfs.core.stores.local import LocalStore

SHAPE, CHUNKS = (6, 40, 48), (4, 16, 32)  # partial edge chunks on every axis


def _array(tmp_path, compressors=None):
    z = zarr.create_array(str(tmp_path / "a"), shape=SHAPE, chunks=CHUNKS, dtype="<f4",
                          compressors=compressors, fill_value=-1.5)  # fmt: skip
    data = np.arange(np.prod(SHAPE), dtype="f4").reshape(SHAPE)
    data[4:, 16:32, :] = -1.5  # chunk (1, 1, *) is never stored: the fill value
    z[...] = data
    return z, data


class HintedStore(LocalStore):
    """Records the chunks opened and the read-ahead hints given for them."""

    def __init__(self, root):
        super().__init__(root)
        self.opened: list[str] = []
        self.hints: list[tuple[str, int, int]] = []

    def open_reader(self, key):
        reader = super().open_reader(key)
        if reader is None:
            return None
        self.opened.append(key)
        hints, inner = self.hints, reader.will_need

        def will_need(offset, length):
            hints.append((key, offset, length))
            inner(offset, length)

        reader.will_need = will_need
        return reader


def _record_scratch(monkeypatch):
    """The sizes asked of the threads' span buffers (``direct._scratch``) from now on."""
    sizes: list[int] = []
    real = direct._scratch
    monkeypatch.setattr(direct, "_scratch", lambda n: sizes.append(n) or real(n))
    return sizes


def _read_all(arr, step):
    got, off = b"", 0
    while off < arr.nbytes:
        got += arr.read(off, step)
        off += step
    return got


@pytest.mark.parametrize("direct", [True, False])
def test_a_sequential_reader_gets_the_bytes_without_loading_units(tmp_path, direct, monkeypatch):
    z, data = _array(tmp_path)
    assert not os.path.exists(tmp_path / "a" / "c" / "1" / "1" / "0")
    scratch = _record_scratch(monkeypatch)
    engine = Engine(threads=2, prefetch_bytes=8192, direct_reads=direct)
    arr = open_array(LocalStore(tmp_path / "a"), "", engine)
    try:
        assert _read_all(arr, 1000) == data.tobytes()  # odd size: pieces split elements
        stats = engine.stats.snapshot()["total"]
        if direct:  # nothing decoded, nothing cached: the page cache of the files serves
            assert stats.get("chunks_decoded", 0) == 0 and len(engine.chunk_cache) == 0
            assert scratch  # rows of 32 of the 48 elements: spans copied from a buffer
        else:
            assert stats["chunks_decoded"] == 10  # the stored chunks, each loaded once
    finally:
        engine.close()


def test_chunks_spanning_whole_rows_are_read_straight_into_the_reply(tmp_path, monkeypatch):
    # chunks (2, 8, 48) span the last axis: each chunk's part of a request is one run of the
    # reply, read without the thread's span buffer
    z = zarr.create_array(str(tmp_path / "a"), shape=SHAPE, chunks=(2, 8, 48), dtype="<f4",
                          compressors=None)  # fmt: skip
    data = np.arange(np.prod(SHAPE), dtype="f4").reshape(SHAPE)
    z[...] = data
    scratch = _record_scratch(monkeypatch)
    engine = Engine(threads=2, prefetch_bytes=0)
    arr = open_array(LocalStore(tmp_path / "a"), "", engine)
    try:
        assert _read_all(arr, 48 * 8 * 4 * 3) == data.tobytes()  # 3 chunks' rows a read
        assert scratch == [] and engine.stats.snapshot()["total"].get("chunks_decoded", 0) == 0
        assert arr.read(4, 48 * 4) == data.tobytes()[4 : 4 + 48 * 4]  # parts of two rows
        assert scratch == []
    finally:
        engine.close()


def test_a_direct_sequential_reader_leaves_read_ahead_to_the_kernel(tmp_path):
    """No ``POSIX_FADV_WILLNEED`` hints and no units loaded ahead of a reader served by direct
    reads: the kernel reads ahead in each chunk file it reads in order (the hints cost CPU and
    made the reads no faster)."""
    _, data = _array(tmp_path)
    store = HintedStore(tmp_path / "a")
    engine = Engine(threads=1, prefetch_bytes=16384)
    arr = open_array(store, "", engine)
    try:
        assert _read_all(arr, 4096) == data.tobytes()
        engine.executor.submit(lambda: None).result()  # anything queued in the pool ran
        assert store.hints == []
        assert len(engine.chunk_cache) == 0
    finally:
        engine.close()


@pytest.fixture
def opened(tmp_path):
    """(array, engine, data) of the test array opened without prefetching."""
    _, data = _array(tmp_path)
    engine = Engine(threads=2, prefetch_bytes=0)
    try:
        yield open_array(LocalStore(tmp_path / "a"), "", engine), engine, data
    finally:
        engine.close()


def test_a_read_in_the_event_loop_uses_open_chunks_in_the_page_cache_only(opened):
    arr, engine, data = opened
    want = data.tobytes()
    assert arr.read_cached(0, 65536) is None  # no chunk open yet: a worker's job
    assert arr.read(0, 65536) == want[:65536]  # opens them
    assert arr.read_cached(0, 65536) == want[:65536]  # open, and in the page cache
    assert len(engine.chunk_cache) == 0


def test_written_bytes_are_read_before_and_after_they_are_stored(opened, tmp_path):
    arr, engine, data = opened
    assert arr.read(0, arr.nbytes) == data.tobytes()  # every stored chunk is open now
    new = (data * 2 + 1).astype("f4")
    arr.write(0, new.tobytes())
    assert arr.read(0, arr.nbytes) == new.tobytes()  # dirty units, from memory
    arr.flush()
    engine.chunk_cache.clear()  # the next read goes to the files again
    assert arr.read(0, arr.nbytes) == new.tobytes()  # not through the old descriptors
    assert np.array_equal(zarr.open_array(str(tmp_path / "a"), mode="r")[...], new)


def test_a_chunk_file_that_shrinks_fails_the_read_naming_it(opened, tmp_path):
    arr, _, _ = opened
    arr.read(0, 65536)  # c/0/0/0 is open now
    os.truncate(tmp_path / "a" / "c" / "0" / "0" / "0", 100)
    with pytest.raises(CorruptDataError, match="c/0/0/0"):
        arr.read(0, 65536)


def test_a_chunk_of_the_wrong_size_is_refused(tmp_path):
    _array(tmp_path)
    path = tmp_path / "a" / "c" / "0" / "0" / "1"
    os.truncate(path, path.stat().st_size + 4)
    engine = Engine(threads=2, prefetch_bytes=0)
    arr = open_array(LocalStore(tmp_path / "a"), "", engine)
    try:
        with pytest.raises(CorruptDataError, match="c/0/0/1"):
            arr.read(0, arr.nbytes)
    finally:
        engine.close()


def test_big_endian_and_compressed_reads_load_units(tmp_path):
    _, data = _array(tmp_path)
    engine = Engine(threads=2, prefetch_bytes=0)
    arr = open_array(LocalStore(tmp_path / "a"), "", engine)
    try:
        assert arr.read(0, arr.nbytes, "big") == data.astype(">f4").tobytes()
        assert engine.stats.snapshot()["total"]["chunks_decoded"] == 10
    finally:
        engine.close()
    _, data = _array(tmp_path / "z", compressors=zarr.codecs.ZstdCodec())
    engine = Engine(threads=2, prefetch_bytes=0)
    arr = open_array(LocalStore(tmp_path / "z" / "a"), "", engine)
    try:
        assert arr.read(0, arr.nbytes) == data.tobytes()
        assert engine.stats.snapshot()["total"]["chunks_decoded"] == 10
    finally:
        engine.close()


def test_spans_and_their_worth():
    shape = (4, 16, 32)
    assert span_of(shape, 4, (slice(0, 1), slice(0, 16), slice(0, 32))) == (0, 2048)
    assert span_of(shape, 4, (slice(1, 2), slice(3, 5), slice(2, 4))) == (
        ((16 + 3) * 32 + 2) * 4,
        ((16 + 4) * 32 + 4) * 4,
    )
    assert worth(shape, 4, [(slice(0, 4), slice(0, 16), slice(0, 32))])
    # one column through every plane: its span is the whole chunk, 512 times what it needs
    assert not worth(shape, 4, [(slice(0, 4), slice(0, 16), slice(0, 1))])


class _Reader(ObjectReader):
    def __init__(self, closed):
        super().__init__(b"x")
        self._closed = closed

    def close(self):
        self._closed.append(self)


def test_open_chunks_are_bounded_and_closed_only_when_unused(monkeypatch):
    closed: list[_Reader] = []
    chunks = OpenChunks()
    monkeypatch.setattr(OpenChunks, "MAX_OPEN", 2)
    a = chunks.acquire(1, "a", 0, lambda k: _Reader(closed))
    b = chunks.acquire(1, "b", 0, lambda k: _Reader(closed))
    chunks.release(b)
    c = chunks.acquire(1, "c", 0, lambda k: _Reader(closed))  # drops "a", still in use
    assert len(chunks) == 2 and closed == []
    chunks.release(a)
    assert closed == [a.reader]
    with pytest.raises(BlockingIOError):  # not open: would have to open it
        chunks.acquire(1, "a", 0, lambda k: _Reader(closed), nowait=True)
    again = chunks.acquire(1, "c", 1, lambda k: _Reader(closed))  # another epoch: reopened
    assert again is not c and closed == [a.reader]  # c is in use
    chunks.release(c)
    assert closed == [a.reader, c.reader]
    chunks.release(again)
    missing = chunks.acquire(1, "missing", 0, lambda k: None)
    assert missing.reader is None  # kept too: found missing again without a lookup
    chunks.release(missing)
    assert chunks.acquire(1, "missing", 0, lambda k: _Reader(closed), nowait=True) is missing
    chunks.release(missing)
    chunks.clear()
    assert len(chunks) == 0 and len(closed) == 4


def test_chunks_larger_than_the_cache_are_read_from_their_files_or_refused(tmp_path):
    """A chunk that decodes to more than the chunk cache holds (and, here lowered to nothing,
    more than ``Engine.min_unit_limit``) is never loaded: plain-bytes
    chunks are read straight from their files, small reads included; compressed ones, and
    writes (over the dirty limit, 3/4 of ``cache_size``), fail with MemoryLimitError (ENOMEM)
    before any allocation, naming the cache size that would do."""
    plain, data = _array(tmp_path / "plain")
    packed, _ = _array(tmp_path / "packed", compressors=[zarr.codecs.GzipCodec(level=1)])
    unit = 16 * 32 * 4 * 4  # 8 KiB: a chunk cache of 4 KiB, a dirty limit of 3 KiB
    for path, compressed in ((tmp_path / "plain" / "a", False), (tmp_path / "packed" / "a", True)):
        engine = Engine(cache_size=4 << 10, prefetch_bytes=0, min_unit_limit=0)
        arr = open_array(LocalStore(str(path)), "", engine)
        assert arr.oversize and unit > arr.engine.cache_size - arr.engine.pool_bytes
        if compressed:
            with pytest.raises(MemoryLimitError, match="cache_size=1M or more"):
                arr.read(0, 4)
        else:  # (a load would be refused as the compressed one is: these come from the files)
            for off, size in ((4 * 1000, 4), (0, arr.nbytes), (4 * 7, 4 * 3000)):
                assert arr.read(off, size) == data.tobytes()[off : off + size]
        with pytest.raises(MemoryLimitError, match="writing"):
            arr.write(0, b"\0" * 4)
        with pytest.raises(MemoryLimitError, match="resizing"):  # a chunk cut in part
            arr.resize((6, 40, 40))
        small = Engine(cache_size=4 << 10, prefetch_bytes=0)  # the floor: 64 MiB units load
        arr = open_array(LocalStore(str(path)), "", small)
        assert not arr.oversize and arr.read(4 * 1000, 4) == data.tobytes()[4000:4004]
        arr.write(0, data.tobytes()[:4])
    assert plain is not None and packed is not None
