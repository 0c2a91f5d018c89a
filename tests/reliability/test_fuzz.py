"""Short fuzz runs (SECURITY.md §7): the parsers of untrusted bytes raise only
``MetadataError``/``CorruptDataError`` and never produce more than they are allowed to.

- ``parse_v3`` on mutated valid ``zarr.json`` documents (values replaced by random JSON, keys
  dropped or added, bytes flipped, cut or inserted) and on random bytes;
- ``decode_index`` (the shard-index parser) on random and mutated indexes with several index
  codec chains and shard sizes;
- the bounded decoders (gzip, zstd, blosc, crc32c) on mutated valid streams with a random
  ``max_size``: the output never exceeds ``max_size``.

Each property runs a bounded number of examples (a few seconds). Longer coverage-guided runs:
``scripts/fuzz_*.py`` (atheris), see SECURITY.md.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zarrfs.core.codecs.blosc import BloscCodec
from zarrfs.core.codecs.chain import CodecChain
from zarrfs.core.codecs.crc32c import Crc32cCodec
from zarrfs.core.codecs.gzip import GzipCodec
from zarrfs.core.codecs.zstd import ZstdCodec
from zarrfs.core.errors import CorruptDataError, MetadataError
from zarrfs.core.metadata.model import ArrayMetadata, GroupMetadata
from zarrfs.core.metadata.v3 import parse_v3
from zarrfs.core.sharding import format as fmt

pytestmark = pytest.mark.timeout(120)

FUZZ = settings(
    max_examples=1000,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

ALLOWED = (MetadataError, CorruptDataError)

BYTES_LE = {"name": "bytes", "configuration": {"endian": "little"}}


def array_doc(**over: Any) -> dict[str, Any]:
    doc = {
        "zarr_format": 3, "node_type": "array", "shape": [100, 40], "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [10, 20]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": "NaN", "codecs": [BYTES_LE, {"name": "gzip", "configuration": {"level": 1}}],
        "attributes": {"title": "t", "nested": {"a": [1, 2.5, None, True]}},
        "dimension_names": ["y", "x"], "storage_transformers": [],
    }  # fmt: skip
    doc.update(over)
    return doc


SEEDS: list[dict[str, Any]] = [
    {"zarr_format": 3, "node_type": "group", "attributes": {"a": 1}},
    array_doc(),
    array_doc(data_type="int16", fill_value=-1, codecs=[
        {"name": "transpose", "configuration": {"order": [1, 0]}}, BYTES_LE,
        {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle",
                                            "typesize": 2, "blocksize": 0}},
        {"name": "crc32c"}]),
    array_doc(data_type="uint8", fill_value=0, codecs=[
        {"name": "sharding_indexed", "configuration": {
            "chunk_shape": [5, 10], "codecs": [BYTES_LE, {"name": "zstd", "configuration": {
                "level": 1, "checksum": True}}],
            "index_codecs": [BYTES_LE, {"name": "crc32c"}], "index_location": "start"}}]),
    array_doc(data_type="complex64", fill_value=["NaN", 0.0],
              chunk_key_encoding={"name": "v2", "configuration": {"separator": "."}}),
    {"zarr_format": 3, "node_type": "group", "attributes": {},
     "consolidated_metadata": {"kind": "inline", "must_understand": False,
                               "metadata": {"a": array_doc(), "g": {
                                   "zarr_format": 3, "node_type": "group", "attributes": {}}}}},
]  # fmt: skip

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12,
)  # fmt: skip


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths(v, (*prefix, i))
    return out


@st.composite
def mutated_documents(draw: Any) -> bytes:
    doc = copy.deepcopy(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(paths(doc)[1:]))
        parent = doc
        for step in where[:-1]:
            parent = parent[step]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "delete" and isinstance(parent, dict):
            parent.pop(where[-1], None)
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.text(max_size=10))] = draw(json_values)
        else:
            parent[where[-1]] = draw(json_values)
    raw = bytearray(json.dumps(doc).encode())
    for _ in range(draw(st.integers(0, 2))):  # byte-level damage on top
        pos = draw(st.integers(0, max(0, len(raw) - 1)))
        kind = draw(st.sampled_from(["flip", "cut", "insert"]))
        if kind == "flip" and raw:
            raw[pos] ^= draw(st.integers(1, 255))
        elif kind == "cut":
            del raw[pos : pos + draw(st.integers(1, 8))]
        else:
            raw[pos:pos] = draw(st.binary(min_size=1, max_size=8))
    return bytes(raw)


def check_parse(raw: bytes) -> None:
    try:
        meta = parse_v3(raw)
    except ALLOWED:
        return
    assert isinstance(meta, ArrayMetadata | GroupMetadata)
    if isinstance(meta, ArrayMetadata):
        meta.codecs.prepare(meta.chunk_spec())  # an accepted array is usable


@FUZZ
@given(mutated_documents())
def test_parse_v3_mutated_documents(raw: bytes) -> None:
    check_parse(raw)


@FUZZ
@given(st.binary(max_size=256) | st.text(max_size=64).map(str.encode))
def test_parse_v3_random_bytes(raw: bytes) -> None:
    check_parse(raw)


# --------------------------------------------------------------------------- shard index

INDEX_CHAINS = [
    CodecChain.from_json([BYTES_LE]),
    CodecChain.from_json([BYTES_LE, {"name": "crc32c"}]),
    CodecChain.from_json([{"name": "bytes", "configuration": {"endian": "big"}}]),
    CodecChain.from_json(
        [{"name": "transpose", "configuration": {"order": [2, 1, 0]}}, BYTES_LE, {"name": "crc32c"}]
    ),  # fmt: skip
]


@st.composite
def index_inputs(draw: Any) -> tuple[bytes, CodecChain, tuple[int, ...], int | None]:
    chain_i = draw(st.integers(0, len(INDEX_CHAINS) - 1))
    chain = INDEX_CHAINS[chain_i]
    cps = (2, 3) if chain_i != 3 else (2, 3)
    size = fmt.index_size(chain, cps)
    if draw(st.booleans()):
        entries = draw(st.lists(
            st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
            | st.just((2**64 - 1, 2**64 - 1)) | st.tuples(st.integers(0, 500), st.integers(0, 500)),
            min_size=6, max_size=6))  # fmt: skip
        index = fmt.ShardIndex(
            np.array([e[0] for e in entries], dtype="u8").reshape(cps),
            np.array([e[1] for e in entries], dtype="u8").reshape(cps),
        )
        data = bytearray(fmt.encode_index(index, chain))
        if data and draw(st.booleans()):
            data[draw(st.integers(0, len(data) - 1))] ^= draw(st.integers(1, 255))
    else:
        data = bytearray(draw(st.binary(min_size=max(0, size - 2), max_size=size + 2)))
    shard_size = draw(st.none() | st.integers(0, 4096))
    return bytes(data), chain, cps, shard_size


@FUZZ
@given(index_inputs())
def test_decode_index(args: tuple[bytes, CodecChain, tuple[int, ...], int | None]) -> None:
    data, chain, cps, shard_size = args
    try:
        index = fmt.decode_index(data, chain, cps, shard_size)
    except ALLOWED:
        return
    for _, offset, nbytes in index.present():
        assert offset + nbytes < 2**64
        if shard_size is not None:
            assert offset + nbytes <= shard_size


# --------------------------------------------------------------------------- decoders

CODECS = {
    "gzip": GzipCodec(level=1),
    "zstd": ZstdCodec(level=1, checksum=False),
    "zstd-checksum": ZstdCodec(level=3, checksum=True),
    "blosc-lz4": BloscCodec("lz4", 5, "shuffle", typesize=4),
    "blosc-zstd": BloscCodec("zstd", 3, "bitshuffle", typesize=2),
    "crc32c": Crc32cCodec(),
}


@st.composite
def damaged_streams(draw: Any) -> tuple[str, bytes, int]:
    name = draw(st.sampled_from(sorted(CODECS)))
    plain = draw(st.binary(max_size=2048) | st.integers(0, 4096).map(bytes))
    stream = bytearray(CODECS[name].encode(plain))
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "repeat", "set"]))
        pos = draw(st.integers(0, max(0, len(stream) - 1)))
        if kind == "flip" and stream:
            stream[pos] ^= draw(st.integers(1, 255))
        elif kind == "cut":
            del stream[pos : pos + draw(st.integers(1, 32))]
        elif kind == "insert":
            stream[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "repeat":
            stream += stream[: draw(st.integers(1, 64))]
        elif stream:  # overwrite a header word with a large value
            stream[pos : pos + 4] = draw(st.integers(0, 2**32 - 1)).to_bytes(4, "little")
    max_size = draw(st.integers(0, 2 * len(plain) + 16))
    return name, bytes(stream), max_size


@FUZZ
@given(damaged_streams())
def test_bounded_decoders(args: tuple[str, bytes, int]) -> None:
    name, stream, max_size = args
    try:
        out = CODECS[name].decode(stream, max_size)
    except ALLOWED:
        return
    assert isinstance(out, bytes | bytearray | memoryview)
    assert len(out) <= max_size, f"{name}: {len(out)} bytes out, {max_size} allowed"
