"""The write-back timer: stores data that has waited ``delay`` seconds in memory.

One thread per mount. Every second (or every ``delay``, when shorter) it flushes each open
array whose oldest unflushed write is at least ``delay`` seconds old. The mount's lifecycle owns
it (``fuse/daemon.py``): started once the tree is open, stopped (joined) before the final
``flush_all``, so no background flush runs while the daemon stores the rest and closes the
engine's threads.

Invariants:
- a failed background flush leaves its units dirty (the next ``fsync``, ``close`` or round
  reports and retries them) and never stops the timer, whatever the exception;
- the timer takes no lock of its own: each flush takes the array's locks in the documented
  order (docs/write-path.md), holding nothing else;
- ``stop`` returns only after a flush in progress has finished.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Protocol

from zarrfs.core.errors import ZarrFSError

log = logging.getLogger(__name__)


class Flushable(Protocol):
    path: str

    def dirty_age(self) -> float: ...

    def flush(self) -> None: ...


class WriteBack:
    """Flushes the arrays ``arrays()`` returns once their dirty data is ``delay`` seconds old."""

    def __init__(self, arrays: Callable[[], Iterable[Flushable]], delay: float) -> None:
        self._arrays = arrays
        self.delay = delay
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None and self.delay > 0:
            self._thread = threading.Thread(target=self._run, name="zarrfs-writeback", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the timer and wait for a flush in progress."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()

    def flush_due(self) -> None:
        """One round: flush every array whose dirty data is due."""
        for arr in self._arrays():
            if self._stop.is_set():
                return
            if arr.dirty_age() >= self.delay:
                try:
                    arr.flush()
                except ZarrFSError as exc:
                    log.error("background flush of %s failed: %s", arr.path or "/", exc)
                except Exception:  # a store or codec bug must not stop write-back
                    log.exception("background flush of %s failed", arr.path or "/")

    def _run(self) -> None:
        while not self._stop.wait(min(1.0, self.delay)):
            self.flush_due()
