"""Fixed-size extension data types written by tensorstore and zarr-python, mounted for real.

tensorstore writes ``bfloat16`` (both byte orders), every ``float8_*``/``float4`` type it has,
``int2`` and ``int4``; zarr-python writes ``numpy.datetime64``/``timedelta64``,
``fixed_length_utf32``, ``null_terminated_bytes`` (a ``bytes`` codec without ``endian``) and
``structured`` (nested, mixed). Each array's ``data.raw`` must be the element bytes the writer
reads back (fill value in the chunks never written), ``info.json`` must say how to read them,
and writes through ``data.raw`` must read back in the writer.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest

ts = pytest.importorskip("tensorstore")
zarr = pytest.importorskip("zarr")

pytestmark = pytest.mark.timeout(300)

TS_TYPES = [
    "bfloat16",
    "float8_e3m4",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e4m3b11fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float4_e2m1fn",
    "int2",
    "int4",
]
VALUES = [0.5, -1, 1, 0, 1.5, 1, -0.5]

ZP_VALUES = {
    "datetime64": np.array(["2020-01-01", "NaT", "1999-12-31", "1970-01-02"], dtype="M8[D]"),
    "timedelta64": np.array([1, -2, 3, 2**40], dtype="m8[10s]"),
    "utf32": np.array(["ab", "é", "", "xyz"], dtype="U3"),
    "null_terminated_bytes": np.array([b"ab", b"", b"xyz", b"\x00q"], dtype="S3"),
    "structured": np.array(
        [(1, (2.5, b"q")), (3, (-1.0, b"r")), (0, (0, b"")), (-7, (1e300, b"s"))],
        dtype=[("a", "<i2"), ("p", [("b", "<f8"), ("c", "S1")])],
    ),
}


def _ts_spec(path: Path, name: str, endian: str | None) -> dict:
    codecs = [{"name": "bytes", "configuration": {"endian": endian}}] if endian else ["bytes"]
    return {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(path)},
        "metadata": {
            "shape": [7],
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [3]}},
            "data_type": name,
            "fill_value": 1,
            "codecs": codecs,
        },
    }


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    root = tmp_path_factory.mktemp("ext") / "ext.zarr"
    expected: dict[str, bytes] = {}
    for name in TS_TYPES:
        for endian in ("little", "big") if name == "bfloat16" else (None,):
            leaf = f"{name}_{endian}" if endian else name
            t = ts.open(_ts_spec(root / leaf, name, endian), create=True).result()
            t[:5] = np.array(VALUES[:5]).astype(t.dtype.numpy_dtype)
            got = t.read().result()  # the last chunk is never written: fill value 1
            expected[leaf] = (
                np.ascontiguousarray(got)
                .view(f"u{got.dtype.itemsize}")
                .astype(f"<u{got.dtype.itemsize}")
                .tobytes()
            )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, data in ZP_VALUES.items():
            a = zarr.create_array(root / name, shape=data.shape, chunks=(3,), dtype=data.dtype)
            a[:2] = data[:2]
            got = np.asarray(a[:])
            expected[name] = got.astype(got.dtype.newbyteorder("<")).tobytes()
    return root, expected


def test_metadata_is_what_the_writers_write(store) -> None:
    root, _ = store
    nt = json.loads((root / "null_terminated_bytes" / "zarr.json").read_text())
    assert nt["codecs"][0] == {"name": "bytes"}  # no endian for 1-byte characters
    st = json.loads((root / "structured" / "zarr.json").read_text())
    assert st["data_type"]["name"] == "structured"
    assert json.loads((root / "int4" / "zarr.json").read_text())["data_type"] == "int4"


def test_mount_serves_the_element_bytes(store, mounter) -> None:
    root, expected = store
    m = mounter(root, "ro")
    for leaf, want in expected.items():
        d = m.path / leaf
        got = (d / "data.raw").read_bytes()
        if leaf == "float8_e8m0fnu":
            # tensorstore 0.1.86 turns the JSON fill value 1 of this type into 0x3f (2^-64)
            # although it writes the element 1 as 0x7f; zarrfs follows the type (ml_dtypes)
            assert got[:6] == want[:6] and got[6:] == b"\x7f"
            continue
        assert got == want, leaf
        info = json.loads((d / "info.json").read_text())
        assert info["decoded_bytes"] == len(want)
        if leaf.split("_")[0] in ("bfloat16", "float8", "float4", "int2", "int4"):
            assert "element_encoding" in info, leaf
            assert "data.npy" not in os.listdir(d) and info["views"] == ["data.raw"]
    # numpy reads the bits as the type info.json names
    ml_dtypes = pytest.importorskip("ml_dtypes")
    raw = np.fromfile(m.path / "bfloat16_big" / "data.raw", "<u2").view(ml_dtypes.bfloat16)
    assert raw.astype("f4").tolist()[:5] == [0.5, -1, 1, 0, 1.5]
    st = np.load(m.path / "structured" / "data.npy")
    assert st.tolist()[:2] == ZP_VALUES["structured"][:2].tolist()
    dt = np.load(m.path / "datetime64" / "data.npy")
    assert dt[:2].tolist() == ZP_VALUES["datetime64"][:2].tolist()


def test_writes_read_back_in_the_writers(store, mounter, tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "w.zarr"
    shutil.copytree(store[0], root)
    m = mounter(root, "rw")
    new_bf = np.array([3, -2, 0.25, 8, -8, 1, 2], dtype="f4")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bits = new_bf.astype(ml_dtypes.bfloat16).view("<u2").tobytes()
    with open(m.path / "bfloat16_big" / "data.raw", "r+b") as f:
        f.write(bits)
    new_i4 = np.array([-8, 7, -1, 0, 3, -3, 1], dtype="i1")
    with open(m.path / "int4" / "data.raw", "r+b") as f:
        f.write((new_i4 & 0xF).astype("u1").tobytes())
    for name in ("structured", "null_terminated_bytes", "utf32"):
        data = ZP_VALUES[name][::-1]
        with open(m.path / name / "data.raw", "r+b") as f:
            f.write(data.astype(data.dtype.newbyteorder("<")).tobytes())
    assert m.unmount() == 0
    t = ts.open(_ts_spec(root / "bfloat16_big", "bfloat16", "big")).result()
    assert t.read().result().astype("f4").tolist() == new_bf.tolist()
    t = ts.open(_ts_spec(root / "int4", "int4", None)).result()
    assert t.read().result().astype("i1").tolist() == new_i4.tolist()
    for name in ("structured", "null_terminated_bytes", "utf32"):
        got = zarr.open_array(root / name, mode="r")[:]
        assert got.tolist() == ZP_VALUES[name][::-1].tolist(), name
