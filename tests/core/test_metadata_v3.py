"""zarr.json parsing and the metadata model (zarrfs.core.metadata) against the v3 core spec and
documents written by zarr-python 3."""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zarrfs.core.errors import InvalidWriteError, MetadataError, UnsupportedError
from zarrfs.core.metadata import (
    ArrayMetadata,
    GroupMetadata,
    array_metadata_v3,
    check_node_name,
    new_array_v3,
    new_group_v3,
    parse_v3,
)

zarr = pytest.importorskip("zarr")


def base_doc(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [10, 20],
        "data_type": "float64",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [5, 5]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": "NaN",
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
    }
    for key, value in changes.items():
        if value is DROP:
            doc.pop(key, None)
        else:
            doc[key] = value
    return doc


DROP = object()


def dumps(doc: Any) -> bytes:
    return json.dumps(doc, indent=2).encode()


# --------------------------------------------------------------------------- zarr-python documents


def _zarr_cases() -> list[tuple[str, dict[str, Any]]]:
    codecs = zarr.codecs
    return [
        (
            "f32_nan_dims",
            dict(
                shape=(10, 20),
                chunks=(5, 5),
                dtype="float32",
                fill_value=np.nan,
                dimension_names=["x", None],
                attributes={"u": "\u00e9", "n": [1, 2.5, None]},
            ),
        ),
        (
            "c64",
            dict(shape=(10,), chunks=(4,), dtype="complex64", fill_value=1 + 2j, compressors=None),
        ),
        (
            "u64_gzip_v2keys",
            dict(
                shape=(9,),
                chunks=(5,),
                dtype="uint64",
                fill_value=2**64 - 1,
                compressors=[codecs.GzipCodec(level=3)],
                chunk_key_encoding={"name": "v2", "separator": "."},
            ),
        ),
        ("bool_0d", dict(shape=(), dtype="bool", fill_value=True)),
        (
            "i16_sharded",
            dict(shape=(100, 100), chunks=(10, 10), shards=(50, 50), dtype="int16", fill_value=-3),
        ),
        (
            "f16_blosc_dot",
            dict(
                shape=(4, 3),
                chunks=(2, 3),
                dtype="float16",
                fill_value=-np.inf,
                compressors=[codecs.BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle")],
                chunk_key_encoding={"name": "default", "separator": "."},
            ),
        ),
        (
            "f64_transpose_crc",
            dict(
                shape=(6, 7),
                chunks=(3, 7),
                dtype="float64",
                fill_value=1.5,
                filters=[codecs.TransposeCodec(order=(1, 0))],
                compressors=[codecs.Crc32cCodec()],
            ),
        ),
        ("i8_empty", dict(shape=(0, 5), chunks=(2, 5), dtype="int8", fill_value=7)),
        (
            "datetime",
            dict(
                shape=(4,), chunks=(2,), dtype="datetime64[10ms]", fill_value=np.datetime64("NaT")
            ),
        ),
    ]


ZARR_CASES = _zarr_cases()


@pytest.fixture(scope="module")
def zarr_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("zarrpy") / "data.zarr"
    store = zarr.storage.LocalStore(str(root))
    zarr.create_group(store, attributes={"title": "t", "nan": float("nan")})
    arrays = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, kwargs in ZARR_CASES:
            arrays[name] = zarr.create_array(store, name=name, **kwargs)
        zarr.create_group(store, path="sub", attributes={"k": 1}).create_group("deeper")
        zarr.create_array(store, name="sub/inner", shape=(3,), dtype="int8")
    return root, arrays


@pytest.mark.parametrize("name", [n for n, _ in ZARR_CASES])
def test_parses_zarr_python_arrays(zarr_store: tuple[Path, dict[str, Any]], name: str) -> None:
    root, arrays = zarr_store
    arr = arrays[name]
    raw = (root / name / "zarr.json").read_bytes()
    meta = parse_v3(raw)
    assert isinstance(meta, ArrayMetadata)
    assert meta.zarr_format == 3
    assert meta.shape == arr.shape
    assert meta.chunk_shape == (arr.shards or arr.chunks)
    assert meta.data_type.dtype == arr.dtype.newbyteorder("=")
    assert meta.fill_value.dtype == meta.data_type.dtype and meta.fill_value.shape == ()
    assert (
        meta.fill_value.tobytes()
        == np.asarray(arr.fill_value, dtype=meta.data_type.dtype).tobytes()
    )
    assert meta.dimension_names == (
        None if arr.metadata.dimension_names is None else tuple(arr.metadata.dimension_names)
    )
    assert dict(meta.attributes) == arr.attrs.asdict()
    assert meta.document == json.loads(raw)
    written = json.loads(raw)
    assert [c.name for c in meta.codecs.codecs] == [c["name"] for c in written["codecs"]]
    assert meta.chunk_key_encoding.to_json() == written["chunk_key_encoding"]
    assert meta.chunk_key(tuple(0 for _ in meta.shape)) == arr.metadata.encode_chunk_key(
        tuple(0 for _ in meta.shape)
    )
    # byte-stable round trip, and the same bytes when re-serialised unchanged
    assert meta.to_bytes() is raw or meta.to_bytes() == raw
    assert meta.with_attributes(meta.attributes).to_bytes() == raw
    assert meta.data_type.fill_value_to_json(meta.fill_value) == written["fill_value"]
    spec = meta.chunk_spec()
    assert spec.shape == meta.chunk_shape and spec.dtype == meta.data_type.dtype
    assert meta.chunk_spec((1,) * meta.ndim).shape == (1,) * meta.ndim


def test_parses_zarr_python_group(zarr_store: tuple[Path, dict[str, Any]]) -> None:
    root, _ = zarr_store
    raw = (root / "zarr.json").read_bytes()
    assert b"NaN" in raw  # zarr-python writes a NaN literal inside attributes
    meta = parse_v3(raw)
    assert isinstance(meta, GroupMetadata)
    assert meta.attributes["title"] == "t" and np.isnan(meta.attributes["nan"])
    assert meta.consolidated is None and meta.consolidated_error is None
    assert meta.to_bytes() == raw
    assert meta.with_attributes(meta.attributes).to_bytes() == raw


def test_resize_and_attributes_serialise_like_zarr_python(tmp_path: Path) -> None:
    store = zarr.storage.LocalStore(str(tmp_path))
    arr = zarr.create_array(
        store,
        shape=(10, 4),
        chunks=(3, 4),
        dtype="float32",
        fill_value=0.5,
        dimension_names=["t", "x"],
        attributes={"a": 1},
    )
    meta = parse_v3((tmp_path / "zarr.json").read_bytes())
    assert isinstance(meta, ArrayMetadata)
    arr.resize((25, 4))
    resized = meta.with_shape((25, 4))
    assert resized.raw is None and resized.shape == (25, 4)
    assert resized.to_bytes() == (tmp_path / "zarr.json").read_bytes()
    arr.update_attributes({"b": [1, "x"]})
    changed = resized.with_attributes({"a": 1, "b": [1, "x"]})
    assert changed.to_bytes() == (tmp_path / "zarr.json").read_bytes()
    assert parse_v3(changed.to_bytes()) == changed
    assert meta.shape == (10, 4) and meta.attributes == {"a": 1}  # originals untouched


def test_new_array_and_group_match_zarr_python(tmp_path: Path) -> None:
    store = zarr.storage.LocalStore(str(tmp_path))
    zarr.create_array(
        store,
        name="a",
        shape=(8, 2),
        chunks=(4, 2),
        dtype="int32",
        fill_value=-1,
        compressors=None,
        dimension_names=["y", "x"],
        attributes={"k": "v"},
    )
    ours = new_array_v3(
        (8, 2), "int32", (4, 2), fill_value=-1, dimension_names=["y", "x"], attributes={"k": "v"}
    )
    assert ours.to_bytes() == (tmp_path / "a" / "zarr.json").read_bytes()
    zarr.create_group(store, path="g", attributes={"q": [1]})
    assert new_group_v3({"q": [1]}).to_bytes() == (tmp_path / "g" / "zarr.json").read_bytes()
    default_fill = new_array_v3((3,), "float32", (3,))
    assert b'"fill_value": 0.0,' in default_fill.to_bytes()


def test_consolidated_metadata_from_zarr_python(zarr_store: tuple[Path, dict[str, Any]]) -> None:
    root, arrays = zarr_store
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(zarr.storage.LocalStore(str(root)))
    meta = parse_v3((root / "zarr.json").read_bytes())
    assert isinstance(meta, GroupMetadata)
    assert meta.consolidated_error is None and meta.consolidated_skipped == {}
    assert meta.consolidated is not None
    expected = {name for name, _ in ZARR_CASES} | {"sub", "sub/deeper", "sub/inner"}
    assert set(meta.consolidated) == expected
    for name in arrays:
        entry = meta.consolidated[name]
        assert isinstance(entry, ArrayMetadata)
        assert entry == parse_v3((root / name / "zarr.json").read_bytes())
    sub = meta.consolidated["sub"]
    assert isinstance(sub, GroupMetadata) and sub.attributes == {"k": 1}
    # zarr-python stores an empty map in nested group entries; ours is the subtree
    assert sub.consolidated is not None and set(sub.consolidated) == {"deeper", "inner"}
    assert sub.consolidated["inner"] is meta.consolidated["sub/inner"]
    deeper = meta.consolidated["sub/deeper"]
    assert isinstance(deeper, GroupMetadata) and deeper.consolidated == {}


def group_doc(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"zarr_format": 3, "node_type": "group", "attributes": {}}
    doc.update(changes)
    return doc


def test_consolidated_invalid_entries_are_skipped_with_reason() -> None:
    good = base_doc()
    doc = group_doc(
        consolidated_metadata={
            "kind": "inline",
            "must_understand": False,
            "metadata": {
                "good": good,
                "strings": base_doc(data_type="string", fill_value=""),
                "__bad": good,
                "x/..": good,
                "notobj": 3,
            },
        }
    )
    meta = parse_v3(dumps(doc))
    assert isinstance(meta, GroupMetadata)
    assert meta.consolidated is not None and set(meta.consolidated) == {"good"}
    assert set(meta.consolidated_skipped) == {"strings", "__bad", "x/..", "notobj"}
    assert "variable-length" in meta.consolidated_skipped["strings"]
    assert "reserved prefix" in meta.consolidated_skipped["__bad"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([], "must be an object"),
        ({"kind": "external", "metadata": {}}, "unknown kind"),
        ({"kind": "inline"}, "'metadata' must be an object"),
    ],
)
def test_unusable_consolidated_metadata_is_ignored(value: Any, message: str) -> None:
    meta = parse_v3(dumps(group_doc(consolidated_metadata=value)))
    assert isinstance(meta, GroupMetadata)
    assert meta.consolidated is None
    assert meta.consolidated_error is not None and message in meta.consolidated_error


