"""The ``zstd`` codec (bytes -> bytes): Zstandard frames (RFC 8878).

Spec: no Zarr spec file; follows zarr-python 3's ``zstd`` codec (https://github.com/zarr-developers/
zarr-extensions/tree/main/codecs/zstd), which numcodecs' ``Zstd`` implements.
Name: ``zstd``
Example: ``{"name": "zstd", "configuration": {"level": 0, "checksum": false}}``

Invariants:
- ``level`` is an integer in [-131072, 22] (0 means zstd's default level; negative levels are
  the fast modes); ``checksum`` is a boolean (content checksum in the frame). Absent fields take
  zarr-python's defaults (0, false); the configuration is always written in full.
- ``decode`` first walks the frame structure itself (RFC 8878 section 3.1: frame header, block
  headers, optional checksum; skippable frames are skipped): a truncated frame, a reserved bit
  or block type, a dictionary id, or trailing bytes that are not a frame is ``CorruptDataError``.
  If every frame states its Frame_Content_Size, their sum must not exceed ``max_size`` and the
  frames are decoded by numcodecs into exactly that many bytes. A frame without a content size
  (streaming writers) is decoded by the zstd library into a buffer of ``max_size`` bytes, so it
  can never produce more. Concatenated frames decode to the concatenation of their contents.
- A stream of exactly one frame is decoded into a buffer of exactly its stated content size
  from ``buffers.take`` (a reused block from 1 MiB on, ``core/buffers.py``) instead of fresh
  memory, whose first touch costs a fifth of the decode on the benchmark machine; the zstd
  library fails a frame whose content differs from its stated size, so no byte of the
  buffer is left undecoded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numcodecs.zstd

from zarrfs.core.codecs._bounded import (
    check_claimed_size,
    decompress_into_block,
    encoded_size_bound,
    zstd_decompress_into,
)
from zarrfs.core.codecs._config import bool_field, int_field, refuse_unknown_keys
from zarrfs.core.codecs.base import BytesBytesCodec, register_codec
from zarrfs.core.errors import CorruptDataError

MIN_LEVEL = -(1 << 17)  # ZSTD_minCLevel()
MAX_LEVEL = 22
_FRAME_MAGIC = 0xFD2FB528
_SKIPPABLE_MAGIC = 0x184D2A50  # the low 4 bits are free
_BLOCK_MAX = 1 << 17  # Block_Maximum_Size upper limit (128 KiB)


class ZstdCodec(BytesBytesCodec):
    """Zstandard compression at ``level``, with an optional content checksum."""

    name = "zstd"
    decodes_buffers = True

    def __init__(self, level: int = 0, checksum: bool = False) -> None:
        self.level, self.checksum = _parse({"level": level, "checksum": checksum})
        self._compressor = numcodecs.zstd.Zstd(level=self.level, checksum=self.checksum)

    @classmethod
    def from_config(cls, configuration: Mapping[str, Any]) -> ZstdCodec:
        return cls(*_parse(configuration))

    def configuration(self) -> dict[str, Any]:
        return {"level": self.level, "checksum": self.checksum}

    def encode(self, data: bytes | memoryview) -> bytes:
        return bytes(self._compressor.encode(data))

    def decode(self, data: bytes | memoryview, max_size: int) -> bytes | memoryview:
        # a memoryview is decoded in place (the engine may read chunks into reused buffers)
        raw = data if isinstance(data, bytes) else memoryview(data).cast("B")
        frames = scan_frames(raw)
        sizes = [f.content_size for f in frames if not f.skippable]
        if not sizes:
            raise CorruptDataError("zstd: stream holds no data frame")
        if any(size is None for size in sizes):
            return zstd_decompress_into(bytes(raw), max_size)
        total = sum(s for s in sizes if s is not None)
        check_claimed_size("zstd", total, max_size)
        if total == 0:
            return b""
        if len(frames) == 1:
            return decompress_into_block("zstd", numcodecs.zstd.decompress, raw, total)
        try:
            # numcodecs sizes its output from the frame headers just checked against the bound,
            # and the zstd library verifies every frame's content against its stated size.
            out = bytes(numcodecs.zstd.decompress(raw))
        except (RuntimeError, ValueError) as exc:
            raise CorruptDataError(f"zstd: {exc}") from None
        if len(out) != total:
            raise CorruptDataError(f"zstd: decoded {len(out)} bytes, frames state {total}")
        return out

    def max_encoded_size(self, size: int) -> int:
        return encoded_size_bound(size)


@dataclass(frozen=True)
class Frame:
    """One frame of a zstd stream: its byte range and stated content size (None: absent)."""

    start: int
    end: int
    content_size: int | None
    skippable: bool = False


def scan_frames(data: bytes | memoryview) -> list[Frame]:
    """Walk every frame of ``data`` without decompressing; raise ``CorruptDataError`` if the
    structure is invalid or the frames do not cover ``data`` exactly."""
    frames: list[Frame] = []
    pos = 0
    while pos < len(data):
        frames.append(_scan_frame(data, pos))
        pos = frames[-1].end
    return frames


def _need(data: bytes | memoryview, pos: int, count: int, what: str) -> None:
    if pos + count > len(data):
        raise CorruptDataError(f"zstd: truncated stream (in {what} at byte {pos})")


def _scan_frame(data: bytes | memoryview, start: int) -> Frame:
    _need(data, start, 4, "magic number")
    magic = int.from_bytes(data[start : start + 4], "little")
    if magic & 0xFFFFFFF0 == _SKIPPABLE_MAGIC:
        _need(data, start + 4, 4, "skippable frame size")
        size = int.from_bytes(data[start + 4 : start + 8], "little")
        _need(data, start + 8, size, "skippable frame")
        return Frame(start, start + 8 + size, None, skippable=True)
    if magic != _FRAME_MAGIC:
        raise CorruptDataError(f"zstd: no frame magic number at byte {start}")
    pos = start + 4
    _need(data, pos, 1, "frame header")
    descriptor = data[pos]
    pos += 1
    fcs_flag = descriptor >> 6
    single_segment = bool(descriptor & 0x20)
    if descriptor & 0x08:
        raise CorruptDataError("zstd: reserved bit set in frame header")
    has_checksum = bool(descriptor & 0x04)
    dict_id_size = (0, 1, 2, 4)[descriptor & 0x03]
    if not single_segment:
        pos += 1  # Window_Descriptor
    _need(data, pos, dict_id_size, "dictionary id")
    if dict_id_size and int.from_bytes(data[pos : pos + dict_id_size], "little") != 0:
        raise CorruptDataError("zstd: frame needs a dictionary, which zarr does not provide")
    pos += dict_id_size
    fcs_size = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
    _need(data, pos, fcs_size, "frame content size")
    content_size: int | None = None
    if fcs_size:
        content_size = int.from_bytes(data[pos : pos + fcs_size], "little")
        if fcs_size == 2:
            content_size += 256
    pos += fcs_size
    while True:
        _need(data, pos, 3, "block header")
        header = int.from_bytes(data[pos : pos + 3], "little")
        pos += 3
        last, block_type, block_size = header & 1, (header >> 1) & 3, header >> 3
        if block_type == 3:
            raise CorruptDataError("zstd: reserved block type")
        if block_size > _BLOCK_MAX:
            raise CorruptDataError(f"zstd: block of {block_size} bytes exceeds the 128 KiB limit")
        payload = 1 if block_type == 1 else block_size  # RLE blocks store one byte
        _need(data, pos, payload, "block")
        pos += payload
        if last:
            break
    if has_checksum:
        _need(data, pos, 4, "content checksum")
        pos += 4
    return Frame(start, pos, content_size)


def _parse(configuration: Mapping[str, Any]) -> tuple[int, bool]:
    name = ZstdCodec.name
    refuse_unknown_keys(name, configuration, ("level", "checksum"))
    level = int_field(name, configuration, "level", low=MIN_LEVEL, high=MAX_LEVEL, default=0)
    checksum = bool_field(name, configuration, "checksum", default=False)
    return level, checksum


register_codec(ZstdCodec)
