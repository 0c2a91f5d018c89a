"""Write-through on a real mount: ``dd`` over ``data.raw`` of a plain-bytes array with 1 MiB
chunks stores every chunk through its stream (``stats.json``), and what it stored reads back
identically with ``cmp``, zarr-python and tensorstore; a second writer going back over part of
the array ends those streams and the newer bytes win."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest
import tensorstore as ts
import zarr

pytestmark = pytest.mark.timeout(300)

SHAPE, CHUNKS = (8, 512, 512), (2, 512, 256)  # 8 chunks of 1 MiB (float32)


def _stats(mnt):
    return json.loads((mnt / ".zarrfs" / "stats.json").read_text())["arrays"][""]


def _engines(path):
    z = zarr.open_array(str(path), mode="r")[...]
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path) + "/"}}
    t = np.asarray(ts.open(spec, open=True).result().read().result())
    return z, t


def _temps(path):
    return [f for _, _, files in os.walk(path) for f in files if f.startswith(".zarrfs-tmp-")]


def test_dd_over_data_raw_is_written_through_and_reads_back(tmp_path, mounter):
    path = tmp_path / "s.zarr"
    z = zarr.create_array(str(path), shape=SHAPE, chunks=CHUNKS, dtype="<f4", compressors=None)
    z[...] = np.random.default_rng(1).random(SHAPE, dtype="f4")
    new = np.random.default_rng(2).random(SHAPE, dtype="f4")
    src = tmp_path / "new.raw"
    new.tofile(src)
    m = mounter(path)
    raw = m.path / "data.raw"
    subprocess.run(["dd", f"if={src}", f"of={raw}", "bs=1M", "conv=notrunc,fsync", "status=none"],
                   check=True)  # fmt: skip
    assert _stats(m.path)["units_written_through"] == 8
    subprocess.run(["cmp", str(src), str(raw)], check=True)
    zp, t = _engines(path)
    assert zp.tobytes() == new.tobytes() and t.tobytes() == new.tobytes()
    assert _temps(path) == []
    # the first half again, written back to front: no stream, the usual way, newer bytes win
    newer = new.copy()
    newer[:4] = -1.0
    with open(raw, "r+b") as f:
        half = newer[:4].tobytes()
        for off in reversed(range(0, len(half), 1 << 20)):
            f.seek(off)
            f.write(half[off : off + (1 << 20)])
        f.flush()
        os.fsync(f.fileno())
    assert _stats(m.path)["units_written_through"] == 8
    zp, t = _engines(path)
    assert zp.tobytes() == newer.tobytes() and t.tobytes() == newer.tobytes()
    assert raw.read_bytes() == newer.tobytes()
    assert _temps(path) == []


def test_a_writer_whose_buffer_is_not_page_aligned_loads_nothing(tmp_path, mounter):
    """A write-only descriptor's writes reach the daemon cut at the writer's page boundaries
    (``direct_io``), so from a buffer 96 bytes past a page every request starts and ends
    inside a row: the rows it cuts are completed by the next request, never loaded."""
    path = tmp_path / "s.zarr"
    z = zarr.create_array(str(path), shape=SHAPE, chunks=CHUNKS, dtype="<f4", compressors=None)
    z[...] = np.random.default_rng(1).random(SHAPE, dtype="f4")
    new = np.random.default_rng(3).random(SHAPE, dtype="f4").tobytes()
    room = np.empty(len(new) + 2 * 4096, dtype=np.uint8)
    start = (-room.ctypes.data) % 4096 + 96
    buf = room[start : start + len(new)]
    buf[...] = np.frombuffer(new, dtype=np.uint8)
    m = mounter(path)
    fd = os.open(m.path / "data.raw", os.O_WRONLY)
    try:
        assert os.write(fd, buf) == len(new)
        os.fsync(fd)
    finally:
        os.close(fd)
    stats = _stats(m.path)
    assert stats.get("chunks_decoded", 0) == 0 and stats.get("cache_misses", 0) == 0
    zp, t = _engines(path)
    assert zp.tobytes() == new and t.tobytes() == new
    assert (m.path / "data.raw").read_bytes() == new
    assert _temps(path) == []
