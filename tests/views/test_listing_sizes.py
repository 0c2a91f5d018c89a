"""Sizes reported by ``stat`` (what a listing sends the kernel) equal the bytes a read returns,
for every file of every array directory, including the sizes computed without rendering
(``info.json``, ``attributes.json``: ``json_size``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrfs.views.base import VDir, VFile
from zarrfs.views.info import VARYING, json_size, render_json
from zarrfs.views.tree import open_tree

_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
_json = st.recursive(
    _leaves,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=25,
)


@settings(max_examples=400, deadline=None)
@given(_json)
def test_json_size_equals_the_rendered_length(value: Any) -> None:
    assert json_size(value) == len(render_json(value))


@pytest.mark.parametrize(
    "value",
    [{}, [], {"a": {}}, {"a": [[], [{}]]}, [1, [2, [3, [4]]]], {"é": "ü\u2028", "n": math.nan}],
)
def test_json_size_edge_cases(value: Any) -> None:
    assert json_size(value) == len(render_json(value))


def _read_all(f: VFile) -> bytes:
    h = f.open(write=False, truncate=False)
    try:
        out = b""
        while True:
            part = bytes(h.read(len(out), 1 << 20))
            if not part:
                return out
            out += part
    finally:
        h.release()


@pytest.fixture
def store_dir(tmp_path: Any) -> str:
    root = zarr.open_group(str(tmp_path / "s.zarr"), mode="w")
    root.attrs["title"] = "sizes ü"
    a = root.create_array("plain", shape=(3, 5, 7), chunks=(2, 5, 4), dtype="<i2")
    a[...] = np.arange(105, dtype="<i2").reshape(3, 5, 7)
    a.attrs.update({"units": "m", "scale": [0.5, 1.5], "nested": {"k": [], "e": {}}})
    b = root.create_array(
        "named", shape=(4, 6), chunks=(2, 3), dtype="float64", dimension_names=["y", "x"]
    )
    b[...] = 1.5
    root.create_array("empty", shape=(0, 3), chunks=(1, 3), dtype="uint8")
    root.create_array("scalar", shape=(), dtype="complex64", fill_value=1 + 2j)
    c = root.create_array(
        "sharded", shape=(8, 8), chunks=(2, 2), shards=(4, 8), dtype=">u4", fill_value=7
    )
    c[:4] = 3
    g = root.create_group("sub")
    g.attrs["multiscales"] = [{"version": "0.4", "datasets": [{"path": "0"}]}]
    d = g.create_array("0", shape=(2, 3, 4), chunks=(1, 3, 4), dtype="bool")
    d[...] = True
    return str(tmp_path / "s.zarr")


def _files(d: VDir, path: str = "") -> list[tuple[str, VFile]]:
    out: list[tuple[str, VFile]] = []
    for name in d.names():
        if name == "group.nc":  # its sizes are checked by the netCDF tests
            continue
        child = d.lookup(name)
        if isinstance(child, VDir):
            if name != ".zarrfs":
                out += _files(child, f"{path}/{name}")
        elif child is not None:
            out.append((f"{path}/{name}", child))
    return out


@pytest.mark.parametrize("byte_order", ["little", "big"])
def test_every_listed_size_equals_the_bytes_read(store_dir: str, byte_order: str) -> None:
    class Options:
        read_only = True

    Options.byte_order = byte_order  # type: ignore[attr-defined]
    root = open_tree(store_dir, Options())
    try:
        files = _files(root)
        names = {p.rsplit("/", 1)[-1] for p, _ in files}
        # every kind of file an array directory shows is covered
        for kind in ("info.json", "attributes.json", "zarr.json", "data.raw", "data.npy",
                     "data.hdr", "data.mhd", "data.nhdr", "data.tif", "data.nii"):  # fmt: skip
            assert kind in names, kind
        for path, f in files:
            assert f.stat().size == len(_read_all(f)), path
    finally:
        root.close()


_names = st.text(max_size=8)


@settings(max_examples=300, deadline=None)
@given(
    # the other members of an array's info: never one of the members that vary per array
    st.dictionaries(st.text(max_size=5).filter(lambda k: k not in VARYING), _json, max_size=4),
    _names,
    st.none() | st.integers(min_value=0, max_value=2**63),
    st.lists(_names, max_size=5),
    _names,
    st.none() | st.integers(min_value=0, max_value=2**63),
    st.lists(_names, max_size=5),
)
def test_info_size_from_a_shared_base_equals_the_rendered_length(
    other: dict[str, Any],
    path: str,
    stored: int | None,
    views: list[str],
    path2: str,
    stored2: int | None,
    views2: list[str],
) -> None:
    from zarrfs.views.info import info_base_size, info_size

    def info(p: str, s: int | None, v: list[str]) -> dict[str, Any]:
        return {"path": "/" + p, **other, "stored_bytes": s, "views": v, "imagej": None}

    base = info_base_size(info(path, stored, views))  # computed for one array ...
    for p, s, v in ((path, stored, views), (path2, stored2, views2)):  # ... used for another
        assert info_size(base, p, s, v) == len(render_json(info(p, s, v)))


def test_info_json_of_arrays_sharing_a_document(tmp_path: Any) -> None:
    root = zarr.open_group(str(tmp_path / "s.zarr"), mode="w")
    for name, n in (("a", 0), ("longer_name_é", 3), ("b", 12)):
        arr = root.create_array(name, shape=(12,), chunks=(4,), dtype="<f4")
        arr[:n] = 1  # a different number of stored chunks each
    tree = open_tree(str(tmp_path / "s.zarr"))
    try:
        docs = [tree.lookup(n).array().metadata for n in ("a", "b")]
        assert docs[0] is docs[1]  # one parsed document
        for name in ("a", "longer_name_é", "b"):
            f = tree.lookup(name).lookup("info.json")
            assert f.stat().size == len(_read_all(f)), name
    finally:
        tree.close()


def test_attributes_json_of_arrays_sharing_a_document_and_after_a_change(
    tmp_path: Any,
) -> None:
    root = zarr.open_group(str(tmp_path / "s.zarr"), mode="w")
    for name in ("a", "b", "c"):
        root.create_array(name, shape=(4,), chunks=(4,), dtype="<f4").attrs["unit"] = "mm"
    tree = open_tree(str(tmp_path / "s.zarr"))
    try:
        docs = [tree.lookup(n).array().metadata for n in ("a", "b")]
        assert docs[0] is docs[1]  # one parsed document: one measurement for both
        for name in ("a", "b", "c"):
            f = tree.lookup(name).lookup("attributes.json")
            assert f.stat().size == len(_read_all(f)), name
        zarr.open_array(str(tmp_path / "s.zarr" / "c"), mode="r+").attrs["unit"] = "micron"
        tree.lookup("c").refresh()  # another client changed c: its own document now
        for name in ("a", "c"):
            f = tree.lookup(name).lookup("attributes.json")
            content = _read_all(f)
            assert f.stat().size == len(content), name
            assert (b"micron" in content) is (name == "c")
    finally:
        tree.close()
