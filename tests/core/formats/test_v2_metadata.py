"""Zarr v2 metadata parsing: data types, fill values, ``.zarray``/``.zgroup`` validation,
``.zmetadata`` entries, and the v2 pipeline codec's configuration."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from zarrfs.core.codecs.v2pipeline import V2PipelineCodec
from zarrfs.core.errors import MetadataError, UnsupportedError
from zarrfs.core.metadata.v2 import (
    VariableLengthArrayError,
    array_metadata_v2,
    new_array_v2,
    parse_zarray,
    parse_zgroup,
    parse_zmetadata,
)
from zarrfs.core.metadata.v2dtypes import VariableLengthError, parse_dtype


@pytest.mark.parametrize(
    ("text", "memory", "stored"),
    [
        ("|b1", "?", "|b1"),
        ("<i1", "i1", "|i1"),
        (">i2", "=i2", ">i2"),
        ("<u8", "=u8", "<u8"),
        (">f2", "=f2", ">f2"),
        ("<c16", "=c16", "<c16"),
        (">M8[ns]", "=M8[ns]", ">M8[ns]"),
        ("<m8[10s]", "=m8[10s]", "<m8[10s]"),
        ("|S12", "S12", "|S12"),
        (">U3", "=U3", ">U3"),
        ("|V5", "V5", "|V5"),
    ],
)
def test_simple_types_keep_the_stored_order_and_hold_native(
    text: str, memory: str, stored: str
) -> None:
    dt = parse_dtype(text)
    assert dt.dtype == np.dtype(memory)
    assert dt.stored == np.dtype(stored) and dt.stored.str == np.dtype(stored).str
    assert dt.name == text
    assert dt.to_json() == np.dtype(stored).str


def test_structured_types_nest_and_round_trip() -> None:
    doc = [["a", ">i4"], ["b", [["c", "<f8", [2, 3]], ["d", "|S2"]]]]
    dt = parse_dtype(doc)
    assert dt.stored["a"] == np.dtype(">i4")
    assert dt.stored["b"]["c"].shape == (2, 3) and dt.stored["b"]["c"].base == np.dtype("<f8")
    assert dt.dtype["a"] == np.dtype("=i4") and dt.dtype["b"]["c"].base == np.dtype("=f8")
    assert dt.itemsize == 4 + 48 + 2
    assert dt.to_json() == doc
    assert dt.name == json.dumps(doc, separators=(",", ":"))


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("|i4", MetadataError),  # a multi-byte type needs its byte order
        ("<M8", MetadataError),  # datetimes need a unit
        ("<M8[parsec]", MetadataError),
        ("<i4[s]", MetadataError),
        ("<f16", UnsupportedError),
        ("i4", UnsupportedError),
        ("<X4", UnsupportedError),
        ("|S0", MetadataError),
        (42, MetadataError),
        ([], MetadataError),
        ([["a", "<i4"], ["a", "<i2"]], MetadataError),
        ([["a"]], MetadataError),
        ([["a", "<i4", [0]]], MetadataError),
        # fields within the element bound whose sum is not: numpy alone would size this
        # record 8 bytes (its size wraps past 2**32) and put every field at offset 0
        ([[f"f{i}", "|S16777216"] for i in range(256)] + [["z", "|S8"]], MetadataError),
        ([["a", "<f8", [2097152]], ["b", "|S1"]], MetadataError),
    ],
)
def test_invalid_types_are_refused(value: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        parse_dtype(value)


@pytest.mark.parametrize("value", ["|O", [["a", "<i4"], ["b", "|O"]]])
def test_object_types_are_variable_length(value: Any) -> None:
    with pytest.raises(VariableLengthError):
        parse_dtype(value)


def _fill(dtype: Any, value: Any) -> np.ndarray:
    return parse_dtype(dtype).parse_fill_value(value)


def test_fill_values() -> None:
    assert _fill("<i4", None).item() == 0
    assert np.isnat(_fill("<M8[s]", None))
    assert _fill(">i2", -5).item() == -5 and _fill("<u1", 3.0).item() == 3
    nan = _fill(">f8", "NaN")
    assert nan.dtype == np.dtype("=f8") and math.isnan(nan.item())
    assert _fill("<f4", "-Infinity").item() == -math.inf
    assert _fill("<f2", 1.5).item() == 1.5
    assert _fill("<f8", "0x7ff0000000000001").view("u8").item() == 0x7FF0000000000001
    assert _fill(">c8", [1.0, "NaN"]).real == 1.0 and math.isnan(_fill(">c8", [1.0, "NaN"]).imag)
    assert _fill("|S4", "YWI=").item() == b"ab"
    assert _fill(">U3", "é").item() == "é"
    assert _fill("|b1", True).item() is True
    assert _fill("<m8[s]", "NaT").view("i8") == np.iinfo(np.int64).min
    record = _fill([["x", ">i2"], ["y", "|u1"]], "AAEC")  # bytes 00 01 02 in the stored layout
    assert record["x"] == 1 and record["y"] == 2 and record.dtype["x"] == np.dtype("=i2")


@pytest.mark.parametrize(
    ("dtype", "value"),
    [
        ("<i1", 200),
        ("<u4", -1),
        ("<i4", 1.5),
        ("<i4", "7"),
        ("|b1", "true"),
        ("<f8", "nan"),
        ("<f8", [1.0]),
        ("<c8", 1.0),
        ("|S2", "YWJj"),  # three bytes
        ("|S2", "not base64!"),
        ("<U2", "abc"),
        ("|V2", "YWJj"),
        ("<M8[s]", 1.5),
    ],
)
def test_invalid_fill_values(dtype: str, value: Any) -> None:
    with pytest.raises(MetadataError):
        _fill(dtype, value)


@pytest.mark.parametrize(
    ("dtype", "value"),
    [
        ("<i8", -(2**63)),
        ("<f4", "NaN"),
        ("<f8", "Infinity"),
        ("<f8", 0.25),
        (">c16", [1.0, "-Infinity"]),
        ("|S4", "YWI="),
        ("<U3", "ab"),
        ("|b1", False),
        ("<M8[ns]", 123),
        ("|V3", "AAEC"),
        ([["x", ">i2"], ["y", "|u1"]], "AAEC"),
    ],
)
def test_fill_value_json_round_trips(dtype: Any, value: Any) -> None:
    dt = parse_dtype(dtype)
    assert dt.fill_value_to_json(dt.parse_fill_value(value)) == value


def _doc(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "zarr_format": 2,
        "shape": [10, 20],
        "chunks": [3, 7],
        "dtype": "<f8",
        "compressor": {"id": "zlib", "level": 1},
        "fill_value": "NaN",
        "order": "C",
        "filters": None,
    }
    doc.update(changes)
    return {k: v for k, v in doc.items() if v is not ...}


def test_zarray_maps_into_the_model() -> None:
    raw = json.dumps(_doc(order="F", dimension_separator="/", extra_member=1)).encode()
    meta = parse_zarray(raw, {"_ARRAY_DIMENSIONS": ["y", "x"], "units": "m"}, True)
    assert meta.zarr_format == 2 and meta.shape == (10, 20) and meta.chunk_shape == (3, 7)
    assert meta.dtype == np.dtype("=f8") and math.isnan(meta.fill_value.item())
    assert meta.chunk_key((1, 2)) == "1/2" and meta.chunk_store_key("a/b", (1, 2)) == "a/b/1/2"
    assert meta.dimension_names == ("y", "x")
    assert meta.attributes == {"_ARRAY_DIMENSIONS": ["y", "x"], "units": "m"}
    assert meta.to_bytes() == raw and meta.zattrs_stored
    (codec,) = meta.codecs.codecs
    assert isinstance(codec, V2PipelineCodec) and codec.order == "F"
    assert codec.configuration()["compressor"] == {"id": "zlib", "level": 1}


def test_defaults_and_zero_dim_keys() -> None:
    meta = array_metadata_v2(_doc(shape=[], chunks=[], compressor=..., filters=..., order=...))
    assert meta.chunk_key(()) == "0" and meta.codecs.array_bytes.order == "C"  # type: ignore[attr-defined]
    assert meta.codecs.array_bytes.compressor is None  # type: ignore[attr-defined]
    assert array_metadata_v2(_doc(filters=[])).codecs.array_bytes.filters == ()  # type: ignore[attr-defined]


def test_resize_and_attributes_keep_the_document_v2() -> None:
    meta = array_metadata_v2(_doc())
    bigger = meta.with_shape((12, 20))
    assert bigger.document["shape"] == [12, 20]
    assert json.loads(bigger.to_bytes())["shape"] == [12, 20]
    titled = meta.with_attributes({"title": "t"})
    assert titled.attributes == {"title": "t"} and "attributes" not in titled.document
    assert titled.document == meta.document


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"zarr_format": 3}, MetadataError),
        ({"shape": ...}, MetadataError),
        ({"shape": [10]}, MetadataError),
        ({"chunks": [0, 7]}, MetadataError),
        ({"shape": [-1, 20]}, MetadataError),
        ({"shape": [True, 20]}, MetadataError),
        ({"order": "X"}, MetadataError),
        ({"dimension_separator": "-"}, MetadataError),
        ({"filters": {"id": "delta"}}, MetadataError),
        ({"filters": [{"id": "delta", "dtype": "<c16"}]}, MetadataError),  # 168 B, 16-B items
        ({"compressor": {"id": "snappy"}}, UnsupportedError),
        ({"compressor": {"id": "zlib", "bogus": 1}}, MetadataError),
        ({"compressor": "zlib"}, MetadataError),
        ({"filters": [{"id": "pickle"}]}, UnsupportedError),
        ({"fill_value": "YWI="}, MetadataError),
        ({"shape": [2**40, 2**40], "chunks": [1, 1]}, MetadataError),
    ],
)
def test_invalid_zarray(changes: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        array_metadata_v2(_doc(**changes))


@pytest.mark.parametrize(
    "filters",
    [
        # what these would store decodes to other numbers, or to nothing
        [{"id": "astype", "encode_dtype": "|V3", "decode_dtype": "<f8"}],
        [{"id": "astype", "encode_dtype": "|S8", "decode_dtype": "<f8"}],
        [{"id": "delta", "dtype": "<M8[s]"}],
        [{"id": "fixedscaleoffset", "offset": None, "scale": 10, "dtype": "<f8", "astype": "<i4"}],
        [{"id": "fixedscaleoffset", "offset": 0, "scale": 10, "dtype": "<f8", "astype": "|V4"}],
        [{"id": "astype", "encode_dtype": "|u1", "decode_dtype": "<f8"}, {"id": "packbits"}],
        [
            {"id": "astype", "encode_dtype": "<i8", "decode_dtype": "<f8"},
            {"id": "bitround", "keepbits": 3},  # (bitround takes floats)
        ],
        [{"id": "shuffle", "elementsize": 16}],  # 3 x 7 x 8 bytes: not whole elements
    ],
)
def test_filters_whose_output_cannot_be_decoded_are_refused(filters: list[Any]) -> None:
    with pytest.raises(MetadataError, match="filter"):
        array_metadata_v2(_doc(filters=filters))


@pytest.mark.parametrize(
    "filters",
    [
        [{"id": "delta", "dtype": "<f8", "astype": "<f4"}],
        [{"id": "fixedscaleoffset", "offset": 1, "scale": 10, "dtype": "<f8", "astype": "<i2"}],
        [{"id": "quantize", "digits": 2, "dtype": "<f8"}],
        [{"id": "astype", "encode_dtype": "<f4", "decode_dtype": "<f8"}],
        [{"id": "bitround", "keepbits": 60}],  # (encoding fails; decoding is a copy: readable)
        [{"id": "shuffle", "elementsize": 8}],
        [{"id": "shuffle", "elementsize": 0}],  # (numcodecs copies)
    ],
)
def test_filters_zarr_python_writes_are_accepted(filters: list[Any]) -> None:
    array_metadata_v2(_doc(filters=filters))


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"compressor": {"id": "zlib", "level": 99}}, "compressor 'zlib' cannot encode"),
        ({"compressor": {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 7}}, "blosc"),
        ({"filters": [{"id": "bitround", "keepbits": 60}]}, "filter 'bitround' cannot encode"),
        ({}, None),
        ({"filters": [{"id": "shuffle", "elementsize": 8}], "compressor": None}, None),
    ],
)
def test_codecs_that_decode_but_cannot_encode_are_named(
    changes: dict[str, Any], reason: str | None
) -> None:
    """Readable arrays whose numcodecs configuration fails only when encoding: the reason
    their writes are refused (``PreparedChain.cannot_encode``)."""
    meta = array_metadata_v2(_doc(**changes))
    why = meta.codecs.prepare(meta.chunk_spec()).cannot_encode
    assert (why is None) if reason is None else (reason in (why or "")), why


def test_object_arrays_raise_with_a_summary() -> None:
    doc = _doc(dtype="|O", filters=[{"id": "vlen-utf8"}], fill_value="")
    with pytest.raises(VariableLengthArrayError) as info:
        parse_zarray(json.dumps(doc).encode())
    assert isinstance(info.value, UnsupportedError)
    summary = info.value.summary
    assert summary["shape"] == [10, 20] and summary["dtype"] == "|O"
    assert summary["filters"] == [{"id": "vlen-utf8"}] and "variable-length" in summary["reason"]


def test_invalid_json_documents() -> None:
    with pytest.raises(MetadataError):
        parse_zarray(b"{not json")
    with pytest.raises(MetadataError):
        parse_zarray(b"[1, 2]")
    with pytest.raises(MetadataError):
        parse_zgroup(b'{"zarr_format": 3}')
    assert parse_zgroup(b'{"zarr_format": 2}', {"a": 1}).attributes == {"a": 1}


def test_new_array_is_written_like_zarr_python() -> None:
    meta = new_array_v2([4], "<i2", [2], fill_value=3, compressor={"id": "zstd", "level": 1})
    assert list(json.loads(meta.to_bytes())) == [
        "shape", "chunks", "dtype", "fill_value", "order", "filters",
        "dimension_separator", "compressor", "zarr_format",
    ]  # fmt: skip
    assert meta.fill_value.item() == 3 and meta.to_bytes().startswith(b'{\n  "shape"')


def test_zmetadata_entries() -> None:
    zarray = _doc()
    doc = {
        "zarr_consolidated_format": 1,
        "metadata": {
            ".zgroup": {"zarr_format": 2},
            ".zattrs": {"root": True},
            "a/.zgroup": {"zarr_format": 2},
            "a/.zattrs": {"title": "A"},
            "a/b/.zarray": zarray,
            "c/.zarray": {**zarray, "dtype": "nonsense"},
            "bad name/..": {},
            "d/.zarray": _doc(dtype="|O", filters=[{"id": "vlen-utf8"}]),
        },
    }
    entries, error, skipped = parse_zmetadata(json.dumps(doc).encode())
    assert error is None and entries is not None
    assert sorted(entries) == ["a", "a/b"]
    assert entries["a"].attributes == {"title": "A"}
    assert entries["a/b"].shape == (10, 20)
    assert sorted(skipped) == ["c", "d"]
    for raw in (b"{}", b'{"zarr_consolidated_format": 2, "metadata": {}}', b"[]"):
        entries, error, _ = parse_zmetadata(raw)
        assert entries is None and error


def test_pipeline_codec_configuration_round_trips() -> None:
    codec = V2PipelineCodec(
        np.dtype([("x", ">i2"), ("y", "<f4", (2,))]),
        "F",
        [{"id": "shuffle", "elementsize": 10}],
        {"id": "gzip", "level": 1},
    )
    again = V2PipelineCodec.from_config(codec.configuration())
    assert again == codec and again.dtype == codec.dtype
    with pytest.raises(MetadataError):
        V2PipelineCodec.from_config({"dtype": "<i4", "extra": 1})
    with pytest.raises(MetadataError):
        V2PipelineCodec(np.dtype("<i4"), "K")
