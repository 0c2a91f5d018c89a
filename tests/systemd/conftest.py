"""Fixtures of the systemd/fstab tests: a real store, a mount point, and teardown that stops
every daemon a test started (by its pid) and detaches every mount it left, whatever happened."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from systemd_helpers import force_unmount, make_store, stop_pid

from zarrfs.fuse import runtime


@dataclass
class Cleanup:
    """What a test started: stopped and detached at teardown, processes first."""

    procs: list[subprocess.Popen] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    mountpoints: list[Path] = field(default_factory=list)

    def popen(self, proc: subprocess.Popen) -> subprocess.Popen:
        self.procs.append(proc)
        return proc

    def daemon_of(self, mountpoint: Path) -> None:
        """Remember the daemon now serving ``mountpoint`` (however it was started)."""
        pid = runtime.find_daemon(str(mountpoint))
        if pid is not None:
            self.pids.append(pid)

    def run(self) -> None:
        for mountpoint in self.mountpoints:
            self.daemon_of(mountpoint)
        for proc in self.procs:
            if proc.poll() is None:
                stop_pid(proc.pid, self.mountpoints)
            proc.poll()
        for pid in self.pids:
            stop_pid(pid, self.mountpoints)
        for mountpoint in self.mountpoints:
            force_unmount(mountpoint)


@pytest.fixture(autouse=True)
def runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Pid and log files of this test's daemons, seen alike by the test and its children."""
    path = tmp_path / "run"
    monkeypatch.setenv("ZARRFS_RUNTIME_DIR", str(path))
    return path


@pytest.fixture
def cleanup() -> Iterator[Cleanup]:
    done = Cleanup()
    try:
        yield done
    finally:
        done.run()


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, np.ndarray]:
    root = tmp_path / "ocean.zarr"
    return root, make_store(root)


@pytest.fixture
def mountpoint(tmp_path: Path, cleanup: Cleanup) -> Path:
    path = tmp_path / "mnt"
    path.mkdir()
    cleanup.mountpoints.append(path)
    return path