def test_consolidated_null_is_absent() -> None:
    meta = parse_v3(dumps(group_doc(consolidated_metadata=None)))
    assert isinstance(meta, GroupMetadata)
    assert meta.consolidated is None and meta.consolidated_error is None


def test_nested_consolidated_entries_are_folded_in() -> None:
    inner = group_doc(consolidated_metadata={"kind": "inline", "metadata": {"arr": base_doc()}})
    doc = group_doc(consolidated_metadata={"kind": "inline", "metadata": {"g": inner}})
    meta = parse_v3(dumps(doc))
    assert isinstance(meta, GroupMetadata) and meta.consolidated is not None
    assert set(meta.consolidated) == {"g", "g/arr"}


# --------------------------------------------------------------------------- the spec example


def test_spec_example_document() -> None:
    doc = base_doc(
        shape=[10000, 1000],
        dimension_names=["rows", "columns"],
        chunk_grid={"name": "regular", "configuration": {"chunk_shape": [1000, 100]}},
        attributes={"foo": 42, "bar": "apples", "baz": [1, 2, 3, 4]},
    )
    meta = parse_v3(dumps(doc))
    assert isinstance(meta, ArrayMetadata)
    assert meta.shape == (10000, 1000) and meta.chunk_shape == (1000, 100)
    assert meta.grid_shape == (10, 10)
    assert meta.dimension_names == ("rows", "columns")
    assert np.isnan(meta.fill_value) and meta.data_type.name == "float64"
    assert meta.nbytes == 10000 * 1000 * 8
    assert meta.attributes["baz"] == [1, 2, 3, 4]


