"""The ``crc32c`` codec (bytes -> bytes): appends a CRC32C checksum (RFC 3720).

Spec: https://zarr-specs.readthedocs.io/en/latest/v3/codecs/crc32c/ (specs/v3/codecs/crc32c.rst)
Name: ``crc32c``
Example: ``{"name": "crc32c"}`` (no configuration; an empty object is accepted)

Invariants:
- Encoded = input + CRC32C(input) as a 4-byte little-endian unsigned integer; the encoded
  size is exactly ``n + 4``.
- ``decode`` returns the input only after the checksum matches; a stream shorter than 4 bytes,
  a mismatch, or a payload longer than ``max_size`` is ``CorruptDataError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import crc32c as _crc32c_lib

from zarrfs.core.codecs._config import refuse_unknown_keys
from zarrfs.core.codecs.base import BytesBytesCodec, register_codec
from zarrfs.core.errors import CorruptDataError

_CHECKSUM_SIZE = 4


def crc32c(data: bytes | memoryview) -> int:
    """The CRC32C (Castagnoli) of ``data``."""
    return int(_crc32c_lib.crc32c(data))


class Crc32cCodec(BytesBytesCodec):
    """CRC32C checksum appended to the stream."""

    name = "crc32c"

    @classmethod
    def from_config(cls, configuration: Mapping[str, Any]) -> Crc32cCodec:
        refuse_unknown_keys(cls.name, configuration, ())
        return cls()

    def configuration(self) -> None:
        return None

    def encode(self, data: bytes | memoryview) -> bytes:
        return bytes(data) + crc32c(data).to_bytes(_CHECKSUM_SIZE, "little")

    def decode(self, data: bytes | memoryview, max_size: int) -> bytes:
        view = memoryview(data).cast("B")
        if len(view) < _CHECKSUM_SIZE:
            raise CorruptDataError(
                f"crc32c: stream of {len(view)} bytes is shorter than its 4-byte checksum"
            )
        payload = view[:-_CHECKSUM_SIZE]
        if len(payload) > max_size:
            raise CorruptDataError(
                f"crc32c: payload of {len(payload)} bytes is more than the {max_size} allowed"
            )
        stored = int.from_bytes(view[-_CHECKSUM_SIZE:], "little")
        if crc32c(payload) != stored:
            raise CorruptDataError("crc32c checksum mismatch")
        return bytes(payload)

    def max_encoded_size(self, size: int) -> int:
        return size + _CHECKSUM_SIZE


register_codec(Crc32cCodec)
