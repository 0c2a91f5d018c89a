"""A daemon killed with SIGKILL (a crash, the OOM killer) leaves a dead mount; the next start
must serve the mount point again. zarrfs@.service does it with its ExecStartPre, run here by
hand as systemd runs it; ``-o auto_unmount`` does it with fusermount3's watchdog. Both are tried
as is and inside the unit's sandbox (hardened_exec.py), which the watchdog must get through.

(That the watchdog detaches the mount at all is tests/fuse/test_fuse_cli.py's
test_auto_unmount_cleans_up_after_a_killed_daemon; here the next start is what counts.)"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
from systemd_helpers import (
    ARRAY,
    SHAPE,
    SYSTEMD_PATH,
    exec_start,
    exec_start_pre,
    hardened_prefix,
    is_mounted,
    require,
    wait_for,
    wait_until_live,
    zarrfs_env,
)

pytestmark = pytest.mark.timeout(180)


def start(
    tmp_path: Path, config: dict[str, str], prefix: list[str], cleanup, name: str
) -> tuple[subprocess.Popen, Path]:
    """The unit's ExecStart (no NOTIFY_SOCKET: READY=1 goes nowhere)."""
    log = tmp_path / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*prefix, *exec_start(config)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out,
            env=zarrfs_env(tmp_path, PATH=SYSTEMD_PATH),
        )  # fmt: skip
    return cleanup.popen(proc), log


def serves(mountpoint: Path, model: np.ndarray) -> bool:
    raw = mountpoint / ARRAY / "data.raw"
    return np.array_equal(np.fromfile(raw, dtype="<u2").reshape(SHAPE), model)


def sandbox_prefix(tmp_path: Path, sandbox: str) -> list[str]:
    if sandbox == "plain":
        return []
    require("systemd-analyze")
    return hardened_prefix(tmp_path)


@pytest.mark.parametrize("sandbox", ["plain", "hardened"])
def test_exec_start_pre_clears_the_dead_mount_of_a_killed_daemon(
    tmp_path: Path, store, mountpoint: Path, cleanup, sandbox: str
) -> None:
    root, model = store
    prefix = sandbox_prefix(tmp_path, sandbox)
    config = {"STORE": str(root), "MOUNTPOINT": str(mountpoint), "OPTIONS": "log_level=info"}
    first, log = start(tmp_path, config, prefix, cleanup, "first")
    wait_until_live(mountpoint, first, log)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    assert is_mounted(mountpoint)
    with pytest.raises(OSError) as dead:
        os.statvfs(mountpoint)
    assert dead.value.errno == errno.ENOTCONN

    # what Restart=on-failure would run next, without the cleanup: refused
    second, log = start(tmp_path, config, prefix, cleanup, "second")
    assert second.wait(timeout=60) == 1
    assert "already a mount point" in log.read_text()

    pre = exec_start_pre(config, prefix)
    assert pre.returncode == 0, pre.stderr
    assert f"detaching the dead zarrfs mount on {mountpoint}" in pre.stdout
    assert not is_mounted(mountpoint)

    third, log = start(tmp_path, config, prefix, cleanup, "third")
    wait_until_live(mountpoint, third, log)
    assert serves(mountpoint, model)
    third.send_signal(signal.SIGTERM)
    assert third.wait(timeout=60) == 0
    assert not is_mounted(mountpoint)


def test_exec_start_pre_leaves_live_and_foreign_mounts_alone(
    tmp_path: Path, store, mountpoint: Path, cleanup
) -> None:
    root, model = store
    config = {"STORE": str(root), "MOUNTPOINT": str(mountpoint), "OPTIONS": ""}
    nothing = exec_start_pre(config)
    assert (nothing.returncode, nothing.stdout, nothing.stderr) == (0, "", "")

    daemon, log = start(tmp_path, config, [], cleanup, "live")
    wait_until_live(mountpoint, daemon, log)
    live = exec_start_pre(config)
    assert (live.returncode, live.stdout) == (0, "")
    assert daemon.poll() is None and serves(mountpoint, model)  # untouched: still serving

    other = tmp_path / "tmpfs"
    other.mkdir()
    cleanup.mountpoints.append(other)
    subprocess.run(["mount", "-t", "tmpfs", "zarrfs-test", str(other)], check=True)
    foreign = exec_start_pre({**config, "MOUNTPOINT": str(other)})
    assert (foreign.returncode, foreign.stdout) == (0, "")
    assert is_mounted(other)
    subprocess.run(["umount", str(other)], check=True)


@pytest.mark.parametrize("sandbox", ["plain", "hardened"])
def test_auto_unmount_lets_the_next_start_serve_again(
    tmp_path: Path, store, mountpoint: Path, cleanup, sandbox: str
) -> None:
    root, model = store
    prefix = sandbox_prefix(tmp_path, sandbox)
    config = {"STORE": str(root), "MOUNTPOINT": str(mountpoint), "OPTIONS": "auto_unmount"}
    first, log = start(tmp_path, config, prefix, cleanup, "first")
    wait_until_live(mountpoint, first, log)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    # fusermount3's watchdog detaches it; under load it may queue behind other unmounts
    wait_for(lambda: not is_mounted(mountpoint), 30, "fusermount3 to detach the dead mount")

    second, log = start(tmp_path, config, prefix, cleanup, "second")
    wait_until_live(mountpoint, second, log)
    assert serves(mountpoint, model)
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=60) == 0
    assert not is_mounted(mountpoint)
