"""Liveness: the mount answers (SECURITY.md §5).

- A store that accepted a request and never answers gives EIO within ``-o timeout=`` while the
  other arrays of the mount keep answering at normal speed, and the mount recovers when the
  store answers again.
- A watchdog: several threads run random operations (reads, writes, fsync, stat, listings,
  xattrs, metadata views) for ~15 s against a store with random injected errors and delays; no
  single operation may take longer than a bound.
"""

from __future__ import annotations

import errno
import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from reliability_helpers import FaultPlan, errno_of, pread, write_array, write_group

pytestmark = pytest.mark.timeout(180)

TIMEOUT = 2.0  # -o timeout=
CHUNK = 256  # elements (float32): 1 KiB chunks, so one read spans many chunks
N = 64 * CHUNK


def make_store(root: Path, names: tuple[str, ...]) -> dict[str, bytes]:
    write_group(root)
    want = {}
    for i, name in enumerate(names):
        data = np.arange(N, dtype="<f4") + 1000 * i
        write_array(root, name, data, (CHUNK,))
        want[name] = data.tobytes()
    return want


def timed(fn: Any) -> tuple[float, Any]:
    start = time.monotonic()
    try:
        result = fn()
    except OSError as exc:
        result = exc
    return time.monotonic() - start, result


def test_hung_array_does_not_stall_the_others(
    tmp_path: Path, faulty_mount: Any, plan: FaultPlan
) -> None:
    store = tmp_path / "store"
    want = make_store(store, ("slow", "fast1", "fast2"))
    m = faulty_mount(store, f"timeout={TIMEOUT:g}", "prefetch=0")
    plan.write([{"op": "get", "key": "^slow/c/", "action": "hang"}])
    try:
        slow = m.path / "slow" / "data.raw"
        # a multi-chunk read of the hung array: EIO once the deadline has passed, not later
        for offset in (0, 40 * 1024, 20 * 1024):
            took, result = timed(lambda o=offset: pread(slow, o, 16 * 1024))
            assert isinstance(result, OSError) and result.errno == errno.EIO, result
            assert took < TIMEOUT + 1.5, f"EIO after {took:.1f} s (deadline {TIMEOUT} s)"
        assert plan.fired("get")
        # meanwhile the other arrays answer at once, including reads spanning many chunks
        for name in ("fast1", "fast2"):
            raw = m.path / name / "data.raw"
            for offset, size in ((0, 64 * 1024), (7 * 1024, 20 * 1024), (0, N * 4)):
                took, result = timed(lambda r=raw, o=offset, n=size: pread(r, o, n))
                assert result == want[name][offset : offset + size], (name, offset, result)
                assert took < TIMEOUT * 0.75, f"{name} took {took:.1f} s while slow hangs"
        took, result = timed(lambda: sorted(os.listdir(m.path)))
        assert result == [
            ".zarrfs", "attributes.json", "fast1", "fast2", "group.nc", "slow", "zarr.json"
        ]  # fmt: skip
        assert took < TIMEOUT * 0.75, f"listing took {took:.1f} s while slow hangs"
        took, result = timed(lambda: os.stat(m.path / "fast2" / "data.raw").st_size)
        assert result == N * 4 and took < TIMEOUT * 0.75
    finally:
        plan.clear()  # the store answers again
    # the hung requests end (StoreTimeout), the array reads again
    time.sleep(0.3)
    assert pread(m.path / "slow" / "data.raw", 0, 64 * 1024) == want["slow"][: 64 * 1024]
    assert m.proc.poll() is None


def test_hang_in_flush_and_metadata_is_bounded(
    tmp_path: Path, faulty_mount: Any, plan: FaultPlan
) -> None:
    """A store whose writes hang: fsync gives EIO within the flush deadline (10x timeout);
    metadata reads that hang give EIO within the request deadline."""
    store = tmp_path / "store"
    want = make_store(store, ("a", "b"))
    m = faulty_mount(store, "timeout=0.5", "writeback=0", "attr_timeout=0")
    plan.write([
        {"op": "get", "key": "^b/zarr.json$", "action": "hang"},
        {"op": "set", "key": "^a/", "action": "hang"},
    ])  # fmt: skip
    try:
        fd = os.open(m.path / "a" / "data.raw", os.O_RDWR)
        try:
            os.pwrite(fd, b"\x01" * CHUNK * 4, 0)  # not the fill value: a set, not a delete
            took, result = timed(lambda: os.fsync(fd))
            assert isinstance(result, OSError) and result.errno == errno.EIO, result
            assert took < 0.5 * 10 + 2, took
        finally:
            plan.write([{"op": "get", "key": "^b/zarr.json$", "action": "hang"}])  # set answers
            errno_of(lambda: os.close(fd))
        (m.path / ".zarrfs" / "drop_caches").write_text("1")
        took, result = timed(lambda: (m.path / "b" / "zarr.json").read_bytes())
        assert isinstance(result, OSError) and result.errno in (errno.EIO, errno.ENOENT), result
        assert took < 0.5 * 3 + 2, took
    finally:
        plan.clear()
    time.sleep(0.3)
    assert pread(m.path / "b" / "data.raw", 0, 4096) == want["b"][:4096]
    assert m.proc.poll() is None