def test_short_hand_names_accepted() -> None:
    doc = base_doc(chunk_key_encoding="v2", codecs=["bytes"], data_type="uint8", fill_value=3)
    meta = parse_v3(dumps(doc))
    assert isinstance(meta, ArrayMetadata)
    assert meta.chunk_key_encoding.separator == "."
    assert meta.chunk_key((1, 2)) == "1.2"


def test_data_type_object_form() -> None:
    meta = parse_v3(dumps(base_doc(data_type={"name": "float32"}, fill_value="0x7fc00001")))
    assert isinstance(meta, ArrayMetadata)
    assert meta.fill_value.view(np.uint32) == 0x7FC00001


def test_dimension_names_may_be_null() -> None:
    meta = parse_v3(dumps(base_doc(dimension_names=[None, "y"])))
    assert isinstance(meta, ArrayMetadata) and meta.dimension_names == (None, "y")


# --------------------------------------------------------------------------- must_understand


def test_unknown_member_ignored_when_must_understand_false() -> None:
    doc = base_doc(my_extension={"must_understand": False, "x": 1})
    meta = parse_v3(dumps(doc))
    assert isinstance(meta, ArrayMetadata)
    assert meta.document["my_extension"] == {"must_understand": False, "x": 1}
    group = parse_v3(dumps(group_doc(note={"must_understand": False})))
    assert isinstance(group, GroupMetadata)


