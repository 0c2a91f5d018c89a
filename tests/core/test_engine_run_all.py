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


def _concurrency_calls(n: int, seconds: float, peak: list[int]) -> list:
    lock = threading.Lock()
    running = [0]

    def make(i: int):
        def call() -> int:
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            time.sleep(seconds)
            with lock:
                running[0] -= 1
            return i

        return call

    return [make(i) for i in range(n)]


@pytest.mark.parametrize("width", [1, 2, 3])
def test_width_bounds_the_calls_running_at_once(width: int) -> None:
    engine = Engine(cache_size=1 << 20, threads=8)
    try:
        peak = [0]
        done = engine.run_all(_concurrency_calls(12, 0.02, peak), width=width)
        assert [f.result() for f in done] == list(range(12))
        assert peak[0] == width
        peak = [0]  # unbounded: the pool's threads and the caller
        engine.run_all(_concurrency_calls(12, 0.02, peak))
        assert peak[0] > 3
    finally:
        engine.close()


# -- one_by_one_until_slow: sequential while quick, concurrent once the store shows latency


class _Clock:
    """A fake ``perf_counter`` that each call advances by its own duration."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _timed_calls(clock: _Clock, seconds: list[float], ran: list[int]) -> list:
    def make(i: int, s: float):
        def call() -> int:
            ran.append(i)
            clock.now += s
            return i * 10

        return call

    return [make(i, s) for i, s in enumerate(seconds)]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    from zarrfs.core import engine

    fake = _Clock()
    monkeypatch.setattr(engine.time, "perf_counter", fake)
    return fake


def test_quick_calls_all_run_here(clock: _Clock) -> None:
    from zarrfs.core.engine import one_by_one_until_slow

    ran: list[int] = []
    handed: list[int] = []
    out = one_by_one_until_slow(
        _timed_calls(clock, [0.0001] * 6, ran), lambda rest: handed.append(len(rest)) or []
    )
    assert out == [0, 10, 20, 30, 40, 50] and ran == list(range(6)) and handed == []


def test_one_slow_call_alone_is_a_hiccup_not_a_store(clock: _Clock) -> None:
    from zarrfs.core.engine import one_by_one_until_slow

    ran: list[int] = []
    handed: list[int] = []
    seconds = [0.0001, 0.05, 0.0001, 0.05, 0.0001, 0.0001]  # never two slow in a row
    out = one_by_one_until_slow(
        _timed_calls(clock, seconds, ran), lambda rest: handed.append(len(rest)) or []
    )
    assert out == [0, 10, 20, 30, 40, 50] and handed == []


def test_two_slow_calls_in_a_row_hand_the_rest_over_in_order(clock: _Clock) -> None:
    from zarrfs.core.engine import one_by_one_until_slow

    ran: list[int] = []
    handed: list[list[int]] = []

    def run_rest(rest):
        handed.append([id(c) for c in rest])
        return [c() for c in rest]

    calls = _timed_calls(clock, [0.0001, 0.01, 0.01, 0.0001, 0.0001], ran)
    out = one_by_one_until_slow(calls, run_rest)
    assert out == [0, 10, 20, 30, 40]
    assert handed == [[id(c) for c in calls[3:]]]  # the calls not run yet, nothing twice
    assert ran == [0, 1, 2, 3, 4]


def test_slow_last_calls_hand_nothing_over(clock: _Clock) -> None:
    from zarrfs.core.engine import one_by_one_until_slow

    ran: list[int] = []
    out = one_by_one_until_slow(
        _timed_calls(clock, [0.01, 0.01], ran), lambda rest: pytest.fail("nothing left")
    )
    assert out == [0, 10]


def test_an_exception_of_a_call_propagates(clock: _Clock) -> None:
    from zarrfs.core.engine import one_by_one_until_slow

    def boom() -> int:
        raise KeyError("x")

    with pytest.raises(KeyError):
        one_by_one_until_slow([lambda: 1, boom, lambda: 3], lambda rest: [])
