"""The blosc codec: configuration, numcodecs interop over every compressor and shuffle,
header checks and bounded decoding."""

from __future__ import annotations

import numcodecs.blosc
import numpy as np
import pytest
from codec_helpers import python_peak_memory

from zarrfs.core.codecs.base import parse_codec
from zarrfs.core.codecs.blosc import SHUFFLES, BloscCodec, available_cnames
from zarrfs.core.errors import CorruptDataError, MetadataError, UnsupportedError

CNAMES = available_cnames()
PAYLOAD = np.linspace(0, 100, 5000, dtype="<f4").tobytes()


def config(**over: object) -> dict:
    conf = {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 4, "blocksize": 0}
    conf.update(over)
    return conf


def test_installed_blosc_has_the_usual_compressors() -> None:
    assert {"blosclz", "lz4", "lz4hc", "zlib", "zstd"} <= set(CNAMES)


@pytest.mark.parametrize("shuffle", list(SHUFFLES))
@pytest.mark.parametrize("cname", CNAMES)
def test_numcodecs_interop(cname: str, shuffle: str) -> None:
    codec = BloscCodec.from_config(config(cname=cname, shuffle=shuffle))
    ours = codec.encode(PAYLOAD)
    assert len(ours) <= codec.max_encoded_size(len(PAYLOAD))
    assert bytes(numcodecs.blosc.decompress(ours)) == PAYLOAD
    flags = ours[2]
    assert bool(flags & 0x01) == (shuffle == "shuffle") or flags & 0x02  # memcpyed: no shuffle
    theirs = numcodecs.blosc.Blosc(
        cname=cname, clevel=5, shuffle=SHUFFLES[shuffle], typesize=4
    ).encode(PAYLOAD)
    assert codec.decode(theirs, len(PAYLOAD)) == PAYLOAD
    assert codec.decode(ours, len(PAYLOAD)) == PAYLOAD


@pytest.mark.parametrize("clevel", [0, 1, 9])
@pytest.mark.parametrize("payload", [b"", b"z", bytes(range(256)) * 300], ids=len)
def test_round_trip_levels_and_sizes(clevel: int, payload: bytes) -> None:
    codec = BloscCodec.from_config(config(clevel=clevel, blocksize=1024))
    assert codec.decode(codec.encode(payload), len(payload)) == payload


def test_typesize_is_recorded_in_the_header() -> None:
    enc = BloscCodec.from_config(config(typesize=8)).encode(PAYLOAD)
    assert enc[3] == 8


def test_configuration_round_trip() -> None:
    doc = {"name": "blosc", "configuration": config(cname="zstd", clevel=1, shuffle="bitshuffle")}
    assert parse_codec(doc).to_json() == doc


def test_optional_typesize_and_blocksize() -> None:
    codec = BloscCodec.from_config({"cname": "lz4", "clevel": 5, "shuffle": "noshuffle"})
    assert codec.configuration() == {
        "cname": "lz4",
        "clevel": 5,
        "shuffle": "noshuffle",
        "blocksize": 0,
    }
    # without typesize, shuffled encoding still produces a stream everyone decodes
    codec = BloscCodec.from_config({"cname": "lz4", "clevel": 5, "shuffle": "shuffle"})
    enc = codec.encode(PAYLOAD)
    assert bytes(numcodecs.blosc.decompress(enc)) == PAYLOAD
    assert "typesize" not in codec.configuration()


