"""The dirty set of an array and when it is stored (flush, write-behind).

Invariants:
- a flush snapshots the dirty units under ``_write_lock`` and marks them frozen; it encodes
  and stores them holding only ``_flush_lock``; a write to a frozen unit copies it first, so
  what is stored is a stable array;
- group commit: the jobs of one flush stage their objects in one ``StoreGroup`` (the
  directory store writes and fsyncs temporary files), then the group is committed (renames,
  one fsync per directory); nothing is marked clean before that commit returned; at most the
  store's ``set_width`` jobs run at once;
- a unit is marked clean (``_commit``) only if the stored array is still its dirty copy, and
  only after the store has its bytes; the stored array then goes to the cache and the epoch
  advances, so loads that overlapped the commit are not cached;
- a failed job leaves its units dirty (unfrozen) and the flush raises the first error after
  every job ran (the objects the other jobs staged are committed); a failed commit leaves
  every unit of the flush dirty;
- one flush per array at a time (``_flush_lock``, always taken before ``_write_lock``), and one
  write-behind flush per array queued or running (``_behind``);
- a flush that stores part of a shard's units (``down_to``) stores every completely written
  dirty unit of that shard with them (one rewrite of the shard, not one per flush).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from zarrfs.core.arraybase import Coords
from zarrfs.core.errors import ZarrFSError
from zarrfs.core.readpath import ReadPath
from zarrfs.core.stores.base import StoreGroup

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DirtyState:
    """Unstored data of one array: bytes of dirty units, stored objects (chunks or shards)
    they belong to, how many of those are being encoded and stored now, and the age of the
    oldest write not stored yet (0 when clean)."""

    nbytes: int = 0
    objects: int = 0
    writing: int = 0
    oldest_age_s: float = 0.0


class Flushing(ReadPath):
    """Storing dirty units: ``flush`` (all, the oldest, or chosen ones) and write-behind."""

    @property
    def dirty(self) -> bool:
        with self._lock:
            return bool(self._dirty) or self._parked_any()

    def _parked_any(self) -> bool:
        """Whether some units are parked (``sharding/builder.py``): stored nowhere yet."""
        parking = self._units.parking
        return parking is not None and parking.any()

    def dirty_state(self) -> DirtyState:
        """What this array holds that the store does not have yet (``stats.json``'s ``dirty``;
        parked units count among its objects, not its bytes: they hold no memory)."""
        parking = self._units.parking
        with self._lock:
            objects = {self._units.location(u)[0] for u in self._dirty}
            if parking is not None:
                objects.update(parking.shards())
            writing = {self._units.location(u)[0] for u in self._frozen}
            since = self._dirty_since
            return DirtyState(
                nbytes=sum(arr.nbytes for arr in self._dirty.values()),
                objects=len(objects),
                writing=len(writing & objects),
                oldest_age_s=0.0 if since is None else time.monotonic() - since,
            )

    def dirty_age(self) -> float:
        """Seconds since the oldest unflushed write (0 when clean)."""
        with self._lock:
            return 0.0 if self._dirty_since is None else time.monotonic() - self._dirty_since

    def flush(self, down_to: int | None = None, only: Sequence[Coords] | None = None) -> None:
        """Encode and store every dirty unit; on return they are in the store (or it raised).

        With ``down_to``, only the oldest dirty units, until the mount's dirty bytes would be
        at most ``down_to``; with ``only``, those of these units that are still dirty.

        Lock order (docs/write-path.md): ``_flush_lock``, then ``_write_lock`` for the snapshot
        only; the caller holds neither."""
        with self._flush_lock:
            self._flush_locked(down_to, only)

    def relieve(self, limit: int) -> None:
        """Back-pressure on a writer that took the dirty bytes over ``limit``: the oldest
        units are stored, down to half the limit.

        An array whose units are written through (``core/writethrough.py``) first waits for
        the flush in progress (a write-behind storing the complete units: their bytes are
        mostly on disk already), then stores the complete units left, and stores more only
        if the dirty bytes are still over the limit then: storing the partly written units of
        the next layer as well would end their streams and store them twice. Measured (512
        MiB ``dd`` over the benchmark's arrays, alternating runs): ``bytes`` 556-598 MiB/s
        against 507 storing them; the same wait for blosc chunks, which are not written
        through, 256 against 323."""
        with self._flush_lock:
            parking = self._units.parking
            if parking is not None and parking.enabled:
                # the complete units are parked (the park in progress, if any, is done);
                # shards are stored only if that leaves the dirty bytes over the limit
                if self.engine.dirty_bytes > limit:
                    with self._lock:
                        whole = [u for u in self._complete if u in self._dirty]
                    self._park_locked(whole)
                if self.engine.dirty_bytes > limit:
                    self._flush_locked(down_to=limit // 2)
                return
            through = self._units.write_through is not None
            if through and self.engine.dirty_bytes > limit:
                with self._lock:  # what the next write-behind would store
                    whole = [u for u in self._complete if u in self._dirty]
                self._flush_locked(only=whole)
            if not through or self.engine.dirty_bytes > limit:
                self._flush_locked(down_to=limit // 2)

    def _flush_locked(
        self, down_to: int | None = None, only: Sequence[Coords] | None = None
    ) -> None:
        """``flush`` with ``_flush_lock`` held by the caller (and maybe ``_write_lock``)."""
        with self._write_lock:
            with self._lock:
                if only is None:
                    units = list(self._dirty)
                else:
                    units = [u for u in only if u in self._dirty]
                if down_to is not None:
                    # completely written units first: storing one frees its memory for good,
                    # while a partly written one must be merged with its stored content (a
                    # load) and is stored again once the writer completes it
                    whole = self._complete
                    units = [u for u in units if u in whole] + [u for u in units if u not in whole]
                    excess = self.engine.dirty_bytes - down_to
                    for n, u in enumerate(units):
                        if excess <= 0:
                            del units[n:]
                            break
                        excess -= self._dirty[u].nbytes
                    units += self._same_shards(units)
                unmerged = [u for u in units if u in self._unknown]
            if unmerged:
                self._merge_unknown(unmerged)  # may raise: nothing flushed, all still dirty
            with self._lock:
                snapshot = {u: self._dirty[u] for u in units if u in self._dirty}
                self._frozen.update(snapshot)
        batches = [
            (outer, {u: snapshot[u] for u in members})
            for outer, members in self._units.groups(list(snapshot)).items()
        ]
        parking = self._units.parking
        if parking is not None and only is None and down_to is None:
            # everything: the shards holding parked units too, with nothing dirty or not
            stored = {outer for outer, _ in batches}
            batches += [(outer, {}) for outer in parking.shards() if outer not in stored]
        if not batches:
            return
        group: StoreGroup | None = None
        try:
            group = self._io.group()
            jobs = [functools.partial(self._units.store, o, b, group) for o, b in batches]
            done = self.engine.run_all(jobs, width=self._io.set_width)
            errors = [exc for f in done if (exc := f.exception()) is not None]
            group.commit()
        except BaseException:
            if group is not None:
                group.abort()
            with self._lock:
                self._frozen.difference_update(snapshot)
            raise
        for (outer, batch), fut in zip(batches, done, strict=True):
            if fut.exception() is None:
                self._units.committed(outer)  # (first: its parked units are stored now)
                self._commit(batch, outer)
        if errors:
            with self._lock:
                self._frozen.difference_update(snapshot)
            raise errors[0]

    def _same_shards(self, units: list[Coords]) -> list[Coords]:
        """The other completely written dirty units of the shards ``units`` belong to
        (``_lock`` held): the shard is rewritten anyway, so they go with it rather than
        cost another rewrite of it in a later flush."""
        if self._units.per_shard_count == 1 or not units:
            return []
        chosen = set(units)
        outers = {self._units.location(u)[0] for u in units}
        return [
            u
            for u in self._complete
            if u not in chosen and u in self._dirty and self._units.location(u)[0] in outers
        ]

    def _commit(self, written: dict[Coords, Any], outer: Coords | None = None) -> None:
        """Mark units clean after their bytes reached the store (the object of outer chunk
        ``outer``, replaced). Its cached shard index goes in the same step, under ``_lock``
        with the epoch: once a unit is clean (and may be evicted and loaded again) no
        index of the replaced shard is cached, and none read before can be cached later."""
        cache = self.engine.chunk_cache
        freed = 0
        with self._lock:
            self._epoch += 1
            if outer is not None:
                self.engine.index_cache.pop((self.uid, outer))
            for u, done in written.items():
                current = self._dirty.get(u)
                if current is not None and current is done:
                    del self._dirty[u]
                    self._frozen.discard(u)
                    self._complete.discard(u)
                    freed += current.nbytes
                    cache.put((self.uid, u), done)
                else:
                    cache.pop((self.uid, u))
            if not self._dirty and not self._parked_any():
                self._dirty_since = None
            self._stored_bytes = None
        self.engine.add_dirty(-freed)

    def _write_behind(self) -> None:
        """Start storing the completely written dirty units in the background, so a
        sequential writer rarely waits for a flush (one such flush per array at a time).

        Inner chunks of shards wait until storing them is worth a shard rewrite (which
        copies the shard's other inner chunks): a shard whose units are all complete goes at
        once, the others once the complete units take half the dirty limit, except a shard
        that also holds a unit still being written (the writer completes it soon; writing
        the shard now would rewrite it again then). A row-major writer of shards spanning the
        whole depth then rewrites each shard twice, not once per layer of inner chunks (a
        512 MiB overwrite of the benchmark's sharded array: 694 MiB written, was 1214)."""
        parking = self._units.parking
        park: list[Coords] = []
        with self._lock:
            if self._behind:
                return
            units = [u for u in self._complete if u in self._dirty and u not in self._frozen]
            if units and parking is not None and parking.enabled:
                # a shard whose units are all complete or parked is stored; the complete
                # units of the others are parked (their memory freed, their bytes written
                # once, into the shard's next file)
                whole = self._units.per_shard_count
                ready: list[Coords] = []
                for outer, us in self._units.groups(units).items():
                    done = {self._units.location(u)[1] for u in us} | parking.parked_in(outer)
                    (ready if len(done) == whole else park).extend(us)
                units = ready
            elif units and self._units.per_shard_count > 1:
                limit = self.engine.dirty_limit
                assert limit is not None
                if len(units) * self._unit_spec.nbytes < limit // 2:
                    whole = self._units.per_shard_count
                    groups = self._units.groups(units).values()
                    units = [u for us in groups if len(us) == whole for u in us]
                else:  # a shard still being written into would be rewritten again soon
                    where = self._units.location
                    busy = {where(u)[0] for u in self._dirty if u not in self._complete}
                    units = [u for u in units if where(u)[0] not in busy]
            if not units and not park:
                return
            self._behind = True

        def run() -> None:
            try:
                if units:
                    self.flush(only=units)
                if park:
                    self._park(park)
            except ZarrFSError as exc:  # the units stay dirty; the next flush reports it
                log.warning("%s: background flush failed: %s", self.path or "/", exc)
            finally:
                with self._lock:
                    self._behind = False

        self.engine.executor.submit(run)

    def _park(self, units: Sequence[Coords]) -> None:
        """Park complete dirty units of shards not complete yet: encode them, append them to
        their shard's next file (``sharding/builder.py``), and drop them from the dirty set
        and its memory. A unit written again meanwhile (a new dirty copy) stays dirty.

        Holds ``_flush_lock`` throughout (no flush of this array meanwhile) and
        ``_write_lock`` for the snapshot only, as a flush does."""
        with self._flush_lock:
            self._park_locked(units)

    def _park_locked(self, units: Sequence[Coords]) -> None:
        """``_park`` with ``_flush_lock`` held by the caller."""
        parking = self._units.parking
        assert parking is not None
        with self._write_lock:
            with self._lock:
                snapshot = {
                    u: self._dirty[u]
                    for u in units
                    if u in self._dirty and u in self._complete and u not in self._frozen
                }
                self._frozen.update(snapshot)
        freed = 0
        cache = self.engine.chunk_cache
        held = 2 * self._unit_spec.nbytes
        try:
            for outer, members in self._units.groups(list(snapshot)).items():
                local = {self._units.location(u)[1]: u for u in members}
                with self.engine.working(held):
                    got = parking.park(outer, {c: snapshot[u] for c, u in local.items()})
                if got is None:  # the store cannot: the units stay dirty
                    return
                builder, entries = got
                with self._lock:
                    self._epoch += 1  # a load that overlapped read the old shard
                    for c, entry in entries.items():
                        u = local[c]
                        if self._dirty.get(u) is not snapshot[u]:
                            continue  # written again meanwhile: that copy wins
                        builder.publish(c, entry)
                        del self._dirty[u]
                        self._complete.discard(u)
                        self._unknown.pop(u, None)  # (every row was written)
                        self._unknown_cols.pop(u, None)
                        cache.pop((self.uid, u))
                        freed += snapshot[u].nbytes
                    self._stored_bytes = None
        finally:
            with self._lock:
                self._frozen.difference_update(snapshot)
            if freed:
                self.engine.add_dirty(-freed)