@pytest.mark.parametrize(
    "value",
    [{"must_understand": True}, {"x": 1}, "text", 3, None, [], {"must_understand": "false"}],
)
def test_unknown_member_refused_otherwise(value: Any) -> None:
    with pytest.raises(UnsupportedError, match="'my_extension'"):
        parse_v3(dumps(base_doc(my_extension=value)))
    with pytest.raises(UnsupportedError, match="'my_extension'"):
        parse_v3(dumps(group_doc(my_extension=value)))


def test_unknown_codec_dropped_only_when_must_understand_false() -> None:
    codecs = [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "x.unknown", "must_understand": False},
    ]
    meta = parse_v3(dumps(base_doc(codecs=codecs)))
    assert isinstance(meta, ArrayMetadata)
    assert [c.name for c in meta.codecs.codecs] == ["bytes"]
    codecs[1] = {"name": "x.unknown"}
    with pytest.raises(UnsupportedError, match="'x.unknown'"):
        parse_v3(dumps(base_doc(codecs=codecs)))


def test_storage_transformers() -> None:
    for value in ([], DROP, [{"name": "cache", "must_understand": False}]):
        assert isinstance(parse_v3(dumps(base_doc(storage_transformers=value))), ArrayMetadata)
    for value in (["sharding"], [{"name": "sharding", "configuration": {}}]):
        with pytest.raises(UnsupportedError, match="storage transformer 'sharding'"):
            parse_v3(dumps(base_doc(storage_transformers=value)))
    with pytest.raises(MetadataError, match="storage_transformers must be a list"):
        parse_v3(dumps(base_doc(storage_transformers={})))


def test_must_understand_false_does_not_excuse_core_extension_points() -> None:
    with pytest.raises(UnsupportedError, match="'rectilinear'"):
        parse_v3(dumps(base_doc(chunk_grid={"name": "rectilinear", "must_understand": False})))
    with pytest.raises(UnsupportedError, match="'x'"):
        parse_v3(dumps(base_doc(chunk_key_encoding={"name": "x", "must_understand": False})))


