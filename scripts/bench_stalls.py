"""Where a cold sequential read waits: ``data.raw`` read in pieces, each timed, the disk sampled.

One extra cold read per variant, after the timed rounds of rows 1 and 2 (``bench_reads``): the
file is read in ``PIECE``-byte ``read`` calls, the end of each piece timed, while a thread
samples the store's disk in ``/proc/diskstats`` (reads in flight) every ``SAMPLE_SECONDS``.
A piece that takes more than ``STALL_FACTOR`` times the median piece is a wait; each wait is
charged to the disk when it had reads in flight during most of the wait, else to the daemon
(decoding, or serving). The row's notes then say how much of the read went to waiting, at
which offsets, and on what: the profile that explains a cold read short of its target.

Invariants: ``analyse`` is a pure function of the pieces' end times and the disk samples (the
tests feed it made-up timelines); ``timed_pieces`` reads the whole file exactly once and
never leaves its sampling thread running.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

#: bytes per ``read`` (four of the kernel's 1 MiB FUSE requests, one plane of the benchmark's
#: array)
PIECE = 4 << 20
#: a piece slower than this many median pieces waited for something
STALL_FACTOR = 3.0
#: how often the disk is sampled
SAMPLE_SECONDS = 0.002


@dataclass
class Stalls:
    """What ``analyse`` found (times in seconds, offsets in bytes)."""

    total: float
    median_piece: float
    #: bytes per piece
    piece: int = PIECE
    #: (offset of the piece, seconds it took beyond the median) for each wait
    waits: list[tuple[int, float]] = field(default_factory=list)
    #: the part of the waits during which the disk had reads in flight (the rest: the daemon)
    on_disk: float = 0.0
    #: time of the read during which the disk had no read in flight
    disk_idle: float = 0.0

    @property
    def waited(self) -> float:
        return sum(w for _, w in self.waits)


def analyse(ends: list[float], samples: list[tuple[float, int]], piece: int = PIECE) -> Stalls:
    """``ends``: the end time of each piece from the start of the read; ``samples``: (time
    from the start, reads in flight) of the disk. Pieces of no time are ignored (end of file)."""
    starts = [0.0, *ends[:-1]]
    spans = [(i, s, e) for i, (s, e) in enumerate(zip(starts, ends)) if e > s]
    total = ends[-1] if ends else 0.0
    if not spans:
        return Stalls(total, 0.0, piece)
    med = median(e - s for _, s, e in spans)
    out = Stalls(total, med, piece)
    for i, start, end in spans:
        if end - start <= STALL_FACTOR * med:
            continue
        out.waits.append((i * piece, end - start - med))
        inside = [n for t, n in samples if start <= t < end]
        if inside and sum(1 for n in inside if n > 0) * 2 > len(inside):
            out.on_disk += end - start - med
    during = [n for t, n in samples if 0.0 <= t <= total]
    if during:
        out.disk_idle = total * sum(1 for n in during if n == 0) / len(during)
    return out


def describe(s: Stalls) -> str:
    """One note for a row: the read, its waits, and what they waited on."""
    mib = 1 << 20
    rate = s.piece / mib / s.median_piece if s.median_piece else 0.0
    where = ", ".join(f"{off // mib}" for off, _ in s.waits[:12])
    more = f" and {len(s.waits) - 12} more" if len(s.waits) > 12 else ""
    waits = f"{len(s.waits)} wait" + ("s" if len(s.waits) != 1 else "")
    return (
        f"where a cold read waits (one more cold read in {s.piece // mib} MiB pieces, "
        f"scripts/bench_stalls.py): {s.total:.2f} s, a piece not waiting "
        f"{s.median_piece * 1e3:.1f} ms ({rate:.0f} MiB/s); {s.waited * 1e3:.0f} ms in "
        f"{waits} (at MiB {where or '-'}{more}), {s.on_disk * 1e3:.0f} ms of them with the "
        f"disk reading, the rest on the daemon; the disk idle {s.disk_idle * 1e3:.0f} ms of "
        "the read"
    )


def disk_of(path: Path) -> str | None:
    """The ``/proc/diskstats`` name of the block device holding ``path`` (None if unknown)."""
    st = os.stat(path)
    dev = f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    try:
        for line in Path(dev, "uevent").read_text().splitlines():
            if line.startswith("DEVNAME="):
                return line.split("=", 1)[1]
    except OSError:
        return None
    return None


def _in_flight(name: str) -> int:
    with open("/proc/diskstats") as f:
        for line in f:
            parts = line.split()
            if len(parts) > 11 and parts[2] == name:
                return int(parts[11])
    return 0


def timed_pieces(path: Path, disk: str | None) -> tuple[list[float], list[tuple[float, int]]]:
    """Read ``path`` whole in ``PIECE``-byte reads: each piece's end time and the disk
    samples, both from the start of the read."""
    samples: list[tuple[float, int]] = []
    stop = threading.Event()
    t0 = 0.0  # set just before the first read

    def sample() -> None:
        while disk and not stop.is_set():
            samples.append((time.perf_counter() - t0, _in_flight(disk)))
            stop.wait(SAMPLE_SECONDS)

    sampler = threading.Thread(target=sample, daemon=True)
    ends: list[float] = []
    buf = bytearray(PIECE)
    fd = os.open(path, os.O_RDONLY)
    try:
        t0 = time.perf_counter()
        sampler.start()
        while os.readv(fd, [buf]) > 0:
            ends.append(time.perf_counter() - t0)
    finally:
        stop.set()
        sampler.join()
        os.close(fd)
    return ends, samples
