#!/usr/bin/env python3
"""Coverage-guided fuzzing of the bounded bytes->bytes decoders (gzip, zstd, blosc, crc32c).

The first input byte picks the codec, the next three give ``max_size``; the rest is the stored
stream. Property: ``decode(stream, max_size)`` raises ``CorruptDataError`` or returns at most
``max_size`` bytes. Run it with an RSS limit so a decoder that allocates past the bound is a
finding too.

    pip install atheris==3.0.0
    python scripts/fuzz_decoders.py --seeds fuzz-corpus/decoders    # valid streams as seeds
    python scripts/fuzz_decoders.py fuzz-corpus/decoders -max_total_time=3600 -rss_limit_mb=1024
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import atheris

with atheris.instrument_imports():
    from zarrfs.core.codecs.blosc import BloscCodec
    from zarrfs.core.codecs.crc32c import Crc32cCodec
    from zarrfs.core.codecs.gzip import GzipCodec
    from zarrfs.core.codecs.zstd import ZstdCodec
    from zarrfs.core.errors import CorruptDataError

CODECS = [
    GzipCodec(level=1),
    ZstdCodec(level=1, checksum=False),
    ZstdCodec(level=3, checksum=True),
    BloscCodec("lz4", 5, "shuffle", typesize=4),
    BloscCodec("zstd", 3, "bitshuffle", typesize=2),
    Crc32cCodec(),
]


def test_one_input(data: bytes) -> None:
    if len(data) < 4:
        return
    codec = CODECS[data[0] % len(CODECS)]
    max_size = int.from_bytes(data[1:4], "little")
    try:
        out = codec.decode(data[4:], max_size)
    except CorruptDataError:
        return
    if len(out) > max_size:
        raise AssertionError(f"{codec.name}: {len(out)} bytes decoded, {max_size} allowed")


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--seeds":
        out = Path(sys.argv[2])
        out.mkdir(parents=True, exist_ok=True)
        plain = bytes(range(256)) * 16 + os.urandom(512)
        for i, codec in enumerate(CODECS):
            head = bytes([i]) + (len(plain) + 64).to_bytes(3, "little")
            (out / f"seed-{i}").write_bytes(head + codec.encode(plain))
        return
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
