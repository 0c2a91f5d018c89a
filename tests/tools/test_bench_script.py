"""The benchmark's bookkeeping (``scripts/bench.py`` and its ``bench_*.py`` modules,
``scripts/bench_ceiling.py``): ratios against the best peer, rows measured on a busy machine
flagged, the ceiling's decode pass decoding every unit from memory and its encode pass
encoding every unit, the CPU capacity measured; the pyfuse3 write floor storing what ``dd``
wrote."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))

import bench  # noqa: E402
import bench_ceiling  # noqa: E402
import bench_data  # noqa: E402
import bench_machine  # noqa: E402
import bench_reads  # noqa: E402
import bench_report  # noqa: E402
import bench_writes  # noqa: E402
import floorfs  # noqa: E402


def test_ratio_is_against_the_best_peer_in_both_directions() -> None:
    fast = bench.Row("read", "bytes", 800.0, 1000.0, 1200.0)
    assert fast.ratio == pytest.approx(800 / 1200)
    latency = bench.Row("pread p50", "bytes", 90.0, 3000.0, 60.0, higher=False)
    assert latency.ratio == pytest.approx(90 / 60)
    alone = bench.Row("read", "bytes", 800.0, None, 400.0)
    assert alone.ratio == pytest.approx(2.0)
    assert bench.Row("rss", "bytes", 500.0).ratio is None


def test_fromfile_meets_the_plain_file_ceiling_only_where_that_is_below_the_peers() -> None:
    target, met = bench.fromfile_target("≥ 1.0× best peer", False, 550.0, 1400.0, 600.0)
    assert met and "0.9× the plain file read the same way (600)" in target
    assert not bench.fromfile_target("t", False, 530.0, 1400.0, 600.0)[1]  # under 0.9×
    # a plain file faster than the best peer: only the peer target counts
    assert bench.fromfile_target("t", False, 1300.0, 1400.0, 1500.0) == ("t", False)
    assert bench.fromfile_target("t", True, 1500.0, 1400.0, 1450.0) == ("t", True)


def test_a_ceiling_part_slower_than_the_best_peers_whole_run_bounds_nothing() -> None:
    mib = 1 << 20
    # the best peer read 512 MiB cold in 0.32 s (1600 MiB/s), chunk files and decoding included
    assert bench_report.slower_than_peer(0.41, 512 * mib, 1600.0)
    assert not bench_report.slower_than_peer(0.30, 512 * mib, 1600.0)
    assert not bench_report.slower_than_peer(0.41, 512 * mib, None)
    notes = bench_report.unbounded_parts({"storage": 0.41, "decode": 0.2}, 512 * mib, 1600.0)
    assert len(notes) == 1 and "storage alone (0.41 s)" in notes[0]
    assert not bench_report.unbounded_parts({"encode": 0.3}, 512 * mib, 1600.0)


@pytest.mark.parametrize(
    "parts, met",
    [
        ({"storage": 0.41, "decode": 0.2}, False),  # a storage pass the host slowed
        ({"storage": 0.15, "decode": 0.4}, False),  # zarrfs' decoding slower than the peer
        ({"storage": 0.15, "decode": 0.2}, True),
    ],
)
def test_a_cold_read_ceiling_with_a_part_slower_than_the_best_peer_meets_no_row(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, parts: dict[str, float], met: bool
) -> None:
    """A ceiling below the best peer meets row 10 at 0.9× of it, but not when one of its
    parts alone took longer than the best peer's whole cold read: a storage pass (the same
    chunk files from the same disk) the host slowed, or zarrfs' own decoding slower than the
    peer's. The row is then met only by the peer ratio."""
    cfg = bench_data.Config("t", (128, 1024, 1024), chunks=(64, 256, 256))  # 512 MiB
    b = _quiet_bench(cfg, tmp_path)
    # zarrfs 1150, the best peer 1600 (0.32 s), a ceiling of 1060 (below the peer)
    b.seq_rates["blosc"] = {"cat": 1150.0, "np": 500.0, "zp": 300.0, "ts": 1600.0}
    monkeypatch.setattr(b, "_decoded_ceiling", lambda store, notes: (1060.0, True, parts))
    b.ceiling("blosc", tmp_path)
    (row,) = b.rows
    assert row.met is met
    assert ("no ceiling used" in row.notes) is not met


