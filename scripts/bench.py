#!/usr/bin/env python3
"""Side-by-side benchmark: a zarrfs mount vs zarr-python and tensorstore on the same data.

Run as root (it drops the page cache and mounts with FUSE) with the project's virtualenv:

    .venv/bin/python scripts/bench.py --small --out bench-small.md      # ~3-4 minutes on 2 cores
    .venv/bin/python scripts/bench.py --out bench.md                     # 512 MiB per variant

The profiles need py-spy in the virtualenv (``.venv/bin/pip install py-spy``); without it, or
with ``--skip profile``, the report has no profile section. strace, when installed, cross-checks
measurement 6.

Data: float32 (128, 1024, 1024) of smooth data with a little noise (``--small``: (32, 512, 512)),
chunks (64, 256, 256), stored as Zarr v3 under ``--workdir`` by zarr-python in four variants
(``bytes`` only; ``blosc`` zstd clevel 3 shuffle; ``gzip`` level 1; ``sharded``: shards
(128, 512, 512) of inner chunks (32, 128, 128), blosc lz4). Each store is one root group holding
the array ``x``, so the mount shows ``MNT/x/data.raw``. Stores and ``src.raw`` (the same bytes as
a plain file) are reused when already present.

Measurements, per variant (every "cold" one starts after ``drop_caches`` and on a fresh mount or a
freshly opened array):
1. full sequential read: ``cat data.raw > /dev/null`` and ``numpy.fromfile`` through the mount vs
   zarr-python ``a[...]`` and tensorstore ``read()`` (``--repeat`` times, median; 3 with
   ``--small``, where one read takes only tens of milliseconds);
2. second (warm) read vs a plain raw file read from the page cache;
3. random 4 KiB preads of ``data.raw``, cold and warm (p50/p99) vs single-element reads
   (zarr-python: no cache, so fewer samples; tensorstore: cache pool of ``--cache-size``), plus a
   pass after ``drop_caches`` (the daemon's chunk cache stays warm) with ``POSIX_FADV_RANDOM``,
   so every pread is one 4 KiB request answered by the daemon;
4. full overwrite (``dd ... conv=notrunc,fsync``) vs ``a[...] = x`` and ``write()``, each
   followed by ``sync`` so all three end with the data on disk;
   beside it (once per run) the pyfuse3 write floor (``scripts/write_floor.py``): the same
   ``dd`` + ``sync`` into a minimal pyfuse3 file system storing each write in one real file,
   or copying it into a buffer (the FUSE transport alone); the floors explain the row, the
   target stays the best peer (a naive file system is not a limit of the machine); and the
   ceiling of an overwrite here (``scripts/bench_ceiling.py``): zarrfs' own encode of every
   unit from memory, the transport alone, both overlapped perfectly, the disk left out; the
   overwrite is compared with it where it is below the best peer;
5. the daemon's peak RSS (VmRSS polled, and VmHWM) during 1 and 4, against ``-o cache_size``;
6. (sharded) bytes fetched from the store for one 4 KiB read, from ``/.zarrfs/stats.json``
   (cross-checked with strace when available) vs the shard index(es) + touched inner chunks;
8. TIFF view: a cold sequential read of ``data.tif`` with ``tifffile.imread`` against a cold
   ``numpy.fromfile`` of ``data.raw`` (same run, fresh mount each; target: within 10 %);
7. ``find MNT | wc -l`` and ``ls -lR MNT`` over 10,000 small arrays (1,000 with ``--small``, to
   stay within a few minutes) vs zarr-python ``members(max_depth=None)``;
9. ``group.nc``: the array read as a netCDF-4 variable with netCDF4-python (netCDF-C, libhdf5)
   vs ``numpy.fromfile`` of its ``data.raw``, each on a fresh mount after ``drop_caches``, in the
   same run (the bytes are compared); the open (which renders the file) is counted, and also
   shown apart with the time of ``ncdump -h`` on a cold mount.
10. the ceiling of a cold read on this machine (``scripts/bench_ceiling.py``): zarrfs' own decode
   of every chunk from memory, serving from a full chunk cache, and both overlapped perfectly
   (the longer of the two, or their CPU seconds spread over every core); the cold ``cat`` of 1
   is compared with it where it is below the best peer. For ``bytes`` the storage bounds it too:
   the array's chunk files read cold by one ``cat``.
Rows 1 also compare with the plain file ``src.raw`` read cold the same way (``cat``,
``numpy.fromfile``): the ``bytes`` target is 0.8× of it. One ``read()`` of the whole file into
fresh memory (``numpy.fromfile``) is bound by the reader itself, so where the plain file read
that way is slower than the best peer, 0.9× of it meets the row (``fromfile_target``).
A py-spy profile of the daemon (extra, untimed passes) is summarised as the top functions.

Ratios compare zarrfs with the best of zarr-python and tensorstore; in rows 1 and 4 each of
the ``--repeat`` rounds starts with another engine (the first measurement after a cache drop
can meet slower memory: this VM hands freed memory back to its host). Every cold measurement
waits (up to ``--quiet-wait`` s) until other processes keep at most ``--busy-cpu`` of the CPUs
busy, and each row reports the load average and that figure; rows measured busy anyway are
flagged "(busy)" and counted in the report's header. A fixed CPU-bound task is timed before
each measurement too (``cpu_probe``): the host slows this VM's CPUs when it is busy, unseen by
the guest's load, and each row gives the range of that time before its runs; so does the rate
at which fresh memory is faulted in (``memory_probe``), which moves with the host too. The
CPU seconds of the daemon and of ``cat`` during the cold ``cat`` are reported with it (how
many of the cores a read used).

Invariants: the script never leaves a mount or a process behind (every mount is unmounted in a
``finally``/``atexit`` path: ``zarrfs umount``, then ``fusermount3 -u -z``, then the daemon's own
pid is signalled); it only ever signals processes it started (the daemons of its own mounts,
py-spy, strace). Timings are reported, never asserted.
"""

from __future__ import annotations

import argparse
import atexit
import datetime
import json
import mmap
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np
import tifffile
from bench_ceiling import (
    decode_all,
    encode_all,
    fill_backwards,
    memory_copy,
    parallel_capacity,
)
from floorfs import children_cpu, proc_cpu

REPO = Path(__file__).resolve().parent.parent
MiB = 1 << 20
ARRAY = "x"


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class Config:
    tag: str
    shape: tuple[int, int, int]
    chunks: tuple[int, int, int] = (64, 256, 256)
    shards: tuple[int, int, int] = (128, 512, 512)
    inner: tuple[int, int, int] = (32, 128, 128)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * 4


FULL = Config("full", (128, 1024, 1024))
SMALL = Config("small", (32, 512, 512))
VARIANTS = ("bytes", "blosc", "gzip", "sharded")


def _create_kwargs(variant: str, cfg: Config) -> dict[str, Any]:
    from zarr.codecs import BloscCodec, GzipCodec

    if variant == "bytes":
        return {"chunks": cfg.chunks, "compressors": None}
    if variant == "blosc":
        return {
            "chunks": cfg.chunks,
            "compressors": BloscCodec(cname="zstd", clevel=3, shuffle="shuffle"),
        }
    if variant == "gzip":
        return {"chunks": cfg.chunks, "compressors": GzipCodec(level=1)}
    if variant == "sharded":
        return {
            "chunks": cfg.inner,
            "shards": cfg.shards,
            "compressors": BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"),
        }
    raise SystemExit(f"unknown variant {variant!r} (choose from {', '.join(VARIANTS)})")


# --------------------------------------------------------------------------- small helpers


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


_CAN_DROP = True


def drop_caches() -> None:
    """Write back and drop the page cache, dentries and inodes (needs root)."""
    global _CAN_DROP
    os.sync()
    if not _CAN_DROP:
        return
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError as exc:
        _CAN_DROP = False
        log(f"WARNING: cannot drop the page cache ({exc}); cold numbers are not cold")


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def timed_then_sync(fn: Callable[[], Any]) -> float:
    """Seconds for ``fn()`` followed by ``sync`` (so every engine ends with its data on disk)."""
    t0 = time.perf_counter()
    fn()
    os.sync()
    return time.perf_counter() - t0


def sh(cmd: str, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, shell=True, check=True, text=True, capture_output=True, timeout=timeout
    )


