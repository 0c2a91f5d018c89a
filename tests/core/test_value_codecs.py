"""``scale_offset``, ``cast_value`` and the ``struct`` data type on hand-built stores: what no
fixture of a writer shows (refused configurations, values that cannot be stored or decoded,
integer arithmetic past int64). What zarr-python writes is in tests/interop/test_zarr_python_34.py.
"""

from __future__ import annotations

import base64
import sys
from typing import Any

import numpy as np
import pytest
from v3_documents import store_array

from zarrfs.core.dtypes import parse_data_type
from zarrfs.core.errors import (
    CorruptDataError,
    InvalidWriteError,
    MetadataError,
    UnsupportedError,
)
from zarrfs.core.hierarchy import open_array
from zarrfs.core.stores.memory import MemoryStore

BYTES = {"name": "bytes", "configuration": {"endian": "little"}}


def _store(data_type: Any, fill: Any, codecs: list[Any], shape=(4,), chunks=(4,)) -> MemoryStore:
    return store_array(MemoryStore(), data_type, fill, codecs, shape, chunks)


def _so(offset: Any, scale: Any) -> dict[str, Any]:
    return {"name": "scale_offset", "configuration": {"offset": offset, "scale": scale}}


def _cast(data_type: str, **conf: Any) -> dict[str, Any]:
    return {"name": "cast_value", "configuration": {"data_type": data_type, **conf}}


def test_scale_offset_integer_decode_refuses_inexact_and_overflow() -> None:
    store = _store("int16", 0, [_so(-5, 3), BYTES])
    store.set("a/c/0", np.array([3, 6, -3, 0], "<i2").tobytes())
    arr = open_array(store, "a")
    assert np.frombuffer(arr.read(0, 8), "<i2").tolist() == [-4, -3, -6, -5]
    store.set("a/c/0", np.array([3, 7, 0, 0], "<i2").tobytes())  # 7 is no multiple of 3
    with pytest.raises(CorruptDataError, match="multiple"):
        open_array(store, "a").read(0, 8)
    store = _store("int8", 0, [_so(-100, 1), BYTES])
    store.set("a/c/0", np.array([100, 27, 28, 0], "i1").tobytes())  # 27 - 100 = -73 fits ...
    assert np.frombuffer(open_array(store, "a").read(0, 4), "i1").tolist()[:2] == [0, -73]
    store.set("a/c/0", np.array([-100, 0, 0, 0], "i1").tobytes())  # ... -200 does not
    with pytest.raises(CorruptDataError, match="does not fit"):
        open_array(store, "a").read(0, 4)


def test_scale_offset_integer_encode_never_wraps() -> None:
    store = _store("int16", 0, [_so(0, 1000), BYTES])
    arr = open_array(store, "a")
    arr.write(0, np.array([1, -2, 32, 0], "<i2").tobytes())
    arr.flush()
    assert np.frombuffer(store.get("a/c/0"), "<i2").tolist() == [1000, -2000, 32000, 0]
    arr.write(0, np.array([33, 0, 0, 0], "<i2").tobytes())  # 33000 is past int16
    with pytest.raises(InvalidWriteError, match="does not fit"):
        arr.flush()
    assert np.frombuffer(store.get("a/c/0"), "<i2").tolist() == [1000, -2000, 32000, 0]


def test_scale_offset_uint64_past_int64_is_exact() -> None:
    big = 2**63 + 12345
    with pytest.raises(MetadataError, match="fill value"):  # (0 - big) * 2 is below zero
        open_array(_store("uint64", 0, [_so(big, 2), BYTES]), "a")
    store = _store("uint64", big, [_so(big, 2), BYTES])
    arr = open_array(store, "a")
    values = np.array([big, big + 7, 2**64 - 1, big + 2**62], "<u8")
    arr.write(0, values.tobytes())
    arr.flush()
    stored = np.frombuffer(store.get("a/c/0"), "<u8")
    assert stored.tolist() == [0, 14, (2**64 - 1 - big) * 2, 2**63]
    assert np.frombuffer(open_array(store, "a").read(0, 32), "<u8").tolist() == values.tolist()


def test_scale_offset_float_is_in_the_arrays_own_type() -> None:
    store = _store("float32", "NaN", [_so(0.1, 3), BYTES])
    stored = np.array([1, 2, 3], "<f4")
    store.set("a/c/0", np.append(stored, np.float32(np.nan)).tobytes())
    got = np.frombuffer(open_array(store, "a").read(0, 16), "<f4")
    want = stored / np.float32(3) + np.float32(0.1)  # float32 throughout, as zarr-python
    assert got[:3].tobytes() == want.tobytes() and np.isnan(got[3])


