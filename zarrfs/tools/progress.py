"""The progress bar of the tools that go through every chunk of a store (``zarrfs check``):
redrawn in place on a terminal, only once a run lasts ``delay`` seconds, at most every
``interval`` seconds; ``clear`` erases it before other output."""

from __future__ import annotations

import time
from typing import TextIO

from zarrfs.tools import human_size


class Progress:
    """``checked 120/4000 chunks (3%)  85 chunks/s  12.3 MiB/s`` redrawn in place on a terminal."""

    def __init__(
        self,
        stream: TextIO,
        total: int,
        *,
        enabled: bool,
        delay: float = 1.0,
        interval: float = 0.2,
    ) -> None:
        self.stream = stream
        self.total = total
        self.enabled = enabled
        self.delay = delay
        self.interval = interval
        self.done = 0
        self.nbytes = 0
        self.start = time.monotonic()
        self._last_draw = 0.0
        self._width = 0

    def update(self, n: int = 1, nbytes: int = 0) -> None:
        self.done += n
        self.nbytes += nbytes
        now = time.monotonic()
        if (
            self.enabled
            and now - self.start >= self.delay
            and now - self._last_draw >= self.interval
        ):
            self._draw(now)

    def _draw(self, now: float) -> None:
        self._last_draw = now
        elapsed = max(now - self.start, 1e-6)
        pct = f" ({100 * self.done // self.total}%)" if self.total else ""
        line = (
            f"checked {self.done}/{self.total} chunks{pct}  {self.done / elapsed:.0f} chunks/s"
            f"  {human_size(int(self.nbytes / elapsed))}/s"
        )
        self.stream.write("\r" + line.ljust(self._width))
        self.stream.flush()
        self._width = len(line)

    def clear(self) -> None:
        """Erase the bar (before other output, and at the end)."""
        if self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0
            self._last_draw = 0.0
