"""The gzip codec: configuration, numcodecs interop, bounded and strict decoding."""

from __future__ import annotations

import gzip as std_gzip
import io
import zlib

import numcodecs
import pytest
from codec_helpers import assert_decodes_into_reused_blocks, python_peak_memory

from zarrfs.core.codecs import gzip as gzip_codec
from zarrfs.core.codecs.base import parse_codec
from zarrfs.core.codecs.gzip import GzipCodec, libdeflate_available
from zarrfs.core.errors import CorruptDataError, MetadataError

PAYLOADS = [b"", b"a", bytes(range(256)) * 40, b"\0" * 100_000]


@pytest.mark.parametrize("level", range(10))
@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: f"{len(p)}B")
def test_round_trip_and_numcodecs_interop(level: int, payload: bytes) -> None:
    codec = GzipCodec(level)
    ours = codec.encode(payload)
    assert len(ours) <= codec.max_encoded_size(len(payload))
    assert codec.decode(ours, len(payload)) == payload
    assert bytes(numcodecs.GZip(level).decode(ours)) == payload
    theirs = numcodecs.GZip(level).encode(payload)
    assert codec.decode(theirs, len(payload)) == payload


def test_encoding_is_deterministic() -> None:
    assert GzipCodec(5).encode(b"x" * 1000) == GzipCodec(5).encode(b"x" * 1000)


def test_multiple_members_and_zero_padding_like_python_gzip() -> None:
    stream = std_gzip.compress(b"abc", mtime=0) + std_gzip.compress(b"def") + b"\0\0\0"
    assert std_gzip.GzipFile(fileobj=io.BytesIO(stream)).read() == b"abcdef"
    assert GzipCodec().decode(stream, 6) == b"abcdef"
    with pytest.raises(CorruptDataError, match="more than the 5"):
        GzipCodec().decode(stream, 5)


@pytest.mark.parametrize(
    "mangle, message",
    [
        (lambda s: s[:-1], "truncated"),
        (lambda s: s[: len(s) // 2], "truncated"),
        (lambda s: s + b"junk", "bad magic"),
        (
            lambda s: s[:-8] + b"\0\0\0\0" + s[-4:],
            "(?i)incorrect (data check|checksum)",
        ),  # zlib | ISA-L
        (lambda s: zlib.compress(b"hello"), "bad magic"),
        (lambda s: b"", "empty"),
    ],
    ids=["cut-1", "cut-half", "trailing-junk", "bad-crc", "zlib-wrapper", "empty"],
)
def test_corrupt_streams(mangle, message: str) -> None:  # type: ignore[no-untyped-def]
    stream = GzipCodec(6).encode(b"hello world " * 100)
    with pytest.raises(CorruptDataError, match=message):
        GzipCodec().decode(mangle(stream), 10_000)


def test_bomb_is_refused_with_bounded_memory() -> None:
    bomb = GzipCodec(9).encode(b"\0" * (64 << 20))
    assert len(bomb) < 100_000
    with python_peak_memory() as peak:
        with pytest.raises(CorruptDataError, match="more than the 1048576 bytes allowed"):
            GzipCodec().decode(bomb, 1 << 20)
        assert peak() < 4 << 20


def test_configuration() -> None:
    doc = {"name": "gzip", "configuration": {"level": 1}}
    assert parse_codec(doc).to_json() == doc
    assert parse_codec({"name": "gzip"}).to_json() == {
        "name": "gzip",
        "configuration": {"level": 5},
    }


@pytest.mark.parametrize(
    "conf",
    [
        {"level": 10},
        {"level": -1},
        {"level": "1"},
        {"level": True},
        {"level": 1.0},
        {"level": 1, "mtime": 0},
    ],
    ids=str,
)
def test_invalid_configuration(conf: dict) -> None:
    with pytest.raises(MetadataError, match="level|mtime"):
        GzipCodec.from_config(conf)


@pytest.mark.parametrize("level", [0, 1, 3, 4, 9])
def test_every_level_writes_standard_gzip(level: int) -> None:
    data = bytes(range(256)) * 512 + b"tail"
    stream = GzipCodec(level).encode(data)
    assert std_gzip.decompress(stream) == data  # the reference decoder, not ours
    assert GzipCodec().decode(stream, len(data)) == data
    if level:
        assert len(stream) < len(data) // 4


# -- one member of 1 MiB or more: inflated by libdeflate into a reused block -----------------

BIG = (bytes(range(256)) * 8192) + b"tail" * 1000  # ~2 MiB, compressible


@pytest.mark.skipif(not libdeflate_available(), reason="libdeflate.so.0 not installed")
def test_a_big_member_is_inflated_into_a_reused_block(monkeypatch: pytest.MonkeyPatch) -> None:
    assert_decodes_into_reused_blocks(
        monkeypatch,
        lambda stream: GzipCodec().decode(stream, len(BIG)),
        GzipCodec(1).encode(BIG),
        numcodecs.GZip(6).encode(BIG),
        BIG,
    )


@pytest.mark.parametrize(
    "mangle, message",
    [
        (lambda s: s[:-1], "truncated|incorrect length"),
        (lambda s: s[: len(s) // 2], "truncated"),
        (lambda s: s + b"junk", "bad magic"),
        (lambda s: s[:-8] + b"\0\0\0\0" + s[-4:], "(?i)incorrect (data check|checksum)"),
        # the trailer's length one short: libdeflate's buffer is too small, the stream too long
        (
            lambda s: s[:-4] + (len(BIG) - 1).to_bytes(4, "little"),
            "(?i)incorrect (length|checksum)|more than",
        ),
        # a trailer claiming more than allowed is never given a block of that size
        (
            lambda s: s[:-4] + (1 << 31).to_bytes(4, "little"),
            "(?i)incorrect (length|checksum)|more than",
        ),
    ],
    ids=["cut-1", "cut-half", "trailing-junk", "bad-crc", "short-isize", "huge-isize"],
)
def test_big_corrupt_streams_are_refused(mangle, message: str) -> None:  # type: ignore[no-untyped-def]
    stream = GzipCodec(6).encode(BIG)
    with pytest.raises(CorruptDataError, match=message):
        GzipCodec().decode(mangle(stream), len(BIG))


def test_big_members_with_padding_or_several_members() -> None:
    padded = GzipCodec(1).encode(BIG) + b"\0" * 7
    assert bytes(GzipCodec().decode(padded, len(BIG))) == BIG
    two = std_gzip.compress(BIG[:1000], mtime=0) + std_gzip.compress(BIG[1000:], mtime=0)
    assert bytes(GzipCodec().decode(two, len(BIG))) == BIG
    with pytest.raises(CorruptDataError, match="more than"):
        GzipCodec().decode(GzipCodec(1).encode(BIG), len(BIG) - 1)


def test_without_libdeflate_big_members_go_through_the_streaming_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gzip_codec, "_gzip_decompress_ex", None)
    assert not libdeflate_available()
    out = GzipCodec().decode(GzipCodec(1).encode(BIG), len(BIG))
    assert isinstance(out, bytes) and out == BIG