@pytest.mark.parametrize("encode_s, met", [(0.4, False), (0.2, True)])
def test_an_overwrite_ceiling_from_an_encoder_slower_than_the_best_peer_meets_no_row(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, encode_s: float, met: bool
) -> None:
    """The overwrite's ceiling excuses this machine's cores, not zarrfs' encoder: where
    zarrfs' encode of every unit alone took longer than the best peer's whole overwrite, the
    ceiling meets no row."""
    cfg = bench_data.Config("t", (128, 1024, 1024), chunks=(64, 256, 256))  # 512 MiB
    b = _quiet_bench(cfg, tmp_path)
    monkeypatch.setattr(bench_writes, "memory_copy", lambda store: None)
    run = bench_ceiling.DecodeRun(encode_s, 0.8, 32)  # both cores: the ceiling is 0.45 s
    monkeypatch.setattr(bench_writes, "encode_all", lambda mem, array, data: run)
    floor = {"memory_best": 3000.0, "memory_cpu_best": 0.1}
    monkeypatch.setattr(b, "write_floor", lambda: floor)
    src = tmp_path / "src.raw"
    src.write_bytes(b"")
    # zarrfs 1150 MiB/s, the best peer 1600 (0.32 s), the ceiling 1138 (below the peer)
    row = bench.Row("4. full overwrite (MiB/s)", "blosc", 1150.0, 300.0, 1600.0)
    b._overwrite_ceiling("blosc", tmp_path, src, row)
    (ceiling_row,) = b.rows
    assert ceiling_row.met is met
    assert ("no ceiling used" in ceiling_row.notes) is not met


def test_the_rounds_note_gives_every_round_in_order_with_the_daemon_cpu() -> None:
    mib = 1 << 20
    zarrfs, peers = [0.5, 1.0, 0.25], {"tensorstore": [0.4, 0.5, 2.0]}
    note = bench_report.rounds_note(512 * mib, zarrfs, [0.6, 1.1, 0.5], [0.2, 0.7, 0.1], peers)
    assert note == (
        "each round, MiB/s: zarrfs cat 1024 (0.60 s daemon CPU, 0.20 s of it system), "
        "512 (1.10 s daemon CPU, 0.70 s of it system), "
        "2048 (0.50 s daemon CPU, 0.10 s of it system); tensorstore 1280, 1024, 256"
    )
    with pytest.raises(ValueError):  # a daemon CPU figure for each round of zarrfs' reads
        bench_report.rounds_note(512 * mib, zarrfs, [0.6, 1.1], [0.2, 0.7, 0.1], peers)
    with pytest.raises(ValueError):  # and its system part
        bench_report.rounds_note(512 * mib, zarrfs, [0.6, 1.1, 0.5], [0.2, 0.7], peers)


# 0.3 s of CPU each: arithmetic in the interpreter, or the kernel filling a buffer
_USER_WORK = (
    "import time\nx = 0\nwhile time.process_time() < 0.3:\n"
    "    for i in range(100_000):\n        x += i\n"
)
_KERNEL_WORK = (
    "import os, time\nfd = os.open('/dev/zero', os.O_RDONLY)\nbuf = bytearray(1 << 20)\n"
    "while time.process_time() < 0.3:\n    os.readv(fd, [buf])\n"
)


@pytest.mark.parametrize("work, in_kernel", [(_USER_WORK, False), (_KERNEL_WORK, True)])
def test_the_system_cpu_of_a_process_is_its_kernel_part(work: str, in_kernel: bool) -> None:
    # the child works, then waits (alive) until its stdin closes, for its /proc/PID/stat
    code = work + "import sys\nprint('done', flush=True)\nsys.stdin.read()\n"
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "done\n"
        total, system = floorfs.proc_cpu(child.pid), floorfs.proc_times(child.pid)[1]
    finally:
        child.kill()
        child.wait(timeout=30)
    assert total >= 0.25
    assert (system > total / 2) is in_kernel


def test_each_round_starts_with_another_step() -> None:
    ran: list[str] = []
    steps = [lambda name=name: ran.append(name) for name in "abc"]
    bench.rotated_rounds(steps, 4)
    assert ran == list("abcbcacababc")


def _bench(gate: bench.LoadGate, tmp_path: Path) -> bench.Bench:
    return bench.Bench(None, bench.SMALL, tmp_path, tmp_path / "mnt", gate=gate)  # type: ignore[arg-type]