def read_status(pid: int, field_name: str) -> int | None:
    """A ``/proc/PID/status`` field in bytes (VmRSS, VmHWM), None once the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def rotated_rounds(steps: list[Callable[[], None]], rounds: int) -> None:
    """Run every step ``rounds`` times, round ``k`` starting with step ``k`` (mod their count)
    and going on in order: no step is always the first after the others."""
    for k in range(rounds):
        first = k % len(steps)
        for step in steps[first:] + steps[:first]:
            step()


def pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def _cat_files(paths: list[Path]) -> None:
    subprocess.run(["cat", *map(str, paths)], stdout=subprocess.DEVNULL, check=True)


def cat_file(path: Path) -> float:
    seconds, _ = timed(lambda: sh(f"cat '{path}' > /dev/null"))
    return seconds


# --------------------------------------------------------------------------- mounts


_ACTIVE: dict[str, Mount] = {}


def mounted(mnt: Path) -> bool:
    target = str(mnt)
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == target for line in f if len(line.split()) > 1)


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def find_daemon_pid(mnt: Path) -> int | None:
    """The daemon serving ``mnt``: zarrfs' own lookup, else a scan of /proc cmdlines."""
    try:
        from zarrfs.fuse.runtime import find_daemon

        pid = find_daemon(str(mnt))
        if pid is not None:
            return pid
    except Exception as exc:  # the lookup is a convenience; the scan below is the fallback
        log(f"zarrfs.fuse.runtime.find_daemon failed: {exc}")
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            args = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"zarrfs" in b" ".join(args) and str(mnt).encode() in args:
            return int(entry)
    return None


class Mount:
    """One zarrfs mount: mounted on enter, always unmounted on exit."""

    def __init__(self, python: str, store: Path, mnt: Path, options: str) -> None:
        self.python, self.store, self.mnt, self.options = python, store, mnt, options
        self.pid: int | None = None

    def __enter__(self) -> Mount:
        self.mnt.mkdir(parents=True, exist_ok=True)
        if mounted(self.mnt):
            log(f"{self.mnt} is still mounted (an earlier run?): unmounting it first")
            Mount(self.python, self.store, self.mnt, "").unmount()
        cmd = [self.python, "-m", "zarrfs", "mount", str(self.store), str(self.mnt)]
        if self.options:
            cmd += ["-o", self.options]
        _ACTIVE[str(self.mnt)] = self
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            self.unmount()
            raise RuntimeError(f"mount failed ({proc.returncode}): {proc.stderr.strip()}")
        self.pid = find_daemon_pid(self.mnt)
        if self.pid is None:
            self.unmount()
            raise RuntimeError(f"mounted {self.mnt} but found no daemon process")
        return self

    def __exit__(self, *exc: object) -> None:
        self.unmount()

    def stats(self) -> dict[str, Any]:
        return json.loads((self.mnt / ".zarrfs" / "stats.json").read_text())

    def unmount(self) -> None:
        pid = self.pid or (find_daemon_pid(self.mnt) if mounted(self.mnt) else None)
        try:
            if mounted(self.mnt):
                proc = subprocess.run(
                    [self.python, "-m", "zarrfs", "umount", str(self.mnt)],
                    cwd=REPO, capture_output=True, text=True, timeout=600,
                )  # fmt: skip
                if proc.returncode != 0:
                    log(f"zarrfs umount {self.mnt} failed: {proc.stderr.strip()}")
        except subprocess.TimeoutExpired:
            log(f"zarrfs umount {self.mnt} timed out")
        if mounted(self.mnt):
            subprocess.run(["fusermount3", "-u", "-z", str(self.mnt)], capture_output=True)
        if pid is not None:
            for sig, wait in ((None, 30.0), (signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
                if sig is not None and _pid_alive(pid):
                    log(f"daemon {pid} still running: sending {sig.name}")
                    os.kill(pid, sig)
                deadline = time.monotonic() + wait
                while _pid_alive(pid) and time.monotonic() < deadline:
                    time.sleep(0.05)
                if not _pid_alive(pid):
                    break
        _ACTIVE.pop(str(self.mnt), None)


def _cleanup_all() -> None:
    for m in list(_ACTIVE.values()):
        try:
            m.unmount()
        except Exception as exc:
            log(f"cleanup of {m.mnt} failed: {exc}")


def _on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


class PeakRss:
    """Polls a process' VmRSS in a thread; ``stop()`` gives max(polled VmRSS, VmHWM) in bytes."""

    def __init__(self, pid: int, interval: float = 0.01) -> None:
        self.pid, self.interval = pid, interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            rss = read_status(self.pid, "VmRSS")
            if rss is None:
                return
            self.peak = max(self.peak, rss)

    def stop(self) -> int:
        hwm = read_status(self.pid, "VmHWM") or 0
        self._stop.set()
        self._thread.join()
        return max(self.peak, hwm)


def cpu_busy(window: float) -> float:
    """The fraction of all CPUs' time spent busy (not idle, not waiting for I/O) over ``window``
    seconds, from ``/proc/stat``."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            vals = [int(x) for x in f.readline().split()[1:9]]
        return sum(vals), vals[3] + vals[4]

    t0, i0 = sample()
    time.sleep(window)
    t1, i1 = sample()
    return 0.0 if t1 == t0 else 1 - (i1 - i0) / (t1 - t0)


#: the input of ``cpu_probe``: 4 MiB that zlib compresses about as hard as array data
_PROBE_DATA = (np.arange(1 << 20, dtype=np.uint64) * 2654435761 % 65521).astype("<u4").tobytes()


def cpu_probe() -> float:
    """Milliseconds of this thread's CPU time that a fixed CPU-bound task takes (zlib level 1
    over 4 MiB). The host of this virtual machine slows its vCPUs when it is busy itself, with
    no sign in the guest's load average or steal time; this shows it."""
    start = time.thread_time()
    zlib.compress(_PROBE_DATA, 1)
    return (time.thread_time() - start) * 1000


#: fresh memory ``memory_probe`` faults in and fills
_MEMORY_PROBE_BYTES = 64 << 20


def memory_probe() -> float:
    """MiB/s at which this process faults in fresh memory (a new anonymous mapping of 64 MiB,
    one write per page, then unmapped). This VM hands freed memory back to its host, which
    backs it again on first touch at a speed that moves with the host's own load, unseen by
    the CPU probe (whose data stays in the CPU's caches); a cold read through the mount fills
    fresh memory with its units and the page cache."""
    start = time.perf_counter()
    with mmap.mmap(-1, _MEMORY_PROBE_BYTES) as m:
        pages = np.frombuffer(m, dtype=np.uint8)
        pages[:: mmap.PAGESIZE] = 1
        del pages
    return _MEMORY_PROBE_BYTES / MiB / (time.perf_counter() - start)


@dataclass(frozen=True)
class LoadSample:
    """The machine just before one measurement: 1-min load average, the fraction of all CPUs
    busy over the sampling window (the bench itself idle then), seconds waited for quiet, and
    the CPU probe's milliseconds (``cpu_probe``; more is a slower CPU) and the memory probe's
    MiB/s (``memory_probe``; less is slower fresh memory)."""

    load1: float
    busy: float
    waited: float
    probe_ms: float = 0.0
    memory_mibps: float = 0.0


class LoadGate:
    """Before each measurement: wait (up to ``wait`` s) until the CPUs are quiet, and record how
    busy the machine was, so every row reports its load and rows run busy are flagged.

    The 1-min load average follows the bench's own previous measurement for a minute, so
    "busy" is judged by the CPU time others use while the bench is idle (``cpu_busy``)."""

    def __init__(self, busy_limit: float, wait: float, window: float = 1.0) -> None:
        self.busy_limit, self.wait, self.window = busy_limit, wait, window
        self.samples: list[LoadSample] = []
        self.all: list[LoadSample] = []

    def settle(self) -> LoadSample:
        start = time.monotonic()
        while True:
            busy = cpu_busy(self.window)
            if busy <= self.busy_limit or time.monotonic() - start >= self.wait:
                break
        waited = max(0.0, time.monotonic() - start - self.window)
        sample = LoadSample(os.getloadavg()[0], busy, waited, cpu_probe(), memory_probe())
        if busy > self.busy_limit:
            log(f"  busy machine before a measurement: {busy:.0%} of the CPUs (others)")
        self.samples.append(sample)
        self.all.append(sample)
        return sample

    def take(self) -> list[LoadSample]:
        """The samples since the last call (those of the row being added)."""
        out, self.samples = self.samples, []
        return out


@contextmanager
def traced(tool_cmd: list[str], ready_wait: float = 0.7) -> Iterator[subprocess.Popen[bytes]]:
    """Run a tracer (py-spy, strace) for the duration of the block; stop it with SIGINT."""
    proc = subprocess.Popen(tool_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(ready_wait)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --------------------------------------------------------------------------- data


def _generate(cfg: Config) -> np.ndarray:
    """Smooth data (product of slow waves drifting along axis 0) plus a little noise."""
    nz, ny, nx = cfg.shape
    out = np.empty(cfg.shape, dtype="<f4")
    rng = np.random.default_rng(42)
    y = np.arange(ny, dtype=np.float32)[:, None]
    x = np.arange(nx, dtype=np.float32)[None, :]
    for z in range(nz):
        plane = np.sin(x * (2 * np.pi / 500) + z * 0.05) * np.cos(y * (2 * np.pi / 700) - z * 0.03)
        plane = plane * 10 + 20 + rng.standard_normal((ny, nx), dtype=np.float32) * 0.05
        out[z] = plane
    return out


def ensure_data(cfg: Config, base: Path, variants: list[str]) -> dict[str, Path]:
    """Write ``src.raw`` and every requested store once; later runs reuse them."""
    import zarr

    base.mkdir(parents=True, exist_ok=True)
    src = base / "src.raw"
    data: np.ndarray | None = None
    if not (src.exists() and src.stat().st_size == cfg.nbytes):
        log(f"generating {cfg.shape} float32 -> {src}")
        data = _generate(cfg)
        data.tofile(src)
    stores = {}
    for v in variants:
        store = base / f"{v}.zarr"
        marker = base / f"{v}.done"
        stamp = json.dumps({"cfg": asdict(cfg), "variant": v, "zarr": zarr.__version__})
        stores[v] = store
        if (
            marker.exists()
            and marker.read_text() == stamp
            and (store / ARRAY / "zarr.json").exists()
        ):
            continue
        if data is None:
            data = np.fromfile(src, dtype="<f4").reshape(cfg.shape)
        log(f"writing {store} with zarr-python")
        shutil.rmtree(store, ignore_errors=True)
        marker.unlink(missing_ok=True)
        root = zarr.open_group(str(store), mode="w", zarr_format=3)
        arr = root.create_array(
            ARRAY, shape=cfg.shape, dtype="float32", fill_value=0.0, **_create_kwargs(v, cfg)
        )
        arr[...] = data
        marker.write_text(stamp)
    return stores


def ensure_listing(path: Path, groups: int, per_group: int) -> None:
    """A hierarchy of groups x arrays of shape (4,), one chunk each; metadata written directly."""
    stamp = f"{groups}x{per_group}"
    marker = path.with_suffix(".done")
    if marker.exists() and marker.read_text() == stamp and (path / "zarr.json").exists():
        return
    log(f"building the listing hierarchy {path} ({groups} groups x {per_group} arrays)")
    shutil.rmtree(path, ignore_errors=True)
    marker.unlink(missing_ok=True)
    group_doc = json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}})
    array_doc = json.dumps({
        "zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0.0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "attributes": {},
    })  # fmt: skip
    path.mkdir(parents=True)
    (path / "zarr.json").write_text(group_doc)
    for g in range(groups):
        gdir = path / f"g{g:03d}"
        gdir.mkdir()
        (gdir / "zarr.json").write_text(group_doc)
        for a in range(per_group):
            adir = gdir / f"a{a:03d}"
            (adir / "c").mkdir(parents=True)
            (adir / "zarr.json").write_text(array_doc)
            (adir / "c" / "0").write_bytes(np.arange(4, dtype="<f4").tobytes())
    marker.write_text(stamp)


