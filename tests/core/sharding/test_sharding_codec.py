"""The sharding_indexed codec: configuration, validation, whole-shard encode and decode."""

from __future__ import annotations

import numpy as np
import pytest
from shard_helpers import BYTES_LE, CRC, chain, sharding, spec

from zarrfs.core.codecs.base import parse_codec
from zarrfs.core.codecs.sharding import ShardingCodec
from zarrfs.core.errors import CorruptDataError, MetadataError
from zarrfs.core.sharding import format as fmt

GZIP = {"name": "gzip", "configuration": {"level": 1}}
ZSTD = {"name": "zstd", "configuration": {"level": 1, "checksum": False}}
BLOSC = {
    "name": "blosc",
    "configuration": {
        "cname": "lz4",
        "clevel": 5,
        "shuffle": "shuffle",
        "typesize": 4,
        "blocksize": 0,
    },
}
TRANSPOSE = {"name": "transpose", "configuration": {"order": [1, 0]}}

INNER_CHAINS = {
    "bytes": [BYTES_LE],
    "bytes-big": [{"name": "bytes", "configuration": {"endian": "big"}}],
    "gzip": [BYTES_LE, GZIP],
    "zstd-crc": [BYTES_LE, ZSTD, CRC],
    "blosc": [BYTES_LE, BLOSC],
    "transpose-gzip": [TRANSPOSE, BYTES_LE, GZIP],
}


def sample(shape: tuple[int, ...], dtype: str = "<f4") -> np.ndarray:
    rng = np.random.default_rng(7)
    return rng.integers(1, 1000, size=shape).astype(dtype)


class TestConfiguration:
    def test_from_metadata_document(self) -> None:
        doc = {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": [2, 3],
                "codecs": [BYTES_LE, GZIP],
                "index_codecs": [BYTES_LE, CRC],
                "index_location": "start",
            },
        }
        codec = parse_codec(doc)
        assert isinstance(codec, ShardingCodec)
        assert codec.chunk_shape == (2, 3)
        assert codec.index_location == "start"
        assert [c.name for c in codec.codecs.codecs] == ["bytes", "gzip"]
        assert codec.to_json() == doc

    def test_defaults(self) -> None:
        codec = ShardingCodec.from_config({"chunk_shape": [4], "codecs": [BYTES_LE]})
        assert codec.index_location == "end"
        assert [c.name for c in codec.index_codecs.codecs] == ["bytes", "crc32c"]
        assert codec.configuration()["index_location"] == "end"

    @pytest.mark.parametrize(
        "conf",
        [
            {"chunk_shape": [2, 0], "codecs": [BYTES_LE]},
            {"chunk_shape": [], "codecs": [BYTES_LE]},
            {"chunk_shape": [2, 2.5], "codecs": [BYTES_LE]},
            {"chunk_shape": [True], "codecs": [BYTES_LE]},
            {"chunk_shape": 4, "codecs": [BYTES_LE]},
            {"chunk_shape": [4]},
            {"chunk_shape": [4], "codecs": [GZIP]},
            {"chunk_shape": [4], "codecs": [BYTES_LE], "index_location": "middle"},
            {"chunk_shape": [4], "codecs": [BYTES_LE], "index_codecs": [BYTES_LE, GZIP]},
            {"chunk_shape": [4], "codecs": [BYTES_LE], "index_codecs": [BYTES_LE, ZSTD]},
            {"chunk_shape": [4], "codecs": [BYTES_LE], "shard_shape": [8]},
        ],
    )
    def test_invalid(self, conf: dict) -> None:
        with pytest.raises(MetadataError):
            ShardingCodec.from_config(conf)

    def test_inner_shape_must_divide_the_shard(self) -> None:
        codec = sharding([2, 3])
        codec.validate(spec((4, 6)))
        with pytest.raises(MetadataError, match="divide"):
            codec.validate(spec((4, 7)))
        with pytest.raises(MetadataError, match="dimensions"):
            codec.validate(spec((4, 6, 1)))

    def test_inner_chain_is_validated_for_the_inner_spec(self) -> None:
        codec = sharding([2], codecs=[{"name": "bytes"}])  # no endian: invalid for float32
        with pytest.raises(MetadataError, match="endian"):
            codec.validate(spec((4,)))
        codec.validate(spec((4,), dtype="u1"))

    def test_geometry(self) -> None:
        codec = sharding([2, 3])
        assert codec.chunks_per_shard((4, 9)) == (2, 3)
        assert codec.inner_spec(spec((4, 9), fill=5)) == spec((2, 3), fill=5)
        assert codec.index_size(spec((4, 9))) == 16 * 6 + 4
        assert list(codec.iter_inner((4, 3))) == [(0, 0), (1, 0)]


