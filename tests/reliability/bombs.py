"""Hostile stored objects for the bounded-resources tests, made in milliseconds.

- ``gzip_bomb(n)``: concatenated gzip members, each 1 MiB of zeros (the gzip codec decodes
  concatenated members), decoding to ``n`` MiB;
- ``zstd_bomb(n, stated)``: one zstd frame of RLE blocks decoding to ``n`` MiB, with no content
  size (``stated=None``) or a lying one;
- ``deflate_bomb(n)``: a raw DEFLATE stream decoding to ``n`` MiB of zeros, and its CRC-32;
- ``write_zip``: a zip archive built by hand from raw member data (so members can be bombs or
  lie about their sizes).
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

MIB = 1 << 20
_ZEROS = bytes(MIB)


def gzip_bomb(mib: int) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    member = c.compress(_ZEROS) + c.flush()
    return member * mib


def zstd_bomb(mib: int, stated: int | None = None) -> bytes:
    """RLE blocks of 128 KiB; ``stated`` is the Frame_Content_Size to claim (8-byte field)."""
    magic = (0xFD2FB528).to_bytes(4, "little")
    if stated is None:
        header = bytes([0x00, 7 << 3])  # no content size, window 2**17
    else:
        header = bytes([0xC0, 7 << 3]) + stated.to_bytes(8, "little")  # 8-byte content size
    blocks = []
    count = mib * 8
    for i in range(count):
        last = 1 if i == count - 1 else 0
        blocks.append(((128 << 10) << 3 | 1 << 1 | last).to_bytes(3, "little") + b"\0")
    return magic + header + b"".join(blocks)


def deflate_bomb(mib: int) -> tuple[bytes, int]:
    """(raw deflate stream of ``mib`` MiB of zeros, CRC-32 of the decoded data)."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    segment = c.compress(_ZEROS) + c.flush(zlib.Z_FULL_FLUSH)
    final = c.compress(_ZEROS) + c.flush()
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(_ZEROS, crc)
    return segment * (mib - 1) + final, crc


def write_zip(path: Path, members: list[tuple[str, int, bytes, int, int]]) -> None:
    """``members``: (name, method (0 stored, 8 deflate), raw data, crc32, declared size)."""
    out = bytearray()
    central = bytearray()
    for name, method, data, crc, size in members:
        raw_name = name.encode()
        offset = len(out)
        out += struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, method, 0, 0, crc, len(data),
                           size, len(raw_name), 0)  # fmt: skip
        out += raw_name + data
        central += struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, method, 0, 0, crc,
                               len(data), size, len(raw_name), 0, 0, 0, 0, 0, offset)  # fmt: skip
        central += raw_name
    start = len(out)
    out += central
    out += struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(members), len(members),
                       len(central), start, 0)  # fmt: skip
    path.write_bytes(bytes(out))
