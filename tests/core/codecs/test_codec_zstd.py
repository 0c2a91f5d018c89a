"""The zstd codec: configuration, numcodecs interop, frame walking and bounded decoding."""

from __future__ import annotations

import ctypes
import ctypes.util
import struct

import numcodecs.zstd
import pytest
from codec_helpers import assert_decodes_into_reused_blocks, python_peak_memory

from zarrfs.core.codecs.base import parse_codec
from zarrfs.core.codecs.zstd import ZstdCodec, scan_frames
from zarrfs.core.errors import CorruptDataError, MetadataError

PAYLOADS = [b"a", bytes(range(256)) * 40, b"\0" * 300_000, bytes(range(200)) * 2000]


def streamed_frame(payload: bytes) -> bytes:
    """A frame written by zstd's streaming API without a pledged size: no content size."""
    lib = ctypes.CDLL(ctypes.util.find_library("zstd") or numcodecs.zstd.__file__)

    class Buf(ctypes.Structure):
        _fields_ = [("ptr", ctypes.c_void_p), ("size", ctypes.c_size_t), ("pos", ctypes.c_size_t)]

    lib.ZSTD_createCCtx.restype = ctypes.c_void_p
    lib.ZSTD_freeCCtx.argtypes = [ctypes.c_void_p]
    lib.ZSTD_compressStream2.restype = ctypes.c_size_t
    lib.ZSTD_compressStream2.argtypes = [
        ctypes.c_void_p,
        ctypes.POINTER(Buf),
        ctypes.POINTER(Buf),
        ctypes.c_int,
    ]
    cctx = lib.ZSTD_createCCtx()
    src = ctypes.create_string_buffer(payload, len(payload))
    cap = len(payload) + 1024
    dst = ctypes.create_string_buffer(cap)
    inp = Buf(ctypes.cast(src, ctypes.c_void_p), len(payload), 0)
    out = Buf(ctypes.cast(dst, ctypes.c_void_p), cap, 0)
    try:
        lib.ZSTD_compressStream2(cctx, ctypes.byref(out), ctypes.byref(inp), 0)  # continue
        remaining = lib.ZSTD_compressStream2(cctx, ctypes.byref(out), ctypes.byref(inp), 2)
        assert remaining == 0
    finally:
        lib.ZSTD_freeCCtx(cctx)
    frame = ctypes.string_at(dst, out.pos)
    assert scan_frames(frame)[0].content_size is None
    return frame


def skippable(content: bytes) -> bytes:
    return struct.pack("<II", 0x184D2A53, len(content)) + content


@pytest.mark.parametrize("checksum", [False, True])
@pytest.mark.parametrize("level", [-5, 0, 1, 3, 19])
@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: f"{len(p)}B")
def test_round_trip_and_numcodecs_interop(level: int, checksum: bool, payload: bytes) -> None:
    codec = ZstdCodec(level, checksum)
    ours = codec.encode(payload)
    assert len(ours) <= codec.max_encoded_size(len(payload))
    assert scan_frames(ours)[0].content_size == len(payload)
    assert bool(ours[4] & 0x04) == checksum
    assert codec.decode(ours, len(payload)) == payload
    assert bytes(numcodecs.zstd.Zstd(level=level, checksum=checksum).decode(ours)) == payload
    theirs = numcodecs.zstd.Zstd(level=level, checksum=checksum).encode(payload)
    assert codec.decode(theirs, len(payload)) == payload


def test_empty_payload() -> None:
    enc = ZstdCodec().encode(b"")
    assert ZstdCodec().decode(enc, 0) == b""


def test_concatenated_and_skippable_frames() -> None:
    a, b = ZstdCodec(3).encode(b"abc" * 100), ZstdCodec(3).encode(b"xyz" * 50)
    stream = skippable(b"meta") + a + skippable(b"") + b
    assert [f.skippable for f in scan_frames(stream)] == [True, False, True, False]
    assert ZstdCodec().decode(stream, 450) == b"abc" * 100 + b"xyz" * 50
    with pytest.raises(CorruptDataError, match="claims 450 decoded bytes"):
        ZstdCodec().decode(stream, 449)


def test_frame_without_content_size_is_decoded_within_the_bound() -> None:
    payload = bytes(range(256)) * 1000
    frame = streamed_frame(payload)
    assert ZstdCodec().decode(frame, len(payload)) == payload
    assert ZstdCodec().decode(frame, len(payload) + 100) == payload
    assert ZstdCodec().decode(frame + ZstdCodec().encode(b"!"), len(payload) + 1) == payload + b"!"
    with pytest.raises(CorruptDataError, match="more than the"):
        ZstdCodec().decode(frame, len(payload) - 1)


def test_content_size_bomb_refused_before_decompressing() -> None:
    bomb = ZstdCodec(3).encode(b"\0" * (64 << 20))
    assert len(bomb) < 100_000
    with python_peak_memory() as peak:
        with pytest.raises(CorruptDataError, match="claims 67108864 decoded bytes"):
            ZstdCodec().decode(bomb, 1 << 20)
        assert peak() < 1 << 20


