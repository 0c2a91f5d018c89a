"""Thread-safe counters for ``/.zarrfs/stats.json`` (global and per array)."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any


class Stats:
    """Named integer counters, one set per array path plus the totals."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._total: Counter[str] = Counter()
        self._per_array: dict[str, Counter[str]] = {}

    def add(self, array: str, name: str, n: int = 1) -> None:
        with self._lock:
            self._total[name] += n
            self._mine(array)[name] += n

    def add_counts(self, array: str, counts: dict[str, int]) -> None:
        """Several ``add``s under one lock acquisition (the hot read path)."""
        with self._lock:
            mine = self._mine(array)
            for name, n in counts.items():
                self._total[name] += n
                mine[name] += n

    def _mine(self, array: str) -> Counter[str]:
        """The counters of ``array`` (made on first use; ``_lock`` held)."""
        mine = self._per_array.get(array)
        if mine is None:
            mine = self._per_array[array] = Counter()
        return mine

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "total": dict(self._total),
                "arrays": {k: dict(v) for k, v in sorted(self._per_array.items())},
            }
