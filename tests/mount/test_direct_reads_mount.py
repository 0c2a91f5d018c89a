"""Direct reads on a real mount: ``cat`` of a plain-bytes array is served from the chunk
files without decoding a chunk into the cache (``-o nodirect_reads``: loaded as before), and
what a write stored is what the next read of the files gives."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
import zarr

pytestmark = pytest.mark.timeout(300)

SHAPE, CHUNKS = (16, 96, 80), (8, 32, 32)  # edge chunks on two axes


def _store(tmp_path):
    z = zarr.create_array(str(tmp_path / "s.zarr"), shape=SHAPE, chunks=CHUNKS, dtype="<i4",
                          compressors=None, fill_value=7)  # fmt: skip
    data = np.arange(np.prod(SHAPE), dtype="<i4").reshape(SHAPE)
    data[8:, 32:64] = 7  # the 3 chunks (1, 1, *) are not stored: the fill value
    z[...] = data
    return data


def _stats(mnt):
    return json.loads((mnt / ".zarrfs" / "stats.json").read_text())["arrays"][""]


@pytest.mark.parametrize("options", [(), ("nodirect_reads",)])
def test_cat_reads_the_chunk_files_without_decoding(tmp_path, mounter, options):
    data = _store(tmp_path)
    m = mounter(tmp_path / "s.zarr", *options)
    out = subprocess.run(["cat", str(m.path / "data.raw")], capture_output=True, check=True)
    assert out.stdout == data.tobytes()
    stats = _stats(m.path)
    if options:
        assert stats["chunks_decoded"] == 15  # 18 chunks, 3 of them not stored
    else:
        assert stats.get("chunks_decoded", 0) == 0
        assert stats["bytes_served"] == data.nbytes


def test_a_write_then_a_cold_read_give_the_new_bytes(tmp_path, mounter):
    data = _store(tmp_path)
    m = mounter(tmp_path / "s.zarr")
    raw = m.path / "data.raw"
    assert raw.read_bytes() == data.tobytes()  # the chunks are open now
    new = (data * 3 - 1).astype("<i4")
    subprocess.run(["dd", f"of={raw}", "bs=64k", "conv=notrunc,fsync", "status=none"],
                   input=new.tobytes(), check=True)  # fmt: skip
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
    assert raw.read_bytes() == new.tobytes()
    assert np.array_equal(zarr.open_array(str(tmp_path / "s.zarr"), mode="r")[...], new)
