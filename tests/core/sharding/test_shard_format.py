"""The pure shard format: index size, index encode/decode/validation, shard assembly."""

from __future__ import annotations

import struct
from typing import Any

import crc32c as crc32c_lib
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shard_helpers import BYTES_LE, CRC, chain

from zarrfs.core.codecs.base import BytesBytesCodec
from zarrfs.core.codecs.bytes import BytesCodec
from zarrfs.core.codecs.chain import CodecChain
from zarrfs.core.errors import CorruptDataError, MetadataError
from zarrfs.core.sharding import format as fmt
from zarrfs.core.sharding.format import MISSING, ShardIndex

INDEX = chain(BYTES_LE, CRC)


def raw_index(entries: np.ndarray, index_chain: CodecChain = INDEX) -> bytes:
    """Encode an arbitrary (possibly invalid) ``cps + (2,)`` entry array with the index codecs."""
    cps = entries.shape[:-1]
    data = index_chain.prepare(fmt.index_spec(cps)).encode(entries.astype(np.uint64))
    assert data is not None
    return data


def entries(cps: tuple[int, ...]) -> np.ndarray:
    """An all-missing entry array to edit."""
    return np.full((*cps, 2), MISSING, dtype=np.uint64)


class TestIndexSize:
    def test_spec_example_is_68_bytes(self) -> None:
        # spec: 16 bytes * 4 chunks + 4 bytes checksum
        assert fmt.index_size(INDEX, (2, 2)) == 68

    def test_without_checksum(self) -> None:
        assert fmt.index_size(chain(BYTES_LE), (3, 5, 1)) == 16 * 15

    def test_variable_size_index_codec_is_refused(self) -> None:
        class FakeZip(BytesBytesCodec):
            name = "fakezip"

            @classmethod
            def from_config(cls, configuration: Any) -> FakeZip:
                return cls()

            def configuration(self) -> None:
                return None

            def encode(self, data: Any) -> bytes:
                return bytes(data)

            def decode(self, data: Any, max_size: int) -> bytes:
                return bytes(data)

            def max_encoded_size(self, size: int) -> int:
                return size

        with pytest.raises(MetadataError, match="fixed"):
            fmt.index_size(CodecChain([BytesCodec("little"), FakeZip()]), (2, 2))


class TestIndexRoundTrip:
    def test_encode_decode(self) -> None:
        offsets = np.array([[0, MISSING], [100, 7]], dtype=np.uint64)
        nbytes = np.array([[100, MISSING], [0, 3]], dtype=np.uint64)
        data = fmt.encode_index(ShardIndex(offsets, nbytes), INDEX)
        assert len(data) == 68
        index = fmt.decode_index(data, INDEX, (2, 2), 200)
        np.testing.assert_array_equal(index.offsets, offsets)
        np.testing.assert_array_equal(index.nbytes, nbytes)
        assert index.get((0, 0)) == (0, 100)
        assert index.get((0, 1)) is None
        assert index.get((1, 1)) == (7, 3)
        assert not index.is_empty()
        assert list(index.present()) == [((0, 0), 0, 100), ((1, 0), 100, 0), ((1, 1), 7, 3)]

    def test_exact_bytes(self) -> None:
        # little-endian (offset, nbytes) pairs in C order, then the crc32c of them (little-endian)
        offsets = np.array([5, MISSING], dtype=np.uint64)
        nbytes = np.array([9, MISSING], dtype=np.uint64)
        body = struct.pack("<4Q", 5, 9, MISSING, MISSING)
        expected = body + struct.pack("<I", crc32c_lib.crc32c(body))
        assert fmt.encode_index(ShardIndex(offsets, nbytes), INDEX) == expected

    def test_empty_index(self) -> None:
        index = ShardIndex.empty((3, 2))
        assert index.is_empty()
        assert index.stored_bytes() == 0
        decoded = fmt.decode_index(fmt.encode_index(index, INDEX), INDEX, (3, 2), 100)
        assert decoded.is_empty()
        assert decoded.get((2, 1)) is None

    def test_unknown_shard_size_skips_only_the_bound(self) -> None:
        arr = entries((2,))
        arr[0] = (10**12, 5)
        index = fmt.decode_index(raw_index(arr), INDEX, (2,), None)
        assert index.get((0,)) == (10**12, 5)
        with pytest.raises(CorruptDataError, match="past the end"):
            fmt.decode_index(raw_index(arr), INDEX, (2,), 10**12)