# --------------------------------------------------------------------------- results


@dataclass
class Row:
    measurement: str
    variant: str
    zarrfs: float | None
    zarr_python: float | None = None
    tensorstore: float | None = None
    target: str = ""
    met: bool | None = None
    notes: str = ""
    fmt: str = "{:.0f}"
    #: throughputs: higher is better; latencies and listing times: lower is better
    higher: bool = True
    #: the machine was busy (others' CPU) before at least one of this row's measurements
    busy: bool = False

    @property
    def best_peer(self) -> float | None:
        peers = [p for p in (self.zarr_python, self.tensorstore) if p is not None and p == p]
        if not peers:
            return None
        return max(peers) if self.higher else min(peers)

    @property
    def ratio(self) -> float | None:
        """zarrfs / the best of zarr-python and tensorstore (for both directions)."""
        best = self.best_peer
        if self.zarrfs is None or not best:
            return None
        return self.zarrfs / best

    def cells(self) -> list[str]:
        def f(v: float | None) -> str:
            return "—" if v is None or v != v else self.fmt.format(v)

        ratio = "—" if self.ratio is None else f"{self.ratio:.2f}×"
        met = {None: "—", True: "yes", False: "**no**"}[self.met]
        if self.busy:
            met += " (busy)"
        cells = [
            self.measurement, self.variant, f(self.zarrfs), f(self.zarr_python),
            f(self.tensorstore), ratio, self.target, met, self.notes,
        ]  # fmt: skip
        return [c.replace("|", "\\|") for c in cells]


HEADER = [
    "measurement", "variant", "zarrfs", "zarr-python", "tensorstore",
    "ratio (zarrfs / best peer)", "target", "met?", "notes",
]  # fmt: skip


def markdown_table(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    return "\n".join(lines)


def mibps(nbytes: int, seconds: float) -> float:
    return nbytes / MiB / seconds


# --------------------------------------------------------------------------- engines


def zarr_open(store: Path, mode: str = "r") -> Any:
    import zarr

    return zarr.open_array(store=str(store), path=ARRAY, mode=mode)


def ts_open(store: Path, cache_bytes: int = 0) -> Any:
    import tensorstore as ts

    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(store / ARRAY)}}
    ctx = ts.Context({"cache_pool": {"total_bytes_limit": cache_bytes}})
    return ts.open(spec, context=ctx, open=True).result()


def _read_all_zarr(arr: Any) -> Any:
    return arr[...]


def _read_all_ts(arr: Any) -> Any:
    return arr.read().result()


def _write_ts(arr: Any, x: np.ndarray) -> None:
    arr.write(x).result()


def ts_bytes_read() -> int:
    import tensorstore as ts

    for m in ts.experimental_collect_matching_metrics("/tensorstore/kvstore/file/bytes_read"):
        return int(sum(v.get("value", 0) for v in m["values"]))
    return 0


class _ByteCounter:
    total = 0


def zarr_counting_array(store: Path) -> Any:
    """A zarr-python array whose store counts the bytes every get returns."""
    import zarr
    from zarr.storage import LocalStore, WrapperStore

    class Counting(WrapperStore):  # type: ignore[misc, type-arg]
        async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
            buf = await self._store.get(key, prototype, byte_range)
            if buf is not None:
                _ByteCounter.total += len(buf)
            return buf

        async def get_partial_values(self, prototype: Any, key_ranges: Any) -> Any:
            bufs = await self._store.get_partial_values(prototype, key_ranges)
            _ByteCounter.total += sum(len(b) for b in bufs if b is not None)
            return bufs

    return zarr.open_array(store=Counting(LocalStore(str(store), read_only=True)), path=ARRAY)


# --------------------------------------------------------------------------- the benchmark


