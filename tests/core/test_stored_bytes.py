"""What an array's chunks take in the store, as the mount shows it (``st_blocks`` of its data
files, ``stored_bytes`` of ``info.json``): the files of its chunk folder where the encoding has
one, found without listing the array's folder (``zarrfs info`` counts every key under the
array, stray ones included, and says which are chunks)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

from zarrfs.core.hierarchy import Hierarchy
from zarrfs.core.keys import ChunkKeyEncoding
from zarrfs.core.metadata.draft import DraftChunkKeyEncoding
from zarrfs.core.stores.local import LocalStore


def _chunk_files(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    ("encoding", "ndim", "folder"),
    [
        (ChunkKeyEncoding("default", "/"), 2, "c/"),
        (ChunkKeyEncoding("default", "/"), 0, ""),  # the 0-d chunk is the file "c" itself
        (ChunkKeyEncoding("default", "."), 2, ""),  # "c.0.1" lies beside zarr.json
        (ChunkKeyEncoding("v2", "/"), 2, ""),
        (ChunkKeyEncoding("v2", "."), 2, ""),
        (DraftChunkKeyEncoding("default", "/"), 2, ""),  # "c0/1": no folder of its own
    ],
)
def test_the_chunk_folder_is_where_every_key_of_the_encoding_lies(
    encoding: ChunkKeyEncoding, ndim: int, folder: str
) -> None:
    assert encoding.directory(ndim) == folder
    for coords in [(0,) * ndim, (3,) * ndim, tuple(range(ndim))]:
        assert encoding.encode(coords).startswith(folder)
    if folder:
        assert all(encoding.encode((i,) * ndim)[: len(folder)] == folder for i in range(20))


@pytest.mark.parametrize("separator", ["/", "."])
def test_stored_bytes_counts_the_chunks_and_nothing_beside_them(
    tmp_path: Path, separator: str
) -> None:
    root = tmp_path / "s.zarr"
    arr = zarr.create_array(
        str(root / "x"),
        shape=(40, 40),
        chunks=(16, 16),
        dtype="float32",
        chunk_key_encoding={"name": "default", "separator": separator},
        compressors=None,
        fill_value=0,
    )
    arr[:] = np.arange(1600, dtype="float32").reshape(40, 40)
    if separator == "/":  # a file beside the chunk folder is not a chunk: never counted
        (root / "x" / "notes.txt").write_bytes(b"x" * 1000)
    store = LocalStore(str(root))
    chunks = 9 * 16 * 16 * 4
    h = Hierarchy(store)
    assert h.array("x").stored_bytes() == chunks
    if separator == "/":
        assert _chunk_files(root / "x" / "c") == chunks