class TestCorruptIndex:
    def test_offset_past_end(self) -> None:
        arr = entries((2, 2))
        arr[1, 0] = (90, 11)  # ends at 101 > 100
        with pytest.raises(CorruptDataError, match=r"entry \(1, 0\)"):
            fmt.decode_index(raw_index(arr), INDEX, (2, 2), 100)

    def test_range_ending_exactly_at_the_end_is_valid(self) -> None:
        arr = entries((2, 2))
        arr[1, 0] = (90, 10)
        assert fmt.decode_index(raw_index(arr), INDEX, (2, 2), 100).get((1, 0)) == (90, 10)

    @pytest.mark.parametrize("shard_size", [None, 2**63])
    def test_overflow(self, shard_size: int | None) -> None:
        arr = entries((2,))
        arr[0] = (2**63, 2**63)  # sum is exactly 2**64: wraps to 0
        with pytest.raises(CorruptDataError, match="overflow"):
            fmt.decode_index(raw_index(arr), INDEX, (2,), shard_size)
        arr[0] = (MISSING - 1, 5)
        with pytest.raises(CorruptDataError, match="overflow"):
            fmt.decode_index(raw_index(arr), INDEX, (2,), shard_size)

    @pytest.mark.parametrize("which", [0, 1])
    def test_one_missing_one_not(self, which: int) -> None:
        arr = entries((2, 2))
        arr[0, 1] = (0, 10)
        arr[0, 1, which] = MISSING
        with pytest.raises(CorruptDataError, match=r"entry \(0, 1\)"):
            fmt.decode_index(raw_index(arr), INDEX, (2, 2), None)

    @pytest.mark.parametrize("delta", [-1, 1, -68])
    def test_wrong_size(self, delta: int) -> None:
        data = fmt.encode_index(ShardIndex.empty((2, 2)), INDEX)
        bad = data[:delta] if delta < 0 else data + b"\0"
        with pytest.raises(CorruptDataError, match="expected 68"):
            fmt.decode_index(bad, INDEX, (2, 2), 1000)

    @pytest.mark.parametrize("position", [0, 30, 64, 67])
    def test_checksum_mismatch(self, position: int) -> None:
        arr = entries((2, 2))
        arr[0, 0] = (0, 10)
        data = bytearray(raw_index(arr))
        data[position] ^= 0x01
        with pytest.raises(CorruptDataError):
            fmt.decode_index(bytes(data), INDEX, (2, 2), 100)

    def test_shard_smaller_than_index(self) -> None:
        with pytest.raises(CorruptDataError, match="smaller"):
            fmt.split_shard(b"\0" * 67, INDEX, (2, 2), "end")


class TestBuildShard:
    @pytest.mark.parametrize("location", ["start", "end"])
    def test_round_trip(self, location: str) -> None:
        chunks = {(1, 0): b"second", (0, 1): b"first!!", (2, 1): b"x"}
        shard = fmt.build_shard(chunks, (3, 2), INDEX, location)
        assert shard is not None
        size = fmt.index_size(INDEX, (3, 2))
        assert len(shard) == size + 7 + 6 + 1
        index = fmt.split_shard(shard, INDEX, (3, 2), location)
        for coords in np.ndindex(3, 2):
            got = fmt.inner_chunk_bytes(shard, index, coords)
            if coords in chunks:
                assert got is not None and bytes(got) == chunks[coords]
            else:
                assert got is None
        # inner chunks are laid out in C order of coords, after the index when it is at the start
        first = size if location == "start" else 0
        assert index.get((0, 1)) == (first, 7)
        assert index.get((1, 0)) == (first + 7, 6)
        assert index.get((2, 1)) == (first + 13, 1)
        assert index.stored_bytes() == 14

    def test_exact_layout_end(self) -> None:
        shard = fmt.build_shard({(1,): b"BB", (0,): b"A"}, (3,), chain(BYTES_LE), "end")
        assert shard == b"ABB" + struct.pack("<6Q", 0, 1, 1, 2, MISSING, MISSING)

    def test_exact_layout_start(self) -> None:
        shard = fmt.build_shard({(2,): b"C"}, (3,), chain(BYTES_LE), "start")
        assert shard == struct.pack("<6Q", MISSING, MISSING, MISSING, MISSING, 48, 1) + b"C"

    def test_no_chunks_is_none(self) -> None:
        assert fmt.build_shard({}, (2, 2), INDEX, "end") is None

    def test_coords_outside_the_grid(self) -> None:
        with pytest.raises(ValueError):
            fmt.build_shard({(2, 0): b"a"}, (2, 2), INDEX, "end")

    def test_index_read_from_the_configured_end(self) -> None:
        shard = fmt.build_shard({(0, 0): b"abc"}, (2, 2), INDEX, "start")
        assert shard is not None
        with pytest.raises(CorruptDataError):
            fmt.split_shard(shard, INDEX, (2, 2), "end")


@settings(max_examples=60, deadline=None)
@given(
    cps=st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple),
    location=st.sampled_from(["start", "end"]),
    data=st.data(),
)
def test_build_split_round_trip(cps: tuple[int, ...], location: str, data: st.DataObject) -> None:
    all_coords = [tuple(int(i) for i in c) for c in np.ndindex(*cps)]
    chosen = data.draw(st.lists(st.sampled_from(all_coords), unique=True))
    chunks = {c: data.draw(st.binary(min_size=0, max_size=20)) for c in chosen}
    shard = fmt.build_shard(chunks, cps, INDEX, location)
    if not chunks:
        assert shard is None
        return
    assert shard is not None
    assert len(shard) == fmt.index_size(INDEX, cps) + sum(len(b) for b in chunks.values())
    index = fmt.split_shard(shard, INDEX, cps, location)
    for c in all_coords:
        got = fmt.inner_chunk_bytes(shard, index, c)
        assert (None if got is None else bytes(got)) == chunks.get(c)
    again = fmt.decode_index(fmt.encode_index(index, INDEX), INDEX, cps, len(shard))
    assert again.same_as(index)
