"""Zarr v1 stores, built from the v1 spec text by a small generator, read and written through
``ZarrArray``.

The generator (``spec_generators.write_v1``) follows v1.rst and makes chunk bytes with the
standard library, so the expected stores do not depend on zarrfs.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from formats_helpers import as_native, engine, ordered, read_all, sample
from spec_generators import COMPRESSION, write_v1

from zarrfs.core.errors import MetadataError, UnsupportedError
from zarrfs.core.hierarchy import Hierarchy
from zarrfs.core.stores.memory import MemoryStore


@pytest.mark.parametrize("compression", COMPRESSION)
@pytest.mark.parametrize("order", ["C", "F"])
def test_v1_arrays_read_as_the_spec_describes(compression: str, order: str) -> None:
    store = MemoryStore()
    data = sample(np.dtype(">i4"), (7, 5, 3), 1)
    write_v1(
        store,
        data,
        (3, 2, 2),
        compression=compression,
        order=order,
        fill_value=42,
        attrs={"foo": 42},
        skip={(2, 2, 1), (0, 1, 0)},
    )
    want = data.copy()
    want[6:, 4:, 2:] = 42
    want[0:3, 2:4, 0:2] = 42
    h = Hierarchy(store, engine())
    node = h.node("")
    assert node.format.name == "v1" and node.metadata.zarr_format == 1
    assert node.metadata.attributes == {"foo": 42}
    assert node.format.metadata_keys(node.metadata) == ("meta", "attrs")
    arr = h.array("")
    for byte_order in ("little", "big"):
        assert read_all(arr, byte_order) == ordered(want, byte_order)


def test_v1_nan_literal_fill_and_float_types() -> None:
    store = MemoryStore()
    data = sample(np.dtype("<f8"), (10,), 2)
    write_v1(store, data, (4,), fill_value=float("nan"), skip={(1,)})
    assert b"NaN" in (store.get("meta") or b"")
    arr = Hierarchy(store, engine()).array("")
    want = data.copy()
    want[4:8] = np.nan
    assert read_all(arr) == ordered(want, "little")


@pytest.mark.parametrize("compression", COMPRESSION)
def test_v1_writes_follow_the_spec(compression: str) -> None:
    store = MemoryStore()
    data = np.zeros((6, 4), dtype="<u2")
    write_v1(store, data, (4, 3), compression=compression, order="F", fill_value=0)
    for key in ("0.0", "0.1", "1.0", "1.1"):
        store.delete(key)
    arr = Hierarchy(store, engine()).array("")
    new = sample(np.dtype("<u2"), (6, 4), 3)
    new[4:, 3:] = 0  # chunk (1, 1) is all fill: not stored
    arr.write(0, ordered(as_native(new), "big"), "big")
    arr.flush()
    _, _, decompress = COMPRESSION[compression]
    assert sorted(k for k in ("0.0", "0.1", "1.0", "1.1") if store.get(k)) == ["0.0", "0.1", "1.0"]
    chunk = np.frombuffer(decompress(store.get("0.1") or b""), dtype="<u2").reshape(
        (4, 3), order="F"
    )
    np.testing.assert_array_equal(chunk[:, :1], new[:4, 3:])
    np.testing.assert_array_equal(chunk[:, 1:], 0)


def test_v1_attribute_and_meta_edits() -> None:
    store = MemoryStore()
    write_v1(store, np.arange(4, dtype="<i2"), (2,), attrs={"a": 1})
    h = Hierarchy(store, engine())
    node = h.node("")
    h.save_metadata("", node.metadata.with_attributes({"b": [1, 2]}))
    assert json.loads(store.get("attrs") or b"") == {"b": [1, 2]}
    parse = node.format.parse_document
    assert parse is not None
    meta_doc = json.loads(store.get("meta") or b"")
    meta_doc["shape"] = [8]
    bigger = parse("meta", json.dumps(meta_doc).encode(), h.node("").metadata)
    assert bigger.shape == (8,) and bigger.attributes == {"b": [1, 2]}  # type: ignore[union-attr]
    h.array("").resize((3,))
    assert json.loads(store.get("meta") or b"")["shape"] == [3]
    assert store.get("1") is not None  # chunk 1 still holds element 2
    with pytest.raises(MetadataError):
        parse("attrs", b"[1]", node.metadata)


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"zarr_format": 2}, MetadataError),
        ({"compression": "snappy"}, UnsupportedError),
        ({"compression": "zlib", "compression_opts": "fast"}, MetadataError),
        ({"compression": "blosc", "compression_opts": 5}, MetadataError),
        ({"order": "Z"}, MetadataError),
        ({"chunks": [0]}, MetadataError),
    ],
)
def test_invalid_v1_meta(changes: dict[str, Any], error: type[Exception]) -> None:
    store = MemoryStore()
    write_v1(store, np.arange(4, dtype="<i2"), (2,))
    doc = {**json.loads(store.get("meta") or b""), **changes}
    store.set("meta", json.dumps(doc).encode())
    with pytest.raises(error):
        Hierarchy(store, engine()).node("")


def test_v1_without_attrs_and_default_opts() -> None:
    store = MemoryStore()
    write_v1(store, np.arange(6, dtype="<f4"), (3,), compression="blosc")
    doc = json.loads(store.get("meta") or b"")
    doc["compression_opts"] = None  # zarr 1 defaults (lz4, level 5, byte shuffle) apply
    store.set("meta", json.dumps(doc).encode())
    store.delete("attrs")
    h = Hierarchy(store, engine())
    node = h.node("")
    assert node.metadata.attributes == {} and node.format.metadata_keys(node.metadata) == ("meta",)
    assert read_all(h.array("")) == np.arange(6, dtype="<f4").tobytes()
