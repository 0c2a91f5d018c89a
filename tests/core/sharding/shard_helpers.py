"""Helpers shared by the sharding tests: a request-counting dict store and codec builders."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from zarrfs.core.codecs.base import ChunkSpec
from zarrfs.core.codecs.chain import CodecChain
from zarrfs.core.codecs.sharding import ShardingCodec
from zarrfs.core.stores.base import RangeRequest, Store, slice_range

BYTES_LE = {"name": "bytes", "configuration": {"endian": "little"}}
CRC = {"name": "crc32c"}


class CountingStore(Store):
    """A dict-backed store that records every request and the bytes it returned."""

    writable = True

    def __init__(self, data: dict[str, bytes] | None = None) -> None:
        self.data: dict[str, bytes] = dict(data or {})
        self.gets: list[tuple[str, RangeRequest]] = []
        self.get_many_calls: list[list[tuple[str, RangeRequest]]] = []
        self.bytes_read = 0
        self.sets: list[str] = []
        self.deletes: list[str] = []

    def reset(self) -> None:
        self.gets.clear()
        self.get_many_calls.clear()
        self.bytes_read = 0
        self.sets.clear()
        self.deletes.clear()

    def get(self, key: str, byte_range: RangeRequest = None) -> bytes | None:
        self.gets.append((key, byte_range))
        value = self.data.get(key)
        if value is None:
            return None
        out = slice_range(value, byte_range)
        self.bytes_read += len(out)
        return out

    def get_many(self, requests: Sequence[tuple[str, RangeRequest]]) -> list[bytes | None]:
        self.get_many_calls.append(list(requests))
        return [self.get(key, rng) for key, rng in requests]

    def size(self, key: str) -> int | None:
        raise AssertionError("the sharding code must not ask for object sizes")

    def set(self, key: str, data: bytes) -> None:
        self.sets.append(key)
        self.data[key] = bytes(data)

    def delete(self, key: str) -> None:
        self.deletes.append(key)
        self.data.pop(key, None)


def sharding(
    chunk_shape: Sequence[int],
    codecs: Sequence[Any] = (BYTES_LE,),
    index_codecs: Sequence[Any] = (BYTES_LE, CRC),
    index_location: str = "end",
) -> ShardingCodec:
    """A sharding codec built from its JSON configuration (as metadata would)."""
    return ShardingCodec.from_config(
        {
            "chunk_shape": list(chunk_shape),
            "codecs": list(codecs),
            "index_codecs": list(index_codecs),
            "index_location": index_location,
        }
    )


def spec(shape: Sequence[int], dtype: str = "<f4", fill: Any = 0) -> ChunkSpec:
    dt = np.dtype(dtype).newbyteorder("=")
    return ChunkSpec(tuple(shape), dt, np.array(fill, dtype=dt))


def chain(*codecs: Any) -> CodecChain:
    return CodecChain.from_json(list(codecs))
