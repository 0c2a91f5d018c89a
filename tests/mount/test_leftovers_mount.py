"""Temporary files a killed daemon left in its directory store: ``zarrfs check`` names them,
the next writable mount removes those its listings meet (and logs each); a read-only mount
leaves them; the data the killed daemon never stored is not there, and the stored data is
intact."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import zarr
from conftest import force_unmount

pytestmark = pytest.mark.timeout(300)

SHAPE, CHUNKS = (8, 512, 512), (2, 512, 256)  # 8 chunks of 1 MiB (float32), written through


def _temps(path):
    return sorted(
        os.path.join(d, f) for d, _, files in os.walk(path) for f in files
        if f.startswith(".zarrfs-tmp-")
    )  # fmt: skip


def test_a_killed_writers_temporary_files_are_removed_by_the_next_writable_mount(tmp_path, mounter):
    path = tmp_path / "s.zarr"
    z = zarr.create_array(str(path), shape=SHAPE, chunks=CHUNKS, dtype="<f4", compressors=None)
    old = np.random.default_rng(1).random(SHAPE, dtype="f4")
    z[...] = old
    m = mounter(path, name="first")
    # the first two planes of the array, front to back: the two chunks they make are
    # complete and written through to temporary files, which only a flush renames
    new = np.full((2, *SHAPE[1:]), -1.0, dtype="<f4")
    fd = os.open(m.path / "data.raw", os.O_WRONLY)
    try:
        assert os.write(fd, new.tobytes()) == new.nbytes
        deadline = time.monotonic() + 30  # both chunks' files, each once complete
        while len(_temps(path)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        left = _temps(path)
        assert len(left) == 2, f"not every chunk was written through: {left}"
        os.kill(m.pid, signal.SIGKILL)  # before any flush could store them
        m.proc.wait(10)
    finally:
        try:
            os.close(fd)
        except OSError:  # the daemon is gone
            pass
    force_unmount(m)
    assert _temps(path) == left  # the crash left them
    assert np.array_equal(zarr.open_array(str(path), mode="r")[...], old)  # never stored

    # zarrfs check names each (a warning: the data is intact) and removes none
    checked = subprocess.run(
        [sys.executable, "-m", "zarrfs", "check", str(path)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    for name in left:
        assert f"leftover temporary file {os.path.relpath(name, path)}:" in checked.stdout
    assert _temps(path) == left

    ro = mounter(path, "ro", name="ro")
    subprocess.run(["ls", "-lR", str(ro.path)], check=True, capture_output=True)
    assert _temps(path) == left  # a read-only mount changes nothing
    ro.unmount()

    rw = mounter(path, name="rw")
    subprocess.run(["ls", "-lR", str(rw.path)], check=True, capture_output=True)
    assert _temps(path) == []
    for name in left:
        assert os.path.basename(name) in rw.log()
    assert np.array_equal(np.fromfile(rw.path / "data.raw", dtype="<f4").reshape(SHAPE), old)
    assert rw.unmount() == 0