def test_streamed_bomb_refused_with_bounded_memory() -> None:
    bomb = streamed_frame(b"\0" * (64 << 20))
    assert len(bomb) < 100_000
    with python_peak_memory() as peak:
        with pytest.raises(CorruptDataError, match="more than the 1048576 bytes allowed"):
            ZstdCodec().decode(bomb, 1 << 20)
        assert peak() < 3 << 20


@pytest.mark.parametrize("claim", [1000, 99_999, 100_001, 200_000])
def test_lying_content_size_is_corrupt(claim: int) -> None:
    enc = bytearray(ZstdCodec(3).encode(b"\0" * 100_000))
    assert enc[4] >> 6 == 2  # 4-byte content size follows the descriptor (single segment)
    enc[5:9] = claim.to_bytes(4, "little")
    with pytest.raises(CorruptDataError, match="zstd"):
        ZstdCodec().decode(bytes(enc), 1 << 20)


@pytest.mark.parametrize(
    "mangle, message",
    [
        (lambda s: b"", "no data frame"),
        (lambda s: s[:3], "truncated"),
        (lambda s: s[:-1], "truncated"),
        (lambda s: s + b"\0", "truncated|magic"),
        (lambda s: s + b"garbage!", "magic"),
        (lambda s: b"\x00" + s[1:], "magic"),
        (lambda s: s[:4] + bytes([s[4] | 0x08]) + s[5:], "reserved bit"),
        (lambda s: s[:-4] + bytes(4), "checksum"),
        (lambda s: skippable(b"only metadata"), "no data frame"),
    ],
    ids=[
        "empty",
        "cut-magic",
        "cut-checksum",
        "nul",
        "garbage",
        "magic",
        "reserved",
        "bad-xxh",
        "only-skippable",
    ],
)
def test_corrupt_streams(mangle, message: str) -> None:  # type: ignore[no-untyped-def]
    enc = ZstdCodec(3, checksum=True).encode(bytes(range(256)) * 40)
    with pytest.raises(CorruptDataError, match=message):
        ZstdCodec().decode(mangle(enc), 1 << 20)


def test_dictionary_frames_are_refused() -> None:
    enc = ZstdCodec(3).encode(b"hello" * 10)
    # rebuild the header with a 1-byte dictionary id: descriptor | 0x01, id after the descriptor
    with_dict = enc[:4] + bytes([enc[4] | 0x01, 7]) + enc[5:]
    with pytest.raises(CorruptDataError, match="dictionary"):
        ZstdCodec().decode(with_dict, 1000)


def test_configuration() -> None:
    doc = {"name": "zstd", "configuration": {"level": -3, "checksum": True}}
    assert parse_codec(doc).to_json() == doc
    assert parse_codec({"name": "zstd"}).to_json() == {
        "name": "zstd",
        "configuration": {"level": 0, "checksum": False},
    }


@pytest.mark.parametrize(
    "conf, field",
    [
        ({"level": 23}, "level"),
        ({"level": -(1 << 17) - 1}, "level"),
        ({"level": 1.5}, "level"),
        ({"level": True}, "level"),
        ({"checksum": 1}, "checksum"),
        ({"checksum": "yes"}, "checksum"),
        ({"level": 1, "dict": "x"}, "dict"),
    ],
    ids=str,
)
def test_invalid_configuration(conf: dict, field: str) -> None:
    with pytest.raises(MetadataError, match=field):
        ZstdCodec.from_config(conf)


# -- one frame of 1 MiB or more: decoded into a reused block ---------------------------------

BIG = bytes(range(251)) * 8400  # ~2 MiB


def test_a_big_frame_is_decoded_into_a_reused_block(monkeypatch: pytest.MonkeyPatch) -> None:
    assert_decodes_into_reused_blocks(
        monkeypatch,
        lambda stream: ZstdCodec().decode(stream, len(BIG)),
        ZstdCodec(3).encode(BIG),
        bytes(numcodecs.zstd.compress(BIG, 1)),
        BIG,
    )


@pytest.mark.parametrize("delta", [-1, 1, -4096])
def test_a_big_frame_lying_about_its_size_is_corrupt(delta: int) -> None:
    enc = bytearray(ZstdCodec(3).encode(BIG))
    assert enc[4] >> 6 == 2  # 4-byte content size follows the descriptor (single segment)
    enc[5:9] = (len(BIG) + delta).to_bytes(4, "little")
    with pytest.raises(CorruptDataError, match="zstd"):
        ZstdCodec().decode(bytes(enc), 4 << 20)


def test_big_frames_checksummed_concatenated_or_over_the_bound() -> None:
    enc = ZstdCodec(3, checksum=True).encode(BIG)
    assert bytes(ZstdCodec().decode(enc, len(BIG))) == BIG
    with pytest.raises(CorruptDataError, match="checksum"):
        ZstdCodec().decode(enc[:-4] + bytes(4), len(BIG))
    two = ZstdCodec(1).encode(BIG[:5000]) + ZstdCodec(1).encode(BIG[5000:])
    assert bytes(ZstdCodec().decode(two, len(BIG))) == BIG
    with pytest.raises(CorruptDataError, match="more than"):
        ZstdCodec().decode(enc, len(BIG) - 1)
