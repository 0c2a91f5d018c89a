"""The benchmark's wait profile (``scripts/bench_stalls.py``): which pieces of a cold read
waited, for how long beyond a piece that did not, and on what (the disk, or the daemon)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))

import bench_stalls  # noqa: E402

MiB = 1 << 20


def test_waits_are_the_slow_pieces_charged_to_the_disk_or_the_daemon() -> None:
    # ten pieces of 2 ms; the fourth takes 22 ms with the disk busy, the eighth 12 ms idle
    widths = [0.002] * 10
    widths[3], widths[7] = 0.022, 0.012
    ends = [sum(widths[: i + 1]) for i in range(10)]
    # a sample each ms; the disk reads only during the fourth piece
    times = [ms / 1000 for ms in range(int(ends[-1] * 1000) + 1)]
    samples = [(t, 4 if ends[2] <= t < ends[3] else 0) for t in times]
    s = bench_stalls.analyse(ends, samples, piece=4 * MiB)
    assert s.median_piece == pytest.approx(0.002)
    assert [off for off, _ in s.waits] == [12 * MiB, 28 * MiB]
    assert s.waited == pytest.approx(0.020 + 0.010)
    assert s.on_disk == pytest.approx(0.020)
    assert s.disk_idle == pytest.approx(s.total * (1 - 22 / len(samples)), rel=0.1)
    note = bench_stalls.describe(s)
    assert "30 ms in 2 waits (at MiB 12, 28)" in note and "20 ms of them" in note


def test_an_even_read_has_no_waits() -> None:
    ends = [0.002 * (i + 1) for i in range(64)]
    s = bench_stalls.analyse(ends, [(0.001 * i, 1) for i in range(128)])
    assert s.waits == [] and s.on_disk == 0.0 and s.disk_idle == 0.0
    assert bench_stalls.analyse([], []).waits == []


def test_timed_pieces_reads_the_whole_file_once(tmp_path: Path) -> None:
    f = tmp_path / "data.raw"
    f.write_bytes(bytes(range(256)) * (10 * MiB // 256 + 3))
    ends, samples = bench_stalls.timed_pieces(f, bench_stalls.disk_of(f))
    # 10 MiB + 768 B: two whole pieces and a short one (the last read, of 0 bytes, not timed)
    assert len(ends) == 3
    assert ends == sorted(ends)
    assert all(t >= 0 for t, _ in samples)