@pytest.mark.parametrize(
    "conf, field",
    [
        (config(cname="lzma"), "cname"),
        (config(clevel=10), "clevel"),
        (config(clevel=-1), "clevel"),
        (config(shuffle=1), "shuffle"),
        (config(shuffle="auto"), "shuffle"),
        (config(typesize=0), "typesize"),
        (config(typesize="4"), "typesize"),
        (config(blocksize=-1), "blocksize"),
        (config(extra=1), "extra"),
        ({"clevel": 5, "shuffle": "shuffle"}, "cname"),
        ({"cname": "lz4", "shuffle": "shuffle"}, "clevel"),
        ({"cname": "lz4", "clevel": 5}, "shuffle"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_invalid_configuration(conf: dict, field: str) -> None:
    with pytest.raises(MetadataError, match=field):
        BloscCodec.from_config(conf)


@pytest.mark.skipif("snappy" in CNAMES, reason="this blosc build has snappy")
def test_snappy_unavailable_is_unsupported() -> None:
    with pytest.raises(UnsupportedError, match="snappy"):
        BloscCodec.from_config(config(cname="snappy"))


def _header(nbytes: int, cbytes: int, flags: int = 0x21) -> bytes:
    return (
        bytes([2, 1, flags, 4])
        + nbytes.to_bytes(4, "little")
        + (0).to_bytes(4, "little")
        + (cbytes.to_bytes(4, "little"))
    )


def test_claimed_size_over_bound_refused_before_decompressing() -> None:
    codec = BloscCodec.from_config(config())
    lie = _header(2_000_000_000, 32) + b"\0" * 16
    with python_peak_memory() as peak:
        with pytest.raises(CorruptDataError, match="claims 2000000000 decoded bytes"):
            codec.decode(lie, 1 << 20)
        assert peak() < 1 << 20


def test_real_bomb_refused_with_bounded_memory() -> None:
    codec = BloscCodec.from_config(config(cname="zstd", clevel=9))
    bomb = codec.encode(b"\0" * (64 << 20))
    assert len(bomb) < 1 << 20
    with python_peak_memory() as peak:
        with pytest.raises(CorruptDataError, match="more than the 1048576 allowed"):
            codec.decode(bomb, 1 << 20)
        assert peak() < 4 << 20


@pytest.mark.parametrize(
    "mangle, message",
    [
        (lambda s: s[:10], "shorter than the 16-byte header"),
        (lambda s: s[:-1], "compressed bytes"),
        (lambda s: s[:12] + (5).to_bytes(4, "little") + s[16:], "compressed bytes"),
        (lambda s: s[:4] + (100).to_bytes(4, "little") + s[8:], "blosc"),
        (lambda s: s[:16] + bytes(len(s) - 16), "blosc"),
    ],
    ids=["short", "cut", "cbytes<16", "nbytes-lie", "zeroed-payload"],
)
def test_corrupt_streams(mangle, message: str) -> None:  # type: ignore[no-untyped-def]
    codec = BloscCodec.from_config(config())
    enc = codec.encode(PAYLOAD)
    with pytest.raises(CorruptDataError, match=message):
        codec.decode(mangle(enc), len(PAYLOAD))


def test_memcpyed_header_must_match_payload() -> None:
    codec = BloscCodec.from_config(config(clevel=0))
    enc = codec.encode(b"abcdefgh")
    assert enc[2] & 0x02
    assert codec.decode(enc, 8) == b"abcdefgh"
    longer = enc[:12] + (len(enc) + 2).to_bytes(4, "little") + enc[16:] + b"xx"
    with pytest.raises(CorruptDataError, match="uncompressed payload of 10 bytes"):
        codec.decode(longer, 100)


def test_trailing_bytes_after_the_stream_are_ignored_like_numcodecs() -> None:
    codec = BloscCodec.from_config(config())
    enc = codec.encode(PAYLOAD) + b"trailing"
    assert bytes(numcodecs.blosc.decompress(enc)) == PAYLOAD
    assert codec.decode(enc, len(PAYLOAD)) == PAYLOAD


@pytest.mark.parametrize("blocksize", [0, 1 << 16])
@pytest.mark.parametrize("typesize", [None, 1, 8])
@pytest.mark.parametrize("shuffle", list(SHUFFLES))
@pytest.mark.parametrize("cname", CNAMES)
def test_encode_into_a_block_is_what_numcodecs_writes(
    cname: str, shuffle: str, typesize: int | None, blocksize: int
) -> None:
    """``encode_buffer`` compresses with c-blosc into a reused block: byte for byte what
    numcodecs writes from a thread other than the main one (where the daemon encodes)."""
    import threading

    from zarrfs.core.buffers import MIN_BLOCK

    codec = BloscCodec(cname, 3, shuffle, typesize, blocksize)
    data = np.cumsum(np.random.default_rng(3).standard_normal(MIN_BLOCK // 4, np.float32))
    raw = memoryview(data.astype("<f4").view(np.uint8))
    got: dict[str, object] = {}

    def encode() -> None:
        got["ours"] = codec.encode_buffer(raw)
        got["theirs"] = codec.encode(raw)

    worker = threading.Thread(target=encode)
    worker.start()
    worker.join()
    ours = got["ours"]
    assert isinstance(ours, memoryview) and ours.readonly  # a view of a block, not bytes
    assert bytes(ours) == got["theirs"]
    assert bytes(numcodecs.blosc.decompress(bytes(ours))) == bytes(raw)


def test_encode_buffer_falls_back_to_numcodecs(monkeypatch: pytest.MonkeyPatch) -> None:
    from zarrfs.core.codecs import blosc

    monkeypatch.setattr(blosc, "_compress_ctx", None)
    codec = BloscCodec.from_config(config())
    out = codec.encode_buffer(PAYLOAD)
    assert isinstance(out, bytes) and out == codec.encode(PAYLOAD)
