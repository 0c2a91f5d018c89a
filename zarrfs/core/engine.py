"""The engine: what all arrays of one mount share (caches, worker threads, counters, limits).

Invariants:
- ``cache_size`` bounds dirty units, decoded cached units, the buffers of work in flight and
  the idle blocks kept for reuse (``core/buffers.py``) together (see ``Engine``);
- ``working`` never lets reservations pass ``work_limit`` except for one job running alone,
  and a job never waits for a reservation while it holds one;
- ``run_all`` finishes every call it is given even when every pool thread is blocked: every
  call still queued once the caller's own call is done runs in the caller's thread.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from zarrfs.core import buffers
from zarrfs.core.cache import LRUCache
from zarrfs.core.direct import OpenChunks
from zarrfs.core.stats import Stats

#: the most an engine keeps of idle blocks for reuse (``Engine.pool_bytes``)
POOL_MAX = 64 << 20


@dataclass
class Engine:
    """What all arrays of one mount share: caches, worker threads, counters, limits.

    Memory: ``cache_size`` bounds decoded chunks and unflushed writes together. Dirty chunks may
    take up to ``dirty_limit`` (three quarters of it by default): when a write takes the
    mount's dirty bytes past that, the writer flushes the array's oldest dirty units (down to
    half the limit) before returning. The decoded-chunk cache gets whatever dirty chunks leave
    (its capacity follows ``dirty_bytes``), and shard indexes a sixteenth on top. A sequential
    writer of a row-major file dirties a whole layer of chunks before the first one is
    complete, so a small dirty share would flush every chunk half-written several times.

    Work in flight holds memory too: an encode holds the encoded bytes (and the codecs'
    intermediate buffers) until the store has them, a load the fetched bytes and the decoded
    units until they are cached. Such work reserves its bound with
    ``working(n)`` for as long as it runs; reservations shrink the decoded-chunk cache like
    dirty bytes do, and together they may take at most what the dirty limit leaves
    (``work_limit``, a quarter of ``cache_size`` by default): more work waits until some
    finishes, except that one job always runs. So dirty chunks, cached chunks and the buffers
    of work in flight stay within ``cache_size`` together.

    Blocks of freed chunk-sized buffers are kept mapped for reuse (``core/buffers.py``): up
    to ``pool_bytes`` of them (an eighth of ``cache_size``, at most ``POOL_MAX``; none when
    that is less than one block), which the decoded-chunk cache leaves free, and beside them
    as much as the decoded-chunk cache does not use now (``_pool_spare``): the units a
    sequential reader has passed wait there for the loads of the layer after next. Each
    reservation or growth of the dirty bytes shrinks that spare, and the pool is brought
    within it (``buffers.pool.fit``, called after ``_dirty_lock`` is released: the pool's lock
    is a leaf) before the job goes on. The pool is the process's; the engine made last sets
    its bound."""

    cache_size: int = 1 << 30
    threads: int = 8
    prefetch_bytes: int = 64 << 20
    dirty_limit: int | None = None
    read_only: bool = False
    #: large or sequential reads of plain-bytes chunks come straight from their stored files
    #: (core/direct.py) instead of through loaded units; off, every unit is loaded
    direct_reads: bool = True
    #: a unit (chunk, or inner chunk of a shard) up to this size is always loaded, whatever
    #: ``cache_size`` (a small cache then costs speed, not the array); a larger one only if
    #: the cache can hold it (``ArrayState.oversize``)
    min_unit_limit: int = 64 << 20
    chunk_cache: LRUCache[Any, Any] = field(init=False)
    index_cache: LRUCache[Any, Any] = field(init=False)
    executor: ThreadPoolExecutor = field(init=False)
    stats: Stats = field(default_factory=Stats)
    #: stored chunks kept open for direct reads (core/direct.py)
    open_chunks: OpenChunks = field(default_factory=OpenChunks)

    def __post_init__(self) -> None:
        #: idle blocks kept for reuse, within ``cache_size`` (``core/buffers.py``)
        share = min(POOL_MAX, self.cache_size // 8)
        self.pool_bytes = share if share >= buffers.MIN_BLOCK else 0  # room for one block
        most = self.cache_size * 3 // 4
        self.dirty_limit = most if self.dirty_limit is None else min(self.dirty_limit, most)
        self.chunk_cache = LRUCache(self.cache_size - self.pool_bytes)
        self._dirty_lock = threading.Condition(threading.Lock())
        #: bytes of dirty (unflushed) chunk copies of every array of the mount
        self.dirty_bytes = 0
        #: bytes reserved by work in flight (``working``), at most ``work_limit`` but for one job
        self.work_bytes = 0
        self.work_limit = max(1, self.cache_size - self.dirty_limit)
        self.index_cache = LRUCache(max(1 << 20, self.cache_size // 16))
        self.executor = ThreadPoolExecutor(self.threads, thread_name_prefix="zarrfs-io")
        self._uid_lock = threading.Lock()
        self._next_uid = 0
        buffers.configure(self.pool_bytes, self._pool_spare)

    def _pool_spare(self) -> int:
        """What the decoded-chunk cache's capacity leaves unused now (idle blocks may take it)."""
        cache = self.chunk_cache
        return max(0, cache.capacity - cache.nbytes)

    def add_dirty(self, n: int) -> int:
        """Account ``n`` more (or, negative, fewer) dirty bytes; returns the new total."""
        with self._dirty_lock:
            self.dirty_bytes += n
            self._resize_cache()
            total = self.dirty_bytes
        if n > 0:
            buffers.pool.fit()
        return total

    @contextlib.contextmanager
    def working(self, n: int) -> Iterator[None]:
        """Reserve ``n`` bytes of the budget while the block runs (see the class docstring).

        Waits while other work holds so much that ``n`` more would pass ``work_limit``. A job
        must not wait for anything that needs a reservation while it holds one."""
        with self._dirty_lock:
            while self.work_bytes and self.work_bytes + n > self.work_limit:
                self._dirty_lock.wait()
            self.work_bytes += n
            self._resize_cache()
        buffers.pool.fit()
        try:
            yield
        finally:
            with self._dirty_lock:
                self.work_bytes -= n
                self._resize_cache()
                self._dirty_lock.notify_all()

    @property
    def room(self) -> int:
        """What the decoded-chunk cache may hold beside dirty chunks and work in flight."""
        return max(0, self.cache_size - self.pool_bytes - self.dirty_bytes - self.work_bytes)

    def _resize_cache(self) -> None:
        """The decoded-chunk cache gets what dirty chunks and work in flight leave (lock held)."""
        self.chunk_cache.resize(self.room)

    def new_uid(self) -> int:
        with self._uid_lock:
            self._next_uid += 1
            return self._next_uid

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.open_chunks.clear()

    def run_all(
        self, calls: Sequence[Callable[[], Any]], width: int | None = None
    ) -> list[Future[Any]]:
        """Run every call and return their finished futures (result or exception), in order.

        The calling thread runs calls too: the first, then, once it is done, every call no pool
        thread has started yet, one after the other; only then does it wait for the calls the
        pool started. So the caller works beside the pool instead of waiting on the pool's
        current call while the next ones queue, and when every pool thread is blocked (a store
        that never answers), work of other arrays still finishes instead of queueing behind it.

        ``width`` bounds how many calls run at once (the caller included; default: the pool's
        threads and the caller): the pool then runs ``width - 1`` runners that take the calls
        in order from a list shared with the caller. Calls that mostly hold the interpreter
        lock gain nothing from more threads than CPUs, and lose to the switching between them.
        """
        out: list[Future[Any]] = [Future() for _ in calls]
        if not calls:
            return out
        lock = threading.Lock()
        todo = iter(range(len(calls)))

        def run_queued() -> None:
            while True:
                with lock:
                    i = next(todo, None)
                if i is None:
                    return
                _run_into(calls[i], out[i])

        runners = min(len(calls), width or len(calls)) - 1
        started = [self.executor.submit(run_queued) for _ in range(runners)]
        run_queued()
        for runner in started:
            if not runner.cancel():
                runner.exception()  # started: it ends once the list is empty
        return out


