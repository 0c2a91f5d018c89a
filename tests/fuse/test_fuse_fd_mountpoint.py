"""``/dev/fd/N`` mountpoints: what the daemon accepts before serving a descriptor."""

from __future__ import annotations

import os

import pytest

from zarrfs.fuse.daemon import check_mountpoint
from zarrfs.fuse.runtime import MountError, fuse_fd, pid_file, write_pid_file


def test_fuse_fd_names_only_dev_fd_paths() -> None:
    assert fuse_fd("/dev/fd/3") == 3
    assert fuse_fd("/dev/fd/17") == 17
    for other in ("/dev/fd/", "/dev/fd/x", "/mnt/dev/fd/3", "/dev/fd/3/", "/proc/self/fd/3"):
        assert fuse_fd(other) is None


def test_a_descriptor_must_be_open_and_dev_fuse(tmp_path) -> None:
    fd = os.open(os.devnull, os.O_RDONLY)
    try:
        with pytest.raises(MountError, match=f"descriptor {fd} is not /dev/fuse"):
            check_mountpoint(f"/dev/fd/{fd}")
    finally:
        os.close(fd)
    with pytest.raises(MountError, match=f"descriptor {fd} is not open"):
        check_mountpoint(f"/dev/fd/{fd}")


@pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse")
def test_an_open_dev_fuse_descriptor_is_accepted_and_gets_no_pid_file(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("ZARRFS_RUNTIME_DIR", str(tmp_path))
    fd = os.open("/dev/fuse", os.O_RDWR)
    try:
        check_mountpoint(f"/dev/fd/{fd}")
        assert write_pid_file(f"/dev/fd/{fd}") is None
        assert not pid_file(f"/dev/fd/{fd}").exists()
    finally:
        os.close(fd)
