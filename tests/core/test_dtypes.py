"""Data types and fill values (zarrfs.core.dtypes) against data-types.rst and zarr-python 3."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from zarrfs.core.dtypes import DataType, parse_data_type
from zarrfs.core.errors import MetadataError, UnsupportedError

UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}
FLOATS = {"float16": 2, "float32": 4, "float64": 8}
CANONICAL_NAN = {"float16": 0x7E00, "float32": 0x7FC00000, "float64": 0x7FF8000000000000}


def bits(arr: np.ndarray) -> int:
    return int.from_bytes(np.ascontiguousarray(arr).tobytes(), "little")


def fill(name: str, value: object) -> np.ndarray:
    return parse_data_type(name).parse_fill_value(value)


# --------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    ("name", "dtype"),
    [
        ("bool", "?"),
        ("int8", "i1"),
        ("int16", "i2"),
        ("int32", "i4"),
        ("int64", "i8"),
        ("uint8", "u1"),
        ("uint16", "u2"),
        ("uint32", "u4"),
        ("uint64", "u8"),
        ("float16", "f2"),
        ("float32", "f4"),
        ("float64", "f8"),
        ("complex64", "c8"),
        ("complex128", "c16"),
        ("r8", "V1"),
        ("r16", "V2"),
        ("r24", "V3"),
        ("r1024", "V128"),
    ],
)
def test_core_names_map_to_native_dtypes(name: str, dtype: str) -> None:
    dt = parse_data_type(name)
    assert dt.name == name
    assert dt.dtype == np.dtype(dtype)
    assert dt.dtype.isnative
    assert dt.itemsize == np.dtype(dtype).itemsize
    assert dt.to_json() == name
    assert parse_data_type({"name": name}) == dt
    assert parse_data_type({"name": name, "configuration": {}}) == dt


@pytest.mark.parametrize("name", ["r0", "r7", "r12", "r08", "r"])
def test_bad_raw_names(name: str) -> None:
    with pytest.raises(MetadataError) if name != "r" else pytest.raises(UnsupportedError):
        parse_data_type(name)


def test_unknown_type_named_even_if_must_understand_false() -> None:
    with pytest.raises(UnsupportedError, match="'urn:example:datetime'"):
        parse_data_type({"name": "urn:example:datetime", "must_understand": False})
    with pytest.raises(UnsupportedError, match="'Float32'"):
        parse_data_type("Float32")
    with pytest.raises(UnsupportedError, match="variable-length"):
        parse_data_type("string")


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (7, "string or an object"),
        (None, "string or an object"),
        ({"configuration": {}}, "string 'name'"),
        ({"name": "int8", "extra": 1}, "unknown keys"),
        ({"name": "int8", "configuration": {"endian": "big"}}, "takes no configuration"),
        ({"name": "int8", "configuration": []}, "must be an object"),
        ({"name": "int8", "must_understand": "no"}, "must be a boolean"),
    ],
)
def test_bad_data_type_documents(doc: object, message: str) -> None:
    with pytest.raises(MetadataError, match=message):
        parse_data_type(doc)


# --------------------------------------------------------------------------- bool and ints


def test_bool_fill() -> None:
    assert fill("bool", True).dtype == np.dtype("?")
    assert bool(fill("bool", True)) is True
    assert bool(fill("bool", False)) is False
    for bad in (0, 1, "true", None):
        with pytest.raises(MetadataError, match="true or false"):
            fill("bool", bad)
    assert parse_data_type("bool").fill_value_to_json(np.array(True)) is True


@pytest.mark.parametrize(
    "name", ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
)
def test_integer_range(name: str) -> None:
    info = np.iinfo(name)
    dt = parse_data_type(name)
    for value in (int(info.min), int(info.max), 0):
        arr = dt.parse_fill_value(value)
        assert arr.shape == () and arr.dtype == dt.dtype and int(arr) == value
        assert dt.fill_value_to_json(arr) == value
        assert type(dt.fill_value_to_json(arr)) is int
    for value in (int(info.min) - 1, int(info.max) + 1):
        with pytest.raises(MetadataError, match="out of range"):
            dt.parse_fill_value(value)


def test_uint64_above_2_63_is_exact() -> None:
    for value in (2**63, 2**63 + 1, 2**64 - 2, 2**64 - 1):
        arr = fill("uint64", value)
        assert bits(arr) == value
        assert parse_data_type("uint64").fill_value_to_json(arr) == value
    # a JSON document with such a number survives text round trip
    text = json.dumps({"fill_value": 2**64 - 1})
    assert bits(fill("uint64", json.loads(text)["fill_value"])) == 2**64 - 1


@pytest.mark.parametrize("bad", [1.5, "1", True, False, None, [1], {"a": 1}, float("nan")])
def test_integer_wrong_types(bad: object) -> None:
    with pytest.raises(MetadataError, match="expected an integer"):
        fill("int32", bad)


def test_integral_float_tolerated_for_integers() -> None:
    assert int(fill("int16", 3.0)) == 3
    with pytest.raises(MetadataError, match="out of range"):
        fill("uint8", 256.0)


# --------------------------------------------------------------------------- floats


@pytest.mark.parametrize("name", FLOATS)
def test_float_special_strings(name: str) -> None:
    size = FLOATS[name]
    dt = parse_data_type(name)
    nan = dt.parse_fill_value("NaN")
    assert nan.dtype == dt.dtype and np.isnan(nan)
    assert bits(nan) == CANONICAL_NAN[name]
    assert dt.fill_value_to_json(nan) == "NaN"
    inf = dt.parse_fill_value("Infinity")
    assert np.isposinf(inf) and dt.fill_value_to_json(inf) == "Infinity"
    ninf = dt.parse_fill_value("-Infinity")
    assert np.isneginf(ninf) and dt.fill_value_to_json(ninf) == "-Infinity"
    hexnan = "0x" + format(CANONICAL_NAN[name], f"0{2 * size}x")
    assert bits(dt.parse_fill_value(hexnan)) == CANONICAL_NAN[name]


@pytest.mark.parametrize(
    ("name", "pattern"),
    [
        ("float16", 0x7C01),  # signalling NaN
        ("float16", 0xFE00),  # negative quiet NaN
        ("float16", 0x7E01),  # quiet NaN with payload
        ("float32", 0x7F800001),
        ("float32", 0xFFC00000),
        ("float32", 0x7FC00001),
        ("float64", 0x7FF0000000000001),
        ("float64", 0xFFF8000000000000),
        ("float64", 0x7FF80000DEADBEEF),
    ],
)
def test_nan_payloads_bit_exact(name: str, pattern: int) -> None:
    size = FLOATS[name]
    dt = parse_data_type(name)
    text = "0x" + format(pattern, f"0{2 * size}x")
    arr = dt.parse_fill_value(text)
    assert bits(arr) == pattern
    assert dt.fill_value_to_json(arr) == text
    # upper-case hex digits are read too
    assert bits(dt.parse_fill_value(text.upper().replace("0X", "0x"))) == pattern


def test_hex_non_nan_values() -> None:
    assert float(fill("float32", "0x3f800000")) == 1.0
    assert float(fill("float16", "0x3c00")) == 1.0
    assert float(fill("float64", "0xc000000000000000")) == -2.0


@pytest.mark.parametrize(
    ("name", "bad", "message"),
    [
        ("float32", "0x7fc0", "exactly 8 hex digits"),
        ("float16", "0x7fc00000", "exactly 4 hex digits"),
        ("float64", "0x7fc00000", "exactly 16 hex digits"),
        ("float32", "0xzzzzzzzz", "hex string"),
        ("float32", "nan", "hex string"),
        ("float32", "inf", "hex string"),
        ("float32", "1.5", "hex string"),
        ("float32", True, "number or a string"),
        ("float32", None, "number or a string"),
        ("float32", [1.0], "number or a string"),
        ("float32", float("nan"), "NaN must be written"),
        ("float64", float("inf"), "infinities must be written"),
        ("float64", 10**400, "out of range"),
    ],
)
def test_float_rejections(name: str, bad: object, message: str) -> None:
    with pytest.raises(MetadataError, match=message):
        fill(name, bad)


def test_float_numbers_round_to_nearest() -> None:
    assert bits(fill("float32", 0.1)) == bits(np.array(0.1, dtype=np.float32))
    assert bits(fill("float16", 0.1)) == bits(np.array(0.1, dtype=np.float16))
    assert np.isposinf(fill("float16", 70000))  # beyond float16 range rounds to infinity
    assert float(fill("float64", 3)) == 3.0
    neg_zero = fill("float64", -0.0)
    assert bits(neg_zero) == 1 << 63
    assert json.dumps(parse_data_type("float64").fill_value_to_json(neg_zero)) == "-0.0"


def test_finite_floats_written_as_json_numbers_like_zarr_python() -> None:
    dt = parse_data_type("float32")
    assert dt.fill_value_to_json(np.array(0, dtype="f4")) == 0.0
    assert type(dt.fill_value_to_json(np.array(1, dtype="f4"))) is float
    assert dt.fill_value_to_json(np.float32(1.5)) == 1.5


@pytest.mark.parametrize("name", FLOATS)
@given(data=st.data())
def test_float_bit_patterns_round_trip_through_json_text(name: str, data: st.DataObject) -> None:
    size = FLOATS[name]
    pattern = data.draw(st.integers(0, 2 ** (8 * size) - 1))
    dt = parse_data_type(name)
    arr = np.array(pattern, dtype=UINT[size]).view(dt.dtype)
    text = json.dumps(dt.fill_value_to_json(arr), allow_nan=False)
    back = dt.parse_fill_value(json.loads(text))
    assert bits(back) == pattern


# --------------------------------------------------------------------------- complex


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("complex64", [1, 2], (0x3F800000, 0x40000000)),
        ("complex64", ["-Infinity", "NaN"], (0xFF800000, 0x7FC00000)),
        ("complex64", ["0x7f800001", "0xffc00001"], (0x7F800001, 0xFFC00001)),
        ("complex128", [0.5, "Infinity"], (0x3FE0000000000000, 0x7FF0000000000000)),
        ("complex128", ["0x7ff0000000000001", -0.0], (0x7FF0000000000001, 1 << 63)),
    ],
)
def test_complex_pairs_bit_exact(name: str, value: list, expected: tuple[int, int]) -> None:
    dt = parse_data_type(name)
    arr = dt.parse_fill_value(value)
    assert arr.dtype == dt.dtype and arr.shape == ()
    half = dt.itemsize // 2
    raw = arr.tobytes()
    assert int.from_bytes(raw[:half], "little") == expected[0]
    assert int.from_bytes(raw[half:], "little") == expected[1]
    back = dt.parse_fill_value(json.loads(json.dumps(dt.fill_value_to_json(arr))))
    assert back.tobytes() == raw


def test_complex_json_forms() -> None:
    dt = parse_data_type("complex128")
    assert dt.fill_value_to_json(np.array(1 + 2j)) == [1.0, 2.0]
    nan_payload = dt.parse_fill_value(["NaN", "0x7ff0000000000002"])
    assert dt.fill_value_to_json(nan_payload) == ["NaN", "0x7ff0000000000002"]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ([1], "two components"),
        ([1, 2, 3], "two components"),
        (1.0, "two components"),
        ("NaN", "two components"),
        ([1, "nope"], "imaginary part"),
        (["0x7fc0", 0], "real part"),
    ],
)
def test_complex_rejections(bad: object, message: str) -> None:
    with pytest.raises(MetadataError, match=message):
        fill("complex64", bad)


@given(st.integers(0, 2**128 - 1))
def test_complex128_bit_patterns_round_trip(pattern: int) -> None:
    dt = parse_data_type("complex128")
    arr = np.frombuffer(pattern.to_bytes(16, "little"), dtype=dt.dtype).reshape(())
    text = json.dumps(dt.fill_value_to_json(arr), allow_nan=False)
    assert dt.parse_fill_value(json.loads(text)).tobytes() == arr.tobytes()


# --------------------------------------------------------------------------- raw


def test_raw_fill_values() -> None:
    dt = parse_data_type("r24")
    arr = dt.parse_fill_value([1, 2, 255])
    assert arr.dtype == np.dtype("V3") and arr.shape == ()
    assert arr.tobytes() == b"\x01\x02\xff"
    assert dt.fill_value_to_json(arr) == [1, 2, 255]
    assert parse_data_type("r8").parse_fill_value([0]).tobytes() == b"\x00"


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ([1, 2], "expected 3 byte values, got 2"),
        ([1, 2, 3, 4], "expected 3 byte values, got 4"),
        ([1, 2, 256], "not an integer in \\[0, 255\\]"),
        ([1, 2, -1], "not an integer in \\[0, 255\\]"),
        ([1, 2, True], "not an integer"),
        ([1, 2, 3.0], "not an integer"),
        ("AQID", "list of 3 byte values"),
        (0, "list of 3 byte values"),
    ],
)
def test_raw_rejections(bad: object, message: str) -> None:
    with pytest.raises(MetadataError, match=message):
        fill("r24", bad)


@given(st.binary(min_size=1, max_size=16))
def test_raw_round_trip(data: bytes) -> None:
    dt = parse_data_type(f"r{8 * len(data)}")
    arr = dt.parse_fill_value(list(data))
    assert arr.tobytes() == data
    assert dt.parse_fill_value(json.loads(json.dumps(dt.fill_value_to_json(arr)))).tobytes() == data


# --------------------------------------------------------------------------- zarr-python extensions


def test_datetime_extension() -> None:
    dt = parse_data_type(
        {"name": "numpy.datetime64", "configuration": {"unit": "ms", "scale_factor": 10}}
    )
    assert dt.dtype == np.dtype("M8[10ms]")
    assert dt.to_json() == {
        "name": "numpy.datetime64",
        "configuration": {"unit": "ms", "scale_factor": 10},
    }
    nat = dt.parse_fill_value("NaT")
    assert np.isnat(nat) and dt.fill_value_to_json(nat) == -(2**63)
    assert dt.parse_fill_value(5).view("i8") == 5
    td = parse_data_type(
        {"name": "numpy.timedelta64", "configuration": {"unit": "s", "scale_factor": 1}}
    )
    assert td.dtype == np.dtype("m8[s]")
    with pytest.raises(MetadataError, match="unknown unit"):
        parse_data_type(
            {"name": "numpy.datetime64", "configuration": {"unit": "x", "scale_factor": 1}}
        )
    with pytest.raises(MetadataError, match="exactly the keys"):
        parse_data_type({"name": "numpy.datetime64", "configuration": {"unit": "s"}})
    with pytest.raises(MetadataError, match="scale_factor"):
        parse_data_type(
            {"name": "numpy.datetime64", "configuration": {"unit": "s", "scale_factor": 0}}
        )


def test_fixed_length_byte_and_string_extensions() -> None:
    raw = parse_data_type({"name": "raw_bytes", "configuration": {"length_bytes": 4}})
    assert raw.dtype == np.dtype("V4")
    arr = raw.parse_fill_value("AQIDBA==")
    assert arr.tobytes() == b"\x01\x02\x03\x04"
    assert raw.fill_value_to_json(arr) == "AQIDBA=="
    with pytest.raises(MetadataError, match="decodes to 3 bytes"):
        raw.parse_fill_value("AQID")
    with pytest.raises(MetadataError, match="base64"):
        raw.parse_fill_value("!!!!")

    nb = parse_data_type({"name": "null_terminated_bytes", "configuration": {"length_bytes": 5}})
    assert nb.dtype == np.dtype("S5")
    arr = nb.parse_fill_value("YWI=")
    assert arr.tobytes() == b"ab\x00\x00\x00"
    assert nb.fill_value_to_json(arr) == "YWI="

    u = parse_data_type({"name": "fixed_length_utf32", "configuration": {"length_bytes": 12}})
    assert u.dtype == np.dtype("U3")
    assert u.fill_value_to_json(u.parse_fill_value("xy")) == "xy"
    with pytest.raises(MetadataError, match="at most 3 characters"):
        u.parse_fill_value("wxyz")
    with pytest.raises(MetadataError, match="multiple of 4"):
        parse_data_type({"name": "fixed_length_utf32", "configuration": {"length_bytes": 6}})
    with pytest.raises(MetadataError, match="element size"):
        parse_data_type({"name": "raw_bytes", "configuration": {"length_bytes": 0}})


def test_default_fill_is_zero_bits() -> None:
    for name in ("bool", "int8", "uint64", "float16", "complex128", "r40"):
        dt = parse_data_type(name)
        assert dt.default_fill_value().tobytes() == bytes(dt.itemsize)


def test_fill_value_to_json_checks_its_input() -> None:
    dt = parse_data_type("int16")
    with pytest.raises(ValueError, match="0-d"):
        dt.fill_value_to_json(np.zeros(2, dtype="i2"))
    with pytest.raises(ValueError, match="dtype"):
        dt.fill_value_to_json(np.array(1.0))
    assert dt.fill_value_to_json(np.array(-2, dtype=">i2")) == -2  # byte order is normalised


def test_datatype_equality_by_name_and_dtype() -> None:
    assert parse_data_type("r32") != parse_data_type(
        {"name": "raw_bytes", "configuration": {"length_bytes": 4}}
    )
    assert parse_data_type("int8") == DataType("int8", np.dtype("i1"))


# --------------------------------------------------------------------------- zarr-python oracle


ORACLE_CASES = [
    ("bool", True),
    ("int8", -128),
    ("uint64", 2**64 - 1),
    ("int64", -(2**63)),
    ("float16", float("nan")),
    ("float16", -float("inf")),
    ("float32", 0.1),
    ("float32", 0.0),
    ("float64", 1e300),
    ("float64", float("inf")),
    ("complex64", 1 + 2j),
    ("complex128", complex(float("nan"), -float("inf"))),
]


@pytest.mark.parametrize(("name", "value"), ORACLE_CASES)
def test_agrees_with_zarr_python(tmp_path, name: str, value: object) -> None:
    zarr = pytest.importorskip("zarr")
    store = zarr.storage.LocalStore(str(tmp_path))
    arr = zarr.create_array(
        store, shape=(2,), chunks=(2,), dtype=name, fill_value=value, compressors=None
    )
    written = json.loads((tmp_path / "zarr.json").read_bytes())["fill_value"]
    dt = parse_data_type(
        written_type := json.loads((tmp_path / "zarr.json").read_bytes())["data_type"]
    )
    assert dt.name == written_type
    ours = dt.parse_fill_value(written)
    theirs = np.asarray(arr.fill_value, dtype=dt.dtype)
    assert ours.tobytes() == theirs.tobytes()
    assert dt.fill_value_to_json(ours) == written
