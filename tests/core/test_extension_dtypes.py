"""Extension data types no oracle writes here (complex_float16, uint2/uint4, structured with an
explicit big-endian bytes codec): parsed, read and written by hand-built stores, compared with
numpy/ml_dtypes encodings of the same values."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from v3_documents import store_array

from zarrfs.core.dtypes import parse_data_type
from zarrfs.core.errors import MetadataError
from zarrfs.core.hierarchy import open_array
from zarrfs.core.stores.memory import MemoryStore


def _array(store: MemoryStore, data_type, fill, codecs, shape=(4,), chunks=(3,)) -> None:
    store_array(store, data_type, fill, codecs, shape, chunks)


def test_complex_float16_big_endian() -> None:
    store = MemoryStore()
    _array(
        store,
        "complex_float16",
        [1.5, "NaN"],
        [{"name": "bytes", "configuration": {"endian": "big"}}],
    )
    values = np.array([1 + 2j, -0.5 + 0j, 3 - 4j], dtype="c8")
    pairs = np.stack([values.real, values.imag], axis=-1).astype(">f2")
    store.set("a/c/0", pairs.tobytes())
    arr = open_array(store, "a")
    got = np.frombuffer(arr.read(0, arr.nbytes, "little"), "<f2").reshape(4, 2)
    assert got[:3].tolist() == pairs.astype("<f2").tolist()
    assert got[3, 0] == 1.5 and np.isnan(got[3, 1])  # the missing chunk: the fill value
    dt = parse_data_type("complex_float16")
    assert dt.fill_value_to_json(arr.metadata.fill_value) == [1.5, "NaN"]
    arr.write(0, np.zeros((4, 2), "<f2").tobytes(), "little")
    arr.flush()
    assert store.get("a/c/0") == bytes(12)


@pytest.mark.parametrize(
    ("name", "value", "byte"), [("uint4", 15, 0x0F), ("uint2", 3, 3), ("int2", -2, 2)]
)
def test_small_integers(name: str, value: int, byte: int) -> None:
    dt = parse_data_type(name)
    fill = dt.parse_fill_value(value)
    assert fill.tobytes() == bytes([byte]) and dt.fill_value_to_json(fill) == value
    assert np.array([value]).astype(getattr(ml_dtypes, name)).view("u1")[0] == byte
    with pytest.raises(MetadataError):
        dt.parse_fill_value(value + 1 if value > 0 else value - 1)


def test_structured_with_big_endian_bytes_codec() -> None:
    store = MemoryStore()
    fields = [["a", "int16"], ["b", "float32"]]
    _array(
        store,
        {"name": "structured", "configuration": {"fields": fields}},
        "AAAAAAAA",
        [{"name": "bytes", "configuration": {"endian": "big"}}],
        shape=(2,),
        chunks=(2,),
    )
    data = np.array([(1, 2.5), (-3, 0.25)], dtype=[("a", ">i2"), ("b", ">f4")])
    store.set("a/c/0", data.tobytes())
    arr = open_array(store, "a")
    assert arr.read(0, arr.nbytes, "little") == data.astype([("a", "<i2"), ("b", "<f4")]).tobytes()
    assert arr.read(0, arr.nbytes, "big") == data.tobytes()


def test_bfloat16_fill_values_round_trip() -> None:
    dt = parse_data_type("bfloat16")
    for text in (1.0, "NaN", "Infinity", "-Infinity", "0x7fc1", -2.5):
        assert dt.fill_value_to_json(dt.parse_fill_value(text)) == text
    with pytest.raises(MetadataError):
        dt.parse_fill_value("0x7fc")
