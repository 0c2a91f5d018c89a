"""The bench's machinery: shell and timing helpers, its zarrfs mounts, and the state of the
machine before each measurement.

- small helpers: ``log``, ``drop_caches``, ``timed``, ``timed_then_sync``, ``sh``,
  ``read_status``, ``rotated_rounds``, ``pct``, ``cat_file``;
- mounts: ``Mount`` (one zarrfs mount; its daemon found by ``find_daemon_pid``), ``mounted``,
  and ``cleanup_all`` / ``on_signal``, which ``bench.main`` registers at exit and for
  SIGTERM / SIGHUP;
- the daemon's memory: ``PeakRss``;
- the machine's load: ``cpu_busy``, ``cpu_probe``, ``memory_probe``, ``LoadSample``,
  ``LoadGate``;
- tracers: ``traced`` (py-spy, strace).

Invariants: a ``Mount`` is in ``_ACTIVE`` from its mount until it is unmounted, and
``cleanup_all`` unmounts whatever is still there, so no mount outlives the bench (``zarrfs
umount``, then ``fusermount3 -u -z``, then the daemon's own pid is signalled); only processes
the bench started are ever signalled (its mounts' daemons, its tracers). ``LoadGate.settle``
looks ``cpu_busy``, ``cpu_probe`` and ``memory_probe`` up in this module at every call, so
replacing them here (the tests do) is what it sees. This module imports no other bench module
(``bench_machine`` is the bottom of their imports).
"""

from __future__ import annotations

import json
import mmap
import os
import signal
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
MiB = 1 << 20


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


def cat_files(paths: list[Path]) -> None:
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


def cleanup_all() -> None:
    for m in list(_ACTIVE.values()):
        try:
            m.unmount()
        except Exception as exc:
            log(f"cleanup of {m.mnt} failed: {exc}")


def on_signal(signum: int, frame: object) -> None:
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
    #: seconds waited for the CPU probe to come back within ``PROBE_SLOW`` of the fastest
    probe_waited: float = 0.0
    #: the probe was still that slow when the wait ran out
    probe_slow: bool = False


#: a CPU probe this many times slower than the run's fastest means the host is slowing the CPUs
PROBE_SLOW = 1.3


class LoadGate:
    """Before each measurement: wait (up to ``wait`` s in all) until the CPUs are quiet and the
    CPU probe runs at its usual speed, and record how busy the machine was, so every row
    reports its load and rows run busy are flagged.

    The 1-min load average follows the bench's own previous measurement for a minute, so
    "busy" is judged by the CPU time others use while the bench is idle (``cpu_busy``). The
    host of this VM slows its CPUs for spells of seconds with no sign in the guest; a probe
    over ``PROBE_SLOW`` times the fastest of the run is taken again every half second until it
    is not (a measurement started inside such a spell takes its engine more CPU time for the
    same work, whichever engine it is)."""

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
        probe = cpu_probe()
        fastest = min([s.probe_ms for s in self.all if s.probe_ms > 0] + [probe])
        probe_start = time.monotonic()
        while probe > PROBE_SLOW * fastest and time.monotonic() - start < self.wait:
            time.sleep(0.5)
            probe = cpu_probe()
        probe_waited = time.monotonic() - probe_start
        slow = probe > PROBE_SLOW * fastest
        waited = max(0.0, time.monotonic() - start - self.window)
        sample = LoadSample(
            os.getloadavg()[0], busy, waited, probe, memory_probe(), probe_waited, slow
        )
        if busy > self.busy_limit:
            log(f"  busy machine before a measurement: {busy:.0%} of the CPUs (others)")
        if slow:
            log(f"  slow CPUs before a measurement: probe {probe:.0f} ms, fastest {fastest:.0f} ms")
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
