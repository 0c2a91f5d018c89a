"""The files of one array agree with each other through a real mount, at once: what a write,
a truncate or a metadata edit through one file changed is what an open reader of another file
reads right after the writer's ``close`` (or, for a file opened after the write, right after
the write), never the bytes the kernel cached before the change.

Each case runs several rounds: the stale reads these tests guard against came from a race
between the reader's revalidation and an invalidation sent after the writer's ``close``.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr

pytestmark = pytest.mark.timeout(300)

SHAPE, CHUNKS = (9, 10, 12), (4, 3, 5)
ROUNDS = 6


@pytest.fixture
def mounted(tmp_path: Path, mounter):
    a = zarr.create_array(
        str(tmp_path / "s.zarr"), name="a", shape=SHAPE, chunks=CHUNKS, dtype="<f4",
        fill_value=0, compressors=[zarr.codecs.ZstdCodec(level=1)],
    )  # fmt: skip
    model = np.arange(np.prod(SHAPE), dtype="<f4").reshape(SHAPE)
    a[...] = model
    return mounter(tmp_path / "s.zarr").path / "a", model


def resized(model: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    new = np.zeros(shape, dtype=model.dtype)
    overlap = tuple(slice(0, min(a, b)) for a, b in zip(model.shape, shape))
    new[overlap] = model[overlap]
    return new


def npy_of(fd: int) -> np.ndarray:
    return np.load(io.BytesIO(os.pread(fd, 1 << 20, 0)))


@pytest.mark.parametrize("same_size", [True, False], ids=["same-size", "other-size"])
def test_an_open_reader_of_data_raw_sees_a_shape_edit(mounted, same_size: bool) -> None:
    """``zarr.json`` edited through the mount to a new shape moves every byte of
    ``data.raw``; a reader that opened it before reads the new layout after the edit."""
    adir, model = mounted
    shapes = [(9, 12, 10), (9, 10, 12)] if same_size else [(4, 4, 9), (9, 10, 12)]
    fd = os.open(adir / "data.raw", os.O_RDONLY)
    try:
        for n in range(ROUNDS):
            assert os.pread(fd, model.nbytes, 0) == model.tobytes()  # now in the page cache
            shape = shapes[n % 2]
            doc = json.loads((adir / "zarr.json").read_text())
            doc["shape"] = list(shape)
            with open(adir / "zarr.json", "w") as f:
                f.write(json.dumps(doc))
            model = resized(model, shape)
            got = os.pread(fd, model.nbytes + 4096, 0)
            assert got == model.tobytes(), f"round {n}: data.raw as it was before {shape}"
    finally:
        os.close(fd)


def test_an_open_reader_of_data_npy_sees_a_truncate_of_data_raw(mounted) -> None:
    """Truncating ``data.raw`` through the mount changes ``data.npy``'s header and size; a
    reader that opened ``data.npy`` before sees the new shape after the truncating ``close``."""
    adir, model = mounted
    row = model[0].nbytes
    reader = os.open(adir / "data.npy", os.O_RDONLY)
    try:
        for n in range(ROUNDS):
            assert npy_of(reader).tobytes() == model.tobytes()
            rows = 5 if n % 2 == 0 else 9
            writer = os.open(adir / "data.raw", os.O_RDWR)
            os.ftruncate(writer, rows * row)
            os.close(writer)
            model = resized(model, (rows, *SHAPE[1:]))
            got = npy_of(reader)
            assert got.shape == model.shape, f"round {n}: data.npy's header before the truncate"
            assert got.tobytes() == model.tobytes()
    finally:
        os.close(reader)


def test_files_opened_after_a_write_to_data_raw_see_it(mounted) -> None:
    """A write through ``data.raw`` (its writer still open, nothing flushed) is in every other
    file of the array opened after it: ``data.npy``, ``data.tif`` and the chunk files, even
    when the kernel holds their pages from a read before the write."""
    adir, model = mounted
    model = model.copy()
    chunk = adir / "chunks" / "0.0.0"
    writer = os.open(adir / "data.raw", os.O_RDWR)
    try:
        for n in range(ROUNDS):
            assert np.load(adir / "data.npy").tobytes() == model.tobytes()
            assert tifffile.imread(adir / "data.tif").tobytes() == model.tobytes()
            first = model[:4, :3, :5]
            assert chunk.read_bytes() == first.tobytes()
            model[0, 0, 0] = 1000.0 + n
            os.pwrite(writer, model[0, 0, :1].tobytes(), 0)
            assert np.load(adir / "data.npy")[0, 0, 0] == 1000.0 + n, f"round {n}: data.npy"
            assert tifffile.imread(adir / "data.tif")[0, 0, 0] == 1000.0 + n, f"round {n}: tif"
            assert chunk.read_bytes()[:4] == model[0, 0, :1].tobytes(), f"round {n}: chunk"
    finally:
        os.close(writer)


def test_an_open_reader_of_data_npy_sees_a_closed_write_to_data_raw(mounted) -> None:
    """A reader that keeps ``data.npy`` open reads what a writer of ``data.raw`` wrote once
    that writer has closed."""
    adir, model = mounted
    model = model.copy()
    reader = os.open(adir / "data.npy", os.O_RDONLY)
    try:
        for n in range(ROUNDS):
            assert npy_of(reader).tobytes() == model.tobytes()
            model[-1, -1, -1] = 2000.0 + n
            writer = os.open(adir / "data.raw", os.O_RDWR)
            os.pwrite(writer, model[-1, -1, -1:].tobytes(), model.nbytes - 4)
            os.close(writer)
            assert npy_of(reader).tobytes() == model.tobytes(), f"round {n}"
    finally:
        os.close(reader)


def test_an_open_reader_of_data_raw_sees_a_closed_write_to_a_chunk_file(mounted) -> None:
    """A chunk file is one directory below the array's views: a write through it is in
    ``data.raw`` for a reader that opened it before, once the chunk file's writer has closed."""
    adir, model = mounted
    model = model.copy()
    reader = os.open(adir / "data.raw", os.O_RDONLY)
    try:
        for n in range(ROUNDS):
            assert os.pread(reader, model.nbytes, 0) == model.tobytes()
            model[0, 0, 0] = 3000.0 + n
            writer = os.open(adir / "chunks" / "0.0.0", os.O_RDWR)
            os.pwrite(writer, model[0, 0, :1].tobytes(), 0)
            os.close(writer)
            assert os.pread(reader, model.nbytes, 0) == model.tobytes(), f"round {n}"
    finally:
        os.close(reader)


def test_a_chunk_file_whose_chunk_a_resize_took_away_is_gone(mounted) -> None:
    """A chunk file opened before a truncate of ``data.raw`` removed its chunk answers ENOENT
    ("No such file or directory"), as its lookup now does, not EINVAL."""
    adir, model = mounted
    # (O_DIRECT: every read asks the daemon; an open chunk file's cached pages may be served
    # for up to the attribute timeout, as the README says)
    fd = os.open(adir / "chunks" / "2.0.0", os.O_RDWR | os.O_DIRECT)
    try:
        assert os.pread(fd, 4, 0) == model[8, 0, :1].tobytes()
        os.truncate(adir / "data.raw", 4 * model[0].nbytes)  # rows 0..3: chunk row 2 goes
        with pytest.raises(FileNotFoundError):
            os.pread(fd, 4, 0)
        with pytest.raises(FileNotFoundError):
            os.pwrite(fd, b"\0\0\0\0", 0)
    finally:
        os.close(fd)
