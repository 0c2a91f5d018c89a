"""Shards built in their new file while a writer fills them.

A shard is stored whole: changing one inner chunk rewrites the shard. A writer that fills
shards larger than the dirty limit leaves (a row-major writer of shards spanning the array's
depth: every layer of inner chunks touches every shard) would otherwise make the engine
store each shard several times over, once per flush the limit forces, each time copying
the inner chunks stored before. Instead, the inner chunks a writer has completed are
*parked*: encoded and appended to the shard's next file (a temporary object of the store,
``Store.open_temp(..., building=True)``), and their memory is freed. The flush that stores
the shard appends the rest to that same file (its dirty inner chunks, the inner chunks of
the old shard nobody changed, then the index) and commits it like any other object. Each
inner chunk is then written once, and the dirty memory of such a writer stays about one
layer of inner chunks.

Invariants:
- a builder belongs to one shard of one array (``ShardedUnits.builders``); its file is
  invisible until the flush that stores the shard commits it. Parked inner chunks are not
  stored yet: the array counts them as dirty (``dirty``, ``flush``, write-back, unmount) and
  a flush of everything finishes and commits every builder;
- ``parked`` maps an inner chunk to ``(offset, nbytes)`` of its encoded bytes in the file, or
  None when it equals the fill value (no bytes). A unit is parked only from a dirty copy a
  writer completed, and leaves the dirty set in the same step (under the array's lock): a
  unit is dirty (in memory), parked (here) or stored, never two at once. A later write makes
  it dirty again, and that copy wins when the shard is stored (its bytes are appended again;
  the parked ones stay in the file as unused space, which the format allows, until more than
  half of the file is unused: the next park or store then copies the parked chunks into a new
  file, ``compact``);
- the parked bytes are the only copy of those units until the commit. The file stays
  readable through a descriptor of its own (``TempObject.read``) even when a failed store or
  commit unlinked it; the next store of the shard first copies the parked inner chunks into
  a new file (``_renew``); a builder's descriptor is released only after a commit stored
  its parked chunks (``release``);
- one ``lock`` per builder orders everything done to its file: appends, reads, finishing.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np

from zarrfs.core.codecs.base import ChunkSpec
from zarrfs.core.codecs.chain import PreparedChain
from zarrfs.core.codecs.sharding import ShardingCodec
from zarrfs.core.errors import StoreError
from zarrfs.core.sharding import format as fmt
from zarrfs.core.sharding.access import _KeptBytes, _Run, kept_entries, shard_plan
from zarrfs.core.stores.base import Store, StoreGroup, TempObject

Coords = tuple[int, ...]
Entry = tuple[int, int] | None

#: a builder's file is compacted only once this many of its bytes are unused
COMPACT_MIN = 4 << 20


class CannotBuild(StoreError):
    """The store gives no object to build (``Store.open_temp`` returned None)."""


class ShardBuilder:
    """The next file of one shard, holding the inner chunks parked so far."""

    def __init__(
        self,
        store: Store,
        key: str,
        codec: ShardingCodec,
        shard_spec: ChunkSpec,
        inner: PreparedChain,
        files: dict[int, TempObject] | None = None,
    ) -> None:
        self.store, self.key = store, key
        self._codec, self._shard_spec, self._inner = codec, shard_spec, inner
        #: every file this builder holds open, shared by the builders of one array (what its
        #: finalizer discards: it must not hold the builders, whose store holds the array)
        self._files: dict[int, TempObject] = {} if files is None else files
        self.lock = threading.Lock()
        #: inner chunk -> its bytes in the file (None: the fill value); changed under the
        #: array's lock (readers look without it: one dict operation at a time)
        self.parked: dict[Coords, Entry] = {}
        self._temp: TempObject | None = None
        self._size = 0
        #: the file went to a store (adopted, or dropped by a failure): the next store of
        #: the shard builds a new one from the parked inner chunks
        self._spent = False
        #: a store adopted the file: once its group commits, the builder is done
        self.stored = False
        #: bytes in the file no entry points at any more (inner chunks parked again)
        self.unused = 0

    @classmethod
    def supported(cls, codec: ShardingCodec) -> bool:
        """Whether shards of ``codec`` can be built this way (the index after the chunks)."""
        return codec.index_location == "end"

    def encode(self, arr: np.ndarray[Any, Any]) -> bytes | memoryview | None:
        """The stored bytes of an inner chunk (None: it equals the fill value)."""
        if self._inner.spec.is_fill(arr):
            return None
        return self._inner.encode_buffer(np.ascontiguousarray(arr))

    def append(self, data: bytes | memoryview | None) -> Entry:
        """Append one inner chunk's stored bytes; where they are (``lock`` held). Raises
        ``StoreError`` where the store cannot build objects, or on an I/O error (the file
        is then given up, ``_spent``)."""
        if data is None:
            return None
        if self._spent:
            self._renew()
        if self._temp is None:
            guess = self._codec.max_encoded_size(self._shard_spec)
            temp = self.store.open_temp(self.key, guess, building=True)
            if temp is None:
                raise CannotBuild(f"{self.key}: the store cannot build objects in place")
            self._temp = temp
            self._files[id(temp)] = temp
        with memoryview(data) as raw, raw.cast("B") as view:
            n = len(view)
            try:
                self._temp.append(view)
            except OSError as exc:
                self._spent = True
                raise StoreError(f"{self.key}: appending to its new shard: {exc}") from exc
        at = self._size
        self._size += n
        return at, n

    def publish(self, c: Coords, entry: Entry) -> None:
        """``c`` is parked at ``entry`` (the array's lock held): what it replaces is unused."""
        old = self.parked.get(c)
        self.parked[c] = entry
        if old is not None:
            self.unused += old[1]

    def compact(self) -> None:
        """Start a new file with the parked chunks only when more than half of this one is
        unused (``lock`` held, nothing appended since for a store): a writer that parks the
        same inner chunks again and again keeps the file, and the shard, about their size."""
        live = sum(e[1] for e in self.parked.values() if e is not None)
        if self.unused > max(live, COMPACT_MIN):
            self._spent = True  # the next append or store copies the parked chunks

    def read(self, entry: Entry) -> bytes | None:
        """The stored bytes of a parked inner chunk (``lock`` held)."""
        if entry is None:
            return None
        return self._read_from(self._temp, entry)

    def decode(self, data: bytes, coords: Coords) -> np.ndarray[Any, Any]:
        """A parked inner chunk's array."""
        return self._codec.decode_inner(data, self._shard_spec, coords, self._inner)

    def _renew(self) -> None:
        """Copy the parked inner chunks of the spent file into a new one (``lock`` held);
        on a failure the spent file stays the parked chunks' place."""
        old, old_size, old_unused = self._temp, self._size, self.unused
        self._temp, self._size, self._spent, self.stored = None, 0, False, False
        self.unused = 0
        moved: dict[Coords, Entry] = {}
        try:
            for c, entry in self.parked.items():
                moved[c] = None if entry is None else self.append(self._read_from(old, entry))
        except BaseException:
            if self._temp is not None:
                self._drop(self._temp)
            self._temp, self._size, self._spent, self.unused = old, old_size, True, old_unused
            raise
        self.parked.update(moved)
        if old is not None:
            self._drop(old)

    def _drop(self, temp: TempObject) -> None:
        """Unlink ``temp`` (if it still has a name) and close it."""
        temp.discard()
        temp.release()
        self._files.pop(id(temp), None)

    def _read_from(self, temp: TempObject | None, entry: tuple[int, int]) -> bytes:
        if temp is None:
            raise StoreError(f"{self.key}: parked inner chunk without a file")
        try:
            return temp.read(*entry)
        except OSError as exc:
            raise StoreError(f"{self.key}: reading a parked inner chunk: {exc}") from exc

    def store_shard(
        self, updates: Mapping[Coords, np.ndarray[Any, Any] | None], group: StoreGroup
    ) -> int:
        """Stage the shard: the parked inner chunks, ``updates`` (inner chunk -> its new
        array; None removes it), the old shard's other inner chunks, the index. The file is
        adopted by ``group``; the caller drops the builder once the group committed
        (``release``). On any failure the builder stays, spent, with its parked chunks.
        Returns the new shard's size (0: nothing was left, the shard was deleted)."""
        with self.lock:
            try:
                return self._store_locked(updates, group)
            except BaseException:
                self._spent = True
                self.stored = False
                raise

    def _store_locked(
        self, updates: Mapping[Coords, np.ndarray[Any, Any] | None], group: StoreGroup
    ) -> int:
        for c in updates:  # newer than what is parked: those bytes go unused
            superseded = self.parked.pop(c, None)
            if superseded is not None:
                self.unused += superseded[1]
        self.compact()
        if self._spent:
            self._renew()
        entries: dict[Coords, Entry] = dict(self.parked)
        for c in sorted(updates):
            arr = updates[c]
            entries[c] = None if arr is None else self.append(self.encode(arr))
        kept = kept_entries(
            self.store, self.key, self._codec, self._shard_spec, self._inner, entries
        )
        runs = [r for r in shard_plan(kept) if isinstance(r, _Run)]
        with _KeptBytes(self.store, self.key, runs) as kept_bytes:
            for run in runs:
                at = self._size
                self.append(kept_bytes.read(run))
                for c in run.members:
                    offset, nbytes = kept[c]
                    entries[c] = (at + offset - run.first, nbytes)
        index = fmt.ShardIndex.empty(self._codec.chunks_per_shard(self._shard_spec.shape))
        for c, entry in entries.items():
            if entry is not None:
                index.offsets[c], index.nbytes[c] = entry
        if index.is_empty():  # nothing left: no shard
            self.store.delete(self.key)
            self._spent = True
            self.stored = True
            if self._temp is not None:
                self._temp.discard()
            return 0
        self.append(fmt.encode_index(index, self._codec.index_codecs))
        assert self._temp is not None
        self._spent = True  # whatever happens next, this file is the group's
        self._temp.finish()
        if not group.adopt(self._temp):
            raise StoreError(f"{self.key}: the store cannot commit a shard built in place")
        self.stored = True
        return self._size

    def release(self) -> None:
        """The shard was committed with every parked chunk: let go of the file. A load that
        took this builder before then finds nothing parked and reads the stored shard."""
        with self.lock:
            self.parked.clear()
            if self._temp is not None:
                self._temp.release()
                self._files.pop(id(self._temp), None)


class Parking:
    """The builders of one array's shards (``ShardedUnits.parking``), by shard coords.

    ``enabled`` only where the store builds objects (``Store.builds_objects``) and the index
    comes last; elsewhere, and for good once the store refuses a file after all, the units
    stay dirty in memory until their shard is stored, as without parking.

    ``builders`` changes only under the array's flush lock (a park, a flush's store and
    commit); readers (loads) look without it, one dict operation at a time."""

    def __init__(
        self, store: Store, key: Any, codec: ShardingCodec, shard_spec: ChunkSpec,
        inner: PreparedChain,
    ) -> None:  # fmt: skip
        self._store, self._key = store, key
        self._codec, self._shard_spec, self._inner = codec, shard_spec, inner
        self.enabled = ShardBuilder.supported(codec) and store.builds_objects
        self.builders: dict[Coords, ShardBuilder] = {}
        # an array dropped with builders never stored (its last flush failed for good):
        # their files go with it
        self._files: dict[int, TempObject] = {}
        weakref.finalize(self, _discard_files, self._files)

    def any(self) -> bool:
        """Whether some shard holds parked inner chunks (unstored data)."""
        return any(b.parked for b in list(self.builders.values()))

    def shards(self) -> list[Coords]:
        """The shards holding parked inner chunks."""
        return [s for s, b in list(self.builders.items()) if b.parked]

    def parked_in(self, shard: Coords) -> set[Coords]:
        """The inner chunks of ``shard`` that are parked."""
        b = self.builders.get(shard)
        return set() if b is None else set(b.parked)

    def park(
        self, shard: Coords, arrays: Mapping[Coords, np.ndarray[Any, Any]]
    ) -> tuple[ShardBuilder, dict[Coords, Entry]] | None:
        """Encode and append inner chunks (coords inside the shard -> array) to the shard's
        builder; where each went, to be published by the caller (``publish``). None when
        the store cannot build objects (parking is then off)."""
        builder = self.builders.get(shard)
        if builder is None:  # (one with nothing parked yet stores the shard as a rewrite would)
            builder = self.builders[shard] = ShardBuilder(
                self._store, self._key(shard), self._codec, self._shard_spec, self._inner,
                self._files,
            )  # fmt: skip
        out: dict[Coords, Entry] = {}
        with builder.lock:
            builder.compact()
            for c in sorted(arrays):
                try:
                    out[c] = builder.append(builder.encode(arrays[c]))
                except CannotBuild:
                    self.enabled = False  # the store cannot after all: never again
                    if not builder.parked:
                        del self.builders[shard]
                    return None
        return builder, out

    def load(self, shard: Coords, coords: list[Coords]) -> dict[Coords, Any]:
        """The parked ones among ``coords`` (inside ``shard``): array, or None for the fill
        value; the others are left to the stored shard."""
        builder = self.builders.get(shard)
        if builder is None:
            return {}
        out: dict[Coords, Any] = {}
        with builder.lock:
            for c in coords:
                if c in builder.parked:
                    data = builder.read(builder.parked[c])
                    out[c] = None if data is None else builder.decode(data, c)
        return out

    def store(
        self, shard: Coords, updates: Mapping[Coords, np.ndarray[Any, Any]], group: StoreGroup
    ) -> int | None:
        """Stage the shard through its builder, if it has one: the new shard's size (0 when
        nothing is left of it); None when it has none."""
        builder = self.builders.get(shard)
        if builder is None:
            return None
        return builder.store_shard(updates, group)

    def committed(self, shard: Coords) -> None:
        """The group that stored ``shard`` committed: its builder is done."""
        builder = self.builders.get(shard)
        if builder is not None and builder.stored:
            del self.builders[shard]
            builder.release()


def _discard_files(files: dict[int, TempObject]) -> None:
    """The finalizer of an array's ``Parking``: unlink and close the files left."""
    for temp in list(files.values()):
        temp.discard()
        temp.release()
    files.clear()
