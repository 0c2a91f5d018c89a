"""The block pool (core/buffers.py): blocks are reused only once nothing refers to them."""

from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import pytest

from zarrfs.core import buffers
from zarrfs.core.buffers import MIN_BLOCK, BlockPool, _Block
from zarrfs.core.engine import POOL_MAX, Engine


def _block_of(arr: np.ndarray) -> object:
    root = arr
    while isinstance(root.base, np.ndarray):
        root = root.base
    return root.base.obj if isinstance(root.base, memoryview) else root.base


def test_small_requests_are_plain_arrays_and_large_ones_blocks():
    pool = BlockPool(limit=64 << 20)
    small = pool.take(MIN_BLOCK - 1)
    assert small.nbytes == MIN_BLOCK - 1 and not isinstance(_block_of(small), _Block)
    big = pool.take(MIN_BLOCK + 1)
    assert big.nbytes == MIN_BLOCK + 1 and big.dtype == np.uint8
    assert isinstance(_block_of(big), _Block)
    assert big.flags.writeable and big.flags.c_contiguous
    assert big.ctypes.data % 4096 == 0  # page aligned
    big[:] = 7  # writable to the end
    assert pool.created == 1 and pool.reused == 0


def test_a_block_is_idle_again_only_when_every_view_of_it_is_gone():
    pool = BlockPool(limit=64 << 20)
    arr = pool.take(2 * MIN_BLOCK)
    address = arr.ctypes.data
    unit = arr.view(np.float32).reshape(64, -1)  # how units use blocks
    mv = unit[3].data
    del arr
    assert pool.idle_bytes == 0  # ``unit`` and ``mv`` still use it
    del unit
    assert pool.idle_bytes == 0  # the memoryview still does
    other = pool.take(2 * MIN_BLOCK)  # so another request gets another block
    assert other.ctypes.data != address
    del mv
    assert pool.idle_bytes == 2 * MIN_BLOCK
    again = pool.take(2 * MIN_BLOCK)
    assert again.ctypes.data == address and pool.reused == 1
    assert pool.idle_bytes == 0


def test_requests_with_one_capacity_share_blocks_whatever_their_size():
    pool = BlockPool(limit=64 << 20)
    first = pool.take(3 * MIN_BLOCK, capacity=5 * MIN_BLOCK)
    address = first.ctypes.data
    del first
    second = pool.take(4 * MIN_BLOCK + 17, capacity=5 * MIN_BLOCK)
    assert second.ctypes.data == address and second.nbytes == 4 * MIN_BLOCK + 17
    del second
    # without the capacity, a different size is another block
    third = pool.take(4 * MIN_BLOCK + 17)
    assert third.ctypes.data != address


def test_idle_blocks_stay_within_the_limit():
    pool = BlockPool(limit=3 * MIN_BLOCK)
    arrays = [pool.take(MIN_BLOCK) for _ in range(5)]
    del arrays
    assert pool.idle_bytes == 3 * MIN_BLOCK
    pool.limit = MIN_BLOCK
    kept = pool.take(MIN_BLOCK)  # one of the idle ones, and the rest down to the limit
    assert pool.reused == 1 and pool.idle_bytes == MIN_BLOCK
    pool.limit = 0
    del kept
    assert pool.idle_bytes == MIN_BLOCK  # not kept again over the limit
    pool.fit()  # and the one idle is freed by the next fit (or take)
    assert pool.idle_bytes == 0


def test_idle_blocks_take_what_the_owner_spares_beside_the_limit_and_give_it_back():
    pool = BlockPool(limit=MIN_BLOCK)
    spare = [3 * MIN_BLOCK]

    class Owner:
        def spare(self):
            return spare[0]

    owner = Owner()
    pool.spare = weakref.WeakMethod(owner.spare)
    arrays = [pool.take(MIN_BLOCK) for _ in range(6)]
    del arrays
    assert pool.idle_bytes == 4 * MIN_BLOCK  # the limit and the spare
    spare[0] = MIN_BLOCK  # the owner's budget shrank
    kept = pool.take(MIN_BLOCK)  # one idle block, and the idle ones brought within
    assert pool.reused == 1 and pool.idle_bytes == 2 * MIN_BLOCK
    spare[0] = 0
    pool.fit()
    assert pool.idle_bytes == MIN_BLOCK  # the limit alone
    del kept, owner  # an owner gone spares nothing
    assert pool.idle_bytes == MIN_BLOCK
    assert pool.created == 6


def test_an_engine_keeps_idle_blocks_within_what_its_cache_and_work_leave():
    engine = Engine(cache_size=16 << 20, threads=1)
    try:
        assert engine.pool_bytes == 2 << 20
        arrays = [buffers.take(1 << 20) for _ in range(8)]
        del arrays
        assert buffers.pool.idle_bytes == 8 << 20  # the empty chunk cache spares them
        with engine.working(12 << 20):  # a reservation shrinks the cache: idle blocks go
            assert buffers.pool.idle_bytes <= (16 << 20) - (12 << 20)
            assert buffers.pool.idle_bytes == 4 << 20
    finally:
        engine.close()
        buffers.pool.trim()