def test_cast_value_write_errors_and_modes() -> None:
    store = _store("float32", 0.0, [_cast("uint8"), BYTES])
    arr = open_array(store, "a")
    arr.write(0, np.array([1.4, 2.5, 3.5, 255], "<f4").tobytes())
    arr.flush()
    assert list(store.get("a/c/0")) == [1, 2, 4, 255]  # nearest-even
    for bad in (256.0, -1.0, np.nan):  # out of range (no out_of_range given), NaN unmapped
        arr.write(0, np.array([bad, 0, 0, 0], "<f4").tobytes())
        with pytest.raises(InvalidWriteError, match="cast_value"):
            arr.flush()
    assert list(store.get("a/c/0")) == [1, 2, 4, 255]
    nan_map = {"encode": [["NaN", -128]], "decode": [[-128, "NaN"]]}
    store = _store(
        "float32", "NaN", [_cast("int8", out_of_range="clamp", scalar_map=nan_map), BYTES]
    )
    arr = open_array(store, "a")
    assert np.isnan(np.frombuffer(arr.read(0, 16), "<f4")).all()  # the fill value, cast back
    arr.write(0, np.array([np.nan, 1000, -1000, -0.5], "<f4").tobytes())
    arr.flush()
    assert np.frombuffer(store.get("a/c/0"), "i1").tolist() == [-128, 127, -128, 0]


@pytest.mark.parametrize(
    ("data_type", "codecs", "error", "match"),
    [
        ("float32", [_so(0, 0), BYTES], MetadataError, "zero"),
        (
            "float32",
            [{"name": "scale_offset", "configuration": {"bias": 1}}, BYTES],
            MetadataError,
            "unknown",
        ),  # fmt: skip
        ("int8", [_so(0.5, 1), BYTES], MetadataError, "offset"),
        ("complex64", [_so(0, 1), BYTES], MetadataError, "integer and float"),
        ("bfloat16", [_so(0, 1), BYTES], UnsupportedError, "raw bits"),
        ("float32", [_cast("bfloat16"), BYTES], UnsupportedError, "not supported"),
        ("float32", [_cast("float16", out_of_range="wrap"), BYTES], MetadataError, "wrap"),
        ("float32", [_cast("int8", rounding="up"), BYTES], MetadataError, "rounding"),
        (
            "float32",
            [{"name": "cast_value", "configuration": {}}, BYTES],
            MetadataError,
            "data_type",
        ),  # fmt: skip
        (
            "float32",
            [_cast("int8", scalar_map={"encode": [["x", 1]]}), BYTES],
            MetadataError,
            "scalar_map",
        ),  # fmt: skip
    ],
)
def test_refused_configurations(data_type: str, codecs: list, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        fill = {"int8": 0, "complex64": [0.0, 0.0]}.get(data_type, 0.0)
        open_array(_store(data_type, fill, codecs), "a")


def test_cast_value_fill_value_must_cast() -> None:
    with pytest.raises(MetadataError, match="fill value"):
        open_array(_store("float32", 300.0, [_cast("uint8"), BYTES]), "a")


def test_struct_fill_values() -> None:
    fields = [{"name": "t", "data_type": "int16"}, {"name": "v", "data_type": "float32"}]
    dt = parse_data_type({"name": "struct", "configuration": {"fields": fields}})
    fill = dt.parse_fill_value({"t": -3, "v": "NaN"})
    assert fill["t"] == -3 and np.isnan(fill["v"])
    assert dt.fill_value_to_json(fill) == {"t": -3, "v": "NaN"}
    raw = np.array((-3, 2.5), dtype=[("t", "<i2"), ("v", "<f4")]).tobytes()
    from_b64 = dt.parse_fill_value(base64.b64encode(raw).decode())  # zarr-python reads it too
    assert from_b64.tolist() == (-3, 2.5)
    for bad in ({"t": 1}, {"t": 1, "v": 0.0, "w": 0}, [1, 2.0], {"t": 1.5, "v": 0.0}):
        with pytest.raises(MetadataError):
            dt.parse_fill_value(bad)
    for conf in (
        {"fields": []},
        {"fields": [{"name": "a", "data_type": "int8"}, {"name": "a", "data_type": "int8"}]},
        {"fields": [{"name": "a", "type": "int8"}]},
        {"fields": [{"name": "s", "data_type": "string"}]},
        # each field within the element bound, the record not (numpy alone wraps its size)
        {"fields": [{"name": f"f{i}", "data_type": "r134217728"} for i in range(257)]},
    ):
        with pytest.raises(MetadataError):
            parse_data_type({"name": "struct", "configuration": conf})


def test_cast_value_without_its_package_is_refused_by_name(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "cast_value_rs", None)  # import fails as if not installed
    # documents no other test opens: parsed metadata is kept by the document's bytes
    with pytest.raises(UnsupportedError, match="cast-value-rs"):
        open_array(_store("float32", 0.0, [_cast("uint8"), BYTES], shape=(3,)), "a")
    open_array(_store("float32", 0.0, [_so(1, 2), BYTES], shape=(3,)), "a")  # needs no package
