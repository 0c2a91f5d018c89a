"""Request-handler plumbing shared by the FUSE handlers (``operations``, ``directories``).

Invariants:
- Only ``FUSEError`` leaves a handler wrapped by ``translate``: any other exception goes through
  the one errno table (``zarrfs.fuse.errors``); with ``-o metrics`` every request is timed and
  its errno counted there.
- ``mutates`` marks a handler that may change what listings show: the handler object's
  ``_mutation()`` runs when it starts and when it ends, so a listing prepared meanwhile is not
  kept.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pyfuse3

from zarrfs.fuse.errors import fuse_error
from zarrfs.fuse.inodes import Path

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def mutates(method: F) -> F:
    """Mark a handler that may change what listings show: listings prepared ahead are dropped
    when it starts and when it ends (a listing prepared meanwhile is not kept)."""

    @functools.wraps(method)
    async def handler(self: Any, *args: Any) -> Any:
        self._mutation()
        try:
            return await method(self, *args)
        finally:
            self._mutation()

    return handler  # type: ignore[return-value]


def translate(method: F) -> F:
    """Let only FUSEError out of a handler; everything else goes through the errno table."""

    name = method.__name__

    @functools.wraps(method)
    async def handler(self: Any, *args: Any) -> Any:
        latency = self.latency  # -o metrics: time every request, count its errors
        began = time.perf_counter() if latency is not None else 0.0
        error: int | None = None
        try:
            return await method(self, *args)
        except pyfuse3.FUSEError as exc:
            error = exc.errno
            raise
        except Exception as exc:
            failure = fuse_error(exc, self.describe(name, args))
            error = failure.errno
            raise failure from None
        finally:
            if latency is not None:
                latency.record(name, time.perf_counter() - began, error)

    return handler  # type: ignore[return-value]


def show(path: Path | None) -> str:
    return "(removed)" if path is None else "/" + "/".join(path)


def fail(code: int) -> pyfuse3.FUSEError:
    return pyfuse3.FUSEError(code)


def checked_bytes(data: Any, op: str) -> Any:
    """``data`` if pyfuse3 can send it; else TypeError *inside* the handler (EIO), because
    pyfuse3 converts a handler's result outside any handler, where a failure ends the
    main loop."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"{op} returned {type(data).__name__}, not bytes")
    return data
