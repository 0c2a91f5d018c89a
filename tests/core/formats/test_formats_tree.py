"""Every format through the views' tree (no kernel): v2, v1 and draft nodes show the same
views as v3 nodes, their metadata files under their native names with the stored bytes, and
edits of ``attributes.json`` and of the native documents land in the native documents."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from spec_generators import entry_point, meta_key, write_array, write_v1

from zarrfs.core.stores.local import LocalStore
from zarrfs.core.stores.memory import MemoryStore
from zarrfs.views.tree import open_tree


class Opts:
    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


def read_all(f: Any) -> bytes:
    h = f.open(write=False, truncate=False)
    try:
        return h.read(0, f.stat().size + 10)  # type: ignore[no-any-return]
    finally:
        h.release()


def write_file(f: Any, content: bytes) -> None:
    h = f.open(write=True, truncate=True)
    h.write(0, content)
    h.release()


@pytest.fixture
def v2_dir(tmp_path: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = zarr.open_group(str(tmp_path), mode="w", zarr_format=2)
        a = root.create_array(
            "a", shape=(3, 4), chunks=(2, 2), dtype=">i4", fill_value=5, order="F", compressors=None
        )
        a[:2, :2] = [[1, 2], [3, 4]]
    return tmp_path


def test_v2_tree_shows_native_files_and_data(v2_dir: Path) -> None:
    root = open_tree(str(v2_dir), Opts(read_only=False, writeback=0))
    try:
        assert {".zgroup", "a", "attributes.json"} <= set(root.names())
        a = root.lookup("a")
        assert {".zarray", ".zattrs", "data.raw", "data.npy", "info.json"} <= set(a.names())
        assert read_all(a.lookup(".zarray")) == (v2_dir / "a" / ".zarray").read_bytes()
        want = np.full((3, 4), 5, ">i4")
        want[:2, :2] = [[1, 2], [3, 4]]
        assert read_all(a.lookup("data.raw")) == want.astype("<i4").tobytes()
        info = json.loads(read_all(a.lookup("info.json")))
        assert info["zarr_format"] == 2 and info["data_type"] == ">i4"
        write_file(a.lookup("attributes.json"), b'{"units": "K"}')
        assert json.loads((v2_dir / "a" / ".zattrs").read_text()) == {"units": "K"}
        assert zarr.open_array(str(v2_dir / "a")).attrs["units"] == "K"
        write_file(a.lookup(".zattrs"), b'{"units": "C"}')
        assert zarr.open_array(str(v2_dir / "a")).attrs["units"] == "C"
        h = a.lookup("data.raw").open(write=True, truncate=False)
        h.write(4 * 11, np.array([-9], "<i4").tobytes())
        h.release()
        assert zarr.open_array(str(v2_dir / "a"))[2, 3] == -9
    finally:
        root.close()


def test_v1_tree(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    mem = MemoryStore()
    write_v1(mem, np.arange(6, dtype="<f4"), (4,), attrs={"x": 1})
    for key in mem.list_prefix(""):
        store.set(key, mem.get(key) or b"")
    root = open_tree(str(tmp_path), Opts(read_only=True))
    try:
        assert {"meta", "attrs", "data.raw", "attributes.json"} <= set(root.names())
        assert read_all(root.lookup("data.raw")) == np.arange(6, dtype="<f4").tobytes()
        assert json.loads(read_all(root.lookup("attributes.json"))) == {"x": 1}
        assert read_all(root.lookup("meta")) == (tmp_path / "meta").read_bytes()
    finally:
        root.close()


def test_draft_tree(tmp_path: Path) -> None:
    mem = MemoryStore()
    entry_point(mem)
    data = np.arange(12, dtype="<i2").reshape(3, 4)
    write_array(mem, "g/arr", data, (2, 3), data_type="<i2", fill_value=0)
    store = LocalStore(tmp_path)
    for key in mem.list_prefix(""):
        store.set(key, mem.get(key) or b"")
    root = open_tree(str(tmp_path), Opts(read_only=False, writeback=0))
    try:
        assert set(root.names()) >= {"zarr.json", "root.group.json", "g", "attributes.json"}
        assert "meta" not in root.names() and "data" not in root.names()
        arr = root.lookup("g").lookup("arr")
        assert "arr.array.json" in arr.names()
        assert read_all(arr.lookup("arr.array.json")) == store.get(meta_key("g/arr", "array"))
        assert read_all(arr.lookup("data.raw")) == data.tobytes()
        write_file(arr.lookup("attributes.json"), b'{"t": 1}')
        assert json.loads(store.get(meta_key("g/arr", "array")) or b"")["attributes"] == {"t": 1}
        h = arr.lookup("data.raw").open(write=True, truncate=False)
        h.write(0, np.array([100], "<i2").tobytes())
        h.release()
        assert store.get("data/root/g/arr/c0/0") is not None
        assert read_all(arr.lookup("data.raw"))[:2] == np.array([100], "<i2").tobytes()
    finally:
        root.close()
