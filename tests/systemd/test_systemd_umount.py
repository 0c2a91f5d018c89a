"""Unmounting never loses dirty data: a lazy unmount (``fusermount3 -u -z``, what a stop with
files still open amounts to) detaches the mount at once, and the daemon flushes and exits 0
after the last close; ``zarrfs umount`` returns only once that has happened.

(That ``zarrfs umount`` waits for a slow final flush is tests/fuse/test_fuse_cli.py's
test_mount_returns_when_live_and_umount_waits_for_the_daemon.)"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from systemd_helpers import (
    ARRAY,
    SHAPE,
    Holder,
    daemon_pid,
    is_mounted,
    read_store,
    wait_for,
    wait_until_live,
    zarrfs_env,
)

from zarrfs.fuse import runtime

pytestmark = pytest.mark.timeout(120)

PATCH = np.arange(100, 160, dtype="<u2")
OFFSET = 7 * SHAPE[1] + 40  # elements; spans chunk rows and columns


def hold(mountpoint: Path, model: np.ndarray, cleanup) -> tuple[Holder, np.ndarray]:
    """Write PATCH into data.raw from a process that keeps the file open; the expected array."""
    holder = Holder(mountpoint / ARRAY / "data.raw", PATCH.tobytes(), OFFSET * 2)
    cleanup.procs.append(holder.proc)
    expected = model.copy()
    expected.reshape(-1)[OFFSET : OFFSET + PATCH.size] = PATCH
    return holder, expected


def test_lazy_fusermount_flushes_after_the_last_close(
    tmp_path: Path, store, mountpoint: Path, cleanup
) -> None:
    root, model = store
    log = tmp_path / "daemon.log"
    with open(log, "wb") as out:
        proc = cleanup.popen(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "zarrfs",
                    "mount",
                    str(root),
                    str(mountpoint),
                    "-f",
                    "-o",
                    "writeback=3600",
                ],
                stdout=out,
                stderr=out,
                env=zarrfs_env(tmp_path),
            )  # fmt: skip
        )
    wait_until_live(mountpoint, proc, log)
    holder, expected = hold(mountpoint, model, cleanup)
    assert np.array_equal(read_store(root), model)  # the write is dirty: only in the daemon
    subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], check=True, timeout=30)
    assert not is_mounted(mountpoint)  # detached at once
    time.sleep(0.5)
    assert proc.poll() is None  # ... but the daemon still serves the open file
    assert np.array_equal(read_store(root), model)
    holder.close()  # close() returns 0 only once the data is in the store
    assert np.array_equal(read_store(root), expected)
    assert proc.wait(timeout=60) == 0, log.read_text()  # the kernel ended the session


def test_zarrfs_umount_lazy_returns_once_the_daemon_flushed_and_exited(
    tmp_path: Path, store, mountpoint: Path, cleanup
) -> None:
    root, model = store
    env = zarrfs_env(tmp_path)
    mount = subprocess.run(
        [sys.executable, "-m", "zarrfs", "mount", str(root), str(mountpoint), "-o",
         "writeback=3600"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert mount.returncode == 0, mount.stderr
    pid = daemon_pid(mountpoint)
    cleanup.pids.append(pid)
    holder, expected = hold(mountpoint, model, cleanup)
    umount = cleanup.popen(
        subprocess.Popen(
            [sys.executable, "-m", "zarrfs", "umount", "--lazy", str(mountpoint)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )  # fmt: skip
    )
    wait_for(lambda: not is_mounted(mountpoint), 30, "the lazy unmount")
    time.sleep(0.5)
    assert umount.poll() is None  # waiting: the daemon still serves the open file
    assert runtime.process_alive(pid)
    assert np.array_equal(read_store(root), model)
    holder.close()
    assert umount.wait(timeout=60) == 0, umount.communicate()[1]
    assert not runtime.process_alive(pid)  # flushed and exited before umount returned
    assert np.array_equal(read_store(root), expected)