def _run_into(call: Callable[[], Any], fut: Future[Any]) -> None:
    """``call()`` in this thread, its result or exception set on ``fut``."""
    try:
        fut.set_result(call())
    except BaseException as exc:
        fut.set_exception(exc)


#: a call slower than this waited on the store (computing what one node or view needs takes
#: well under it; a read from a local disk or the page cache too)
SLOW_CALL_SECONDS = 0.003
#: consecutive slow calls that show a store with latency: one alone is more often a hiccup of
#: this process (preempted on a busy machine, a page fault, a first import) than a store
SLOW_CALLS_IN_A_ROW = 2


def one_by_one_until_slow(
    calls: Sequence[Callable[[], Any]], run_rest: Callable[[Sequence[Callable[[], Any]]], list[Any]]
) -> list[Any]:
    """The results of ``calls``, in order: run one after the other in this thread while they
    are quick (a local disk: threads would only contend for the interpreter), and once
    ``SLOW_CALLS_IN_A_ROW`` in a row each took over ``SLOW_CALL_SECONDS`` (an object store, a
    network file system), ``run_rest(the calls not run yet)`` runs the rest concurrently. An
    exception of a call propagates."""
    out: list[Any] = []
    slow = 0
    for i, call in enumerate(calls):
        began = time.perf_counter()
        out.append(call())
        slow = slow + 1 if time.perf_counter() - began > SLOW_CALL_SECONDS else 0
        if slow >= SLOW_CALLS_IN_A_ROW and i + 1 < len(calls):
            return out + run_rest(calls[i + 1 :])
    return out
