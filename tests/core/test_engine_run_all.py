"""``Engine.run_all``: every call runs once, results in order, the caller works beside the pool."""

from __future__ import annotations

import threading
import time

import pytest

from zarrfs.core.engine import Engine


def _calls(n: int, seconds: float, names: list[str]) -> list:
    def make(i: int):
        def call() -> int:
            names.append(threading.current_thread().name)
            time.sleep(seconds)
            return i

        return call

    return [make(i) for i in range(n)]


def test_results_in_order_and_each_call_once() -> None:
    engine = Engine(cache_size=1 << 20, threads=3)
    try:
        names: list[str] = []
        done = engine.run_all(_calls(20, 0.001, names))
        assert [f.result() for f in done] == list(range(20))
        assert len(names) == 20
    finally:
        engine.close()


def test_caller_takes_back_queued_calls_beside_a_busy_pool() -> None:
    # one pool thread: the caller must run about half of the calls, not only the first one
    engine = Engine(cache_size=1 << 20, threads=1)
    try:
        names: list[str] = []
        done = engine.run_all(_calls(12, 0.02, names))
        assert [f.result() for f in done] == list(range(12))
        mine = names.count(threading.current_thread().name)
        assert mine >= 4, names
    finally:
        engine.close()


def test_exceptions_are_kept_per_call() -> None:
    engine = Engine(cache_size=1 << 20, threads=2)

    def bad() -> None:
        raise ValueError("no")

    try:
        done = engine.run_all([lambda: 1, bad, lambda: 3, bad])
        assert done[0].result() == 1 and done[2].result() == 3
        for f in (done[1], done[3]):
            with pytest.raises(ValueError):
                f.result()
    finally:
        engine.close()