def _quiet_bench(cfg: bench_data.Config, tmp_path: Path, repeat: int = 1) -> bench.Bench:
    """A bench of ``cfg`` whose load gate never waits (any load counts as quiet)."""
    args = argparse.Namespace(
        repeat=repeat, python=sys.executable, cache_size="64M", mount_options=""
    )
    gate = bench.LoadGate(busy_limit=1.0, wait=0.0, window=0.0)
    return bench.Bench(args, cfg, tmp_path, tmp_path / "mnt", gate=gate)


def test_a_row_measured_busy_is_flagged_with_its_load(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    readings = iter([0.9, 0.9, 0.05])
    monkeypatch.setattr(bench_machine, "cpu_busy", lambda window: next(readings))
    gate = bench.LoadGate(busy_limit=0.25, wait=0.0, window=0.0)  # no waiting: measure anyway
    b = _bench(gate, tmp_path)
    gate.settle()  # 0.9: busy
    b.add(row := bench.Row("read", "bytes", 1.0, 1.0))
    assert row.busy and "(busy)" in row.cells()[7]
    assert "others' CPU before each run ≤ 90%" in row.notes
    gate.settle()  # 0.9
    gate.settle()  # 0.05
    b.add(mixed := bench.Row("read", "blosc", 1.0, 1.0))
    assert mixed.busy  # one of its two runs started busy
    monkeypatch.setattr(bench_machine, "cpu_busy", lambda window: 0.05)
    gate.settle()
    b.add(calm := bench.Row("read", "gzip", 1.0, 1.0))
    # a row carries only its own samples, not those of the rows before it
    assert not calm.busy and "(busy)" not in calm.cells()[7]
    assert "≤ 5%" in calm.notes


def test_each_row_gives_the_cpu_probe_range_before_its_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real_probe = bench.cpu_probe
    monkeypatch.setattr(bench_machine, "cpu_busy", lambda window: 0.05)
    probes = iter([40.0, 61.0, 45.0])
    monkeypatch.setattr(bench_machine, "cpu_probe", lambda: next(probes))
    real_memory = bench.memory_probe
    fresh = iter([900.0, 1500.0, 300.0])
    monkeypatch.setattr(bench_machine, "memory_probe", lambda: next(fresh))
    gate = bench.LoadGate(busy_limit=0.25, wait=0.0, window=0.0)
    b = _bench(gate, tmp_path)
    gate.settle()
    gate.settle()
    b.add(row := bench.Row("read", "bytes", 1.0, 1.0))
    assert "CPU probe 40-61 ms, memory probe 900-1500 MiB/s" in row.notes
    gate.settle()
    b.add(row := bench.Row("read", "blosc", 1.0, 1.0))
    assert "CPU probe 45-45 ms, memory probe 300-300 MiB/s" in row.notes
    summary = bench.probe_summary(gate.all)
    assert "40 / 45 / 61 ms (min / median / max of 3)" in summary
    assert "300 / 900 / 1500 MiB/s (min / median / max)" in summary
    assert real_probe() > 0
    assert real_memory() > 0


def test_the_gate_waits_for_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    readings = iter([0.8, 0.7, 0.1, 0.9])
    monkeypatch.setattr(bench_machine, "cpu_busy", lambda window: next(readings))
    sample = bench.LoadGate(busy_limit=0.25, wait=60.0, window=0.0).settle()
    assert sample.busy == pytest.approx(0.1)  # stopped at the first quiet reading


def _small_store(tmp_path: Path) -> tuple[Path, np.ndarray, object]:
    """A zarr-python array ``x`` of 3 x 2 chunks: (its store, its data, the zarr group)."""
    zarr = pytest.importorskip("zarr")
    data = np.arange(40 * 30, dtype="<f4").reshape(40, 30)
    store = tmp_path / "s.zarr"
    root = zarr.open_group(str(store), mode="w")
    root.create_array("x", shape=data.shape, chunks=(16, 16), dtype="<f4")[...] = data
    return store, data, root


def test_decode_alone_decodes_every_unit_from_memory(tmp_path: Path) -> None:
    store, _, _ = _small_store(tmp_path)
    mem = bench_ceiling.memory_copy(store)
    run = bench_ceiling.decode_all(mem, "x", threads=2)
    assert run.units == 3 * 2 and run.seconds > 0


def test_encode_alone_encodes_every_unit_and_stores_nothing(tmp_path: Path) -> None:
    store, data, root = _small_store(tmp_path)
    mem = bench_ceiling.memory_copy(store)
    before = dict(mem._data)
    new = (data + 1).tobytes()
    sink = bench_ceiling._Discarding(mem)
    run = bench_ceiling.encode_all(mem, "x", new, threads=2)
    assert run.units == 3 * 2 and run.seconds > 0
    assert mem._data == before  # the store's objects are left as they were
    # what a flush gives the discarding store is every chunk encoded: as many bytes as the
    # chunks zarr-python writes for the same data
    arr = bench_ceiling.open_array(sink, "x", bench_ceiling.Engine(cache_size=1 << 30))
    arr.write(0, new)
    arr.flush()
    root["x"][...] = data + 1  # type: ignore[index]
    chunks = [p for p in (store / "x" / "c").rglob("*") if p.is_file()]
    assert sink.stored == sum(p.stat().st_size for p in chunks) > 0
    arr.engine.close()


def test_cpu_capacity_is_cores_times_alone_over_together() -> None:
    cap, alone, together = bench_ceiling.parallel_capacity(sys.executable, 2, repeat=1)
    assert alone > 0 and together > 0
    # the figure itself depends on the machine and its load (a busy host gave 2.56 on two
    # cores): only its definition is checked here, its value is what the bench reports
    assert cap == pytest.approx(2 * alone / together)


@pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse")
def test_the_write_floor_stores_what_dd_wrote(tmp_path: Path) -> None:
    src = tmp_path / "src.raw"
    src.write_bytes(np.random.default_rng(1).integers(0, 256, 4 << 20, dtype=np.uint8).tobytes())
    out = subprocess.run(
        [sys.executable, str(SCRIPTS / "write_floor.py"), str(src), "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    runs = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["kind"] for r in runs] == ["memory", "file"]
    assert all(r["same"] and r["mib_s"] > 0 and r["cpu_s"] > 0 for r in runs)
    assert [p.name for p in tmp_path.iterdir()] == ["src.raw"]  # the floor's file is gone


def test_the_backwards_fill_leaves_every_unit_cached_for_the_serving_pass(
    tmp_path: Path, mounter: Any
) -> None:
    """The ceiling's serving pass must decode nothing: after ``fill_backwards`` a cold ``cat``
    loads no unit, while after a sequential ``cat`` (which the daemon releases units behind)
    it loads them again."""
    import zarr

    # 64 units of 1 MiB: the daemon releases units behind a sequential reader when it plans
    # ahead, every half window (4 MiB here), and only where the request it plans at continues
    # the one before; the kernel's read-ahead requests may arrive out of order, so a file of a
    # few windows (16 MiB) could pass with no plan point releasing anything
    shape, chunks = (256, 256, 256), (4, 256, 256)
    data = np.arange(np.prod(shape), dtype="<f4").reshape(shape)
    zarr.create_array(str(tmp_path / "s.zarr"), shape=shape, chunks=chunks, dtype="<f4")[...] = data
    options = ("prefetch=8M", "cache_size=256M", "nodirect_reads")

    def misses(m: Any) -> int:
        stats = json.loads((m.path / ".zarrfs" / "stats.json").read_text())
        return int(stats["arrays"][""].get("cache_misses", 0))

    def cold_cat(m: Any) -> bytes:
        bench.drop_caches()
        return subprocess.run(["cat", str(m.path / "data.raw")], capture_output=True).stdout

    # a sequential fill: the units it passed leave the cache, the next cat loads them again
    m = mounter(tmp_path / "s.zarr", *options, name="sequential")
    assert cold_cat(m) == data.tobytes()
    before = misses(m)
    assert cold_cat(m) == data.tobytes()
    assert misses(m) > before

    m = mounter(tmp_path / "s.zarr", *options, name="backwards")  # a fresh daemon
    assert bench_ceiling.fill_backwards(m.path / "data.raw") == data.nbytes
    before = misses(m)
    assert cold_cat(m) == data.tobytes()
    assert misses(m) == before


def _in_page_cache(path: Path) -> bool:
    """Every page of ``path`` is in the page cache (``mincore``; a read with ``RWF_NOWAIT``
    may answer EAGAIN for cached pages another process holds for a moment)."""
    import ctypes
    import mmap

    size = path.stat().st_size
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as m:
        pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        vec = (ctypes.c_ubyte * pages)()
        view = np.frombuffer(m, dtype=np.uint8)
        libc = ctypes.CDLL(None, use_errno=True)
        rc = libc.mincore(ctypes.c_void_p(view.ctypes.data), ctypes.c_size_t(size), vec)
        del view
        assert rc == 0, os.strerror(ctypes.get_errno())
        return all(v & 1 for v in vec)


def test_the_bytes_ceiling_serves_the_chunk_files_from_the_page_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A ``bytes`` array's cold reads come straight from its chunk files, so the ceiling's
    serving pass must take that path: every chunk file in the page cache when ``data.raw`` is
    read, a fresh mount, and no unit decoded. The ceiling is the longer of the storage and
    serving passes (or their CPU spread over the cores)."""
    cfg = bench_data.Config("t", (8, 512, 512), chunks=(4, 256, 256))  # 8 chunks of 1 MiB
    store = bench_data.ensure_data(cfg, tmp_path, ["bytes"])["bytes"]
    chunk_files = [p for p in (store / "x").rglob("*") if p.is_file() and p.name != "zarr.json"]
    assert len(chunk_files) == 8
    b = _quiet_bench(cfg, tmp_path)
    b.raw_cold_mibps = 1000.0
    seen: dict[str, Any] = {}
    real_cat_file = bench_reads.cat_file

    def cat_file(path: Path) -> float:
        seen["cached"] = [_in_page_cache(p) for p in chunk_files]
        seconds = real_cat_file(path)
        stats = json.loads((tmp_path / "mnt" / ".zarrfs" / "stats.json").read_text())
        seen["served"] = stats["arrays"]["x"]
        seen["seconds"] = seconds
        return seconds

    monkeypatch.setattr(bench_reads, "cat_file", cat_file)
    notes: list[str] = []
    ceiling, parts = b._bytes_ceiling(store, notes)
    assert parts["storage"] > 0
    assert all(seen["cached"])
    assert seen["served"]["bytes_served"] == cfg.nbytes
    assert seen["served"].get("chunks_decoded", 0) == 0  # direct reads: no unit decoded
    assert 0 < ceiling <= bench_report.mibps(cfg.nbytes, seen["seconds"]) + 1e-6
    assert f"{bench_report.mibps(cfg.nbytes, seen['seconds']):.0f} MiB/s" in notes[0]
    assert "8 chunk files (8 MiB) read cold" in notes[0]


def test_the_decoded_ceiling_reads_every_chunk_file_cold(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A cold read of a compressed array must read its chunk files from the disk, so its
    ceiling has a storage part beside decoding and serving: every chunk file (no metadata)
    read with the page cache dropped first, and a ceiling no faster than that reading. A
    ceiling is an upper bound, so each part is the fastest of its runs: passes the machine
    slowed do not lower it."""
    cfg = bench_data.Config("t", (8, 512, 512), chunks=(4, 256, 256))  # 8 chunks of 1 MiB
    store = bench_data.ensure_data(cfg, tmp_path, ["blosc"])["blosc"]
    chunk_files = {p for p in (store / "x").rglob("*") if p.is_file() and p.name != "zarr.json"}
    assert len(chunk_files) == 8
    b = _quiet_bench(cfg, tmp_path, repeat=3)
    b.raw_cold_mibps = 1000.0
    events: list[str] = []
    real_cold = b.cold

    def cold() -> None:
        events.append("cold")
        real_cold()

    monkeypatch.setattr(b, "cold", cold)
    # storage passes slower than decoding and serving these 8 MiB; two of them slowed more
    delays = [0.6, 0.3, 0.6]

    def cat_files(paths: list[Path]) -> None:
        events.append("cat")
        assert set(paths) == chunk_files
        time.sleep(delays.pop(0))

    monkeypatch.setattr(bench_reads, "cat_files", cat_files)
    notes: list[str] = []
    ceiling, clean, parts = b._decoded_ceiling(store, notes)
    assert clean
    assert 0.3 <= parts["storage"] < 0.6  # the fastest storage pass
    assert 0 < parts["decode"]
    assert not delays
    assert events[:6] == ["cold", "cat"] * 3
    n = cfg.nbytes
    assert bench_report.mibps(n, 0.6) < ceiling <= bench_report.mibps(n, 0.3)
    assert any("8 chunk files" in n and "read cold" in n for n in notes)
