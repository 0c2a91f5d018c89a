"""The CSI pattern: a privileged helper mounts ``/dev/fuse``, an unprivileged daemon serves it.

The test process is the helper (root): it opens ``/dev/fuse``, calls mount(2) on a directory
with ``fd=N,rootmode=40000,user_id=0,group_id=0`` (what a CSI driver or ``mount.fuse3 -o
drop_privileges`` does) and starts ``zarrfs mount STORE /dev/fd/N`` as ``nobody`` with no
capabilities, passing it the descriptor. The daemon runs detached, as ``zarrfs mount`` always
does without ``-f``, and the command returns once the mount answers. Reads and writes go through
the mount; ``zarrfs stats`` and ``zarrfs umount`` work on it; the daemon exits after the unmount
having stored every write.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zarr
from fstab import mount_fstab
from unprivileged import REPO, nobody_command

from zarrfs.fuse.runtime import mount_info

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0
    or not os.path.exists("/dev/fuse")
    or not (shutil.which("setpriv") and shutil.which("unshare")),
    reason="needs root, /dev/fuse, setpriv and unshare",
)

NOBODY = 65534


def fuse_mount(fd: int, mountpoint: Path) -> None:
    """mount(2) of a /dev/fuse descriptor, as a privileged helper does."""
    libc = ctypes.CDLL(None, use_errno=True)
    data = f"fd={fd},rootmode=40000,user_id=0,group_id=0".encode()
    if libc.mount(b"zarrfs-csi", os.fsencode(mountpoint), b"fuse.zarrfs", 0, data) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {mountpoint}: {os.strerror(errno)}")


def daemons_serving(fd_path: str, store: Path) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            args = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if any(os.fsencode(fd_path) in a for a in args) and os.fsencode(str(store)) in args:
            if b"setpriv" not in args and b"sh" not in args and b"-c" not in args:
                found.append(int(entry))
    return found


def status_fields(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory nobody can use (pytest's tmp_path is private to root)."""
    base = Path(tempfile.mkdtemp(prefix="zarrfs-csi-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        if mount_info(str(base / "mnt")) is not None:
            subprocess.run(["umount", "-l", str(base / "mnt")], check=False)
        shutil.rmtree(base, ignore_errors=True)


def test_unprivileged_daemon_serves_a_descriptor(shared_dir: Path) -> None:
    store, mnt, run = shared_dir / "store.zarr", shared_dir / "mnt", shared_dir / "run"
    expected = np.arange(40 * 30, dtype="<u2").reshape(40, 30)
    zarr.create_array(store, shape=expected.shape, chunks=(8, 16), dtype="<u2")[:] = expected
    subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(store)], check=True)
    for d in (mnt, run, shared_dir / "stash"):
        d.mkdir(mode=0o777)
        d.chmod(0o777)

    fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    daemon_pids: list[int] = []
    try:
        fuse_mount(fd, mnt)
        fd_path = f"/dev/fd/{fd}"
        env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO),
               "ZARRFS_RUNTIME_DIR": str(run), "HOME": "/nonexistent"}  # fmt: skip
        command = [sys.executable, "-m", "zarrfs", "mount", str(store), fd_path]
        result = subprocess.run(
            nobody_command(command, str(mnt), str(shared_dir / "stash")),
            pass_fds=(fd,), env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        os.close(fd)  # the helper's copy: from now on the daemon alone holds the connection
        fd = -1
        assert result.returncode == 0, result.stderr
        daemon_pids = daemons_serving(fd_path, store)
        assert len(daemon_pids) == 1, daemon_pids
        status = status_fields(daemon_pids[0])
        assert status["Uid"].split()[:2] == [str(NOBODY)] * 2
        assert int(status["CapEff"], 16) == 0 and int(status["CapBnd"], 16) == 0

        data = mnt / "data.raw"
        assert data.read_bytes() == expected.tobytes()
        with open(data, "r+b", buffering=0) as f:
            f.seek(2 * 30 * 5)
            f.write(np.full(30, 4242, dtype="<u2").tobytes())
        expected[5] = 4242
        assert np.array_equal(np.load(mnt / "data.npy"), expected)
        stats = subprocess.run(
            [sys.executable, "-m", "zarrfs", "stats", str(mnt)],
            capture_output=True, text=True, cwd=REPO, timeout=60,
        )  # fmt: skip
        assert stats.returncode == 0 and f"file://{store}" in stats.stdout, stats

        with open(data, "r+b", buffering=0) as f:  # left dirty: only umount's flush stores it
            f.write(np.full(30, 7, dtype="<u2").tobytes())
        expected[0] = 7
        gone = subprocess.run(
            [sys.executable, "-m", "zarrfs", "umount", str(mnt)],
            capture_output=True, text=True, cwd=REPO, timeout=120,
        )  # fmt: skip
        assert gone.returncode == 0, gone.stderr
        assert np.array_equal(zarr.open_array(store)[:], expected)  # stored before umount returned
        deadline = time.monotonic() + 30
        while os.path.exists(f"/proc/{daemon_pids[0]}") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.path.exists(f"/proc/{daemon_pids[0]}"), "the daemon did not exit"
        assert mount_info(str(mnt)) is None
        logs = "".join(p.read_text() for p in run.glob("*.log"))
        assert "unmounted /dev/fd/" in logs and " ERROR " not in logs, logs
    finally:
        if fd >= 0:
            os.close(fd)
        if mount_info(str(mnt)) is not None:
            subprocess.run(["umount", "-l", str(mnt)], check=False)
        for pid in daemon_pids:
            if os.path.exists(f"/proc/{pid}"):
                os.kill(pid, 9)


def test_fstab_drop_privileges(tmp_path: Path) -> None:
    """fstab's form of the pattern: mount.fuse3 -o drop_privileges opens /dev/fuse, mounts it
    and runs ``zarrfs STORE /dev/fd/N`` with every capability dropped."""
    store, mnt = tmp_path / "store.zarr", tmp_path / "mnt"
    mnt.mkdir()
    expected = np.arange(16 * 16, dtype="<i2").reshape(16, 16)
    zarr.create_array(store, shape=expected.shape, chunks=(8, 8), dtype="<i2")[:] = expected
    pid = None
    try:
        result = mount_fstab(str(store), mnt, "drop_privileges,_netdev", tmp_path)
        assert result.returncode == 0, result.stderr
        found = [p for p in daemons_serving("", store) if p != os.getpid()]
        pids = [p for p in found if b"/dev/fd/" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert len(pids) == 1, found
        pid = pids[0]
        status = status_fields(pid)
        assert int(status["CapEff"], 16) == 0 and int(status["CapBnd"], 16) == 0
        with open(mnt / "data.raw", "r+b", buffering=0) as f:
            assert f.read() == expected.tobytes()
            f.seek(0)
            f.write(np.full(16, 3, dtype="<i2").tobytes())
        gone = subprocess.run(
            [sys.executable, "-m", "zarrfs", "umount", str(mnt)],
            capture_output=True, text=True, cwd=REPO, timeout=120,
        )  # fmt: skip
        assert gone.returncode == 0, gone.stderr
        expected[0] = 3
        assert np.array_equal(zarr.open_array(store)[:], expected)
        deadline = time.monotonic() + 30
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.path.exists(f"/proc/{pid}"), "the daemon did not exit"
        assert mount_info(str(mnt)) is None
    finally:
        if mount_info(str(mnt)) is not None:
            subprocess.run(["umount", "-l", str(mnt)], check=False)
        if pid is not None and os.path.exists(f"/proc/{pid}"):
            os.kill(pid, 9)
