"""How an array's units are loaded and stored: plain chunks or the inner chunks of shards.

Chosen once per array (``shardunits.choose_units``), the way tensorstore picks a leaf or a
sharded chunk cache: a plain ``sharding_indexed`` chain (no codec before or after it) moves
inner chunks (``shardunits.ShardedUnits``), anything else moves whole chunks (``PlainUnits``,
here). The rest of the engine never asks which one it has.

Invariants:
- units live on a grid over the *extended* array (whole chunks), so a unit is always of the
  full unit shape (``unit_spec``);
- ``load`` returns every unit it was asked for, as an array or ``MISSING`` (not in the
  store: reads as the fill value); a unit that cannot be loaded raises, it is never replaced
  by the fill value;
- a plain chunk is fetched with a byte range of at most its chain's ``max_encoded_size`` + 1
  bytes, so an oversized stored object costs no more memory than a valid chunk;
- a streaming load (``streams``: a chain of the ``bytes`` codec in the native byte order,
  alone or followed by ``blosc`` alone, on a store that ``reads_into``) fills the unit array
  front to back and ``publish``es each prefix once it is final. Plain bytes (``direct``): a
  chunk whose stored size is exactly the unit's size is read straight into the unit array;
  nothing of a chunk of any other size is published (it is loaded as usual, and refused as
  corrupt). Blosc (``progressive``): the blocks are decoded in order as the stream is read
  (``blosc.decode_progressively``); a stream it cannot take so is decoded whole, unpublished.
  Only a file changed in place while it is read, or a damaged blosc block past a published
  prefix, can fail after a prefix was published (the load then raises, as any load would);
- ``load_memory`` bounds what a load holds before its units are cached;
- ``store`` reserves the memory it holds (``Engine.working``) while it encodes and writes, and
  never marks anything clean; it stages its object in the flush's ``StoreGroup``, and the
  dirty set marks the units clean once the group is committed (then ``committed``);
- the shard index cache entry of a shard is dropped whenever that shard is rewritten or found
  corrupt, and an index read that overlapped a commit (``epoch`` moved) is not cached.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np

from zarrfs.core import buffers
from zarrfs.core.codecs.base import ChunkSpec
from zarrfs.core.codecs.blosc import BloscCodec, decode_progressively
from zarrfs.core.codecs.blosc import progressive_available as blosc_progressive_available
from zarrfs.core.codecs.bytes import BytesCodec
from zarrfs.core.codecs.chain import PreparedChain
from zarrfs.core.direct import read_pieces
from zarrfs.core.engine import Engine
from zarrfs.core.errors import CorruptDataError, StoreError
from zarrfs.core.metadata.model import ArrayMetadata
from zarrfs.core.pages import prefault
from zarrfs.core.sharding.builder import Parking
from zarrfs.core.stores.base import ByteRange, ObjectReader, Store, StoreGroup, TempObject
from zarrfs.core.writethrough import UnitStreams

Coords = tuple[int, ...]
#: ``publish(array, ready)``: the first ``ready`` bytes of the unit ``array`` are loaded
Publish = Callable[[np.ndarray[Any, Any], int], None]

#: a streaming load publishes the unit array every this many bytes
STREAM_PIECE = 1 << 20

#: the value of a unit (or shard index) that is not in the store
MISSING = np.zeros(0, dtype=np.uint8)


@dataclass
class UnitContext:
    """What a unit strategy needs from its array."""

    #: chunk and shard I/O: the array's store, counting the bytes fetched
    io: Store
    engine: Engine
    #: the array's identity in the shared caches, and its path (for the counters)
    uid: int
    path: str
    #: store key of outer chunk (or shard) ``coords``
    key: Callable[[Coords], str]
    #: the array's commit epoch (read under the array's lock)
    epoch: Callable[[], int]
    #: ``if_current(epoch, action)``: run ``action`` under the array's lock if the epoch is
    #: still ``epoch`` (a cache put that no commit can overtake); whether it ran
    if_current: Callable[[int, Callable[[], object]], bool]


class UnitStrategy(ABC):
    """Loads and stores the units of one array."""

    def __init__(self, metadata: ArrayMetadata, ctx: UnitContext) -> None:
        self.ctx = ctx
        self.chunk_spec: ChunkSpec = metadata.chunk_spec()
        #: the spec of one unit (a chunk, or an inner chunk)
        self.unit_spec: ChunkSpec = self.chunk_spec
        #: units per outer chunk along each axis
        self.per_shard: Coords = tuple(1 for _ in metadata.chunk_shape)

    @property
    def per_shard_count(self) -> int:
        """Units per outer chunk (1 for plain chunks)."""
        return prod(self.per_shard)

    def location(self, unit: Coords) -> tuple[Coords, Coords]:
        """(outer chunk coords, coords inside the shard) of a unit."""
        shard = tuple(u // n for u, n in zip(unit, self.per_shard))
        return shard, tuple(u % n for u, n in zip(unit, self.per_shard))

    def groups(self, units: Sequence[Coords]) -> dict[Coords, list[Coords]]:
        """The units grouped by the outer chunk that holds them (one job per group)."""
        out: dict[Coords, list[Coords]] = {}
        for u in units:
            out.setdefault(self.location(u)[0], []).append(u)
        return out

    def store_get(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        """``io.get`` with the key named in any store error."""
        return _naming(key, self.ctx.io.get, key, byte_range)

    def open_stored(self, key: str) -> ObjectReader | None:
        """``io.open_reader`` with the key named in any store error."""
        return _naming(key, self.ctx.io.open_reader, key)

    #: loads fill their unit arrays front to back and publish them as they go
    streams: bool = False
    #: stored units are their elements as in memory: reads may copy from the stored
    #: objects themselves (``read_direct``)
    direct: bool = False

    def load_memory(self, count: int) -> int:
        """What a load of ``count`` units holds at most: the fetched bytes and the units."""
        return 2 * self.unit_spec.nbytes * count

    #: units written front to back are stored while they are written (``writethrough``)
    write_through: UnitStreams | None = None
    #: completed units kept in their outer chunk's next object (shards only)
    parking: Parking | None = None

    def wrote(self, unit: Coords, arr: np.ndarray[Any, Any], sel: tuple[slice, ...]) -> None:
        """A write copied the piece ``sel`` of ``unit`` into its dirty array ``arr`` (its
        stripe lock held; never blocks)."""
        if self.write_through is not None:
            self.write_through.wrote(unit, arr, sel)

    def unstream(self, unit: Coords) -> None:
        """``unit``'s dirty array is changed other than by a write (its unwritten rows)."""
        if self.write_through is not None:
            self.write_through.drop(unit)

    @abstractmethod
    def load(
        self, outer: Coords, units: list[Coords], publish: Publish | None = None
    ) -> dict[Coords, Any]:
        """The units (all in outer chunk ``outer``) from the store: array or ``MISSING``.
        A streaming strategy calls ``publish`` as the unit array fills."""

    @abstractmethod
    def store(
        self, outer: Coords, units: Mapping[Coords, np.ndarray[Any, Any]], group: StoreGroup
    ) -> None:
        """Encode the units of outer chunk ``outer`` and stage the object in ``group`` (the
        other units keep their bytes); a delete happens at once."""

    def committed(self, outer: Coords) -> None:
        """The object of outer chunk ``outer`` was replaced (its group committed)."""

    def read_direct(
        self,
        unit: Coords,
        pieces: Sequence[tuple[tuple[slice, ...], np.ndarray[Any, Any]]],
        nowait: bool = False,
    ) -> bool:
        """Copy ``unit[sel]`` into each ``dst`` of ``pieces`` straight from the stored object,
        opened through the mount's open chunks (``direct.read_pieces``; only where
        ``direct``: the object is the unit's elements). False when the object is not a plain
        unit of the right size (then it is loaded as usual, which refuses it). With ``nowait``,
        ``BlockingIOError`` where that would wait (the chunk is not open yet, or its bytes are
        not in memory)."""
        key = self.ctx.key(unit)
        spec = self.unit_spec
        chunks = self.ctx.engine.open_chunks
        entry = chunks.acquire(self.ctx.uid, key, self.ctx.epoch(), self.open_stored, nowait)
        try:
            return read_pieces(
                entry.reader, spec.shape, spec.dtype, spec.fill_value, pieces, key, nowait
            )
        finally:
            chunks.release(entry)


