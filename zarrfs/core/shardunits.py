"""Units that are the inner chunks of shards (``ShardedUnits``), and the choice of a strategy.

An array whose chain is ``sharding_indexed`` alone moves inner chunks: read by byte range
(the index, then the wanted inner chunks; on a local store both from one open file), stored
by rewriting the shard once per flush, or through the shard's builder when inner chunks were
parked (``sharding/builder.py``). Anything else moves whole chunks (``units.PlainUnits``).
The invariants of a unit strategy are in ``units.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from zarrfs.core.codecs.chain import PreparedChain
from zarrfs.core.codecs.sharding import ShardingCodec
from zarrfs.core.errors import CorruptDataError, StoreError
from zarrfs.core.metadata.model import ArrayMetadata
from zarrfs.core.sharding.access import (
    read_inner_chunks,
    read_shard_index,
    rewrite_memory,
    rewrite_shard,
)
from zarrfs.core.sharding.builder import Parking
from zarrfs.core.sharding.format import index_size
from zarrfs.core.stores.base import StoreGroup
from zarrfs.core.units import MISSING, Coords, PlainUnits, Publish, UnitContext, UnitStrategy

#: reads of a shard's inner chunks tried while flushes keep replacing the shard
SHARD_READ_ATTEMPTS = 3


class ShardedUnits(UnitStrategy):
    """Units are the inner chunks of shards, read by byte range and rewritten per shard."""

    def __init__(self, metadata: ArrayMetadata, ctx: UnitContext, codec: ShardingCodec) -> None:
        super().__init__(metadata, ctx)
        self.codec = codec
        self.per_shard = codec.chunks_per_shard(metadata.chunk_shape)
        self.unit_spec = codec.inner_spec(self.chunk_spec)
        #: the inner chunks' chain, prepared once for the array
        self.inner: PreparedChain = codec.inner_chain(self.chunk_spec)
        #: completed inner chunks kept in their shard's next file (``sharding/builder.py``)
        cps = codec.chunks_per_shard(self.chunk_spec.shape)
        self._index_size = index_size(codec.index_codecs, cps)
        self._parking = Parking(ctx.io, ctx.key, codec, self.chunk_spec, self.inner)
        self.parking = self._parking

    def shard_index(self, shard: Coords) -> Any:
        """The index of ``shard`` (cached), or None when the shard is not stored."""
        cache, uid = self.ctx.engine.index_cache, self.ctx.uid
        hit = cache.get((uid, shard))
        if hit is not None:
            return None if hit is MISSING else hit
        epoch = self.ctx.epoch()
        index = read_shard_index(self.ctx.io, self.ctx.key(shard), self.codec, self.chunk_spec)
        # cached only if no commit came in between (one that did dropped the entry already
        # and advanced the epoch, under the same lock)
        self.ctx.if_current(
            epoch, lambda: cache.put((uid, shard), MISSING if index is None else index)
        )
        return index

    def load(
        self, outer: Coords, units: list[Coords], publish: Publish | None = None
    ) -> dict[Coords, Any]:
        local = {self.location(u)[1]: u for u in units}
        # parked first: a shard committed meanwhile is then read with its new index
        parked = self._parking.load(outer, list(local)) if self._parking.builders else {}
        out = {local[c]: (MISSING if arr is None else arr) for c, arr in parked.items()}
        local = {c: u for c, u in local.items() if c not in parked}
        if not local:
            return out
        key = self.ctx.key(outer)
        if self.ctx.io.reads_into:  # the index is read from the file the chunks come from
            got = read_inner_chunks(
                self.ctx.io, key, self.codec, self.chunk_spec, None, list(local),
                inner=self.inner,
            )  # fmt: skip
        else:
            got = self._read_checked(outer, key, list(local))
            if got is None:
                return out | {u: MISSING for u in local.values()}
        decoded = sum(1 for v in got.values() if v is not None)
        self.ctx.engine.stats.add(self.ctx.path, "chunks_decoded", decoded)
        return out | {local[c]: (MISSING if arr is None else arr) for c, arr in got.items()}

    def _read_checked(self, outer: Coords, key: str, coords: list[Coords]) -> Any:
        """``read_inner_chunks`` with the shard's (cached) index, on a store whose reads are
        not of one open file: read again when the shard's index changed under the read (a
        flush replaced the shard in between); None when the shard is missing."""
        for attempt in range(SHARD_READ_ATTEMPTS):
            index = self.shard_index(outer)
            if index is None:
                return None
            try:
                return read_inner_chunks(
                    self.ctx.io, key, self.codec, self.chunk_spec, index, coords,
                    inner=self.inner,
                )  # fmt: skip
            except (CorruptDataError, StoreError):
                self.ctx.engine.index_cache.pop((self.ctx.uid, outer))
                now = read_shard_index(self.ctx.io, key, self.codec, self.chunk_spec)
                if attempt + 1 == SHARD_READ_ATTEMPTS or now is None or now.same_as(index):
                    raise
        return None  # (not reached: the last attempt returns or raises)

    def store(
        self, outer: Coords, units: Mapping[Coords, np.ndarray[Any, Any]], group: StoreGroup
    ) -> None:
        io, engine = self.ctx.io, self.ctx.engine
        updates = {self.location(u)[1]: arr for u, arr in units.items()}
        held = rewrite_memory(io, self.codec, self.chunk_spec, len(updates), inner=self.inner)
        try:
            with engine.working(held):
                size = self._parking.store(outer, updates, group)
                if size is None:  # no parked units: the usual rewrite
                    key = self.ctx.key(outer)
                    index = rewrite_shard(
                        io, key, self.codec, self.chunk_spec, updates, inner=self.inner,
                        sink=group,
                    )  # fmt: skip
                    size = 0 if index is None else index.stored_bytes() + self._index_size
            engine.stats.add(self.ctx.path, "bytes_stored", size)
        finally:
            engine.index_cache.pop((self.ctx.uid, outer))

    def committed(self, outer: Coords) -> None:
        # (its cached index is dropped by the array's commit, under its lock)
        self._parking.committed(outer)


def choose_units(metadata: ArrayMetadata, ctx: UnitContext) -> UnitStrategy:
    """Inner chunks for a chain that is ``sharding_indexed`` alone, else whole chunks."""
    chain = metadata.codecs
    codec = chain.array_bytes
    if isinstance(codec, ShardingCodec) and not chain.array_array and not chain.bytes_bytes:
        return ShardedUnits(metadata, ctx, codec)
    return PlainUnits(metadata, ctx)
