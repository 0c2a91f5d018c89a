"""Zarr v2 nodes in a hierarchy: discovery by listing and by ``.zmetadata``, the metadata
files each node shows, edits through ``parse_document``, and what writes leave in the store
(``.zattrs`` for attributes, consolidated metadata kept in step, one kind of node per path)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr
from formats_helpers import NonListable, engine, ordered, read_all

from zarrfs.core.errors import MetadataError
from zarrfs.core.hierarchy import FORMATS, Hierarchy
from zarrfs.core.metadata.v2 import VariableLengthArrayError, new_group_v2
from zarrfs.core.stores.local import LocalStore
from zarrfs.core.stores.memory import MemoryStore


@pytest.fixture
def v2_store(tmp_path: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = zarr.open_group(str(tmp_path), mode="w", zarr_format=2, attributes={"title": "r"})
        sub = root.create_group("sub", attributes={"level": 1})
        a = sub.create_array("a", shape=(4, 6), chunks=(2, 4), dtype="<i2", fill_value=-1)
        a[:3, :] = np.arange(18).reshape(3, 6)
        a.attrs["_ARRAY_DIMENSIONS"] = ["t", "x"]
        root.create_array("b", shape=(5,), chunks=(5,), dtype=">f4", fill_value=np.nan)
        root.create_array("text", shape=(3,), chunks=(3,), dtype=str)
        zarr.consolidate_metadata(str(tmp_path))
    return tmp_path


def test_listing_finds_every_v2_node(v2_store: Path) -> None:
    h = Hierarchy(LocalStore(v2_store), engine())
    root = h.node("")
    assert root.format.name == "v2" and root.metadata.attributes == {"title": "r"}
    assert [(n.name, n.format.name, n.is_array) for n in h.children("")] == [
        ("b", "v2", True),
        ("sub", "v2", False),
    ]
    assert [n.path for n in h.children("sub")] == ["sub/a"]
    arr = h.array("sub/a")
    want = np.full((4, 6), -1, dtype="<i2")
    want[:3] = np.arange(18).reshape(3, 6)
    assert read_all(arr, "big") == ordered(want, "big")
    assert arr.metadata.dimension_names == ("t", "x")


def test_object_arrays_are_reported_not_read(v2_store: Path) -> None:
    h = Hierarchy(LocalStore(v2_store), engine())
    assert "text" not in [n.name for n in h.children("")]
    assert "variable-length" in h.problems["text"]
    with pytest.raises(VariableLengthArrayError) as info:
        h.node("text")
    assert info.value.summary["shape"] == [3] and info.value.summary["dtype"] == "|O"


def test_consolidated_metadata_finds_children_without_listing(v2_store: Path) -> None:
    h = Hierarchy(NonListable(LocalStore(v2_store)), engine())
    root = h.node("").metadata
    assert root.consolidated is not None and sorted(root.consolidated) == ["b", "sub", "sub/a"]
    assert "text" in root.consolidated_skipped
    assert [n.name for n in h.children("")] == ["b", "sub"]
    assert [n.path for n in h.children("sub")] == ["sub/a"]
    assert h.array("sub/a").read(0, 4, "little") == ordered(np.array([0, 1], "<i2"), "little")
    # a listable store does not need it (and does not read it)
    assert Hierarchy(LocalStore(v2_store), engine()).node("").metadata.consolidated is None


def test_metadata_files_are_the_native_documents(tmp_path: Path) -> None:
    store = MemoryStore()
    store.set(".zgroup", b'{"zarr_format": 2}')
    store.set("a/.zarray", _zarray())
    store.set("b/.zarray", _zarray())
    store.set("b/.zattrs", b"{}")
    h = Hierarchy(store, engine())
    keys = {n.path: n.format.metadata_keys(n.metadata) for n in [h.node(""), *h.children("")]}
    assert keys == {"": (".zgroup",), "a": (".zarray",), "b": (".zarray", ".zattrs")}
    titled = h.node("a").metadata.with_attributes({"t": 1})
    assert h.node("a").format.metadata_keys(titled) == (".zarray", ".zattrs")


def _zarray(**changes: object) -> bytes:
    doc = {
        "zarr_format": 2,
        "shape": [4],
        "chunks": [2],
        "dtype": "<u2",
        "compressor": None,
        "fill_value": 0,
        "order": "C",
        "filters": None,
    }
    doc.update(changes)
    return json.dumps(doc, indent=4).encode()


def test_attribute_writes_store_zattrs_only(tmp_path: Path) -> None:
    store = MemoryStore()
    original = _zarray()
    store.set("a/.zarray", original)
    h = Hierarchy(store, engine())
    node = h.node("a")
    h.save_metadata("a", node.metadata.with_attributes({"units": "K", "nan": float("nan")}))
    assert store.get("a/.zarray") == original  # untouched, byte for byte
    assert json.loads(store.get("a/.zattrs") or b"")["units"] == "K"
    h.save_metadata("a", h.node("a").metadata.with_attributes({}))
    assert json.loads(store.get("a/.zattrs") or b"") == {}


def test_parse_document_edits(tmp_path: Path) -> None:
    store = MemoryStore()
    store.set("a/.zarray", _zarray())
    store.set(".zgroup", b'{"zarr_format": 2}')
    h = Hierarchy(store, engine())
    node = h.node("a")
    parse = node.format.parse_document
    assert parse is not None
    edited = parse(".zarray", _zarray(shape=[6]), node.metadata)
    assert edited.shape == (6,) and edited.to_bytes() == _zarray(shape=[6])  # type: ignore[union-attr]
    assert parse(".zattrs", b'{"a": [1, 2]}', node.metadata).attributes == {"a": [1, 2]}
    group = h.node("")
    assert parse(".zattrs", b'{"g": 1}', group.metadata).attributes == {"g": 1}
    for name, content, old in [
        (".zarray", b"{", node.metadata),
        (".zattrs", b"[]", node.metadata),
        (".zgroup", b'{"zarr_format": 2}', node.metadata),
        (".zarray", _zarray(), group.metadata),
    ]:
        with pytest.raises(MetadataError):
            parse(name, content, old)


def test_writes_keep_consolidated_metadata_in_step(v2_store: Path) -> None:
    h = Hierarchy(LocalStore(v2_store), engine())
    arr = h.array("sub/a")
    arr.resize((7, 6))
    sub = h.node("sub")
    h.save_metadata("sub", sub.metadata.with_attributes({"level": 2}))
    consolidated = json.loads((v2_store / ".zmetadata").read_text())["metadata"]
    assert consolidated["sub/a/.zarray"]["shape"] == [7, 6]
    assert consolidated["sub/.zattrs"] == {"level": 2}
    reopened = zarr.open_group(str(v2_store), mode="r", zarr_format=2, use_consolidated=True)
    assert reopened["sub/a"].shape == (7, 6) and reopened["sub"].attrs["level"] == 2


def test_one_kind_of_node_per_path(tmp_path: Path) -> None:
    store = MemoryStore()
    store.set("g/.zgroup", b'{"zarr_format": 2}')
    store.set("x/.zarray", _zarray())
    h = Hierarchy(store, engine())
    fmt = h.node("g").format
    fmt.write(store, "g", h.node("x").metadata)
    assert store.get("g/.zgroup") is None and store.get("g/.zarray") == store.get("x/.zarray")
    fmt.write(store, "g", new_group_v2({"made": True}))
    assert store.get("g/.zarray") is None and json.loads(store.get("g/.zgroup") or b"") == {
        "zarr_format": 2
    }
    assert json.loads(store.get("g/.zattrs") or b"") == {"made": True}


def test_v3_still_comes_first_and_v2_follows() -> None:
    names = [f.name for f in FORMATS]
    assert names[:2] == ["v3", "v2"] and "v1" in names and "v3-draft" in names
    store = MemoryStore()
    store.set("zarr.json", b'{"zarr_format": 3, "node_type": "group", "attributes": {"x": 1}}')
    store.set(".zgroup", b'{"zarr_format": 2}')
    node = Hierarchy(store, engine()).node("")
    assert node.format.name == "v3" and node.metadata.attributes == {"x": 1}
