"""Every leaf codec inside CodecChain: round trips over every data type and shape, full chains,
bounds passed between stages, and the codec-order errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from codec_helpers import BYTES_BE, BYTES_LE, DTYPES, SHAPES, chain, same_bits, sample, spec

from zarrfs.core.codecs.base import ArrayArrayCodec, ChunkSpec
from zarrfs.core.codecs.bytes import BytesCodec
from zarrfs.core.codecs.chain import CodecChain
from zarrfs.core.errors import CorruptDataError, MetadataError

GZIP = {"name": "gzip", "configuration": {"level": 6}}
ZSTD = {"name": "zstd", "configuration": {"level": 3, "checksum": True}}
CRC = {"name": "crc32c"}


def blosc(shuffle: str, cname: str = "lz4", typesize: int = 4) -> dict:
    return {
        "name": "blosc",
        "configuration": {
            "cname": cname,
            "clevel": 5,
            "shuffle": shuffle,
            "typesize": typesize,
            "blocksize": 0,
        },
    }


def transpose_for(ndim: int) -> dict:
    return {"name": "transpose", "configuration": {"order": list(reversed(range(ndim)))}}


BYTES_CODECS = {
    "none": [],
    "gzip": [GZIP],
    "zstd": [ZSTD],
    "blosc-shuffle": [blosc("shuffle")],
    "blosc-bitshuffle": [blosc("bitshuffle", "zstd")],
    "crc32c": [CRC],
    "all": [blosc("noshuffle", "zlib"), ZSTD, GZIP, CRC],
}


@pytest.mark.parametrize("bb", list(BYTES_CODECS))
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_every_codec_every_type_every_shape(dtype: str, shape: tuple[int, ...], bb: str) -> None:
    s = spec(shape, DTYPES[dtype])
    for endian in (BYTES_LE, BYTES_BE):
        prepared = chain(transpose_for(len(shape)), endian, *BYTES_CODECS[bb]).prepare(s)
        arr = sample(shape, s.dtype, seed=len(shape))
        data = prepared.encode(arr)
        assert data is not None and len(data) <= prepared.max_encoded_size
        out = prepared.decode(data)
        assert same_bits(out, arr)
        assert out.flags.c_contiguous


def test_transpose_then_big_endian_layout_is_what_the_spec_says() -> None:
    arr = np.arange(6, dtype="uint16").reshape(2, 3)
    prepared = chain(transpose_for(2), BYTES_BE, CRC).prepare(spec((2, 3), "uint16"))
    data = prepared.encode(arr)
    assert data[:-4] == arr.T.astype(">u2").tobytes()


def test_full_chain_bounds_and_corruption() -> None:
    s = spec((16, 8), "float32")
    prepared = chain(transpose_for(2), BYTES_BE, blosc("shuffle", "lz4"), CRC).prepare(s)
    assert prepared.ab_spec.shape == (8, 16)
    # blosc may produce at most the 512 bytes of the bytes codec; crc32c at most blosc's bound
    assert prepared.bb_bounds[0] == s.nbytes
    assert prepared.max_encoded_size == prepared.bb_bounds[1] + 4
    arr = sample((16, 8), "float32")
    data = bytearray(prepared.encode(arr))
    assert same_bits(prepared.decode(bytes(data)), arr)
    data[20] ^= 1
    with pytest.raises(CorruptDataError, match="crc32c checksum mismatch"):
        prepared.decode(bytes(data))


def test_chunk_of_wrong_decoded_size_is_corrupt() -> None:
    # a valid gzip stream of 8 bytes where the chunk needs 16
    small = chain(BYTES_LE, GZIP).prepare(spec((2,), "float32")).encode(np.zeros(2, "float32"))
    with pytest.raises(CorruptDataError):
        chain(BYTES_LE, GZIP).prepare(spec((4,), "float32")).decode(small)


def test_configurations_round_trip_through_the_chain() -> None:
    docs = [transpose_for(3), BYTES_BE, blosc("bitshuffle", "zstd", 8), ZSTD, GZIP, CRC]
    assert CodecChain.from_json(docs).to_json() == docs


@pytest.mark.parametrize(
    "docs, message",
    [
        ([GZIP, BYTES_LE], "gzip.*must come after the array->bytes codec"),
        ([CRC], "crc32c.*must come after the array->bytes codec"),
        ([BYTES_LE, transpose_for(1)], "transpose.*must come before the array->bytes codec"),
        ([BYTES_LE, BYTES_BE], "two array->bytes codecs"),
        ([transpose_for(1)], "no array->bytes codec"),
        ([], "no array->bytes codec"),
    ],
)
def test_bad_codec_order(docs: list, message: str) -> None:
    with pytest.raises(MetadataError, match=message):
        CodecChain.from_json(docs)


def test_rank_mismatch_found_when_prepared() -> None:
    with pytest.raises(MetadataError, match="transpose"):
        chain(transpose_for(2), BYTES_LE).prepare(spec((4,), "uint8"))


def test_missing_endian_found_when_prepared() -> None:
    c = chain({"name": "bytes"}, GZIP)
    c.prepare(spec((4,), "uint8"))
    with pytest.raises(MetadataError, match="endian"):
        c.prepare(spec((4,), "int16"))


class _ReadOnlyIdentity(ArrayArrayCodec):
    """Test codec whose decode hands back a read-only view."""

    name = "test_read_only_identity"

    @classmethod
    def from_config(cls, configuration: Any) -> _ReadOnlyIdentity:
        return cls()

    def configuration(self) -> None:
        return None

    def resolve_spec(self, spec: ChunkSpec) -> ChunkSpec:
        return spec

    def encode(self, arr: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        return arr

    def decode(self, arr: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        view = arr.view()
        view.flags.writeable = False
        return view


def test_zero_dimensional_chunks_stay_zero_dimensional() -> None:
    prepared = CodecChain([_ReadOnlyIdentity(), BytesCodec("big")]).prepare(spec((), "float64"))
    out = prepared.decode(prepared.encode(np.array(2.5)))
    assert out.shape == () and out[()] == 2.5


def test_non_contiguous_input_is_encoded_in_c_order() -> None:
    arr = np.arange(12, dtype="int32").reshape(3, 4)
    prepared = chain(BYTES_LE).prepare(spec((4, 3), "int32"))
    assert prepared.encode(arr.T) == np.ascontiguousarray(arr.T).tobytes()
