"""Arrays zarr-python 3.4 wrote, mounted for real: what 3.2 and later write that 3.1 did not.

The fixture (``zp34/``, written by ``zp34/make_fixture.py`` under Python 3.12 with zarr 3.4.2
and cast-value-rs, as the tests' own zarr 3.1.6 cannot write these) holds the ``struct`` data
type, the ``scale_offset`` and ``cast_value`` codecs in every rounding and out-of-range mode,
with a scalar map and inside a shard, and zarr-python 3.4's defaults. Each array's ``data.raw``
must be zarr-python's own read of it; writing new values through ``data.raw`` must store the
objects zarr-python stores for the same values, byte for byte (the shards: the same inner
chunks, whose order in the file zarr-python chooses differently).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from zarrfs.core.array import Engine
from zarrfs.core.hierarchy import open_array
from zarrfs.core.stores.local import LocalStore

from .corpus import ordered_bytes

pytestmark = pytest.mark.timeout(300)

HERE = Path(__file__).resolve().parent / "zp34"
EXPECTED = dict(np.load(HERE / "expected.npz"))
REWRITE = dict(np.load(HERE / "rewrite.npz"))
SHARDED = ("so_sharded", "sharded_f4")


def _objects(root: Path, name: str) -> dict[str, bytes]:
    base = root / name
    return {
        p.relative_to(base).as_posix(): p.read_bytes()
        for p in base.rglob("*")
        if p.is_file() and p.name != "zarr.json"
    }


def _inner_chunks(root: Path, name: str) -> dict[str, list[bytes | None]]:
    """Each shard's inner chunks in index order (None where absent), from the end index."""
    doc = json.loads((root / name / "zarr.json").read_text())
    shard = doc["chunk_grid"]["configuration"]["chunk_shape"]
    inner = doc["codecs"][-1]["configuration"]["chunk_shape"]
    n = int(np.prod([s // i for s, i in zip(shard, inner, strict=True)]))
    out = {}
    for key, data in _objects(root, name).items():
        index = np.frombuffer(data[-(16 * n + 4) : -4], "<u8").reshape(n, 2)
        out[key] = [None if o == 2**64 - 1 else data[o : o + k] for o, k in index.tolist()]
    return out


def test_fixture_is_what_zarr_python_34_writes() -> None:
    doc = json.loads((HERE / "store" / "struct_nested" / "zarr.json").read_text())
    assert doc["data_type"]["name"] == "struct"
    assert doc["data_type"]["configuration"]["fields"][0]["name"] == "p"
    assert doc["fill_value"] == {"p": {"x": 9.0, "y": 8.0}, "v": 7}
    codecs = json.loads((HERE / "store" / "so_cast_u16_nan" / "zarr.json").read_text())["codecs"]
    assert [c["name"] for c in codecs[:2]] == ["scale_offset", "cast_value"]
    assert codecs[1]["configuration"]["scalar_map"] == {
        "encode": [["NaN", 0]],
        "decode": [[0, "NaN"]],
    }


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_core_reads_what_zarr_python_reads(name: str) -> None:
    engine = Engine(threads=2)
    try:
        arr = open_array(LocalStore(HERE / "store", read_only=True), name, engine=engine)
        want = EXPECTED[name]
        assert arr.read(0, arr.nbytes, "little") == ordered_bytes(want, "little")
        assert arr.read(0, arr.nbytes, "big") == ordered_bytes(want, "big")
    finally:
        engine.close()


def test_mount_reads_and_writes_as_zarr_python(mounter, tmp_path: Path) -> None:
    root = tmp_path / "zp34.zarr"
    shutil.copytree(HERE / "store", root)
    m = mounter(root, "rw")
    for name, want in EXPECTED.items():
        d = m.path / name
        assert (d / "data.raw").read_bytes() == ordered_bytes(want, "little"), name
        if want.dtype.names:  # records: numpy reads data.npy with their fields
            assert np.load(d / "data.npy").tolist() == want.tolist()
    info = json.loads((m.path / "so_cast_u16" / "info.json").read_text())
    assert "scale_offset" in json.dumps(info) and "cast_value" in json.dumps(info)
    for name, values in REWRITE.items():
        fd = os.open(m.path / name / "data.raw", os.O_WRONLY)
        try:
            os.write(fd, ordered_bytes(values, "little"))
            os.fsync(fd)
        finally:
            os.close(fd)
    assert m.unmount() == 0
    engine = Engine(threads=2)
    try:
        for name in REWRITE:
            if name in SHARDED:  # zarr-python orders a shard's inner chunks its own way
                got = open_array(LocalStore(root, read_only=True), name, engine=engine)
                ref = open_array(
                    LocalStore(HERE / "rewritten", read_only=True), name, engine=engine
                )
                assert got.read(0, got.nbytes, "little") == ref.read(0, ref.nbytes, "little")
                assert _inner_chunks(root, name) == _inner_chunks(HERE / "rewritten", name)
            else:
                assert _objects(root, name) == _objects(HERE / "rewritten", name), name
    finally:
        engine.close()
