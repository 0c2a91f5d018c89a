"""The offload function: worker threads, one capacity limit, a deadline that abandons."""

from __future__ import annotations

import threading
import time

import pytest
import trio

from zarrfs.core.errors import CorruptDataError, StoreTimeout
from zarrfs.fuse.offload import Offload

pytestmark = pytest.mark.timeout(30)


def test_result_and_exceptions_pass_through() -> None:
    offload = Offload(threads=2, deadline=5)

    async def main() -> None:
        assert await offload(lambda a, b: a + b, 2, 3) == 5
        assert await offload(threading.get_ident) != threading.get_ident()

        def fail() -> None:
            raise CorruptDataError("bad", key="k")

        with pytest.raises(CorruptDataError):
            await offload(fail)

    trio.run(main)


def test_deadline_abandons_the_thread() -> None:
    offload = Offload(threads=4, deadline=0.2)
    release = threading.Event()
    finished = threading.Event()

    def stuck() -> None:
        release.wait(20)
        finished.set()

    async def main() -> float:
        started = time.monotonic()
        with pytest.raises(StoreTimeout, match="did not finish within 0.2 s"):
            await offload(stuck)
        return time.monotonic() - started

    elapsed = trio.run(main)
    assert elapsed < 5 and not finished.is_set()  # answered while the thread still runs
    release.set()
    assert finished.wait(5)


def test_per_call_deadline_overrides_the_default() -> None:
    offload = Offload(threads=1, deadline=0.05)

    async def main() -> str:
        return await offload(lambda: time.sleep(0.3) or "done", deadline=5)

    assert trio.run(main) == "done"


def test_capacity_limit_and_abandoned_threads_keep_their_slot() -> None:
    offload = Offload(threads=2, deadline=5)
    active = 0
    peak = 0
    lock = threading.Lock()

    def work() -> None:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.05)
        with lock:
            active -= 1

    async def many() -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(offload, work)

    trio.run(many)
    assert peak == 2

    single = Offload(threads=1, deadline=0.2)
    release = threading.Event()

    async def starved() -> None:
        with pytest.raises(StoreTimeout):
            await single(release.wait, 20)
        # the hung call still holds the only thread: the next call times out waiting for it
        with pytest.raises(StoreTimeout):
            await single(lambda: "never runs")
        release.set()
        await trio.sleep(0.1)
        assert await single(lambda: "runs") == "runs"

    trio.run(starved)
