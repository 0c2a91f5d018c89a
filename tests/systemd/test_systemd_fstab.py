"""fstab type ``fuse.zarrfs`` for real: ``mount -t fuse.zarrfs STORE MNT -o ...`` goes through
mount(8) and /sbin/mount.fuse3, which runs ``zarrfs STORE MNT -o OPTS`` from root's PATH
(/usr/local/bin/zarrfs, linked by scripts/setup.sh). ``mount`` returns once the mount answers;
``umount`` makes the daemon flush and exit 0."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from systemd_helpers import (
    ARRAY,
    HERE,
    INSTALLED_ZARRFS,
    SHAPE,
    VENV_ZARRFS,
    daemon_pid,
    is_mounted,
    require,
)

pytestmark = pytest.mark.timeout(120)

#: what an fstab line may carry: zarrfs' options and mount(8)'s/systemd's generic ones
FSTAB_OPTIONS = (
    "ro,allow_other,_netdev,nofail,x-systemd.automount,x-systemd.idle-timeout=10min,"
    "comment=zarrfs,noatime,auto_unmount,log_level=debug"
)


class Subreaper:
    """subreaper.py: runs commands and collects the exit status of the daemons they leave."""

    def __init__(self, cleanup) -> None:
        self.proc = cleanup.popen(
            subprocess.Popen(
                [sys.executable, str(HERE / "subreaper.py")],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )  # fmt: skip
        )

    def _ask(self, request: dict) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def run(self, *argv: str) -> dict:
        return self._ask({"run": list(argv), "env": dict(os.environ)})

    def wait(self, pid: int, timeout: float) -> dict:
        return self._ask({"wait": pid, "timeout": timeout})


@pytest.fixture
def zarrfs_on_path() -> Iterator[None]:
    """/usr/local/bin/zarrfs -> this checkout, as scripts/setup.sh leaves it; a missing or
    dangling link is pointed here for the test and put back afterwards."""
    require("mount.fuse3", "findmnt")
    link = Path(INSTALLED_ZARRFS)
    previous = os.readlink(link) if link.is_symlink() else None
    if link.exists():
        if os.path.realpath(link) != os.path.realpath(VENV_ZARRFS):
            pytest.skip(f"{link} is not this checkout's zarrfs (run scripts/setup.sh as root)")
        yield
        return
    link.unlink(missing_ok=True)
    link.symlink_to(VENV_ZARRFS)
    try:
        yield
    finally:
        link.unlink()
        if previous is not None:
            link.symlink_to(previous)


def test_mount_t_fuse_zarrfs_is_live_on_return_and_umount_ends_the_daemon(
    store, mountpoint: Path, cleanup, zarrfs_on_path
) -> None:
    root, model = store
    reaper = Subreaper(cleanup)
    cleanup.mountpoints.append(mountpoint)
    mounted = reaper.run(
        "mount", "-t", "fuse.zarrfs", str(root), str(mountpoint), "-o", FSTAB_OPTIONS
    )
    assert mounted["rc"] == 0, mounted["stderr"]
    # live the moment mount(8) returned: no waiting here
    found = subprocess.run(
        ["findmnt", "-n", "-o", "FSTYPE,SOURCE,OPTIONS", "--mountpoint", str(mountpoint)],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert found[:2] == ["fuse.zarrfs", str(root)]
    assert {"ro", "allow_other"} <= set(found[2].split(","))
    raw = mountpoint / ARRAY / "data.raw"
    assert np.array_equal(np.fromfile(raw, dtype="<u2").reshape(SHAPE), model)
    with pytest.raises(OSError) as refused:
        os.open(raw, os.O_WRONLY)
    assert refused.value.errno == errno.EROFS

    pid = daemon_pid(mountpoint)
    cleanup.pids.append(pid)
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        argv = [arg.decode() for arg in f.read().split(b"\0") if arg]
    given = set(argv[argv.index("-o") + 1].split(","))
    # mount(8) keeps _netdev, nofail, x-* and comment= for itself; mount.fuse3 adds dev,suid
    assert {"ro", "allow_other", "log_level=debug", "dev", "suid"} <= given
    assert not {o for o in given if o.startswith(("x-", "comment="))}

    unmounted = subprocess.run(["umount", str(mountpoint)], capture_output=True, text=True)
    assert unmounted.returncode == 0, unmounted.stderr
    assert reaper.wait(pid, 30) == {"exit": 0}
    assert not is_mounted(mountpoint)


def test_mount_t_fuse_zarrfs_reports_a_store_that_cannot_be_opened(
    tmp_path: Path, mountpoint: Path, zarrfs_on_path
) -> None:
    missing = tmp_path / "missing.zarr"
    result = subprocess.run(
        ["mount", "-t", "fuse.zarrfs", str(missing), str(mountpoint), "-o", "ro,_netdev"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0
    assert f"zarrfs: cannot open {missing}" in result.stderr
    assert "Traceback" not in result.stderr
    assert not is_mounted(mountpoint)