class TestWholeShard:
    @pytest.mark.parametrize("inner", list(INNER_CHAINS), ids=list(INNER_CHAINS))
    @pytest.mark.parametrize("location", ["start", "end"])
    def test_round_trip(self, inner: str, location: str) -> None:
        codec = sharding([4, 2], codecs=INNER_CHAINS[inner], index_location=location)
        s = spec((8, 6))
        arr = sample((8, 6))
        arr[4:8, 2:4] = 0  # one inner chunk equal to the fill value
        full = chain(codec.to_json()).prepare(s)
        data = full.encode(arr)
        assert data is not None
        assert len(data) <= full.max_encoded_size
        index = codec.read_index(data, s)
        assert index.get((1, 1)) is None
        assert sum(1 for _ in index.present()) == 5
        np.testing.assert_array_equal(full.decode(data), arr)

    def test_all_fill_encodes_to_nothing(self) -> None:
        codec = sharding([2, 2])
        s = spec((4, 4), fill=3)
        assert codec.encode(np.full((4, 4), 3, dtype="f4"), s) is None

    def test_missing_inner_chunks_decode_as_fill(self) -> None:
        codec = sharding([2, 2])
        s = spec((4, 4), fill=-1)
        arr = np.full((4, 4), -1, dtype="f4")
        arr[3, 3] = 42
        data = codec.encode(arr, s)
        assert data is not None
        assert sum(1 for _ in codec.read_index(data, s).present()) == 1
        np.testing.assert_array_equal(codec.decode(data, s), arr)

    def test_nan_fill_is_bit_exact(self) -> None:
        codec = sharding([2])
        s = spec((4,), dtype="<f8", fill=np.nan)
        arr = np.array([np.nan, np.nan, 1.0, np.nan])
        data = codec.encode(arr, s)
        index = codec.read_index(data, s)
        assert index.get((0,)) is None and index.get((1,)) is not None
        out = codec.decode(data, s)
        np.testing.assert_array_equal(out.view(np.uint64), arr.view(np.uint64))

    @pytest.mark.parametrize("location", ["start", "end"])
    def test_nested_sharding(self, location: str) -> None:
        inner_shard = {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": [2, 2],
                "codecs": [BYTES_LE, GZIP],
                "index_codecs": [BYTES_LE, CRC],
                "index_location": "start",
            },
        }
        codec = sharding([4, 4], codecs=[inner_shard], index_location=location)
        s = spec((8, 8), dtype="<i4")
        arr = sample((8, 8), "<i4")
        arr[:4, :4] = 0  # one whole inner shard empty
        arr[4:6, 4:6] = 0  # one inner-inner chunk empty
        data = codec.encode(arr, s)
        assert data is not None
        index = codec.read_index(data, s)
        assert index.get((0, 0)) is None
        offset, nbytes = index.get((1, 1))  # type: ignore[misc]
        inner_codec = codec.codecs.array_bytes
        assert isinstance(inner_codec, ShardingCodec)
        inner_index = inner_codec.read_index(data[offset : offset + nbytes], s.with_shape((4, 4)))
        assert inner_index.get((0, 0)) is None
        assert inner_index.get((1, 1)) is not None
        np.testing.assert_array_equal(codec.decode(data, s), arr)
        assert len(data) <= codec.max_encoded_size(s)

    @pytest.mark.parametrize("location", ["start", "end"])
    def test_transpose_before_sharding_non_square(self, location: str) -> None:
        # The sharding codec sees the transposed shard: (6, 4) when the array chunk is (4, 6).
        docs = [
            TRANSPOSE,
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": [3, 2],
                    "codecs": [BYTES_LE, CRC],
                    "index_codecs": [BYTES_LE, CRC],
                    "index_location": location,
                },
            },
        ]
        full = chain(*docs).prepare(spec((4, 6)))
        arr = sample((4, 6))
        data = full.encode(arr)
        np.testing.assert_array_equal(full.decode(data), arr)
        codec = full.chain.array_bytes
        assert isinstance(codec, ShardingCodec)
        # inner chunk (0, 0) of the transposed shard holds arr.T[0:3, 0:2]
        index = codec.read_index(data, spec((6, 4)))
        offset, nbytes = index.get((0, 0))  # type: ignore[misc]
        inner = codec.decode_inner(data[offset : offset + nbytes], spec((6, 4)), (0, 0))
        np.testing.assert_array_equal(inner, arr.T[0:3, 0:2])
        with pytest.raises(MetadataError, match="divide"):
            chain(*docs).prepare(spec((6, 4)))


class TestCorruptShard:
    def shard(self, location: str = "end") -> tuple[ShardingCodec, bytes]:
        codec = sharding([2, 2], codecs=[BYTES_LE, CRC], index_location=location)
        data = codec.encode(sample((4, 4)), spec((4, 4)))
        assert data is not None
        return codec, data

    @pytest.mark.parametrize("location", ["start", "end"])
    def test_truncated(self, location: str) -> None:
        codec, data = self.shard(location)
        cut = data[1:] if location == "end" else data[:-1]
        with pytest.raises(CorruptDataError):
            codec.decode(cut, spec((4, 4)))

    def test_too_short_for_the_index(self) -> None:
        codec, _ = self.shard()
        with pytest.raises(CorruptDataError, match="smaller"):
            codec.decode(b"\0" * 10, spec((4, 4)))

    def test_inner_chunk_checksum(self) -> None:
        codec, data = self.shard()
        index = codec.read_index(data, spec((4, 4)))
        offset, _ = index.get((1, 0))  # type: ignore[misc]
        bad = bytearray(data)
        bad[offset] ^= 0xFF
        with pytest.raises(CorruptDataError, match=r"inner chunk \(1, 0\)"):
            codec.decode(bytes(bad), spec((4, 4)))

    def test_index_entry_past_the_end(self) -> None:
        codec, data = self.shard()
        s = spec((4, 4))
        index = codec.read_index(data, s)
        offsets = np.array(index.offsets)
        offsets[0, 1] = len(data)
        body = data[: len(data) - codec.index_size(s)]
        forged = body + fmt.encode_index(fmt.ShardIndex(offsets, index.nbytes), codec.index_codecs)
        with pytest.raises(CorruptDataError, match="past the end"):
            codec.decode(forged, s)