# --------------------------------------------------------------------------- rejections


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "invalid JSON"),
        (b"{", "invalid JSON"),
        (b"{'a': 1}", "invalid JSON"),
        (b"[]", "expected a JSON object, got list"),
        (b'"zarr"', "expected a JSON object, got str"),
        (b"3", "expected a JSON object, got int"),
        (b"null", "expected a JSON object, got NoneType"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b'{"a": 1, "a": 2}', "duplicate key 'a'"),
        (b"[" * 100000 + b"]" * 100000, "nested"),
        (b'{"a":' * 200 + b"1" + b"}" * 200, "nested deeper"),
        (b'{"zarr_format": ' + b"1" * 5000 + b"}", "unreadable JSON"),
    ],
)
def test_bad_json(raw: bytes, message: str) -> None:
    with pytest.raises(MetadataError, match=message):
        parse_v3(raw)


def test_utf8_bom_tolerated() -> None:
    assert isinstance(parse_v3(b"\xef\xbb\xbf" + dumps(group_doc())), GroupMetadata)


@pytest.mark.parametrize("fmt", [2, "3", 3.0, True, None, 4])
def test_zarr_format_must_be_3(fmt: Any) -> None:
    with pytest.raises(MetadataError, match="zarr_format must be 3"):
        parse_v3(dumps(base_doc(zarr_format=fmt)))
    with pytest.raises(MetadataError, match="zarr_format must be 3"):
        parse_v3(dumps(base_doc(zarr_format=DROP)))


@pytest.mark.parametrize("node_type", ["Array", "foo", None, 1])
def test_node_type(node_type: Any) -> None:
    with pytest.raises(MetadataError, match="node_type must be 'array' or 'group'"):
        parse_v3(dumps(base_doc(node_type=node_type)))


@pytest.mark.parametrize(
    "key", ["shape", "data_type", "chunk_grid", "chunk_key_encoding", "fill_value", "codecs"]
)
def test_required_keys(key: str) -> None:
    with pytest.raises(MetadataError, match=f"required keys \\['{key}'\\]"):
        parse_v3(dumps(base_doc(**{key: DROP})))


