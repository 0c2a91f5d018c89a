"""The crc32c codec: checksum layout, verification, bounds."""

from __future__ import annotations

import crc32c as crc32c_lib
import pytest

from zarrfs.core.codecs.base import parse_codec
from zarrfs.core.codecs.crc32c import Crc32cCodec, crc32c
from zarrfs.core.errors import CorruptDataError, MetadataError


def test_known_vector() -> None:
    # RFC 3720 B.4 check value of "123456789"
    assert crc32c(b"123456789") == 0xE3069283
    assert Crc32cCodec().encode(b"123456789") == b"123456789" + bytes.fromhex("839206e3")


@pytest.mark.parametrize("payload", [b"", b"x", bytes(range(256)) * 9])
def test_round_trip(payload: bytes) -> None:
    codec = Crc32cCodec()
    enc = codec.encode(memoryview(payload))
    assert len(enc) == len(payload) + 4 == codec.max_encoded_size(len(payload))
    assert enc[-4:] == crc32c_lib.crc32c(payload).to_bytes(4, "little")
    assert codec.decode(enc, len(payload)) == payload


@pytest.mark.parametrize("flip", [0, 5, -1, -4])
def test_any_flipped_byte_is_detected(flip: int) -> None:
    enc = bytearray(Crc32cCodec().encode(b"hello world"))
    enc[flip] ^= 0x10
    with pytest.raises(CorruptDataError, match="crc32c checksum mismatch"):
        Crc32cCodec().decode(bytes(enc), 100)


@pytest.mark.parametrize("data", [b"", b"abc"])
def test_too_short(data: bytes) -> None:
    with pytest.raises(CorruptDataError, match="shorter than its 4-byte checksum"):
        Crc32cCodec().decode(data, 100)


def test_payload_larger_than_bound() -> None:
    enc = Crc32cCodec().encode(b"0123456789")
    with pytest.raises(CorruptDataError, match="more than the 9 allowed"):
        Crc32cCodec().decode(enc, 9)


def test_configuration() -> None:
    for doc in ["crc32c", {"name": "crc32c"}, {"name": "crc32c", "configuration": {}}]:
        codec = parse_codec(doc)
        assert isinstance(codec, Crc32cCodec)
        assert codec.to_json() == {"name": "crc32c"}
    with pytest.raises(MetadataError, match="unknown configuration keys"):
        Crc32cCodec.from_config({"seed": 1})
