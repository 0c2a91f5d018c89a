"""The 2019-2020 v3 draft layout, built from the draft spec text by a small generator, read and
written through ``Hierarchy`` and ``ZarrArray``.

The generator (``spec_generators.entry_point``/``write_array``) follows
drafts/core-protocol-v3.0-2020.rst (and the 2019 document style); group documents sit at
``meta/root/<path>.group<suffix>``, groups without one are implicit, chunks are at
``data/root/<path>/c<i><sep><j>``.
"""

from __future__ import annotations

import gzip
import json
import zlib
from itertools import product
from typing import Any

import numpy as np
import pytest
from formats_helpers import as_native, engine, ordered, read_all, sample
from spec_generators import entry_point, meta_key, write_array

from zarrfs.core.errors import MetadataError, UnsupportedError
from zarrfs.core.hierarchy import Hierarchy
from zarrfs.core.metadata.draft import DRAFT_FORMAT
from zarrfs.core.stores.memory import MemoryStore


@pytest.fixture
def hierarchy_store() -> tuple[MemoryStore, np.ndarray]:
    """The spec's example: group /foo/bar, array /foo/baz/qux; /, /foo, /foo/baz implicit."""
    store = MemoryStore()
    entry_point(store)
    store.set(meta_key("foo/bar", "group"), json.dumps({"attributes": {"spam": "ham"}}).encode())
    data = sample(np.dtype("<f8"), (5, 7), 1)
    data[1, 1] = np.nan
    write_array(
        store,
        "foo/baz/qux",
        data,
        (2, 3),
        data_type="<f8",
        fill_value="NaN",
        fill=np.nan,
        skip=frozenset({(2, 2)}),
        attributes={"units": "m"},
    )
    data[4:, 6:] = np.nan
    return store, data


def test_discovery_and_reads_in_the_draft_layout(
    hierarchy_store: tuple[MemoryStore, np.ndarray],
) -> None:
    store, want = hierarchy_store
    h = Hierarchy(store, engine())
    root = h.node("")
    assert root.format.name == DRAFT_FORMAT and root.metadata.node_type == "group"
    assert [n.path for n in h.children("")] == ["foo"]
    assert [(n.path, n.is_array) for n in h.children("foo")] == [
        ("foo/bar", False),
        ("foo/baz", False),
    ]
    assert h.node("foo/bar").metadata.attributes == {"spam": "ham"}
    (qux,) = h.children("foo/baz")
    assert qux.path == "foo/baz/qux" and qux.metadata.attributes == {"units": "m"}
    arr = h.array("foo/baz/qux")
    assert arr.chunk_key((1, 2)) == "data/root/foo/baz/qux/c1/2"
    for order in ("little", "big"):
        assert read_all(arr, order) == ordered(want, order)
    keys = {
        p: h.node(p).format.metadata_keys(h.node(p).metadata) for p in ("", "foo", "foo/baz/qux")
    }
    assert keys == {
        "": ("zarr.json", "root.group.json"),
        "foo": ("foo.group.json",),
        "foo/baz/qux": ("qux.array.json",),
    }
    assert h.node("foo/baz/qux").metadata.to_bytes() == store.get(meta_key("foo/baz/qux", "array"))


@pytest.mark.parametrize("layout", ["C", "F"])
@pytest.mark.parametrize("separator", ["/", "."])
@pytest.mark.parametrize("style", [2019, 2020])
def test_root_arrays_layouts_and_document_styles(layout: str, separator: str, style: int) -> None:
    store = MemoryStore()
    entry_point(store, suffix=".meta")
    data = sample(np.dtype(">i2"), (4, 5, 3), 2)
    write_array(
        store,
        "",
        data,
        (3, 2, 2),
        data_type=">i2",
        layout=layout,
        separator=separator,
        fill_value=7,
        fill=7,
        suffix=".meta",
        skip=frozenset({(1, 2, 1)}),
        style=style,
    )
    data[3:, 4:, 2:] = 7
    h = Hierarchy(store, engine())
    arr = h.array("")
    assert arr.chunk_key((1, 0, 1)) == f"data/root/c1{separator}0{separator}1"
    assert read_all(arr, "big") == ordered(data, "big")
    assert h.node("").format.metadata_keys(h.node("").metadata) == ("zarr.json", "root.array.meta")


@pytest.mark.parametrize(
    ("data_type", "dtype", "fill_value", "fill"),
    [
        ("bool", "|b1", True, True),
        ("i1", "|i1", -1, -1),
        ("u1", "|u1", 255, 255),
        (">u8", ">u8", "0x0000000000000102", 258),
        ("<f4", "<f4", "0b01111111100000000000000000000000", np.inf),
        (">f2", ">f2", "+Infinity", np.inf),
        ("<c8", "<c8", [1.0, "NaN"], complex(1, np.nan)),
        ("r24", "|V3", "0x616263", b"abc"),
        (
            {"extension": "https://example.org/datetime", "type": "<M8[ns]", "fallback": "<i8"},
            "<M8[ns]",
            5,
            5,
        ),
        (
            {"extension": "https://example.org/mystery", "type": "quaternion", "fallback": "<i8"},
            "<i8",
            -2,
            -2,
        ),
    ],
)
def test_draft_data_types_and_fill_values(
    data_type: Any, dtype: str, fill_value: Any, fill: Any
) -> None:
    store = MemoryStore()
    entry_point(store)
    dt = np.dtype(dtype)
    write_array(
        store,
        "a",
        np.zeros((3,), dt),
        (2,),
        data_type=data_type,
        fill_value=fill_value,
        compress=None,
        skip=frozenset({(0,), (1,)}),
    )
    arr = Hierarchy(store, engine()).array("a")
    want = np.full((3,), np.array(fill).astype(dt) if dt.kind != "V" else fill, dtype=dt)
    assert read_all(arr) == ordered(want, "little")


