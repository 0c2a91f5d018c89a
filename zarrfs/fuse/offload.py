"""The single path from a FUSE request to a blocking node call (DESIGN §5 "one offload function").

Every call into the virtual tree (stat, lookup, read, write, flush, ...) may block on store I/O
or decoding, so handlers never call nodes directly: they ``await offload(fn, *args)``.

Invariants:
- At most ``threads`` node calls run at once (one ``trio.CapacityLimiter`` for the mount); the
  trio thread that reads ``/dev/fuse`` never blocks on a node.
- Every call has a deadline covering both the wait for a free thread and the call itself. When it
  passes, the caller gets ``StoreTimeout`` (EIO by the errno table) and the worker thread is
  abandoned, not waited for: the request is answered, the mount stays responsive, and the thread
  keeps its capacity slot until it really finishes (so a store that hangs cannot make the
  daemon start unbounded numbers of threads). An abandoned call may still complete later: an
  EIO after a timeout does not promise that nothing changed.
- Exceptions raised by ``fn`` propagate unchanged to the handler, which maps them to errno.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import trio

from zarrfs.core.errors import StoreTimeout

T = TypeVar("T")


class Offload:
    """Runs blocking callables in worker threads under one capacity limit and a deadline."""

    def __init__(self, threads: int, deadline: float) -> None:
        self.limiter = trio.CapacityLimiter(threads)
        self.deadline = deadline

    async def __call__(
        self, fn: Callable[..., T], *args: object, deadline: float | None = None
    ) -> T:
        """``fn(*args)`` in a worker thread; ``StoreTimeout`` after ``deadline`` seconds."""
        seconds = self.deadline if deadline is None else deadline
        with trio.move_on_after(seconds):
            return await trio.to_thread.run_sync(
                functools.partial(fn, *args),
                abandon_on_cancel=True,
                limiter=self.limiter,
                thread_name=f"zarrfs {_name(fn)}",
            )
        raise StoreTimeout(
            f"{_name(fn)} did not finish within {seconds:g} s (worker thread abandoned)"
        )


def _name(fn: Callable[..., object]) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)
