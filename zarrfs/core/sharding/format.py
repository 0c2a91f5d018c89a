"""The binary shard format of the ``sharding_indexed`` codec: index and shard layout.

Spec: Zarr v3 ``sharding_indexed`` codec, "Binary shard format"
(specs/v3/codecs/sharding-indexed.rst).

This module is pure: it never touches a store. It knows how to

- compute the (fixed) encoded size of a shard index,
- decode a shard index and validate every entry,
- encode a shard index,
- assemble a shard from already encoded inner chunks, and
- cut an inner chunk's bytes out of a whole shard held in memory.

Invariants:

- A shard index is an array of ``uint64`` of shape ``chunks_per_shard + (2,)`` holding
  ``(offset, nbytes)`` per inner chunk in C order; an empty inner chunk has both values equal to
  ``MISSING`` (2**64 - 1). Offsets are absolute positions in the shard object (with the index at
  the start, the first inner chunk begins after the index).
- Index codecs are fixed-size (``bytes``, ``transpose``, ``crc32c``), so the index always has
  exactly ``index_size(...)`` bytes; anything else is corrupt. It holds at most
  ``MAX_INDEX_BYTES`` of entries.
- Every entry of a decoded :class:`ShardIndex` is either ``(MISSING, MISSING)`` or a range with
  ``offset + nbytes`` not overflowing 64 bits and, when the shard size is known, not past the end
  of the shard. Violations raise ``CorruptDataError``.
- Arrays are compared with numpy's functions (``np.equal``, ``np.less`` ...), not operators:
  ``scripts/fuzz_shard_index.py`` runs this module under atheris 3.0, whose hook on every
  comparison operator keeps ~160 bytes per array compared, so a fuzzing run grew by ~100 bytes
  per input until it ran out of memory.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from zarrfs.core.codecs.base import ChunkSpec
from zarrfs.core.codecs.chain import CodecChain
from zarrfs.core.errors import CorruptDataError, MetadataError, UnsupportedError

#: offset and nbytes of an empty inner chunk
MISSING = 2**64 - 1

#: largest shard index accepted (16 bytes per inner chunk: 4 Mi inner chunks per shard); a larger
#: ``chunks_per_shard`` product is refused when the metadata is read (``UnsupportedError``), so no
#: index read, decode or rebuild ever needs more memory than this
MAX_INDEX_BYTES = 64 << 20

#: codecs whose encoded size depends only on the input size (allowed as index codecs)
FIXED_SIZE_CODECS = frozenset({"bytes", "transpose", "crc32c"})

INDEX_LOCATIONS = ("start", "end")

_UINT64 = np.dtype(np.uint64)


@dataclass(frozen=True, eq=False)
class ShardIndex:
    """Where each inner chunk of a shard lives: ``offsets[c]``, ``nbytes[c]`` for coords ``c``.

    Both arrays are ``uint64`` of shape ``chunks_per_shard``; ``MISSING`` in both marks an empty
    inner chunk. Treat the arrays as read-only. Compared by identity (``same_as`` compares
    contents).
    """

    offsets: np.ndarray[Any, Any]
    nbytes: np.ndarray[Any, Any]

    @classmethod
    def empty(cls, chunks_per_shard: tuple[int, ...]) -> ShardIndex:
        """An index with every inner chunk missing."""
        offsets = np.full(chunks_per_shard, MISSING, dtype=_UINT64)
        return cls(offsets, offsets.copy())

    @property
    def chunks_per_shard(self) -> tuple[int, ...]:
        return tuple(self.offsets.shape)

    def get(self, coords: tuple[int, ...]) -> tuple[int, int] | None:
        """``(offset, nbytes)`` of the inner chunk at ``coords``, or None if it is empty."""
        offset = int(self.offsets[coords])
        if offset == MISSING:
            return None
        return offset, int(self.nbytes[coords])

    def is_empty(self) -> bool:
        """True when no inner chunk is stored."""
        return bool(np.equal(self.offsets, MISSING).all())

    def present(self) -> Iterator[tuple[tuple[int, ...], int, int]]:
        """``(coords, offset, nbytes)`` of every stored inner chunk, in C order of coords."""
        for flat in np.flatnonzero(np.not_equal(self.offsets, MISSING)):
            coords = tuple(int(i) for i in np.unravel_index(flat, self.offsets.shape))
            yield coords, int(self.offsets[coords]), int(self.nbytes[coords])

    def same_as(self, other: ShardIndex) -> bool:
        """True when both indexes hold the same entries."""
        return bool(
            np.array_equal(self.offsets, other.offsets)
            and np.array_equal(self.nbytes, other.nbytes)
        )

    def stored_bytes(self) -> int:
        """Total encoded bytes of the stored inner chunks (the index excluded)."""
        present = np.not_equal(self.offsets, MISSING)
        return int(self.nbytes[present].sum(dtype=np.uint64)) if present.any() else 0


def index_spec(chunks_per_shard: tuple[int, ...]) -> ChunkSpec:
    """The chunk spec the index codecs see: ``uint64[chunks_per_shard + (2,)]``."""
    return ChunkSpec((*chunks_per_shard, 2), _UINT64, np.array(MISSING, dtype=_UINT64))


def check_index_codecs(index_chain: CodecChain) -> None:
    """Raise ``MetadataError`` unless every index codec has a fixed-size encoding."""
    for codec in index_chain.codecs:
        if codec.name not in FIXED_SIZE_CODECS:
            raise MetadataError(
                f"codec 'sharding_indexed': index codec {codec.name!r} does not have a fixed "
                f"encoded size (allowed: {', '.join(sorted(FIXED_SIZE_CODECS))})"
            )


def index_size(index_chain: CodecChain, chunks_per_shard: tuple[int, ...]) -> int:
    """The encoded size in bytes of the index of a shard with ``chunks_per_shard`` inner chunks;
    ``UnsupportedError`` past ``MAX_INDEX_BYTES``."""
    check_index_codecs(index_chain)
    n_inner = 1
    for n in chunks_per_shard:
        n_inner *= n
    if n_inner * 16 > MAX_INDEX_BYTES:
        raise UnsupportedError(
            f"codec 'sharding_indexed': {n_inner} inner chunks per shard need a shard index of "
            f"{n_inner * 16} bytes, more than the {MAX_INDEX_BYTES} supported"
        )
    return index_chain.prepare(index_spec(tuple(chunks_per_shard))).max_encoded_size


def decode_index(
    data: bytes | memoryview,
    index_chain: CodecChain,
    chunks_per_shard: tuple[int, ...],
    shard_size: int | None,
) -> ShardIndex:
    """Decode and validate the index bytes of a shard of ``shard_size`` bytes.

    ``shard_size=None`` means the size is not known (the index came from a suffix read): the
    entries are then checked for consistency and overflow only, and the caller must check that
    each range it fetches is complete.
    """
    cps = tuple(chunks_per_shard)
    expected = index_size(index_chain, cps)
    if len(data) != expected:
        raise CorruptDataError(f"shard index is {len(data)} bytes, expected {expected}")
    if shard_size is not None and shard_size < expected:
        raise CorruptDataError(
            f"shard is {shard_size} bytes, smaller than its {expected}-byte index"
        )
    arr = index_chain.prepare(index_spec(cps)).decode(data)
    offsets = np.ascontiguousarray(arr[..., 0])
    nbytes = np.ascontiguousarray(arr[..., 1])
    missing = np.equal(offsets, MISSING)
    mismatched = np.not_equal(missing, np.equal(nbytes, MISSING))
    if mismatched.any():
        bad = _first(mismatched)
        raise CorruptDataError(
            f"shard index entry {bad}: offset {int(offsets[bad])} and nbytes {int(nbytes[bad])} "
            "must both be 2**64-1 or both be a byte range"
        )
    present = ~missing
    with np.errstate(over="ignore"):
        ends = offsets + nbytes  # wraps around on overflow
    overflow = present & np.less(ends, offsets)
    if overflow.any():
        bad = _first(overflow)
        raise CorruptDataError(
            f"shard index entry {bad}: offset {int(offsets[bad])} + nbytes {int(nbytes[bad])} "
            "overflows 64 bits"
        )
    if shard_size is not None:
        past = present & np.greater(ends, np.uint64(shard_size))
        if past.any():
            bad = _first(past)
            raise CorruptDataError(
                f"shard index entry {bad}: bytes [{int(offsets[bad])}, {int(ends[bad])}) lie "
                f"past the end of the {shard_size}-byte shard"
            )
    offsets.flags.writeable = False
    nbytes.flags.writeable = False
    return ShardIndex(offsets, nbytes)


def encode_index(index: ShardIndex, index_chain: CodecChain) -> bytes:
    """The encoded bytes of ``index``."""
    cps = index.chunks_per_shard
    size = index_size(index_chain, cps)
    arr = np.stack([index.offsets, index.nbytes], axis=-1).astype(_UINT64, copy=False)
    data = index_chain.prepare(index_spec(cps)).encode(np.ascontiguousarray(arr))
    if data is None or len(data) != size:
        raise MetadataError(
            f"codec 'sharding_indexed': index codecs produced "
            f"{None if data is None else len(data)} bytes, expected the fixed size {size}"
        )
    return data


def build_shard(
    chunks: Mapping[tuple[int, ...], bytes | memoryview],
    chunks_per_shard: tuple[int, ...],
    index_chain: CodecChain,
    index_location: str,
) -> bytes | None:
    """Assemble a shard from encoded inner chunks keyed by coords; None if there are none.

    Inner chunks are laid out in C order of their coords, without gaps, followed (``"end"``) or
    preceded (``"start"``) by the index.
    """
    if index_location not in INDEX_LOCATIONS:
        raise ValueError(f"index_location must be 'start' or 'end', got {index_location!r}")
    cps = tuple(chunks_per_shard)
    if not chunks:
        return None
    index = ShardIndex.empty(cps)
    offsets = np.array(index.offsets)
    nbytes = np.array(index.nbytes)
    size = index_size(index_chain, cps)
    position = size if index_location == "start" else 0
    parts: list[bytes | memoryview] = []
    for coords in sorted(chunks):
        if len(coords) != len(cps) or any(not 0 <= c < n for c, n in zip(coords, cps, strict=True)):
            raise ValueError(f"inner chunk coords {coords} outside the shard grid {cps}")
        data = chunks[coords]
        offsets[coords] = position
        nbytes[coords] = len(data)
        position += len(data)
        parts.append(data)
    index_bytes = encode_index(ShardIndex(offsets, nbytes), index_chain)
    if index_location == "start":
        parts.insert(0, index_bytes)
    else:
        parts.append(index_bytes)
    return b"".join(parts)


def split_shard(
    data: bytes | memoryview,
    index_chain: CodecChain,
    chunks_per_shard: tuple[int, ...],
    index_location: str,
) -> ShardIndex:
    """Decode and fully validate the index of a whole shard held in memory."""
    cps = tuple(chunks_per_shard)
    size = index_size(index_chain, cps)
    if len(data) < size:
        raise CorruptDataError(f"shard is {len(data)} bytes, smaller than its {size}-byte index")
    view = memoryview(data)
    index_bytes = view[:size] if index_location == "start" else view[len(view) - size :]
    return decode_index(index_bytes, index_chain, cps, len(data))


def inner_chunk_bytes(
    data: bytes | memoryview, index: ShardIndex, coords: tuple[int, ...]
) -> memoryview | None:
    """The encoded bytes of one inner chunk of a whole shard (validated by ``split_shard``)."""
    entry = index.get(coords)
    if entry is None:
        return None
    offset, nbytes = entry
    if offset + nbytes > len(data):
        raise CorruptDataError(
            f"inner chunk {coords}: bytes [{offset}, {offset + nbytes}) lie past the end of the "
            f"{len(data)}-byte shard"
        )
    return memoryview(data)[offset : offset + nbytes]


def _first(mask: np.ndarray[Any, Any]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(int(np.flatnonzero(mask)[0]), mask.shape))
