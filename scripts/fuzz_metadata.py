#!/usr/bin/env python3
"""Coverage-guided fuzzing of the Zarr v3 metadata parser (``parse_v3``) with atheris.

Property: any input bytes either parse into array/group metadata whose codec chain prepares for
its chunk spec, or raise ``MetadataError``; any other exception is a finding (atheris stops
and writes the input to ``crash-*``).

    pip install atheris==3.0.0            # into the environment that has zarrfs' dependencies
    python scripts/fuzz_metadata.py --seeds fuzz-corpus/metadata   # write seed documents once
    python scripts/fuzz_metadata.py fuzz-corpus/metadata -max_total_time=3600 -rss_limit_mb=2048

Other arguments are libFuzzer's (``-runs=``, ``-jobs=``, ``-max_len=`` ...).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import atheris

with atheris.instrument_imports():
    from zarrfs.core.errors import MetadataError
    from zarrfs.core.metadata.model import ArrayMetadata
    from zarrfs.core.metadata.v3 import parse_v3

BYTES_LE = {"name": "bytes", "configuration": {"endian": "little"}}
SEEDS = [
    {"zarr_format": 3, "node_type": "group", "attributes": {"a": [1, {"b": None}]}},
    {"zarr_format": 3, "node_type": "array", "shape": [100, 40], "data_type": "float32",
     "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [10, 20]}},
     "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
     "fill_value": "NaN", "attributes": {}, "dimension_names": ["y", None],
     "codecs": [{"name": "transpose", "configuration": {"order": [1, 0]}}, BYTES_LE,
                {"name": "gzip", "configuration": {"level": 1}}, {"name": "crc32c"}]},
    {"zarr_format": 3, "node_type": "array", "shape": [64], "data_type": "uint16",
     "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [32]}},
     "chunk_key_encoding": {"name": "v2", "configuration": {"separator": "."}},
     "fill_value": 0, "attributes": {},
     "codecs": [{"name": "sharding_indexed", "configuration": {
         "chunk_shape": [8], "codecs": [BYTES_LE, {"name": "zstd", "configuration": {
             "level": 1, "checksum": False}}],
         "index_codecs": [BYTES_LE, {"name": "crc32c"}], "index_location": "end"}}]},
]  # fmt: skip


def test_one_input(data: bytes) -> None:
    try:
        meta = parse_v3(data)
    except MetadataError:
        return
    if isinstance(meta, ArrayMetadata):
        meta.codecs.prepare(meta.chunk_spec())


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--seeds":
        out = Path(sys.argv[2])
        out.mkdir(parents=True, exist_ok=True)
        for i, doc in enumerate(SEEDS):
            (out / f"seed-{i}.json").write_text(json.dumps(doc, indent=2))
        # and every array document of the interop fixtures (data types, codecs and
        # configurations as other implementations write them)
        fixtures = Path(__file__).resolve().parent.parent / "tests" / "interop"
        for i, path in enumerate(sorted(fixtures.rglob("zarr.json"))):
            (out / f"fixture-{i}.json").write_bytes(path.read_bytes())
        return
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