def test_draft_writes_and_edits() -> None:
    store = MemoryStore()
    entry_point(store)
    write_array(
        store,
        "g/a",
        np.zeros((4, 4), "<u2"),
        (2, 2),
        data_type="<u2",
        fill_value=0,
        skip=frozenset(product(range(2), range(2))),
    )
    h = Hierarchy(store, engine())
    arr = h.array("g/a")
    new = sample(np.dtype("<u2"), (4, 4), 5)
    new[2:, 2:] = 0
    arr.write(0, ordered(as_native(new), "little"), "little")
    arr.flush()
    stored = sorted(k for k in store.list_prefix("data/"))
    assert stored == ["data/root/g/a/c0/0", "data/root/g/a/c0/1", "data/root/g/a/c1/0"]
    chunk = np.frombuffer(gzip.decompress(store.get("data/root/g/a/c1/0") or b""), "<u2")
    np.testing.assert_array_equal(chunk.reshape(2, 2), new[2:, :2])
    # attributes of an array and of an implicit group go into their documents
    h.save_metadata("g/a", h.node("g/a").metadata.with_attributes({"t": 1}))
    assert json.loads(store.get(meta_key("g/a", "array")) or b"")["attributes"] == {"t": 1}
    assert store.get(meta_key("g", "group")) is None
    h.save_metadata("g", h.node("g").metadata.with_attributes({"made": True}))
    assert json.loads(store.get(meta_key("g", "group")) or b"") == {"attributes": {"made": True}}
    # resize rewrites the document; parse_document reads edited documents of the node
    h.array("g/a").resize((6, 4))
    doc = json.loads(store.get(meta_key("g/a", "array")) or b"")
    assert doc["shape"] == [6, 4] and doc["attributes"] == {"t": 1}
    node = h.node("g/a")
    parse = node.format.parse_document
    assert parse is not None
    doc["attributes"] = {"t": 2}
    assert parse("a.array.json", json.dumps(doc).encode(), node.metadata).attributes == {"t": 2}
    for name in ("zarr.json", "b.array.json"):
        with pytest.raises(MetadataError):
            parse(name, json.dumps(doc).encode(), node.metadata)


def test_entry_point_rules() -> None:
    store = MemoryStore()
    entry_point(store, extensions=[{"extension": "https://x.org/e", "must_understand": False}])
    assert Hierarchy(store, engine()).node("").format.name == DRAFT_FORMAT
    entry_point(store, extensions=[{"extension": "https://x.org/e", "must_understand": True}])
    with pytest.raises(UnsupportedError):
        Hierarchy(store, engine()).node("")
    entry_point(store, metadata_encoding="https://example.org/yaml")
    with pytest.raises(UnsupportedError):
        Hierarchy(store, engine()).node("")


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"chunk_grid": {"type": "rectilinear"}}, UnsupportedError),
        ({"chunk_memory_layout": "Z"}, UnsupportedError),
        ({"compressor": {"codec": "https://example.org/codec/x"}}, UnsupportedError),
        (
            {"compressor": {"codec": "https://purl.org/zarr/spec/codec/snappy/1.0"}},
            UnsupportedError,
        ),
        ({"extensions": [{"extension": "x", "must_understand": True}]}, UnsupportedError),
        ({"data_type": {"extension": "x", "type": "quaternion"}}, UnsupportedError),
        ({"data_type": "r12"}, MetadataError),
        ({"fill_value": "0x12"}, MetadataError),
        ({"zarr_format": 3}, MetadataError),
        ({"shape": [4, 4]}, MetadataError),
    ],
)
def test_invalid_draft_arrays(changes: dict[str, Any], error: type[Exception]) -> None:
    store = MemoryStore()
    entry_point(store)
    write_array(store, "a", np.zeros((4,), "<i4"), (2,), data_type="<i4", fill_value=0)
    doc = {**json.loads(store.get(meta_key("a", "array")) or b""), **changes}
    store.set(meta_key("a", "array"), json.dumps(doc).encode())
    with pytest.raises(error):
        Hierarchy(store, engine()).node("a")


def test_a_v3_zarr_json_is_not_a_draft() -> None:
    store = MemoryStore()
    store.set("zarr.json", b'{"zarr_format": 3, "node_type": "group"}')
    store.set(meta_key("", "group"), b'{"attributes": {}}')
    h = Hierarchy(store, engine())
    assert h.node("").format.name == "v3"
    with pytest.raises(Exception):  # noqa: B017 - no node of any format
        h.node("meta")


def test_zlib_codec_uri_and_custom_suffix_children() -> None:
    store = MemoryStore()
    entry_point(store, suffix="")
    data = np.arange(6, dtype="<i4")
    doc_codec = {
        "codec": "https://purl.org/zarr/spec/codec/zlib/1.0",
        "configuration": {"level": 1},
    }
    write_array(
        store,
        "x/y",
        data,
        (4,),
        data_type="<i4",
        fill_value=0,
        suffix="",
        compress=("zlib", zlib.compress),
    )
    doc = json.loads(store.get(meta_key("x/y", "array", "")) or b"")
    doc.pop("compressor", None)
    doc["compressor"] = doc_codec
    store.set(meta_key("x/y", "array", ""), json.dumps(doc).encode())
    h = Hierarchy(store, engine())
    assert [n.path for n in h.children("")] == ["x"]
    assert [n.path for n in h.children("x")] == ["x/y"]
    assert read_all(h.array("x/y")) == data.tobytes()