class PlainUnits(UnitStrategy):
    """Units are whole chunks, encoded through the full chain."""

    def __init__(self, metadata: ArrayMetadata, ctx: UnitContext) -> None:
        super().__init__(metadata, ctx)
        self.prepared: PreparedChain = metadata.codecs.prepare(self.chunk_spec)
        chain, spec = metadata.codecs, self.chunk_spec
        ab = chain.array_bytes
        # the chunk bytes decoded by the chain's ``bytes`` codec are the unit's elements as
        # they are in memory
        plain = (
            ctx.io.reads_into
            and isinstance(ab, BytesCodec)
            and not chain.array_array
            and spec.dtype.kind not in "OT"
            and spec.dtype.isnative
            and ab.stored_dtype(spec.dtype) == spec.dtype
        )
        self.direct = plain and not chain.bytes_bytes
        #: blosc alone after ``bytes``: its blocks are decoded in order as they are read
        self.progressive = (
            plain
            and len(chain.bytes_bytes) == 1
            and isinstance(chain.bytes_bytes[0], BloscCodec)
            and blosc_progressive_available()
        )
        self.streams = self.direct or self.progressive
        if self.direct and spec.shape and UnitStreams.worth(spec.nbytes):
            self.write_through = UnitStreams(ctx.io, ctx.key, spec.shape, spec.dtype.itemsize)
        #: stored chunks are read into reused blocks: the chain's last decoding step
        #: (``bytes_bytes[0]``) decodes a buffer in place into memory of its own
        self.reads_encoded_into = (
            ctx.io.reads_into and bool(chain.bytes_bytes) and chain.bytes_bytes[0].decodes_buffers
        )

    def load_memory(self, count: int) -> int:
        # a direct streaming load reads into the unit array itself
        return (1 if self.direct else 2) * self.unit_spec.nbytes * count

    def load(
        self, outer: Coords, units: list[Coords], publish: Publish | None = None
    ) -> dict[Coords, Any]:
        (u,) = units
        key = self.ctx.key(u)
        if self.direct and publish is not None:
            return {u: self._stream(key, publish)}
        if self.progressive and publish is not None:
            return {u: self._stream_blosc(key, publish)}
        return {u: self._decode(key)}

    def _stream(self, key: str, publish: Publish) -> Any:
        """The chunk read straight into a new unit array, published as it fills."""
        spec = self.unit_spec
        reader = self.open_stored(key)
        if reader is None:
            return MISSING
        with reader:
            if reader.size != spec.nbytes:  # not a valid chunk: loaded and refused as usual
                return self._decode(key)
            arr = buffers.empty(spec.shape, spec.dtype)
            flat = arr.reshape(-1).view(np.uint8).data
            for start in range(0, spec.nbytes, STREAM_PIECE):
                piece = flat[start : start + STREAM_PIECE]
                prefault(piece)  # fresh memory: faulted in with one call, not page by page
                if reader.readinto(piece, start) != len(piece):
                    raise CorruptDataError(
                        f"chunk file shrank to {start} bytes while it was read", key=key
                    )
                if start + len(piece) == spec.nbytes:  # counted before a reader sees it whole
                    self.ctx.engine.stats.add(self.ctx.path, "chunks_decoded")
                publish(arr, start + len(piece))
        return arr

    def _stream_blosc(self, key: str, publish: Publish) -> Any:
        """The chunk's blosc blocks decoded into a new unit array as its bytes are read, a
        piece at a time, published as it fills (``blosc.decode_progressively``); a stream
        that cannot be decoded so is read whole and decoded as usual, unpublished."""
        reader = self._open_checked(key)
        if reader is None:
            return MISSING
        with reader:
            size = reader.size
            encoded = buffers.take(size, self.prepared.max_encoded_size)
            try:
                arr = self._decode_progressively(reader, encoded, publish)
            except CorruptDataError as exc:
                raise CorruptDataError(str(exc), key=key) from None
        if arr is not None:
            return arr
        return self._decoded_from_block(key, encoded, size)

    def _decode_progressively(
        self, reader: ObjectReader, encoded: np.ndarray[Any, Any], publish: Publish
    ) -> np.ndarray[Any, Any] | None:
        """``_stream_blosc``'s unit array, or None with the whole stream read into
        ``encoded`` when it cannot be decoded progressively."""
        spec, size = self.unit_spec, reader.size
        got = 0

        def read_to(n: int) -> None:
            # in steps of a piece at least: few calls, and the kernel reads ahead of them
            nonlocal got
            if n <= got:
                return
            stop = min(size, max(n, got + STREAM_PIECE))
            got += reader.readinto(encoded.data[got:stop], got)
            if got < n:
                raise CorruptDataError(f"chunk file shrank to {got} bytes while it was read")

        arr = buffers.empty(spec.shape, spec.dtype)
        flat = arr.reshape(-1).view(np.uint8)

        def done(ready: int) -> None:
            if ready == len(flat):  # counted before a reader sees it whole
                self.ctx.engine.stats.add(self.ctx.path, "chunks_decoded")
            publish(arr, ready)
            if ready < len(flat):  # the next piece's fresh memory, in one call
                prefault(flat[ready : ready + STREAM_PIECE].data)

        prefault(flat[:STREAM_PIECE].data)
        if decode_progressively(encoded, size, read_to, flat, STREAM_PIECE, done):
            return arr
        read_to(size)
        return None

    def _decode(self, key: str) -> Any:
        if self.reads_encoded_into:
            return self._decode_read_into(key)
        # never fetch more than a valid chunk can take (+1 byte to see that it is longer)
        data = self.store_get(key, ByteRange(0, self.prepared.max_encoded_size + 1))
        if data is None:
            return MISSING
        return self._decoded(key, data)

    def _decoded(self, key: str, data: bytes | memoryview) -> Any:
        try:
            arr = self.prepared.decode(data)
        except CorruptDataError as exc:
            raise CorruptDataError(str(exc), key=key) from None
        self.ctx.engine.stats.add(self.ctx.path, "chunks_decoded")
        return arr

    def _decode_read_into(self, key: str) -> Any:
        """``_decode`` for a chain that decodes into memory of its own: the stored object is
        read into a pool block (``core/buffers.py``) that is reused once the chunk is decoded,
        instead of into fresh memory for every chunk."""
        reader = self._open_checked(key)
        if reader is None:
            return MISSING
        with reader:
            encoded = buffers.take(reader.size, self.prepared.max_encoded_size)
            got = reader.readinto(encoded.data, 0)
        return self._decoded_from_block(key, encoded, got)

    def _open_checked(self, key: str) -> ObjectReader | None:
        """The stored chunk open for reads, or None if it is not stored; one larger than
        any valid chunk is refused unread."""
        reader = self.open_stored(key)
        if reader is not None:
            try:
                self.prepared.check_encoded_size(reader.size)
            except CorruptDataError as exc:
                reader.close()
                raise CorruptDataError(str(exc), key=key) from None
        return reader

    def _decoded_from_block(self, key: str, encoded: np.ndarray[Any, Any], size: int) -> Any:
        """The chunk decoded from the first ``size`` bytes of the pool block ``encoded``, never
        a view of that block (``buffers.apart``)."""
        return buffers.apart(self._decoded(key, encoded.data[:size]), encoded)

    def store(
        self, outer: Coords, units: Mapping[Coords, np.ndarray[Any, Any]], group: StoreGroup
    ) -> None:
        arr = units[outer]
        key = self.ctx.key(outer)
        store, engine = self.ctx.io, self.ctx.engine
        temp = self.write_through.take(outer, arr) if self.write_through is not None else None
        if self.chunk_spec.is_fill(arr):
            if temp is not None:
                temp.discard()
            store.delete(key)
            return
        if temp is not None and _adopted(group, temp):  # stored while it was written
            engine.stats.add(self.ctx.path, "bytes_stored", arr.nbytes)
            engine.stats.add(self.ctx.path, "units_written_through")
            return
        with engine.working(self.prepared.encode_memory):
            # a view of the frozen unit where the chain allows (it is copied, never changed,
            # by writes that come while it is stored)
            data = self.prepared.encode_buffer(arr)
            if data is None:
                store.delete(key)
            else:
                group.set(key, data)
                engine.stats.add(self.ctx.path, "bytes_stored", len(data))
            del data


def _adopted(group: StoreGroup, temp: TempObject) -> bool:
    """``group.adopt(temp)``; False, with ``temp`` discarded, when it cannot or fails (the
    unit is then stored the usual way, which reports any error that lasts)."""
    try:
        if group.adopt(temp):
            return True
    except (OSError, StoreError):  # adopt discarded it
        return False
    temp.discard()
    return False


def _naming(key: str, call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)``, with ``key`` named in the message of any store error it raises."""
    try:
        return call(*args)
    except StoreError as exc:
        if key in str(exc):
            raise
        raise type(exc)(f"{key}: {exc}") from exc
