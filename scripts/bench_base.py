"""What every measurement of the bench shares: ``BenchBase``, its state (arguments, data,
rows, the load gate, rates measured once and used by later rows) and the steps they all take.
The measurement families extend it (``bench_reads``, ``bench_writes``, ``bench_misc``) and
``bench.Bench`` assembles them.

Invariants: a cold measurement starts with ``cold`` (page cache dropped, then a quiet machine
awaited by the ``LoadGate``); a row is added with ``add``, which gives it the load samples
taken since the row before it, and only those; every zarrfs mount is a ``Mount`` used as a
context manager (from ``mount``: ``-o cache_size=`` and ``--mount-options``, unless a
measurement needs other options), so it is unmounted when its block ends. Imports only
``bench_machine``, ``bench_data`` and ``bench_report`` among the bench modules.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from bench_data import Config
from bench_machine import LoadGate, MiB, Mount, drop_caches, log
from bench_report import Row


@dataclass
class BenchBase:
    """The bench's shared state and steps; ``bench.Bench`` adds the measurements."""

    args: argparse.Namespace
    cfg: Config
    base: Path
    mnt: Path
    rows: list[Row] = field(default_factory=list)
    profiles: list[tuple[str, str, Path]] = field(default_factory=list)
    raw_warm_mibps: float = 0.0
    raw_cold_mibps: float = 0.0
    #: (CPUs' worth of work all CPUs do at once, seconds of the loop alone, all together)
    capacity: tuple[float, float, float] = (0.0, 0.0, 0.0)
    #: ``numpy.fromfile`` of the plain file, cold: what the reader's one big read() reaches
    raw_np_mibps: float = 0.0
    gate: LoadGate = field(default_factory=lambda: LoadGate(0.25, 30.0))
    #: cold sequential read rates of zarrfs per variant (cat, np), for the ceiling rows
    seq_rates: dict[str, dict[str, float]] = field(default_factory=dict)
    #: the pyfuse3 write floor, MiB/s by kind (``write_floor``), once measured
    _write_floor: dict[str, float] | None = None

    @property
    def cache_bytes(self) -> int:
        from zarrfs.fuse.options import parse_size

        return parse_size(self.args.cache_size)

    def mount(self, store: Path) -> Mount:
        opts = f"cache_size={self.args.cache_size}"
        if self.args.mount_options:
            opts += "," + self.args.mount_options
        return Mount(self.args.python, store, self.mnt, opts)

    def cold(self) -> None:
        """Before a cold measurement: page cache dropped, then a quiet machine awaited."""
        drop_caches()
        self.gate.settle()

    def add(self, row: Row) -> None:
        samples = self.gate.take()
        if samples:
            row.busy = any(x.busy > self.gate.busy_limit for x in samples)
            probes = [x.probe_ms for x in samples]
            fresh = [x.memory_mibps for x in samples]
            load = (
                f"load {max(x.load1 for x in samples):.1f}, others' CPU before each run "
                f"≤ {max(x.busy for x in samples):.0%}, CPU probe {min(probes):.0f}-"
                f"{max(probes):.0f} ms, memory probe {min(fresh):.0f}-{max(fresh):.0f} MiB/s"
            )
            row.notes = "; ".join(x for x in (row.notes, load) if x)
        self.rows.append(row)
        log("  " + " | ".join(row.cells()))

    def _rss_row(self, name: str, v: str, peak: int) -> Row:
        limit = self.cache_bytes + 150 * MiB
        return Row(
            name,
            v,
            peak / MiB,
            None,
            None,
            f"≤ cache_size + 150 MiB ({limit / MiB:.0f})",
            peak <= limit,
            f"-o cache_size={self.args.cache_size}",
        )

    def _pread_latencies(self, path: Path, offsets: np.ndarray, no_ra: bool = False) -> np.ndarray:
        out = np.empty(len(offsets))
        fd = os.open(path, os.O_RDONLY)
        try:
            if no_ra:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            clock, pread = time.perf_counter_ns, os.pread
            for k, off in enumerate(offsets.tolist()):
                t0 = clock()
                pread(fd, 4096, off)
                out[k] = clock() - t0
        finally:
            os.close(fd)
        return out / 1000