NAN_LITERAL = float("nan")


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"shape": [10, -1]}, MetadataError, "shape must hold integers"),
        ({"shape": [10, True]}, MetadataError, "shape must hold integers"),
        ({"shape": [10, 2.0]}, MetadataError, "shape must hold integers"),
        ({"shape": "10,20"}, MetadataError, "shape must be a list"),
        ({"shape": [2**63, 1]}, MetadataError, "shape must hold integers"),
        ({"shape": [1] * 33}, MetadataError, "33 dimensions"),
        ({"shape": [2**62, 2**62]}, MetadataError, "exceeds"),
        ({"shape": [2**61, 1], "data_type": "float64"}, MetadataError, "exceeds"),
        (
            {"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [5, 0]}}},
            MetadataError,
            "chunk_shape must hold integers in \\[1",
        ),
        (
            {"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [5, True]}}},
            MetadataError,
            "chunk_shape must hold integers",
        ),
        (
            {"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [5, 5.0]}}},
            MetadataError,
            "chunk_shape must hold integers",
        ),
        (
            {"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [5]}}},
            MetadataError,
            "has 1 dimensions, the array has 2",
        ),
        (
            {"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2**40, 2**40]}}},
            MetadataError,
            "chunk shape .* exceeds",
        ),
        ({"chunk_grid": "regular"}, MetadataError, "needs configuration.chunk_shape"),
        (
            {"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [5, 5], "x": 1}}},
            MetadataError,
            "unknown configuration keys \\['x'\\]",
        ),
        (
            {"chunk_grid": {"name": "regular", "configuration": None}},
            MetadataError,
            "'configuration' must be an object",
        ),
        (
            {"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [5, 5]}, "y": 1}},
            MetadataError,
            "unknown keys \\['y'\\]",
        ),
        (
            {"chunk_grid": {"name": "rectilinear", "configuration": {}}},
            UnsupportedError,
            "unknown chunk grid 'rectilinear'",
        ),
        ({"chunk_grid": 5}, MetadataError, "must be a name or an object"),
        ({"data_type": "float128"}, UnsupportedError, "'float128'"),
        ({"fill_value": None}, MetadataError, "fill_value None is invalid for data type float64"),
        ({"fill_value": "nan"}, MetadataError, "fill_value 'nan' is invalid"),
        ({"fill_value": NAN_LITERAL}, MetadataError, "NaN/Infinity literal"),
        ({"data_type": "int8", "fill_value": 300}, MetadataError, "out of range"),
        (
            {"chunk_key_encoding": {"name": "default", "configuration": {"separator": ":"}}},
            MetadataError,
            "separator",
        ),
        ({"codecs": []}, MetadataError, "no array->bytes codec"),
        ({"codecs": {"name": "bytes"}}, MetadataError, "codecs must be a list"),
        (
            {"codecs": [{"name": "gzip", "configuration": {"level": 1}}, "bytes"]},
            MetadataError,
            "must come after",
        ),
        (
            {"codecs": [{"name": "transpose", "configuration": {"order": [0, 1, 2]}}, "bytes"]},
            MetadataError,
            "transpose",
        ),
        ({"codecs": ["bytes"]}, MetadataError, "endian"),
        (
            {"codecs": [{"name": "gzip", "configuration": {"level": NAN_LITERAL}}]},
            MetadataError,
            "NaN/Infinity literal at '\\[0\\].configuration.level'",
        ),
        ({"dimension_names": ["x"]}, MetadataError, "list of 2 names"),
        ({"dimension_names": ["x", 1]}, MetadataError, "strings or null"),
        ({"dimension_names": "xy"}, MetadataError, "list of 2 names"),
        ({"attributes": []}, MetadataError, "attributes must be a JSON object"),
        ({"attributes": "x"}, MetadataError, "attributes must be a JSON object"),
    ],
)
def test_array_rejections(changes: dict[str, Any], error: type[Exception], message: str) -> None:
    doc = base_doc(**changes)
    with pytest.raises(error, match=message):
        parse_v3(json.dumps(doc).encode())
    with pytest.raises(error, match=message):
        array_metadata_v3(doc)


def test_nan_literals_only_inside_attributes() -> None:
    ok = base_doc(attributes={"x": float("nan"), "y": [float("-inf")]})
    meta = parse_v3(json.dumps(ok).encode())
    assert isinstance(meta, ArrayMetadata) and np.isnan(meta.attributes["x"])
    with pytest.raises(MetadataError, match="shape: NaN/Infinity literal at '\\[1\\]'"):
        parse_v3(json.dumps(base_doc(shape=[1, float("inf")])).encode())
    with pytest.raises(MetadataError, match="fill_value: NaN/Infinity literal"):
        parse_v3(json.dumps(base_doc(fill_value=float("-inf"))).encode())


def test_group_rejections() -> None:
    with pytest.raises(MetadataError, match="attributes must be a JSON object"):
        parse_v3(dumps(group_doc(attributes=[1])))
    assert parse_v3(dumps({"zarr_format": 3, "node_type": "group"})).attributes == {}


def test_array_metadata_v3_copies_its_input() -> None:
    doc = base_doc(attributes={"a": [1]})
    meta = array_metadata_v3(doc)
    doc["attributes"]["a"].append(2)
    doc["shape"][0] = 99
    assert meta.attributes == {"a": [1]} and meta.document["shape"] == [10, 20]
    assert meta.raw is None
    assert json.loads(meta.to_bytes()) == base_doc(attributes={"a": [1]})
    with pytest.raises(MetadataError, match="node_type must be 'array'"):
        array_metadata_v3(group_doc())
    with pytest.raises(MetadataError, match="not JSON"):
        array_metadata_v3(base_doc(fill_value=np.float64(1.0), attributes={"x": object()}))


def test_chunk_spec_and_prepared_chain_validate_sharding() -> None:
    sharded = base_doc(
        codecs=[
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": [2, 2],
                    "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                    "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                },
            }
        ]
    )
    with pytest.raises(MetadataError):  # inner chunk (2, 2) does not divide the shard (5, 5)
        parse_v3(dumps(sharded))
    sharded["chunk_grid"]["configuration"]["chunk_shape"] = [4, 4]
    meta = parse_v3(dumps(sharded))
    assert isinstance(meta, ArrayMetadata) and meta.chunk_shape == (4, 4)


# --------------------------------------------------------------------------- model behaviour


def test_with_shape() -> None:
    meta = parse_v3(dumps(base_doc()))
    assert isinstance(meta, ArrayMetadata)
    bigger = meta.with_shape([np.int64(30), 20])
    assert bigger.shape == (30, 20) and bigger.document["shape"] == [30, 20]
    assert bigger.raw is None and meta.document["shape"] == [10, 20]
    assert parse_v3(bigger.to_bytes()) == bigger
    assert bigger != meta
    for bad, message in [
        ((10,), "rank"),
        ((10, -1), "non-negative"),
        ((10, True), "non-negative"),
        ((2**62, 2**62), "too large"),
        ((1.5, 2), "non-negative"),
    ]:
        with pytest.raises(InvalidWriteError, match=message):
            meta.with_shape(bad)


def test_with_attributes() -> None:
    meta = parse_v3(dumps(base_doc(attributes={"a": 1})))
    new = meta.with_attributes({"b": {"c": [None, True, 1.5, "s"]}, "n": float("nan")})
    assert new.attributes["b"] == {"c": [None, True, 1.5, "s"]}
    assert new.document["attributes"] is not meta.document["attributes"]
    assert meta.attributes == {"a": 1}
    reparsed = parse_v3(new.to_bytes())
    assert np.isnan(reparsed.attributes["n"])
    for bad, message in [
        ([1], "must be a JSON object"),
        ({1: "x"}, "not a string"),
        ({"x": {2: 1}}, "not a string"),
        ({"x": {1, 2}}, "not JSON"),
        ({"x": np.int64(1)}, "not JSON"),
    ]:
        with pytest.raises(MetadataError, match=message):
            meta.with_attributes(bad)
    deep: Any = 1
    for _ in range(200):
        deep = [deep]
    with pytest.raises(MetadataError, match="nested deeper"):
        meta.with_attributes({"d": deep})
    group = parse_v3(dumps(group_doc()))
    assert isinstance(group, GroupMetadata)
    assert parse_v3(group.with_attributes({"z": 1}).to_bytes()).attributes == {"z": 1}


def test_metadata_is_frozen() -> None:
    meta = parse_v3(dumps(base_doc()))
    with pytest.raises(AttributeError):
        meta.shape = (1, 1)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("a", True),
        ("data.zarr", True),
        ("...a", True),
        ("a_", True),
        ("_a", True),
        ("é", True),
        ("", False),
        ("a/b", False),
        (".", False),
        ("..", False),
        ("...", False),
        ("__zarr", False),
        ("__", False),
    ],
)
def test_check_node_name(name: str, ok: bool) -> None:
    if ok:
        assert check_node_name(name) == name
    else:
        with pytest.raises(MetadataError):
            check_node_name(name)


# --------------------------------------------------------------------------- hostile input


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_random_bytes_only_raise_metadata_error(raw: bytes) -> None:
    try:
        parse_v3(raw)
    except MetadataError:
        pass


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=10,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    key=st.sampled_from(sorted(base_doc()) + ["attributes", "dimension_names", "other"]),
    value=JSON_VALUES,
)
def test_mutated_documents_only_raise_metadata_error(key: str, value: Any) -> None:
    doc = copy.deepcopy(base_doc())
    doc[key] = value
    try:
        meta = parse_v3(json.dumps(doc).encode())
    except MetadataError:
        return
    # whatever was accepted serialises and parses back to the same model
    rewritten = meta.with_attributes(meta.attributes)
    again = parse_v3(rewritten.to_bytes())
    assert again == rewritten
    assert isinstance(again, ArrayMetadata) and isinstance(meta, ArrayMetadata)
    assert again.fill_value.tobytes() == meta.fill_value.tobytes()
    assert (again.shape, again.chunk_shape, again.codecs) == (
        meta.shape,
        meta.chunk_shape,
        meta.codecs,
    )