def test_blocks_of_a_size_in_use_displace_the_longest_idle_ones():
    pool = BlockPool(limit=4 * MIN_BLOCK)
    big = [pool.take(2 * MIN_BLOCK) for _ in range(2)]
    del big  # the limit is full of blocks of a size nobody takes again
    assert pool.idle_bytes == 4 * MIN_BLOCK
    for _ in range(3):  # blocks of another size come and go
        small = [pool.take(MIN_BLOCK) for _ in range(2)]
        del small
    assert pool.reused >= 2  # the later rounds took the earlier rounds' blocks
    assert pool.stats()["idle_bytes"] <= pool.limit
    assert sorted(len(b) for b, _ in pool._idle[MIN_BLOCK]) == [MIN_BLOCK, MIN_BLOCK]


def test_blocks_idle_too_long_are_freed(monkeypatch):
    pool = BlockPool(limit=64 << 20)
    clock = [1000.0]
    monkeypatch.setattr(buffers.time, "monotonic", lambda: clock[0])
    old = pool.take(2 * MIN_BLOCK)
    del old
    assert pool.idle_bytes == 2 * MIN_BLOCK
    clock[0] += buffers.IDLE_SECONDS + 1
    fresh = pool.take(MIN_BLOCK)  # another size: the old block expires meanwhile
    assert pool.idle_bytes == 0 and pool.reused == 0
    del fresh


def test_no_block_is_in_two_hands_at_once_across_threads():
    pool = BlockPool(limit=8 * MIN_BLOCK)
    failures: list[str] = []

    def work(tag: int) -> None:
        for i in range(200):
            arr = pool.take(MIN_BLOCK)
            mark = (tag * 1000 + i) % 251
            arr[:] = mark
            view = arr.reshape(16, -1)[::3]  # a view outlives the array name
            del arr
            if not (view == mark).all():
                failures.append(f"thread {tag}: block changed while in use")
            del view

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    assert pool.reused > 0 and pool.idle_bytes <= pool.limit


def test_empty_and_copy_give_arrays_of_the_asked_shape_and_type():
    a = buffers.empty((8, 256, 128), np.dtype("<f8"))
    assert a.shape == (8, 256, 128) and a.dtype == np.dtype("<f8") and a.flags.c_contiguous
    assert isinstance(_block_of(a), _Block)
    a[...] = np.arange(a.size).reshape(a.shape)
    b = buffers.copy(a[:, ::2])  # a C-order copy, like ndarray.copy()
    assert b.flags.c_contiguous and np.array_equal(b, a[:, ::2])
    assert not np.shares_memory(a, b)
    o = buffers.empty((4,), np.dtype(object))  # object arrays are never blocks
    assert o.dtype == object


def test_an_engine_leaves_its_pool_share_out_of_the_chunk_cache():
    engine = Engine(cache_size=512 << 20, threads=1)
    try:
        assert engine.pool_bytes == min(POOL_MAX, (512 << 20) // 8)
        assert buffers.pool.limit == engine.pool_bytes
        assert engine.chunk_cache.capacity == (512 << 20) - engine.pool_bytes
    finally:
        engine.close()
    small = Engine(cache_size=4 << 20, threads=1)  # an eighth is less than one block
    try:
        assert small.pool_bytes == 0 and small.chunk_cache.capacity == 4 << 20
    finally:
        small.close()


@pytest.fixture(autouse=True)
def _collect():
    yield
    gc.collect()


def test_apart_copies_only_a_view_of_the_block():
    block = buffers.take(2 << 20)
    block[:] = 7
    view = block[: 1 << 20]
    out = buffers.apart(view, block)
    assert not np.may_share_memory(out, block) and (out == 7).all()
    other = np.ones(4, dtype=np.uint8)
    assert buffers.apart(other, block) is other


def test_an_array_freed_while_the_pool_lock_is_held_does_not_wait_for_it():
    """The cyclic garbage collector can free a pool array during any allocation, one made
    inside the pool's own critical section included: its finalizer must not wait for the
    pool's lock (it did, and a flush's ``take`` hung for good)."""
    pool = BlockPool(limit=4 * MIN_BLOCK)
    arr = pool.take(MIN_BLOCK)
    done = threading.Event()

    def free_under_the_lock() -> None:
        nonlocal arr
        with pool._lock:
            del arr  # the finalizer runs here, in this thread, under the lock
        done.set()

    t = threading.Thread(target=free_under_the_lock, daemon=True)
    t.start()
    t.join(5)
    assert done.is_set()
    assert pool.idle_bytes == MIN_BLOCK  # and the block is idle again
