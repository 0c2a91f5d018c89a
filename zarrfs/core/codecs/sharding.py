"""The ``sharding_indexed`` codec (array -> bytes): a shard of inner chunks plus an index.

Spec: https://zarr-specs.readthedocs.io/en/latest/v3/codecs/sharding-indexed/
(specs/v3/codecs/sharding-indexed.rst)
Name: ``sharding_indexed``
Example: ``{"name": "sharding_indexed", "configuration": {"chunk_shape": [32, 32],
"codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
"index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
"index_location": "end"}}``

Invariants:
- ``chunk_shape`` has one positive integer per dimension of the shard it is applied to and
  divides the shard shape (``validate`` raises ``MetadataError`` otherwise); the shard shape is
  the shape this codec receives, i.e. after any array->array codec before it (``transpose``).
- ``codecs`` is the inner chain (any valid chain, nested sharding included); ``index_codecs``
  are fixed-size codecs only (``bytes``, ``transpose``, ``crc32c``).
- ``encode`` stores no inner chunk equal to the fill value and returns None when nothing is
  left; ``decode`` validates the whole index against the shard size and returns missing inner
  chunks as the fill value.
- The byte layout lives in ``zarrfs.core.sharding.format``; ranged store access in
  ``zarrfs.core.sharding.access``. This module never touches a store.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from zarrfs.core.codecs.base import ArrayBytesCodec, ChunkSpec, register_codec
from zarrfs.core.codecs.chain import CodecChain, PreparedChain
from zarrfs.core.errors import CorruptDataError, MetadataError
from zarrfs.core.sharding import format as fmt

_NAME = "sharding_indexed"

#: index codecs used when a document omits ``index_codecs`` (the spec's recommendation)
DEFAULT_INDEX_CODECS: tuple[dict[str, Any], ...] = (
    {"name": "bytes", "configuration": {"endian": "little"}},
    {"name": "crc32c"},
)


class ShardingCodec(ArrayBytesCodec):
    """Stores a chunk (a "shard") as independently encoded inner chunks and an index."""

    name = _NAME

    def __init__(
        self,
        chunk_shape: tuple[int, ...],
        codecs: CodecChain,
        index_codecs: CodecChain,
        index_location: str = "end",
    ) -> None:
        if not chunk_shape or any(
            isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in chunk_shape
        ):
            raise MetadataError(
                f"codec {_NAME!r}: 'chunk_shape' must be a non-empty list of positive integers, "
                f"got {list(chunk_shape)!r}"
            )
        if index_location not in fmt.INDEX_LOCATIONS:
            raise MetadataError(
                f"codec {_NAME!r}: 'index_location' must be 'start' or 'end', "
                f"got {index_location!r}"
            )
        fmt.check_index_codecs(index_codecs)
        self.chunk_shape: tuple[int, ...] = tuple(chunk_shape)
        self.codecs: CodecChain = codecs
        self.index_codecs: CodecChain = index_codecs
        self.index_location: str = index_location

    @classmethod
    def from_config(cls, configuration: Mapping[str, Any]) -> ShardingCodec:
        extra = set(configuration) - {"chunk_shape", "codecs", "index_codecs", "index_location"}
        if extra:
            raise MetadataError(f"codec {_NAME!r}: unknown configuration keys {sorted(extra)}")
        chunk_shape = configuration.get("chunk_shape")
        if not isinstance(chunk_shape, (list, tuple)):
            raise MetadataError(f"codec {_NAME!r}: 'chunk_shape' must be a list of integers")
        if "codecs" not in configuration:
            raise MetadataError(f"codec {_NAME!r}: 'codecs' is required")
        codecs = _chain(configuration["codecs"], "codecs")
        # The spec requires ``index_codecs``; a document without it is read with the
        # recommended default rather than refused.
        index_docs = configuration.get("index_codecs", DEFAULT_INDEX_CODECS)
        index_codecs = _chain(index_docs, "index_codecs")
        return cls(
            tuple(chunk_shape),
            codecs,
            index_codecs,
            configuration.get("index_location", "end"),
        )

    def configuration(self) -> dict[str, Any]:
        return {
            "chunk_shape": list(self.chunk_shape),
            "codecs": self.codecs.to_json(),
            "index_codecs": self.index_codecs.to_json(),
            "index_location": self.index_location,
        }

    # -- geometry ---------------------------------------------------------------------------

    def chunks_per_shard(self, shard_shape: tuple[int, ...]) -> tuple[int, ...]:
        """Inner chunks along each dimension; ``MetadataError`` unless ``chunk_shape`` divides."""
        if len(shard_shape) != len(self.chunk_shape):
            raise MetadataError(
                f"codec {_NAME!r}: 'chunk_shape' {list(self.chunk_shape)} has "
                f"{len(self.chunk_shape)} dimensions, the shard shape {list(shard_shape)} has "
                f"{len(shard_shape)}"
            )
        if any(s % c for s, c in zip(shard_shape, self.chunk_shape, strict=True)):
            raise MetadataError(
                f"codec {_NAME!r}: inner 'chunk_shape' {list(self.chunk_shape)} does not evenly "
                f"divide the shard shape {list(shard_shape)}"
            )
        return tuple(s // c for s, c in zip(shard_shape, self.chunk_shape, strict=True))

    def inner_spec(self, shard_spec: ChunkSpec) -> ChunkSpec:
        """The spec of one inner chunk of a shard described by ``shard_spec``."""
        return shard_spec.with_shape(self.chunk_shape)

    def inner_chain(self, shard_spec: ChunkSpec) -> PreparedChain:
        """The inner codec chain prepared for the inner chunks of ``shard_spec``."""
        return self.codecs.prepare(self.inner_spec(shard_spec))

    def index_size(self, shard_spec: ChunkSpec) -> int:
        """The encoded size of the index of a shard described by ``shard_spec``."""
        return fmt.index_size(self.index_codecs, self.chunks_per_shard(shard_spec.shape))

    def inner_slices(self, coords: tuple[int, ...]) -> tuple[slice, ...]:
        """Where the inner chunk at ``coords`` lies within the shard array."""
        return tuple(
            slice(i * n, (i + 1) * n) for i, n in zip(coords, self.chunk_shape, strict=True)
        )

    def iter_inner(self, shard_shape: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
        """Coords of every inner chunk of a shard, in C order."""
        for coords in np.ndindex(*self.chunks_per_shard(shard_shape)):
            yield tuple(int(i) for i in coords)

    def cannot_encode(self, spec: ChunkSpec) -> str | None:
        inner = self.inner_chain(spec).cannot_encode
        if inner is not None:
            return inner
        cps = self.chunks_per_shard(spec.shape)
        return self.index_codecs.prepare(fmt.index_spec(cps)).cannot_encode

    def validate(self, spec: ChunkSpec) -> None:
        cps = self.chunks_per_shard(spec.shape)
        self.inner_chain(spec)  # validates the inner chain for the inner chunk spec
        fmt.index_size(self.index_codecs, cps)  # validates the index chain for the index spec

    def max_encoded_size(self, spec: ChunkSpec) -> int:
        cps = self.chunks_per_shard(spec.shape)
        n_inner = 1
        for n in cps:
            n_inner *= n
        return n_inner * self.inner_chain(spec).max_encoded_size + fmt.index_size(
            self.index_codecs, cps
        )

    # -- whole shards -----------------------------------------------------------------------

    def encode_inner(
        self,
        arr: np.ndarray[Any, Any],
        shard_spec: ChunkSpec,
        inner: PreparedChain | None = None,
    ) -> bytes | None:
        """Encode one inner chunk; None when it equals the fill value (nothing to store).

        ``inner`` is ``inner_chain(shard_spec)`` when the caller already has it."""
        if inner is None:
            inner = self.inner_chain(shard_spec)
        if inner.spec.is_fill(arr):
            return None
        return inner.encode(np.ascontiguousarray(arr))

    def encode(self, arr: np.ndarray[Any, Any], spec: ChunkSpec) -> bytes | None:
        cps = self.chunks_per_shard(spec.shape)
        if arr.shape != spec.shape:
            raise ValueError(f"shard shape {arr.shape} does not match {spec.shape}")
        chunks: dict[tuple[int, ...], bytes] = {}
        inner = self.inner_chain(spec)
        for coords in self.iter_inner(spec.shape):
            data = self.encode_inner(arr[self.inner_slices(coords)], spec, inner)
            if data is not None:
                chunks[coords] = data
        return fmt.build_shard(chunks, cps, self.index_codecs, self.index_location)

    def decode(self, data: bytes | memoryview, spec: ChunkSpec) -> np.ndarray[Any, Any]:
        cps = self.chunks_per_shard(spec.shape)
        index = fmt.split_shard(data, self.index_codecs, cps, self.index_location)
        out = spec.fill_array()
        view = memoryview(data)
        inner = self.inner_chain(spec)
        for coords, offset, nbytes in index.present():
            out[self.inner_slices(coords)] = self.decode_inner(
                view[offset : offset + nbytes], spec, coords, inner
            )
        return out

    def decode_inner(
        self,
        data: bytes | memoryview,
        shard_spec: ChunkSpec,
        coords: tuple[int, ...],
        inner: PreparedChain | None = None,
    ) -> np.ndarray[Any, Any]:
        """Decode the stored bytes of the inner chunk at ``coords``.

        ``inner`` is ``inner_chain(shard_spec)`` when the caller already has it."""
        if inner is None:
            inner = self.inner_chain(shard_spec)
        try:
            return inner.decode(data)
        except CorruptDataError as exc:
            raise CorruptDataError(f"inner chunk {coords}: {exc}") from exc

    def read_index(self, data: bytes | memoryview, spec: ChunkSpec) -> fmt.ShardIndex:
        """The validated index of a whole shard held in memory."""
        return fmt.split_shard(
            data, self.index_codecs, self.chunks_per_shard(spec.shape), self.index_location
        )


def _chain(docs: Any, field: str) -> CodecChain:
    try:
        return CodecChain.from_json(docs)
    except MetadataError as exc:
        raise type(exc)(f"codec {_NAME!r}: '{field}': {exc}") from exc


register_codec(ShardingCodec)