@dataclass
class Bench:
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

    # -- plain raw file reference (once)
    def raw_reference(self) -> None:
        src = self.base / "src.raw"
        cold, warm, np_cold = [], [], []
        for _ in range(self.args.repeat):
            self.cold()
            cold.append(cat_file(src))
            warm.append(cat_file(src))
            self.cold()
            np_cold.append(timed(lambda: np.fromfile(src, dtype="<f4"))[0])
        self.raw_cold_mibps = mibps(self.cfg.nbytes, median(cold))
        self.raw_warm_mibps = mibps(self.cfg.nbytes, median(warm))
        self.raw_np_mibps = mibps(self.cfg.nbytes, median(np_cold))
        self.gate.settle()
        self.capacity = parallel_capacity(self.args.python, os.cpu_count() or 1)
        self.gate.take()
        log(f"plain raw file: cold {self.raw_cold_mibps:.0f} MiB/s, warm {self.raw_warm_mibps:.0f}")

    # -- 1, 2, 5: sequential reads and peak RSS
    def sequential(self, v: str, store: Path) -> None:
        n, reps = self.cfg.nbytes, self.args.repeat
        src = np.fromfile(self.base / "src.raw", dtype="<f4")
        t: dict[str, list[float]] = {k: [] for k in ("cat", "warm", "np", "zp", "zp2", "ts", "ts2")}
        warm_served: list[float] = []
        cpu: dict[str, list[float]] = {"daemon": [], "cat": []}
        state = {"peak": 0, "identical": True}

        def zarrfs_cat() -> None:
            self.cold()
            with self.mount(store) as m:
                assert m.pid is not None
                rss = PeakRss(m.pid)
                cpu0, kids0 = proc_cpu(m.pid), children_cpu()
                t["cat"].append(cat_file(m.mnt / ARRAY / "data.raw"))
                cpu["daemon"].append(proc_cpu(m.pid) - cpu0)
                cpu["cat"].append(children_cpu() - kids0)
                before = m.stats()["arrays"].get(ARRAY, {}).get("bytes_served", 0)
                t["warm"].append(cat_file(m.mnt / ARRAY / "data.raw"))
                after = m.stats()["arrays"].get(ARRAY, {}).get("bytes_served", 0)
                warm_served.append((after - before) / MiB)
                state["peak"] = max(state["peak"], rss.stop())

        def zarrfs_np() -> None:
            self.cold()
            with self.mount(store) as m:
                assert m.pid is not None
                rss = PeakRss(m.pid)
                secs, got = timed(lambda: np.fromfile(m.mnt / ARRAY / "data.raw", dtype="<f4"))
                t["np"].append(secs)
                state["peak"] = max(state["peak"], rss.stop())
            state["identical"] = state["identical"] and bool(np.array_equal(got, src))

        def zarr_python() -> None:
            self.cold()
            a = zarr_open(store)
            t["zp"].append(timed(partial(_read_all_zarr, a))[0])
            t["zp2"].append(timed(partial(_read_all_zarr, a))[0])

        def tensorstore() -> None:
            self.cold()
            ts_arr = ts_open(store)
            t["ts"].append(timed(partial(_read_all_ts, ts_arr))[0])
            t["ts2"].append(timed(partial(_read_all_ts, ts_arr))[0])

        # each round starts with another reader: the first measurement after a cache drop can
        # meet slower memory (this VM hands freed memory back to its host, which backs it
        # again on the next touch), and no reader should always be the one that meets it
        rotated_rounds([zarrfs_cat, zarrfs_np, zarr_python, tensorstore], reps)
        peak, identical = state["peak"], state["identical"]
        rate = {k: mibps(n, median(secs)) for k, secs in t.items()}
        wall = median(t["cat"])
        busy = (median(cpu["daemon"]) + median(cpu["cat"])) / wall
        cpu_note = (
            f"CPU during cat: daemon {median(cpu['daemon']):.2f} s + cat "
            f"{median(cpu['cat']):.2f} s in {wall:.2f} s ({busy:.1f} of {os.cpu_count()} cores)"
        )
        rep_note = f"median of {reps}" if reps > 1 else ""
        self.seq_rates[v] = {k: rate[k] for k in ("cat", "np", "zp", "ts")}
        for label, key in (("cat", "cat"), ("numpy.fromfile", "np")):
            r = Row(f"1. seq read cold, {label} (MiB/s)", v, rate[key], rate["zp"], rate["ts"],
                    "≥ 1.0× best peer")  # fmt: skip
            r.met = (r.ratio or 0) >= 1.0
            # the plain file of the same bytes, read cold the same way (cat, numpy.fromfile)
            plain = self.raw_cold_mibps if key == "cat" else self.raw_np_mibps
            notes = [rep_note]
            if v == "bytes":
                r.target += f" and ≥ 0.8× the plain file read the same way ({plain:.0f})"
                r.met = r.met and rate[key] / plain >= 0.8
            if key == "np":
                r.target, r.met = fromfile_target(r.target, r.met, rate[key], r.best_peer, plain)
            notes.append(f"{rate[key] / plain:.2f}× the plain file read the same way")
            if key == "cat":
                notes.append(cpu_note)
            else:
                notes.append(
                    "bytes identical to src.raw" if identical else "**bytes DIFFER from src.raw**"
                )
            r.notes = "; ".join(x for x in notes if x)
            self.add(r)
        to_raw = rate["warm"] / self.raw_warm_mibps
        self.add(Row(
            "2. seq re-read warm, cat (MiB/s)", v, rate["warm"], rate["zp2"], rate["ts2"],
            f"≥ 0.5× plain raw page-cache read ({self.raw_warm_mibps:.0f})", to_raw >= 0.5,
            f"{to_raw:.2f}× plain raw; 2nd cat on the same mount (the daemon served "
            f"{median(warm_served):.0f} of {n / MiB:.0f} MiB, the rest came from the kernel "
            "page cache); zarr-python/tensorstore: "
            "2nd read (page cache warm, no chunk cache)" + (f"; {rep_note}" if rep_note else ""),
        ))  # fmt: skip
        self.add(self._rss_row("5. daemon peak RSS, seq read (MiB)", v, peak))

    # -- 8: the TIFF view against data.raw
    def tiff_read(self, v: str, store: Path) -> None:
        t: dict[str, list[float]] = {"tif": [], "raw": []}
        src = np.fromfile(self.base / "src.raw", dtype="<f4").reshape(self.cfg.shape)
        identical = True
        for _ in range(self.args.repeat):
            for key in ("raw", "tif"):
                self.cold()
                with self.mount(store) as m:
                    path = m.mnt / ARRAY / f"data.{key}"
                    if key == "tif":
                        secs, got = timed(lambda p=path: tifffile.imread(p))
                    else:
                        secs, got = timed(lambda p=path: np.fromfile(p, dtype="<f4"))
                    t[key].append(secs)
                identical = identical and bool(np.array_equal(got.reshape(src.shape), src))
                del got
        rate = {k: mibps(self.cfg.nbytes, median(secs)) for k, secs in t.items()}
        ratio = rate["tif"] / rate["raw"]
        self.add(Row(
            "8. seq read cold, tifffile.imread data.tif (MiB/s)", v, rate["tif"], None, None,
            "≥ 0.9× numpy.fromfile of data.raw (same run)", ratio >= 0.9,
            f"data.raw {rate['raw']:.0f} MiB/s, {ratio:.2f}×"
            + (f"; median of {self.args.repeat}" if self.args.repeat > 1 else "")
            + ("; values identical to src.raw" if identical else "; **values DIFFER**"),
        ))  # fmt: skip

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

    # -- 3: random 4 KiB reads
    def random_reads(self, v: str, store: Path) -> None:
        n, count = self.cfg.nbytes, self.args.random_reads
        rng = np.random.default_rng(7)
        sets = [rng.integers(0, n // 4096, count) * 4096 for _ in range(3)]
        self.cold()
        zf, served = [], []
        with self.mount(store) as m:
            # cold; warm (new open, new offsets); then the kernel page cache dropped (the
            # daemon's chunk cache stays) and read-ahead off, so every pread reaches the daemon
            for k, offs in enumerate(sets):
                if k == 2:
                    self.cold()
                before = m.stats()["arrays"].get(ARRAY, {}).get("bytes_served", 0)
                zf.append(self._pread_latencies(m.mnt / ARRAY / "data.raw", offs, k == 2))
                after = m.stats()["arrays"].get(ARRAY, {}).get("bytes_served", 0)
                served.append((after - before) / MiB)
        zp_n = min(count, self.args.zp_samples)
        self.cold()
        a = zarr_open(store)
        zp = [self._element_latencies(lambda i: a[i], offs[:zp_n]) for offs in sets[:2]]
        self.cold()
        t = ts_open(store, self.cache_bytes)
        ts_ = [self._element_latencies(lambda i: t[i].read().result(), offs) for offs in sets[:2]]
        base_note = f"zarr-python n={zp_n} (no chunk cache); zarrfs/tensorstore n={count}"
        cases = (("cold", 0), ("warm", 1), ("daemon-warm, page cache dropped, FADV_RANDOM", 2))
        for phase, k in cases:
            for q in (50, 99):
                zp_q = pct(zp[k], q) if k < 2 else None
                ts_q = pct(ts_[k], q) if k < 2 else None
                r = Row(f"3. random 4K pread {phase} p{q} (µs)", v, pct(zf[k], q), zp_q, ts_q,
                        notes=base_note if k < 2 else "", higher=False)  # fmt: skip
                if q == 50 and k == 0:
                    r.target, r.met = "≤ zarr-python p50", r.zarrfs <= r.zarr_python  # type: ignore[operator]
                elif q == 50:
                    r.target, r.met = "≤ 100 µs", r.zarrfs <= 100  # type: ignore[operator]
                if q == 50:
                    r.notes = "; ".join(x for x in (r.notes, (
                        f"the daemon served {served[k]:.1f} MiB for these "
                        f"{count * 4096 / MiB:.0f} MiB of preads (the rest: kernel page cache)"
                    )) if x)  # fmt: skip
                if k == 1:
                    r.notes += "; warm = same mount, new open(), new offsets"
                if k == 2 and q == 50:
                    r.notes += (
                        "; same mount after drop_caches (the daemon's chunk cache stays), new "
                        "open() with read-ahead off: each pread is one 4 KiB FUSE read "
                        "(compare zarr-python/tensorstore in the warm rows)"
                    )
                self.add(r)

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

    def _element_latencies(self, read: Callable[[Any], Any], offsets: np.ndarray) -> np.ndarray:
        idx = np.stack(np.unravel_index(offsets // 4, self.cfg.shape), axis=1).tolist()
        out = np.empty(len(idx))
        clock = time.perf_counter_ns
        for k, i in enumerate(idx):
            key = tuple(i)
            t0 = clock()
            read(key)
            out[k] = clock() - t0
        return out / 1000

    # -- 9: group.nc read with netCDF4-python vs the same array's data.raw
    def netcdf_read(self, v: str, store: Path) -> None:
        import netCDF4

        t_nc: list[float] = []
        t_raw: list[float] = []
        t_header: list[float] = []
        t_open: list[float] = []
        same = True
        for _ in range(self.args.repeat):
            self.cold()
            with self.mount(store) as m:
                path = m.mnt / "group.nc"
                t_header.append(timed(lambda p=path: sh(f"ncdump -h '{p}' > /dev/null"))[0])
            self.cold()
            with self.mount(store) as m:
                # as a user would: `ls` first (which starts the daemon's one-time import of
                # h5py, ~0.3 s, in the background: ncdump -h above includes it), then open (which
                # renders the file) + read, counted like numpy.fromfile's open + read
                os.listdir(m.mnt)
                time.sleep(1.0)
                opened, d = timed(lambda p=m.mnt / "group.nc": netCDF4.Dataset(p))
                try:
                    d.set_auto_maskandscale(False)
                    secs, got = timed(lambda d=d: np.asarray(d[ARRAY][:]))
                finally:
                    d.close()
                t_open.append(opened)
                t_nc.append(opened + secs)
            self.cold()
            with self.mount(store) as m:
                secs, raw = timed(lambda: np.fromfile(m.mnt / ARRAY / "data.raw", dtype="<f4"))
                t_raw.append(secs)
            same = same and bool(np.array_equal(got.reshape(-1), raw))
            del got, raw
        nc_rate = mibps(self.cfg.nbytes, median(t_nc))
        raw_rate = mibps(self.cfg.nbytes, median(t_raw))
        ratio = nc_rate / raw_rate
        notes = [
            f"data.raw numpy.fromfile, same run: {raw_rate:.0f} MiB/s ({ratio:.2f}×)",
            f"ncdump -h, cold mount: {median(t_header) * 1000:.0f} ms",
            f"of which netCDF4.Dataset() open: {median(t_open) * 1000:.0f} ms",
            "bytes identical to data.raw" if same else "**bytes DIFFER from data.raw**",
        ]
        if self.args.repeat > 1:
            notes.append(f"median of {self.args.repeat}")
        self.add(Row(
            "9. group.nc: one variable, netCDF4-python, cold (MiB/s)", v, nc_rate, None, None,
            "≥ 0.8× data.raw read (same bytes)", ratio >= 0.8 and same, "; ".join(notes),
        ))  # fmt: skip

    # -- 10: what a cold sequential read can reach here (decode alone, serving alone, both)
    def ceiling(self, v: str, store: Path) -> None:
        n, reps = self.cfg.nbytes, self.args.repeat
        mem = memory_copy(store)
        t: dict[str, list[float]] = {"decode": [], "serve": []}
        cpu: dict[str, list[float]] = {"decode": [], "serve": []}
        clean = True
        path = ARRAY + "/data.raw"
        # a chunk cache that holds every decoded unit, read into it even where reads would
        # come from the chunk files (``bytes``), and the mount's other options
        opts = f"cache_size={max(2 * n, 1 << 30) // MiB}M,nodirect_reads" + (
            f",{self.args.mount_options}" if self.args.mount_options else ""
        )
        for _ in range(reps):
            self.gate.settle()
            run = decode_all(mem, ARRAY)
            t["decode"].append(run.seconds)
            cpu["decode"].append(run.cpu)
            with Mount(self.args.python, store, self.mnt, opts) as m:
                assert m.pid is not None
                fill_backwards(m.mnt / path)  # every unit decoded into the daemon's cache
                self.cold()  # the kernel's page cache only: the daemon keeps its cache
                misses = m.stats()["arrays"].get(ARRAY, {}).get("cache_misses", 0)
                cpu0, kids0 = proc_cpu(m.pid), children_cpu()
                t["serve"].append(cat_file(m.mnt / path))
                cpu["serve"].append(proc_cpu(m.pid) - cpu0 + children_cpu() - kids0)
                after = m.stats()["arrays"].get(ARRAY, {}).get("cache_misses", 0)
                clean = clean and after == misses
        dec, srv = median(t["decode"]), median(t["serve"])
        dec_cpu, srv_cpu = median(cpu["decode"]), median(cpu["serve"])
        cores = os.cpu_count() or 1
        # both overlapped perfectly on these cores: neither alone can be beaten, nor the CPU
        # seconds of both spread over every core
        both = max(dec, srv, (dec_cpu + srv_cpu) / cores)
        ceiling = mibps(n, both)
        notes = [
            f"decode alone {mibps(n, dec):.0f} MiB/s ({dec_cpu:.2f} s CPU; zarrfs' engine, "
            f"{cores} threads, store in memory)",
            f"serving alone {mibps(n, srv):.0f} MiB/s ({srv_cpu:.2f} s CPU, daemon + cat; every "
            "unit in the daemon's cache, page cache dropped)"
            + ("" if clean else " **the daemon loaded units: not clean, no ceiling used**"),
            f"both = max(decode, serve, CPU of both / {cores} cores) = {both:.2f} s",
        ]
        if self.capacity[0]:
            notes.append(
                f"these {cores} CPUs do {self.capacity[0]:.2f} CPUs' worth of CPU-bound work at "
                f"once (header); CPU of both / {self.capacity[0]:.2f} = "
                f"{(dec_cpu + srv_cpu) / self.capacity[0]:.2f} s"
            )
        if v == "bytes":
            files = sorted((p for p in (store / ARRAY).rglob("*") if p.is_file()), key=str)
            chunk_files = [p for p in files if p.name != "zarr.json"]
            t_files = []
            for _ in range(reps):
                self.cold()
                t_files.append(timed(partial(_cat_files, chunk_files))[0])
            files_rate = mibps(sum(p.stat().st_size for p in chunk_files), median(t_files))
            ceiling = min(ceiling, files_rate)
            notes.append(
                f"storage: its {len(chunk_files)} chunk files read cold with one `cat` "
                f"{files_rate:.0f} MiB/s (one plain file of the same bytes: "
                f"{self.raw_cold_mibps:.0f})"
            )
        seq = self.seq_rates.get(v, {})
        r = Row("10. cold read ceiling on this machine (MiB/s)", v, seq.get("cat"),
                seq.get("zp"), seq.get("ts"), CEILING_TARGET)  # fmt: skip
        notes.insert(0, f"ceiling {ceiling:.0f} MiB/s")
        if r.zarrfs is not None:
            to_ceiling = r.zarrfs / ceiling
            notes.insert(1, f"zarrfs cold cat (row 1) = {to_ceiling:.2f}× the ceiling")
            r.met = (r.ratio or 0) >= 1.0 or (
                clean and within_ceiling(r.zarrfs, r.best_peer, ceiling)
            )
        if reps > 1:
            notes.append(f"median of {reps}")
        r.notes = "; ".join(notes)
        self.add(r)

    # -- 4, 5: full overwrite
    def overwrite(self, v: str, store: Path) -> None:
        n, src, reps = self.cfg.nbytes, self.base / "src.raw", self.args.repeat
        x = np.fromfile(src, dtype="<f4").reshape(self.cfg.shape)
        t: dict[str, list[float]] = {"zf": [], "zp": [], "ts": []}
        state = {"peak": 0, "checked": False, "identical": True}

        def zarrfs_dd() -> None:
            self.cold()
            cat_file(src)  # the source comes from the page cache for every engine
            with self.mount(store) as m:
                assert m.pid is not None
                rss = PeakRss(m.pid)
                dd = f"dd if='{src}' of='{m.mnt / ARRAY / 'data.raw'}' bs=1M conv=notrunc,fsync"
                t["zf"].append(timed_then_sync(partial(sh, dd + " status=none")))
                state["peak"] = max(state["peak"], rss.stop())
            if not state["checked"]:
                state["checked"] = True
                state["identical"] = bool(np.array_equal(zarr_open(store)[...], x))

        def zarr_python() -> None:
            self.cold()
            a = zarr_open(store, mode="r+")
            t["zp"].append(timed_then_sync(partial(a.__setitem__, Ellipsis, x)))

        def tensorstore() -> None:
            self.cold()
            ts_arr = ts_open(store)
            t["ts"].append(timed_then_sync(partial(_write_ts, ts_arr, x)))

        rotated_rounds([zarrfs_dd, zarr_python, tensorstore], reps)
        peak, identical = state["peak"], state["identical"]
        split = self._overwrite_split(store, src)
        rate = {k: mibps(n, median(secs)) for k, secs in t.items()}
        floor = self.write_floor()
        r = Row("4. full overwrite (MiB/s)", v, rate["zf"], rate["zp"], rate["ts"],
                "≥ 1.0× best peer")  # fmt: skip
        r.met = (r.ratio or 0) >= 1.0
        r.notes = "; ".join(
            x
            for x in (
                "dd bs=1M conv=notrunc,fsync; all three + sync",
                f"pyfuse3 write floors: one real file {floor['file']:.0f} MiB/s, a buffer "
                f"(transport alone) {floor['memory']:.0f} MiB/s",
                "zarr-python reads back src.raw" if identical else "**read-back DIFFERS**",
                split,
                f"median of {reps}" if reps > 1 else "",
            )
            if x
        )
        self.add(r)
        self.add(self._rss_row("5. daemon peak RSS, overwrite (MiB)", v, peak))
        self._overwrite_ceiling(v, store, src, r)

    def _overwrite_ceiling(self, v: str, store: Path, src: Path, row: Row) -> None:
        """What a full overwrite can reach here (``bench_ceiling``): zarrfs' encode of every
        unit alone (from memory, into memory, one thread per CPU), the FUSE transport alone
        (the pyfuse3 write floor into a buffer), both overlapped perfectly: the longer of the
        two, and their CPU seconds spread over every core. The disk is left out."""
        reps = self.args.repeat
        mem = memory_copy(store)
        data = src.read_bytes()
        runs = []
        for _ in range(reps):
            self.gate.settle()
            runs.append(encode_all(mem, ARRAY, data))
        del data, mem
        enc, enc_cpu = median(x.seconds for x in runs), median(x.cpu for x in runs)
        floor = self.write_floor()
        n, cores = self.cfg.nbytes, os.cpu_count() or 1
        fuse_s, fuse_cpu = n / MiB / floor["memory"], floor["memory_cpu"]
        both = max(enc, fuse_s, (enc_cpu + fuse_cpu) / cores)
        ceiling = mibps(n, both)
        r = Row("4. full overwrite: ceiling here (MiB/s)", v, row.zarrfs, row.zarr_python,
                row.tensorstore, CEILING_TARGET)  # fmt: skip
        to_ceiling = (row.zarrfs or 0.0) / ceiling
        r.met = (r.ratio or 0) >= 1.0 or within_ceiling(row.zarrfs or 0.0, r.best_peer, ceiling)
        r.notes = "; ".join(
            x
            for x in (
                f"ceiling {ceiling:.0f} MiB/s",
                f"zarrfs overwrite (row 4) = {to_ceiling:.2f}× the ceiling",
                f"encode alone {mibps(n, enc):.0f} MiB/s ({enc_cpu:.2f} s CPU; zarrfs' engine, "
                f"{cores} threads, store in memory)",
                f"the FUSE transport alone (write floor into a buffer) {floor['memory']:.0f} "
                f"MiB/s ({fuse_cpu:.2f} s CPU, the floor's server + dd)",
                f"both = max(encode, transport, CPU of both / {cores} cores) = {both:.2f} s",
                "the disk left out",
                f"median of {reps}" if reps > 1 else "",
            )
            if x
        )
        self.add(r)

    def write_floor(self) -> dict[str, float]:
        """The pyfuse3 write floor (``scripts/write_floor.py``), measured once per run and
        reported as its own row: the same ``dd`` + ``sync`` into a pyfuse3 file system that
        stores each write in one real file as it comes (``file``; on the store's disk, fsynced
        on ``fsync``) or copies it into a buffer (``memory``). Medians of ``--repeat``."""
        if self._write_floor is not None:
            return self._write_floor
        script = Path(__file__).parent / "write_floor.py"
        src = self.base / "src.raw"
        runs: dict[str, list[float]] = {"file": [], "memory": []}
        cpu: list[float] = []
        for _ in range(self.args.repeat):
            for kind in runs:
                self.cold()
                out = sh(f"'{self.args.python}' '{script}' '{src}' --kind {kind} "
                         f"--dir '{self.base}'").stdout  # fmt: skip
                runs[kind].append(json.loads(out)["mib_s"])
                if kind == "memory":
                    cpu.append(json.loads(out)["cpu_s"])
        self._write_floor = {k: median(v) for k, v in runs.items()}
        self._write_floor["memory_cpu"] = median(cpu)
        r = Row("4. full overwrite: pyfuse3 write floor (MiB/s)", "—", self._write_floor["file"])
        r.notes = "; ".join(
            x
            for x in (
                "scripts/write_floor.py: the same dd + sync into a pyfuse3 file system that "
                "pwrites each 1 MiB write into one real file on the store's disk, fsync on fsync",
                f"into a preallocated buffer instead (no disk): {self._write_floor['memory']:.0f}",
                f"median of {self.args.repeat}" if self.args.repeat > 1 else "",
            )
            if x
        )
        self.add(r)
        return self._write_floor

    def _overwrite_split(self, store: Path, src: Path) -> str:
        """One more (untimed for the row) overwrite with 1 MiB ``write``s, then ``fsync``, then
        ``close``: where the time of the overwrite goes, and the daemon's CPU seconds. Its load
        sample goes to the overwrite row it explains."""
        self.cold()
        cat_file(src)
        with self.mount(store) as m, open(src, "rb") as f:
            assert m.pid is not None
            cpu0 = proc_cpu(m.pid)
            fd = os.open(m.mnt / ARRAY / "data.raw", os.O_WRONLY)
            try:
                t0 = time.perf_counter()
                while piece := f.read(MiB):
                    os.write(fd, piece)
                t1 = time.perf_counter()
                os.fsync(fd)
                t2 = time.perf_counter()
            finally:
                os.close(fd)
            t3 = time.perf_counter()
            cpu = proc_cpu(m.pid) - cpu0
        return (
            f"split (one more pass, 1 MiB writes): write {t1 - t0:.2f} s, fsync {t2 - t1:.2f} s, "
            f"close {t3 - t2:.2f} s; daemon CPU {cpu:.2f} s"
        )

    # -- 6: bytes fetched for one 4 KiB read of the sharded array
    def shard_fetch(self, v: str, store: Path) -> None:
        cfg = self.cfg
        z, y = min(cfg.shape[0] - 1, cfg.inner[0] + 8), cfg.inner[1] + 8
        off = (z * cfg.shape[1] + y) * cfg.shape[2] * 4
        expected_4k, shards_4k, inner_4k = self._expected_fetch(store, off, 4096)
        self.cold()
        strace_bytes: int | None = None
        with self.mount(store) as m:
            before = m.stats()["arrays"].get(ARRAY, {})
            tracer = shutil.which("strace")
            trace_file = self.base / "strace-shard.txt"
            cmd = [tracer or "true", "-f", "-qq", "-p", str(m.pid), "-e", "trace=pread64",
                   "-o", str(trace_file)]  # fmt: skip
            with traced(cmd, ready_wait=1.0 if tracer else 0):
                fd = os.open(m.mnt / ARRAY / "data.raw", os.O_RDONLY)
                try:
                    os.pread(fd, 4096, off)
                finally:
                    os.close(fd)
                time.sleep(0.5)  # let any read-ahead the daemon started finish
            after = m.stats()["arrays"].get(ARRAY, {})
            if tracer and trace_file.exists():
                strace_bytes = _sum_pread(trace_file)
        fetched = after.get("bytes_fetched", 0) - before.get("bytes_fetched", 0)
        served = after.get("bytes_served", 0) - before.get("bytes_served", 0)
        expected_req, shards_req, inner_req = self._expected_fetch(store, off, max(served, 4096))
        # the same elements through zarr-python (counting store) and tensorstore (its metrics)
        rows = max(1, 1024 // cfg.shape[2])
        sel = (z, slice(y, y + rows), slice(0, min(1024, cfg.shape[2])))
        self.cold()
        a = zarr_counting_array(store)
        _ByteCounter.total = 0
        a[sel]
        zp_bytes = _ByteCounter.total
        self.cold()
        t = ts_open(store)
        b0 = ts_bytes_read()
        t[sel].read().result()
        ts_bytes = ts_bytes_read() - b0
        notes = (
            f"4 KiB at offset {off} touches {shards_4k} shard(s), {inner_4k} inner chunk(s); "
            f"kernel asked zarrfs for {served} B"
        )
        if served > 4096:
            notes += (
                f" (read-ahead: index+inner chunks for that range = {expected_req} B, "
                f"{inner_req} inner chunks)"
            )
        if strace_bytes is not None:
            notes += f"; strace: daemon pread64 total {strace_bytes} B"
        self.add(Row(
            "6. bytes fetched, one 4 KiB read (B)", v, fetched, zp_bytes, ts_bytes,
            f"≤ shard index(es) + touched inner chunk(s) = {expected_4k}", fetched <= expected_4k,
            notes,
        ))  # fmt: skip

    def _expected_fetch(self, store: Path, offset: int, size: int) -> tuple[int, int, int]:
        """(index bytes of the touched shards + stored bytes of the touched inner chunks,
        number of shards, number of inner chunks) for the flat byte range."""
        cfg = self.cfg
        meta = json.loads((store / ARRAY / "zarr.json").read_text())
        sharding = meta["codecs"][0]["configuration"]
        has_crc = any(c["name"] == "crc32c" for c in sharding["index_codecs"])
        per_shard = tuple(s // i for s, i in zip(cfg.shards, cfg.inner, strict=True))
        n_inner = int(np.prod(per_shard))
        index_size = n_inner * 16 + (4 if has_crc else 0)
        e0, e1 = offset // 4, min(cfg.nbytes, offset + size + 3) // 4
        touched: set[tuple[int, ...]] = set()
        row_len = cfg.shape[2]
        for row in range(e0 // row_len, (e1 - 1) // row_len + 1):
            zz, yy = divmod(row, cfg.shape[1])
            x0 = max(e0, row * row_len) - row * row_len
            x1 = min(e1, (row + 1) * row_len) - row * row_len
            for cx in range(x0 // cfg.inner[2], (x1 - 1) // cfg.inner[2] + 1):
                touched.add((zz // cfg.inner[0], yy // cfg.inner[1], cx))
        shards: dict[tuple[int, ...], np.ndarray] = {}
        total = 0
        for c in sorted(touched):
            s = tuple(ci // p for ci, p in zip(c, per_shard, strict=True))
            if s not in shards:
                key = store / ARRAY / "c" / "/".join(map(str, s))
                with open(key, "rb") as f:
                    f.seek(-index_size, os.SEEK_END)
                    raw = f.read(index_size)
                shards[s] = np.frombuffer(raw[: n_inner * 16], "<u8").reshape(*per_shard, 2)
                total += index_size
            local = tuple(ci % p for ci, p in zip(c, per_shard, strict=True))
            total += int(shards[s][local][1])
        return total, len(shards), len(touched)

    # -- 7: listing
    def listing(self) -> None:
        """Cold walks of zarrfs and walks of the pyfuse3 floor, interleaved round by round
        (``--repeat`` rounds; medians), so both columns of the ratio see the same machine."""
        path = self.base.parent / "listing.zarr"
        g, per = self.args.listing_groups, self.args.listing_arrays
        ensure_listing(path, g, per)
        floor_script = Path(__file__).parent / "listing_floor.py"
        t: dict[str, list[float]] = {k: [] for k in ("find", "ls", "ro1", "ro2")}
        floors: dict[str, list[float]] = {"find_s": [], "ls_lR_s": []}
        for _ in range(self.args.repeat):
            self.cold()
            with self.mount(path) as m:
                secs, out = timed(lambda: sh(f"find '{m.mnt}' | wc -l"))
            t["find"].append(secs)
            entries = int(out.stdout.strip())
            self.cold()
            with self.mount(path) as m:
                t["ls"].append(timed(lambda: sh(f"ls -lR '{m.mnt}' > /dev/null"))[0])
            # a read-only mount walked twice: the second walk is answered by the kernel's caches
            self.cold()
            ro = self.mount(path)
            ro.options += ",ro"
            with ro as m:
                t["ro1"].append(timed(lambda: sh(f"find '{m.mnt}' > /dev/null"))[0])
                t["ro2"].append(timed(lambda: sh(f"find '{m.mnt}' > /dev/null"))[0])
            # the same walks over an in-memory pyfuse3 file system of the same shape: the
            # floor, each walk on a fresh mount after dropped caches, as zarrfs's
            for walk, key in (("find", "find_s"), ("ls", "ls_lR_s")):
                self.cold()
                floor_run = json.loads(
                    sh(f"'{self.args.python}' '{floor_script}' --groups {g} --arrays {per} "
                       f"--walk {walk}").stdout
                )  # fmt: skip
                floors[key].append(floor_run[key])
        import zarr

        self.cold()
        t_zp, members = timed(
            lambda: list(zarr.open_group(str(path), mode="r").members(max_depth=None))
        )
        floor = {key: median(values) for key, values in floors.items()}
        t_find, t_ls = median(t["find"]), median(t["ls"])
        t_ro_first, t_ro_again = median(t["ro1"]), median(t["ro2"])
        rounds = (
            f"median of {self.args.repeat} rounds, each a zarrfs walk then the floor's"
            if self.args.repeat > 1
            else ""
        )
        label = f"{g * per:,} arrays"
        for name, secs, note in (
            ("find MNT | wc -l", t_find, f"{entries:,} entries"),
            ("ls -lR MNT", t_ls, ""),
        ):
            key = "find_s" if name.startswith("find") else "ls_lR_s"
            floor_note = (
                f"pyfuse3 floor (in-memory file system of the same shape answering in the event "
                f"loop, scripts/listing_floor.py, a fresh mount after dropped caches): "
                f"{floor[key]:.2f} s"
            )
            note = "; ".join(x for x in (note, floor_note) if x)
            target = f"≤ 1.5× the pyfuse3 floor ({1.5 * floor[key]:.2f} s)"
            r = Row(f"7. list {label}: {name} (s)", "hierarchy", secs, t_zp, None, target,
                    fmt="{:.2f}", higher=False)  # fmt: skip
            r.met = secs <= 1.5 * floor[key]
            r.notes = "; ".join(
                x
                for x in (
                    note,
                    f"zarr-python members(max_depth=None): {len(members):,} nodes",
                    "cold: fresh mount, dropped caches",
                    rounds,
                )
                if x  # fmt: skip
            )
            self.add(r)
        r = Row(f"7. list {label}: second find on an -o ro mount (s)", "hierarchy", t_ro_again,
                None, None, "≤ 0.5 s (the kernel's caches)", fmt="{:.2f}",
                higher=False)  # fmt: skip
        r.met = t_ro_again <= 0.5
        r.notes = "; ".join(
            x for x in (f"the first find on that mount (cold): {t_ro_first:.2f} s", rounds) if x
        )
        self.add(r)

    # -- py-spy profiles (extra untimed passes)
    def profile(self, v: str, store: Path) -> None:
        spy = shutil.which("py-spy") or str(Path(self.args.python).parent / "py-spy")
        if not os.path.exists(spy):
            log("py-spy not found: no profile")
            return
        outdir = self.base / "profiles"
        outdir.mkdir(exist_ok=True)
        rng = np.random.default_rng(11)
        offsets = rng.integers(0, self.cfg.nbytes // 4096, self.args.random_reads) * 4096
        for phase in ("seq", "random"):
            out = outdir / f"{v}-{phase}.txt"
            out.unlink(missing_ok=True)
            drop_caches()
            with self.mount(store) as m:
                cmd = [spy, "record", "-p", str(m.pid), "-o", str(out), "--format", "raw",
                       "-r", str(self.args.profile_rate), "--nonblocking"]  # fmt: skip
                with traced(cmd):
                    if phase == "seq":
                        cat_file(m.mnt / ARRAY / "data.raw")
                    else:
                        self._pread_latencies(m.mnt / ARRAY / "data.raw", offsets)
                        drop_caches()
                        self._pread_latencies(m.mnt / ARRAY / "data.raw", offsets[::-1], True)
            if out.exists():
                self.profiles.append((v, phase, out))


def _sum_pread(trace_file: Path) -> int:
    """Bytes returned by every pread64 in an strace log (whole or ``<... resumed>`` lines)."""
    total = 0
    for line in trace_file.read_text().splitlines():
        if "pread64" not in line or "unfinished" in line:
            continue
        result = re.search(r"= (\d+)$", line.rstrip())
        if result:
            total += int(result.group(1))
    return total


#: leaf frames that mean "waiting for work" (py-spy does not always see these threads as idle)
IDLE_LEAVES = (
    "EpollIOManager.get_events (trio/_core/_io_epoll.py)",  # the trio loop in epoll_wait
    "WorkerThread._work (trio/_core/_thread_cache.py)",  # a trio worker waiting for a job
    "_worker (concurrent/futures/thread.py)",  # an executor thread waiting on its queue
    "Condition.wait (threading.py)",
    "Event.wait (threading.py)",
)


def summarize_profile(path: Path, top: int) -> str:
    """Top functions by self samples (leaf frame) and by inclusive samples (zarrfs frames),
    as shares of the busy samples (idle waits counted apart)."""
    self_t: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = idle = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = []
        for fr in stack.split(";"):
            name, _, loc = fr.partition(" (")
            frames.append(f"{name} ({loc.rsplit(':', 1)[0]})" if loc else name)
        if frames[-1] in IDLE_LEAVES:
            idle += n
            continue
        total += n
        self_t[frames[-1]] += n
        for fr in set(frames):
            if "zarrfs/" in fr:
                incl[fr] += n
    if not total:
        return "(no samples)"
    lines = [
        f"{total} busy samples ({idle} more were threads waiting for work: epoll, idle workers)."
        " Self time:",
        "",
    ]
    lines += [f"- {100 * c / total:5.1f}%  `{f}`" for f, c in self_t.most_common(top)]
    lines += ["", "Inclusive time, zarrfs functions:", ""]
    lines += [f"- {100 * c / total:5.1f}%  `{f}`" for f, c in incl.most_common(top)]
    return "\n".join(lines)


#: the issue's ceiling rule: where what the machine allows here is below the best peer,
#: this share of that ceiling meets a row
CEILING_SHARE = 0.9
CEILING_TARGET = "≥ 1.0× best peer, or ≥ 0.9× the ceiling where the ceiling is below it"


def within_ceiling(rate: float, best_peer: float | None, ceiling: float) -> bool:
    """True if ``ceiling`` is below the best peer and ``rate`` reaches ``CEILING_SHARE`` of it."""
    return best_peer is not None and ceiling < best_peer and rate >= CEILING_SHARE * ceiling


def fromfile_target(
    target: str, met: bool | None, rate: float, best_peer: float | None, plain: float
) -> tuple[str, bool | None]:
    """Row 1's ``numpy.fromfile`` target with its ceiling: one ``read()`` of the whole file into
    fresh memory is bound by the reader itself (its page faults), so a plain file of the same
    bytes read cold the same way, when slower than the best peer, is the ceiling, and ≥ 0.9×
    of it meets the row (the issue's ceiling rule)."""
    if best_peer is None or plain >= best_peer:
        return target, met
    target += f", or ≥ 0.9× the plain file read the same way ({plain:.0f}) where it is below"
    return target, bool(met) or within_ceiling(rate, best_peer, plain)


def probe_summary(samples: list[LoadSample]) -> str:
    """The report's lines on the CPU and memory probes over the whole run."""
    probes = sorted(x.probe_ms for x in samples)
    if not probes:
        return "- CPU probe: not run"
    fresh = sorted(x.memory_mibps for x in samples)
    return (
        f"- CPU probe before each measurement (zlib level 1 over 4 MiB, CPU time; a busy host "
        f"slows this VM's CPUs unseen by its load): {probes[0]:.0f} / {median(probes):.0f} / "
        f"{probes[-1]:.0f} ms (min / median / max of {len(probes)}); each row gives the range "
        "before its runs\n"
        f"- memory probe before each measurement (64 MiB of fresh memory faulted in, one write "
        f"per page; the host backs the memory this VM gave back again on first touch): "
        f"{fresh[0]:.0f} / {median(fresh):.0f} / {fresh[-1]:.0f} MiB/s (min / median / max); "
        "each row gives the range before its runs"
    )


def environment(args: argparse.Namespace, cfg: Config, load_start: str) -> str:
    from importlib.metadata import version

    import tensorstore  # noqa: F401
    import zarr

    try:
        rev = sh(f"git -C '{REPO}' rev-parse --short HEAD").stdout.strip()
        dirty = sh(f"git -C '{REPO}' status --porcelain -- zarrfs").stdout.strip()
        rev += " (+ uncommitted changes in zarrfs/)" if dirty else ""
    except Exception:
        rev = "?"
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    return "\n".join([
        f"- date: {datetime.datetime.now().isoformat(timespec='seconds')}; host: "
        f"{platform.node()}, {os.cpu_count()} CPUs, {mem:.1f} GiB RAM, Linux {platform.release()}",
        f"- zarrfs {rev}; zarr-python {zarr.__version__}; tensorstore {version('tensorstore')}; "
        f"numpy {np.__version__}; numcodecs {version('numcodecs')}; "
        f"Python {platform.python_version()}",
        f"- data: float32 {cfg.shape} = {cfg.nbytes / MiB:.0f} MiB, chunks {cfg.chunks}; sharded: "
        f"shards {cfg.shards} of inner chunks {cfg.inner} (blosc lz4)",
        f"- mount options: -o cache_size={args.cache_size}"
        + (f",{args.mount_options}" if args.mount_options else "")
        + f"; tensorstore random reads use cache_pool total_bytes_limit = {args.cache_size}",
        f"- load average (1/5/15 min) at the start: {load_start}, at the end: {load} "
        "(other work on the machine adds noise)",
        "- cold = `drop_caches` + fresh mount / freshly opened array; throughputs in MiB/s "
        "(higher is better), latencies in µs and listing in s (lower is better)",
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", type=Path, default=Path("/tmp/zarrfs-bench"))
    p.add_argument("--out", type=Path, help="write the markdown report here too")
    p.add_argument("--json", type=Path, help="write the rows as JSON here")
    p.add_argument(
        "--small", action="store_true", help="(32, 512, 512) instead of (128, 1024, 1024)"
    )
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset")
    p.add_argument(
        "--skip",
        default="",
        help="phases to skip: seq,ceiling,random,tiff,overwrite,shard,netcdf,listing,profile",
    )
    p.add_argument("--cache-size", default="512M", help="-o cache_size= for every mount")
    p.add_argument("--mount-options", default="", help="extra -o options")
    p.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="repetitions of each sequential measurement, median reported "
        "(default 3 with --small, else 1)",
    )
    p.add_argument("--random-reads", type=int, default=10_000)
    p.add_argument(
        "--zp-samples",
        type=int,
        default=None,
        help="zarr-python single-element reads per pass (default 100 small, 200 full)",
    )
    p.add_argument(
        "--listing-groups",
        type=int,
        default=None,
        help="groups in the listing hierarchy (default 100; 10 with --small)",
    )
    p.add_argument("--listing-arrays", type=int, default=100)
    p.add_argument("--profile-rate", type=int, default=200, help="py-spy samples per second")
    p.add_argument("--profile-top", type=int, default=10)
    p.add_argument("--python", default=sys.executable, help="interpreter that runs zarrfs")
    p.add_argument(
        "--busy-cpu",
        type=float,
        default=0.25,
        help="before each measurement, wait while others keep more than this fraction of all "
        "CPUs busy; rows measured busy anyway are flagged (default 0.25)",
    )
    p.add_argument(
        "--quiet-wait", type=float, default=30.0, help="seconds to wait for quiet (default 30)"
    )
    args = p.parse_args(argv)  # fmt: skip
    if args.listing_groups is None:
        args.listing_groups = 10 if args.small else 100
    if args.repeat is None:
        args.repeat = 3 if args.small else 1
    if args.zp_samples is None:
        args.zp_samples = 100 if args.small else 200
    variants = [
        ("sharded" if v == "sharding_indexed" else v) for v in args.variants.split(",") if v
    ]
    for v in variants:
        _create_kwargs(v, SMALL)  # validates the name
    skip = {s for s in args.skip.split(",") if s}
    cfg = SMALL if args.small else FULL
    if os.geteuid() != 0:
        log("WARNING: not root: the page cache cannot be dropped")

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGHUP, _on_signal)
    atexit.register(_cleanup_all)
    base = args.workdir / cfg.tag
    gate = LoadGate(args.busy_cpu, args.quiet_wait)
    bench = Bench(args, cfg, base, args.workdir / "mnt", gate=gate)
    started = time.monotonic()
    load_start = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    try:
        stores = ensure_data(cfg, base, variants)
        bench.raw_reference()
        for v in variants:
            log(f"== {v}")
            store = stores[v]
            if "seq" not in skip:
                bench.sequential(v, store)
            if "random" not in skip:
                bench.random_reads(v, store)
            if v == "sharded" and "shard" not in skip:
                bench.shard_fetch(v, store)
            if "ceiling" not in skip:
                bench.ceiling(v, store)
            if "tiff" not in skip:
                bench.tiff_read(v, store)
            if "overwrite" not in skip:
                bench.overwrite(v, store)
            if "netcdf" not in skip:
                bench.netcdf_read(v, store)
            if "profile" not in skip:
                bench.profile(v, store)
        if "listing" not in skip:
            log("== listing")
            bench.listing()
    finally:
        _cleanup_all()
    elapsed = time.monotonic() - started
    report = [
        f"## zarrfs benchmark ({cfg.tag}: {cfg.nbytes / MiB:.0f} MiB per variant)",
        "",
        environment(args, cfg, load_start),
        f"- plain raw file `src.raw`: cold {bench.raw_cold_mibps:.0f} MiB/s (`cat`), "
        f"{bench.raw_np_mibps:.0f} MiB/s (`numpy.fromfile`), page cache "
        f"{bench.raw_warm_mibps:.0f} MiB/s; run took {elapsed:.0f} s",
        probe_summary(gate.all),
        f"- CPU capacity: {os.cpu_count()} CPU-bound processes at once do "
        f"{bench.capacity[0]:.2f} CPUs' worth of work (a loop of {bench.capacity[1]:.2f} s alone "
        f"took {bench.capacity[2]:.2f} s each when run together)",
        "",
        markdown_table(bench.rows),
    ]
    busy = [r for r in bench.rows if r.busy]
    if busy:
        report[4:4] = [
            f"- **{len(busy)} row(s) measured on a busy machine** (others kept more than "
            f"{args.busy_cpu:.0%} of the CPUs busy just before, even after waiting "
            f'{args.quiet_wait:.0f} s): marked "(busy)"; repeat them on a quiet machine'
        ]
    else:
        report[4:4] = [
            f"- every measurement started on a quiet machine (others ≤ {args.busy_cpu:.0%} of "
            "the CPUs over the second before it)"
        ]
    if bench.profiles:
        report += ["", "### py-spy profiles of the daemon (separate, untimed passes)"]
        for v, phase, path in bench.profiles:
            what = (
                "sequential cat"
                if phase == "seq"
                else ("random 4 KiB preads (cold pass, then drop_caches and a FADV_RANDOM pass)")
            )
            report += ["", f"#### {v}, {what} (`{path}`)", "",
                       summarize_profile(path, args.profile_top)]  # fmt: skip
    text = "\n".join(report) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    if args.json:
        args.json.write_text(
            json.dumps([asdict(r) | {"ratio": r.ratio} for r in bench.rows], indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
