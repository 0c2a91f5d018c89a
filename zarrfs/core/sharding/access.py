"""Partial shard I/O on a store: read a shard index, read some inner chunks, rewrite a shard.

Spec: Zarr v3 ``sharding_indexed`` codec, "Implementation notes" (partial reads through byte
ranges, read-modify-write of shards) — specs/v3/codecs/sharding-indexed.rst.

Request pattern:

- ``read_shard_index``: exactly one ranged request, the first (``index_location = "start"``) or
  last (``"end"``) ``index_size`` bytes. The total shard size is not fetched, so the index is
  validated for consistency and 64-bit overflow only; the bound "inside the shard" is enforced
  when inner chunks are fetched: every range ``read_inner_chunks`` asks for must come back
  complete, or the shard is corrupt. No inner chunk is ever decoded from a short read.
- ``read_inner_chunks``: one ``store.get_many`` call; byte ranges of the wanted inner chunks that
  are closer than ``coalesce_gap`` bytes are merged into one request. An index entry longer than
  any valid inner chunk is corrupt and is never fetched.
- ``rewrite_shard``: at most one full read of the existing shard (skipped when every inner chunk
  is replaced; never more than a valid shard's ``max_encoded_size`` + 1 bytes), then exactly one
  ``store.set`` (or ``store.delete`` when nothing is left). Inner
  chunks that are not updated keep their encoded bytes unchanged: they are never decoded or
  re-encoded.

Every corruption is reported as ``CorruptDataError`` carrying the shard's key. Locking around
read-modify-write is the caller's business (one lock per shard key).

``shard_spec`` is the spec the sharding codec itself sees. When the array's chain has
array->array codecs before ``sharding_indexed`` (``[transpose, sharding_indexed]``), that is the
transformed shard and inner-chunk coords are in the transformed space; such callers either map
their coords through those codecs or decode whole shards with the full chain.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from zarrfs.core.codecs.base import ChunkSpec
from zarrfs.core.codecs.sharding import ShardingCodec
from zarrfs.core.errors import CorruptDataError, StoreError
from zarrfs.core.sharding import format as fmt
from zarrfs.core.stores.base import ByteRange, Store, SuffixRange

#: byte ranges separated by less than this are fetched as one request
COALESCE_GAP = 64 * 1024


def read_shard_index(
    store: Store, key: str, codec: ShardingCodec, shard_spec: ChunkSpec
) -> fmt.ShardIndex | None:
    """The index of the shard at ``key`` (one ranged request); None if the shard is missing."""
    cps = codec.chunks_per_shard(shard_spec.shape)
    size = fmt.index_size(codec.index_codecs, cps)
    request = SuffixRange(size) if codec.index_location == "end" else ByteRange(0, size)
    data = store.get(key, request)
    if data is None:
        return None
    if len(data) != size:
        raise CorruptDataError(
            f"shard is {len(data)} bytes, smaller than its {size}-byte index", key=key
        )
    try:
        return fmt.decode_index(data, codec.index_codecs, cps, None)
    except CorruptDataError as exc:
        raise _with_key(exc, key) from exc


def coalesce(ranges: Iterable[tuple[int, int]], gap: int = COALESCE_GAP) -> list[tuple[int, int]]:
    """Merge ``(offset, nbytes)`` ranges into ``(start, end)`` spans, sorted by start.

    Ranges that overlap or are separated by fewer than ``gap`` bytes share one span.
    """
    spans: list[tuple[int, int]] = []
    for offset, nbytes in sorted(ranges):
        end = offset + nbytes
        if spans and offset - spans[-1][1] < gap:
            start, last_end = spans[-1]
            spans[-1] = (start, max(last_end, end))
        else:
            spans.append((offset, end))
    return spans


def read_inner_chunks(
    store: Store,
    key: str,
    codec: ShardingCodec,
    shard_spec: ChunkSpec,
    index: fmt.ShardIndex,
    coords: Sequence[tuple[int, ...]],
    *,
    coalesce_gap: int = COALESCE_GAP,
) -> dict[tuple[int, ...], np.ndarray[Any, Any] | None]:
    """Decoded inner chunks at ``coords`` (None for a missing one; the caller fills it)."""
    result: dict[tuple[int, ...], np.ndarray[Any, Any] | None] = {}
    wanted: dict[tuple[int, ...], tuple[int, int]] = {}
    inner = codec.inner_chain(shard_spec)
    for c in coords:
        c = tuple(c)
        entry = index.get(c)
        if entry is None:
            result[c] = None
        elif entry[1] > inner.max_encoded_size:
            raise CorruptDataError(
                f"shard index entry {c} claims {entry[1]} bytes, more than the "
                f"{inner.max_encoded_size} any valid inner chunk can take",
                key=key,
            )
        else:
            wanted[c] = entry
    if not wanted:
        return result
    spans = coalesce(wanted.values(), coalesce_gap)
    blobs = store.get_many([(key, ByteRange(start, end - start)) for start, end in spans])
    if len(blobs) != len(spans):
        raise StoreError(f"store answered {len(blobs)} of {len(spans)} range requests")
    for (start, end), blob in zip(spans, blobs, strict=True):
        if blob is None:
            raise CorruptDataError("shard disappeared while its inner chunks were read", key=key)
        if len(blob) != end - start:
            raise CorruptDataError(
                f"shard index points at bytes [{start}, {end}) but the shard ends at "
                f"{start + len(blob)}",
                key=key,
            )
    starts = [start for start, _ in spans]
    for c, (offset, nbytes) in wanted.items():
        i = bisect_right(starts, offset) - 1
        span_start = spans[i][0]
        view = memoryview(blobs[i])[offset - span_start : offset - span_start + nbytes]  # type: ignore[arg-type]
        try:
            result[c] = codec.decode_inner(view, shard_spec, c, inner)
        except CorruptDataError as exc:
            raise _with_key(exc, key) from exc
    return result


def rewrite_shard(
    store: Store,
    key: str,
    codec: ShardingCodec,
    shard_spec: ChunkSpec,
    updates: Mapping[tuple[int, ...], np.ndarray[Any, Any] | None],
) -> fmt.ShardIndex | None:
    """Replace inner chunks of the shard at ``key`` and store the shard once.

    ``updates`` maps inner-chunk coords to the new decoded inner chunk; None (or a chunk equal to
    the fill value) removes it. Untouched inner chunks keep their stored bytes. Returns the new
    shard's index, or None when the shard became empty and was deleted.
    """
    cps = codec.chunks_per_shard(shard_spec.shape)
    for c, arr in updates.items():
        if len(c) != len(cps) or any(not 0 <= i < n for i, n in zip(c, cps, strict=True)):
            raise ValueError(f"inner chunk coords {c} outside the shard grid {cps}")
        if arr is not None and arr.shape != codec.chunk_shape:
            raise ValueError(f"inner chunk {c} has shape {arr.shape}, expected {codec.chunk_shape}")
    chunks: dict[tuple[int, ...], bytes | memoryview] = {}
    n_inner = int(np.prod(cps))
    if len(updates) < n_inner:
        bound = codec.max_encoded_size(shard_spec)
        existing = store.get(key, ByteRange(0, bound + 1))  # never more than a valid shard
        if existing is not None and len(existing) > bound:
            raise CorruptDataError(
                f"shard is more than the {bound} bytes any valid shard can take", key=key
            )
        if existing is not None:
            try:
                index = codec.read_index(existing, shard_spec)
            except CorruptDataError as exc:
                raise _with_key(exc, key) from exc
            view = memoryview(existing)
            for c, offset, nbytes in index.present():
                if c not in updates:
                    chunks[c] = view[offset : offset + nbytes]
    inner = codec.inner_chain(shard_spec)
    for c, arr in updates.items():
        if arr is None:
            continue
        data = codec.encode_inner(arr, shard_spec, inner)
        if data is not None:
            chunks[tuple(c)] = data
    shard = fmt.build_shard(chunks, cps, codec.index_codecs, codec.index_location)
    if shard is None:
        store.delete(key)
        return None
    store.set(key, shard)
    return codec.read_index(shard, shard_spec)


def _with_key(exc: CorruptDataError, key: str) -> CorruptDataError:
    """``exc`` re-labelled with the shard key (the codecs do not know it)."""
    return CorruptDataError(str(exc), key=key)
