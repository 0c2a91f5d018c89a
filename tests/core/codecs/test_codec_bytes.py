"""The bytes codec: configuration, byte order, exact-length decoding, every data type."""

from __future__ import annotations

import numpy as np
import pytest
from codec_helpers import DTYPES, SHAPES, same_bits, sample, spec

from zarrfs.core.codecs.base import ChunkSpec, parse_codec
from zarrfs.core.codecs.bytes import BytesCodec
from zarrfs.core.errors import CorruptDataError, MetadataError


@pytest.mark.parametrize("endian", ["little", "big"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", list(DTYPES), ids=str)
def test_round_trip_every_type(dtype: str, shape: tuple[int, ...], endian: str) -> None:
    codec = BytesCodec(endian)  # type: ignore[arg-type]
    s = spec(shape, DTYPES[dtype])
    arr = sample(shape, s.dtype)
    data = codec.encode(arr, s)
    assert len(data) == s.nbytes == codec.max_encoded_size(s)
    order = "<" if endian == "little" else ">"
    stored = (
        s.dtype if s.dtype.itemsize == 1 or s.dtype.kind == "V" else s.dtype.newbyteorder(order)
    )
    assert data == arr.astype(stored).tobytes()
    out = codec.decode(data, s)
    assert same_bits(out, arr)
    assert out.flags.c_contiguous
    assert out.dtype.isnative


def test_big_endian_layout() -> None:
    s = spec((2,), "uint16")
    assert BytesCodec("big").encode(np.array([1, 0x0203], dtype="uint16"), s) == b"\x00\x01\x02\x03"
    assert (
        BytesCodec("little").encode(np.array([1, 0x0203], dtype="uint16"), s) == b"\x01\x00\x03\x02"
    )
    out = BytesCodec("big").decode(b"\x00\x01\x02\x03", s)
    assert out.tolist() == [1, 0x0203]


def test_complex_is_real_then_imaginary() -> None:
    s = spec((1,), "complex64")
    data = BytesCodec("big").encode(np.array([1 + 2j], dtype="complex64"), s)
    assert data == np.array([1, 2], dtype=">f4").tobytes()


@pytest.mark.parametrize("length", [0, 11, 13, 24])
def test_wrong_length_is_corrupt(length: int) -> None:
    s = spec((3,), "float32")
    with pytest.raises(CorruptDataError, match="expected 12"):
        BytesCodec("little").decode(b"\0" * length, s)


def test_configuration_round_trip() -> None:
    for doc in [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "bytes", "configuration": {"endian": "big"}},
        {"name": "bytes"},
    ]:
        codec = parse_codec(doc)
        assert isinstance(codec, BytesCodec)
        assert codec.to_json() == doc
    assert parse_codec("bytes") == BytesCodec(None)
    assert parse_codec({"name": "bytes", "configuration": {}}).to_json() == {"name": "bytes"}


@pytest.mark.parametrize(
    "conf, field",
    [
        ({"endian": "middle"}, "endian"),
        ({"endian": 1}, "endian"),
        ({"endian": ["little"]}, "endian"),
        ({"endian": "Little"}, "endian"),
        ({"endian": "little", "order": "C"}, "order"),
    ],
)
def test_invalid_configuration(conf: dict, field: str) -> None:
    with pytest.raises(MetadataError, match=field):
        BytesCodec.from_config(conf)


@pytest.mark.parametrize("dtype", ["uint8", "int8", "bool", "V1", "V3", "V16"])
def test_endian_optional_for_single_byte_and_raw_types(dtype: str) -> None:
    codec = BytesCodec(None)
    s = spec((2, 2), dtype)
    codec.validate(s)
    arr = sample((2, 2), dtype)
    assert same_bits(codec.decode(codec.encode(arr, s), s), arr)


@pytest.mark.parametrize("dtype", ["uint16", "int32", "float16", "float64", "complex128"])
def test_endian_required_for_multibyte_types(dtype: str) -> None:
    with pytest.raises(MetadataError, match="endian"):
        BytesCodec(None).validate(spec((2,), dtype))


def test_native_order_decode_is_a_view_not_a_copy():
    codec = BytesCodec("little")
    s = ChunkSpec((64, 64), np.dtype("<f4"), np.zeros((), "<f4"))
    data = np.arange(64 * 64, dtype="<f4").tobytes()
    out = codec.decode(data, s)
    assert np.shares_memory(out, np.frombuffer(data, np.uint8))
    swapped = BytesCodec("big").decode(np.arange(64 * 64, dtype=">f4").tobytes(), s)
    assert (swapped == out).all() and swapped.dtype == np.dtype("<f4")
