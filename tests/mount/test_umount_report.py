"""``zarrfs umount`` tells the user at the terminal what the mount held that is not in the store
once the daemon has gone: data it could not store (exit status 1) and the scratch files it
dropped (memory only by design). A clean unmount says nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import zarr

pytestmark = pytest.mark.timeout(120)


def zarrfs_umount(mnt: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "zarrfs", "umount", str(mnt)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_umount_names_the_scratch_files_it_drops(tmp_path: Path, mounter) -> None:
    zarr.create_array(str(tmp_path / "s.zarr"), name="a", shape=(4,), dtype="u1")
    m = mounter(tmp_path / "s.zarr")
    (m.path / "a" / "data.raw").write_bytes(b"\x01\x02\x03\x04")  # stored: nothing to say
    (m.path / "notes.txt").write_text("notes\n")
    (m.path / "g").mkdir()
    (m.path / "g" / "f.txt").write_text("x\n")
    result = zarrfs_umount(m.path)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 2, result.stderr
    assert "/notes.txt (6 bytes)" in lines[0] and "/g/f.txt (2 bytes)" in lines[1]
    assert all("never stored" in line for line in lines)
    assert m.proc.wait(30) == 0
    assert zarr.open_array(str(tmp_path / "s.zarr" / "a"))[...].tolist() == [1, 2, 3, 4]


def test_a_clean_umount_says_nothing(tmp_path: Path, mounter) -> None:
    zarr.create_array(str(tmp_path / "s.zarr"), name="a", shape=(4,), dtype="u1")
    m = mounter(tmp_path / "s.zarr")
    (m.path / "a" / "data.raw").write_bytes(b"\x01\x02\x03\x04")
    result = zarrfs_umount(m.path)
    assert (result.returncode, result.stderr) == (0, "")


WRITER = """
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
os.pwrite(fd, os.urandom(1 << 20), 0)
os._exit(0)  # no close() that could report the failure: only the daemon still holds the data
"""


def test_umount_fails_when_written_data_cannot_be_stored(tmp_path: Path, mounter) -> None:
    """The store's file system is full, and a writer left without looking at ``close``: the
    daemon's final flush fails, and ``zarrfs umount`` says so with exit status 1 instead of
    returning 0 over data that is not in the store."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(disk)], check=True)
    try:
        zarr.create_array(
            str(disk / "s.zarr"), name="a", shape=(256, 1024), chunks=(64, 1024), dtype="<f4",
            compressors=None,
        )  # fmt: skip
        m = mounter(disk / "s.zarr", "writeback=0")
        subprocess.run([sys.executable, "-c", WRITER, str(m.path / "a" / "data.raw")], check=True)
        result = zarrfs_umount(m.path)
        assert result.returncode == 1, result.stderr
        assert "could not be stored" in result.stderr, result.stderr
        assert "No space left on device" in result.stderr, result.stderr
        assert m.proc.wait(30) == 1
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
