#!/usr/bin/env python3
"""Coverage-guided fuzzing of the shard-index parser (``sharding.format.decode_index``).

The first input byte picks the index codec chain and the inner-chunk grid, the next two an
optional shard size; the rest is the index. Property: ``CorruptDataError``/``MetadataError`` or
an index whose every entry is missing or a range that does not overflow 64 bits and (with a
known shard size) ends inside the shard.

    pip install atheris==3.0.0
    python scripts/fuzz_shard_index.py fuzz-corpus/shard-index -max_total_time=3600
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    from zarrfs.core.codecs.chain import CodecChain
    from zarrfs.core.errors import CorruptDataError, MetadataError
    from zarrfs.core.sharding import format as fmt

LE = {"name": "bytes", "configuration": {"endian": "little"}}
CHAINS = [
    CodecChain.from_json([LE]),
    CodecChain.from_json([LE, {"name": "crc32c"}]),
    CodecChain.from_json([{"name": "bytes", "configuration": {"endian": "big"}}]),
]
GRIDS = [(1,), (4,), (2, 3), (2, 2, 2)]


def test_one_input(data: bytes) -> None:
    if len(data) < 3:
        return
    chain = CHAINS[data[0] % len(CHAINS)]
    cps = GRIDS[(data[0] // len(CHAINS)) % len(GRIDS)]
    size = int.from_bytes(data[1:3], "little")
    shard_size = None if size == 0xFFFF else size
    try:
        index = fmt.decode_index(data[3:], chain, cps, shard_size)
    except (CorruptDataError, MetadataError):
        return
    for _, offset, nbytes in index.present():
        if offset + nbytes >= 2**64 or (shard_size is not None and offset + nbytes > shard_size):
            raise AssertionError(f"entry ({offset}, {nbytes}) accepted for shard {shard_size}")


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
