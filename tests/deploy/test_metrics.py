"""``-o metrics=ADDR:PORT``: a Prometheus endpoint on that address only, off by default; the
``dirty`` block of stats.json and ``zarrfs stats`` (real mounts, scraped over loopback)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import zarr
from prometheus_client.parser import text_string_to_metric_families

from zarrfs.fuse.metrics import CONTENT_TYPE
from zarrfs.tools import stats as stats_tool

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[str, list]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as reply:
        assert reply.headers["Content-Type"] == CONTENT_TYPE
        text = reply.read().decode()
    samples: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def value(samples: dict[str, list], name: str, **labels: str) -> float:
    found = [s.value for s in samples[name] if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, samples.get(name))
    return float(found[0])


def listening_ports(pid: int) -> set[int]:
    """TCP ports ``pid`` listens on (its socket inodes matched against /proc/net/tcp*)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            for line in list(f)[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, np.ndarray]:
    path = tmp_path / "store.zarr"
    expected = np.arange(32 * 32, dtype="<u4").reshape(32, 32)
    zarr.create_array(path, shape=expected.shape, chunks=(8, 32), dtype="<u4")[:] = expected
    return path, expected


def test_metrics_endpoint(store, mounter, capsys) -> None:
    path, expected = store
    port = free_port()
    m = mounter(path, f"metrics=127.0.0.1:{port}", "writeback=0")
    assert listening_ports(m.pid) == {port}
    raw = m.path / "data.raw"
    assert raw.read_bytes() == expected.tobytes()
    assert not (m.path / "missing").exists()
    held = open(raw, "r+b", buffering=0)
    try:
        held.write(b"\xff" * 8 * 32 * 4 * 2)  # two whole chunks, left dirty (no write-back)
        samples = scrape(port)
        assert value(samples, "zarrfs_bytes_served_total") >= expected.nbytes
        assert value(samples, "zarrfs_array_bytes_written_total", array="/") == 2048
        assert value(samples, "zarrfs_dirty_bytes") == 2048
        assert value(samples, "zarrfs_dirty_objects") == 2
        assert value(samples, "zarrfs_writes_in_flight") == 0
        assert value(samples, "zarrfs_oldest_dirty_age_seconds") > 0
        assert value(samples, "zarrfs_chunk_cache_capacity_bytes") > 0
        # the block pool: counters as the mount's stats.json has them
        pool = json.loads((m.path / ".zarrfs" / "stats.json").read_bytes())["buffers"]
        assert value(samples, "zarrfs_buffer_idle_limit_bytes") == pool["limit"]
        assert value(samples, "zarrfs_buffer_blocks_created_total") <= pool["blocks_created"]
        assert value(samples, "zarrfs_buffer_blocks_reused_total") >= 0
        assert value(samples, "zarrfs_buffer_idle_bytes") >= 0
        reads = value(samples, "zarrfs_operation_duration_seconds_count", op="read")
        assert reads >= 1
        assert value(samples, "zarrfs_operation_duration_seconds_bucket", op="read",
                     le="+Inf") == reads  # fmt: skip
        assert value(samples, "zarrfs_operation_duration_seconds_sum", op="read") > 0
        assert value(samples, "zarrfs_operation_errors_total", op="lookup", errno="ENOENT") >= 1

        doc = json.loads((m.path / ".zarrfs" / "stats.json").read_bytes())
        assert doc["dirty"]["bytes"] == 2048 and doc["dirty"]["objects"] == 2
        # in this process: a child would close its inherited copy of `held`, and that close
        # flushes the file (a FUSE flush request), as any close does
        assert stats_tool.main([str(m.path)]) == 0
        shown = capsys.readouterr().out
        assert "unstored        2.0 KiB in 2 objects (0 being written), oldest" in shown
    finally:
        held.close()  # flushes
    samples = scrape(port)
    assert value(samples, "zarrfs_dirty_bytes") == 0
    assert value(samples, "zarrfs_dirty_objects") == 0
    assert value(samples, "zarrfs_bytes_stored_total") > 0

    with pytest.raises(urllib.error.HTTPError, match="404"):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30)
    with pytest.raises(OSError):  # that address only: not on another loopback address
        socket.create_connection(("127.0.0.2", port), timeout=5).close()
    assert m.unmount() == 0


def test_metrics_are_off_by_default(store, mounter) -> None:
    m = mounter(store[0])
    assert listening_ports(m.pid) == set()
    assert m.unmount() == 0


def test_an_address_in_use_fails_the_mount(store, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        mnt = tmp_path / "mnt"
        mnt.mkdir()
        result = subprocess.run(
            [sys.executable, "-m", "zarrfs", "mount", str(store[0]), str(mnt),
             "-o", f"metrics=127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=120,
            env={**os.environ, "ZARRFS_RUNTIME_DIR": str(tmp_path / "run")},
        )  # fmt: skip
    assert result.returncode == 1
    assert f"zarrfs: cannot serve metrics on 127.0.0.1:{port}: Address already in use" in (
        result.stderr
    )
    assert not os.path.ismount(mnt)