# --------------------------------------------------------------------------- watchdog

WATCHDOG_SECONDS = 15.0
WORKERS = 4
#: no single operation may take longer (the request deadline is 3 s, flushes get 10x: far
#: below this only if nothing stalls; injected delays are 0.3 s)
STALL_BOUND = 8.0


def test_watchdog_random_operations(tmp_path: Path, faulty_mount: Any, plan: FaultPlan) -> None:
    store = tmp_path / "store"
    names = ("w0", "w1", "w2")
    make_store(store, names)
    write_array(store, "sh", np.arange(64 * 64, dtype="<u2").reshape(64, 64), (32, 32), [
        {"name": "sharding_indexed", "configuration": {
            "chunk_shape": [8, 8],
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                       {"name": "zstd", "configuration": {"level": 1, "checksum": False}}],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                             {"name": "crc32c"}]}}])  # fmt: skip
    m = faulty_mount(store, "timeout=3", "writeback=1", "cache_size=2M")
    plan.write([
        {"op": "*", "key": "", "action": "raise", "error": "StoreError", "probability": 0.03},
        {"op": "*", "key": "", "action": "sleep", "seconds": 0.3, "probability": 0.02},
        {"op": "decode", "key": "", "action": "raise", "error": "ValueError",
         "probability": 0.02},
    ])  # fmt: skip
    mnt = m.path
    arrays = (*names, "sh")
    worst: list[tuple[float, str]] = []
    failures: list[str] = []
    stop = time.monotonic() + WATCHDOG_SECONDS

    def one_op(rng: random.Random) -> tuple[str, Any]:
        name = rng.choice(arrays)
        raw = mnt / name / "data.raw"
        size = os.stat(raw).st_size
        kind = rng.choice(["read", "read", "write", "fsync", "stat", "listdir", "xattr",
                           "metadata", "info", "chunks", "flush"])  # fmt: skip
        off = rng.randrange(size)
        n = rng.randrange(1, 64 * 1024)
        if kind == "read":
            return kind, lambda: pread(raw, off, n, direct=rng.random() < 0.5)
        if kind == "write":

            def write() -> None:
                fd = os.open(raw, os.O_WRONLY)
                try:
                    os.pwrite(fd, os.urandom(min(n, size - off)), off)
                finally:
                    os.close(fd)

            return kind, write
        if kind == "fsync":

            def fsync() -> None:
                fd = os.open(raw, os.O_RDWR)
                try:
                    os.pwrite(fd, b"\x01\x02", min(off, size - 2))
                    os.fsync(fd)
                finally:
                    os.close(fd)

            return kind, fsync
        if kind == "stat":
            return kind, lambda: os.stat(raw)
        if kind == "listdir":
            return kind, lambda: os.listdir(mnt / name)
        if kind == "xattr":
            return kind, lambda: os.getxattr(raw, "user.zarr.shape")
        if kind == "metadata":
            return kind, lambda: (mnt / name / "zarr.json").read_bytes()
        if kind == "info":
            return kind, lambda: (mnt / name / "info.json").read_bytes()
        if kind == "chunks":
            return kind, lambda: os.listdir(mnt / name / "chunks")[:10]
        return kind, lambda: (mnt / ".zarrfs" / "flush").write_text("1")

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        while time.monotonic() < stop:
            try:
                kind, fn = one_op(rng)
            except OSError:
                continue  # the stat choosing the op met an injected error
            took, result = timed(fn)
            worst.append((took, kind))
            if isinstance(result, OSError) and result.errno not in (errno.EIO, errno.ENOENT):
                failures.append(f"{kind}: {result}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WATCHDOG_SECONDS + 60)
    assert not any(t.is_alive() for t in threads), "a worker is stuck in an operation"
    plan.clear()
    slowest = max(worst)
    assert slowest[0] < STALL_BOUND, f"{slowest[1]} took {slowest[0]:.1f} s"
    assert len(worst) > 200, f"only {len(worst)} operations in {WATCHDOG_SECONDS} s"
    assert not failures, failures[:5]
    assert m.proc.poll() is None
    # with the faults gone, everything answers
    for name in arrays:
        assert (
            len((mnt / name / "data.raw").read_bytes()) == os.stat(mnt / name / "data.raw").st_size
        )
