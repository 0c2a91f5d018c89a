"""What a cold sequential read of one array can reach on this machine: the bench's ceiling rows.

A cold ``cat`` of ``data.raw`` makes the daemon do two things: decode every chunk (from the
store into its chunk cache) and serve the decoded bytes (gather them into 1 MiB replies, which
the kernel copies into its page cache and then to ``cat``). This module measures them apart
and together, on the same machine and in the same run as the read itself:

- *decode alone*: every unit of the array decoded by zarrfs' own engine, in this process, from
  an in-memory copy of the store (so no disk), with as many threads as there are CPUs;
- *serving alone*: ``cat data.raw`` on a mount whose chunk cache already holds every decoded
  unit (the kernel's page cache dropped): no store access, no decoding. The cache is filled
  by ``fill_backwards``: a sequential ``cat`` would not do, the daemon drops the units a
  sequential reader has passed (``core/readpath.py``), so the timed ``cat`` would decode
  them all again;
- *both* (computed by the bench from the two): overlapped perfectly, a cold read takes at least
  the longer of the two, and at least their CPU seconds spread over every core: with the
  store's bytes already in memory, a cold read cannot be faster on these CPUs. (Running the
  two passes at once measures something else: two processes' allocations and page faults
  competing, slower than the daemon's own pipeline.)

The bench adds a third part, *storage*: the array's chunk files read cold by one ``cat``
(``bench_reads``), which a cold read through the mount must also do; the ceiling is then the
longest of the three, or the CPU seconds of all three spread over every core, each part the
fastest of the bench's ``--repeat`` runs (a ceiling is an upper bound: a pass the machine
slowed must not lower it). For ``bytes``, whose cold reads come straight from the chunk
files, the bench times serving on that path instead of from decoded units.

The same for a full overwrite (``dd`` of the whole ``data.raw``): *encode alone* (``encode_all``:
every unit encoded and stored in memory by zarrfs' engine) and *the transport alone* (the
bench's pyfuse3 write floor into a buffer, ``scripts/write_floor.py``), overlapped perfectly.

Invariants: decode alone never touches the disk during its timing (the encoded objects are read
into memory first); serving alone checks that the daemon loaded nothing during its timing
(``cache_misses`` in ``stats.json`` did not move), else the bench reports the figure as not
clean and uses no ceiling for that variant.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from zarrfs.core.engine import Engine
from zarrfs.core.hierarchy import open_array
from zarrfs.core.stores.memory import MemoryStore


def memory_copy(store_dir: Path) -> MemoryStore:
    """Every file of the directory store ``store_dir`` in a new in-memory store."""
    mem = MemoryStore()
    for path in sorted(store_dir.rglob("*")):
        if path.is_file():
            mem.set(path.relative_to(store_dir).as_posix(), path.read_bytes())
    return mem


def fill_backwards(path: Path, step: int = 1 << 20) -> int:
    """Read the file ``path`` (a mounted ``data.raw``) from its end back to its start, ``step``
    bytes at a time; returns the bytes read. Every unit of the array is loaded into the
    daemon's chunk cache, and as no read continues the one before (each starts ``step`` bytes
    before the previous one began, beyond the daemon's sequential slack of 1 MiB when ``step``
    is at least that), the daemon sees no sequential reader: it releases no unit behind one.
    The file's pages are dropped from the kernel's page cache first, so that every read reaches
    the daemon."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        size = os.fstat(fd).st_size
        got = 0
        for start in range((size - 1) // step * step, -1, -step):
            got += len(os.pread(fd, step, start))
        return got
    finally:
        os.close(fd)


@dataclass
class DecodeRun:
    """One pass of decode alone: wall seconds and the CPU seconds this process used."""

    seconds: float
    cpu: float
    units: int


def _thread_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def decode_all(mem: MemoryStore, array: str, threads: int | None = None) -> DecodeRun:
    """Decode every unit of ``array`` with zarrfs' engine (``threads`` concurrent decodes,
    default one per CPU), timing only the decoding. The decoded units go to a chunk cache big
    enough to hold them all, as in the daemon."""
    threads = threads or os.cpu_count() or 1
    arr = open_array(mem, array, Engine(cache_size=1 << 40, threads=max(1, threads - 1)))
    units = arr._units_in(0, arr.nbytes)
    cpu0 = _thread_cpu()
    t0 = time.perf_counter()
    arr._load(units)  # one job per chunk (or shard): the caller's thread plus the pool's
    seconds = time.perf_counter() - t0
    cpu = _thread_cpu() - cpu0
    arr.engine.close()
    return DecodeRun(seconds, cpu, len(units))


class _Discarding(MemoryStore):
    """A copy of a memory store whose sets consume their pieces and keep nothing (counted in
    ``stored``): what a flush into it costs is the encoding alone."""

    streams_sets = True

    def __init__(self, source: MemoryStore) -> None:
        super().__init__()
        self._data = source._data
        self.stored = 0

    def set(self, key: str, data: bytes | memoryview) -> None:
        self.stored += len(data)

    def set_stream(self, key: str, parts: Callable[[], Iterable[bytes | memoryview]]) -> None:
        for piece in parts():
            self.stored += len(piece)


def encode_all(mem: MemoryStore, array: str, data: bytes, threads: int | None = None) -> DecodeRun:
    """The counterpart of ``decode_all`` for an overwrite: ``data`` (the array's C-order
    bytes) written into dirty units of ``array`` with zarrfs' engine, then one flush encodes
    every unit (``threads`` concurrent jobs, default one per CPU) into a store that keeps
    nothing. Only the flush is timed: the copies into dirty units and storing are left out."""
    threads = threads or os.cpu_count() or 1
    sink = _Discarding(mem)
    arr = open_array(sink, array, Engine(cache_size=1 << 40, threads=max(1, threads - 1)))
    arr.write(0, data)  # below the dirty limit of this cache: nothing is stored yet
    units = len(arr._dirty)
    cpu0 = _thread_cpu()
    t0 = time.perf_counter()
    arr.flush()
    seconds = time.perf_counter() - t0
    cpu = _thread_cpu() - cpu0
    arr.engine.close()
    return DecodeRun(seconds, cpu, units)


#: a CPU-bound loop of about half a second that prints its own duration
_SPIN = (
    "import time\nt = time.perf_counter()\nx = 0\n"
    "for i in range(6_000_000):\n    x += i\nprint(time.perf_counter() - t)"
)


def parallel_capacity(python: str, cores: int, repeat: int = 3) -> tuple[float, float, float]:
    """How many CPUs' worth of work ``cores`` CPU-bound processes get done at once here:
    (``cores`` x the time of one alone / the time of each when all run together, the time
    alone, the time together), medians of ``repeat``. ``cores`` on as many free cores; less
    where they share a physical core or a busy host (a ceiling that spreads CPU seconds over
    ``cores`` assumes the former)."""

    def run(n: int) -> list[float]:
        procs = [
            subprocess.Popen([python, "-c", _SPIN], stdout=subprocess.PIPE, text=True)
            for _ in range(n)
        ]
        return [float(p.communicate()[0]) for p in procs]

    alone = statistics.median(run(1)[0] for _ in range(repeat))
    together = statistics.median(statistics.median(run(cores)) for _ in range(repeat))
    return cores * alone / together, alone, together
