"""Listings the kernel keeps (read-only mounts) and listings that follow changes (writable).

On a read-only mount, when the installed pyfuse3 names the directory in ``readdir`` (the build
``scripts/setup.sh`` makes), the kernel keeps each listing it read: a second walk asks the
daemon nothing. What another store client adds must still show up, one attribute timeout
after the listing was read. On a writable mount, what changes through the mount shows up in
the next listing at once.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from zarrfs.fuse.directories import kernel_dir_cache_supported

pytestmark = pytest.mark.timeout(120)


def _store(root: Path) -> Path:
    g = zarr.open_group(str(root), mode="w")
    for name in ("a", "b"):
        g.create_array(name, shape=(6, 4), chunks=(2, 4), dtype="<f4")[...] = np.arange(
            24, dtype="<f4"
        ).reshape(6, 4)
    return root


def _appears(path: Path, name: str, within: float) -> float:
    """Seconds until ``name`` is listed in ``path`` (fails after ``within``)."""
    began = time.monotonic()
    while name not in os.listdir(path):
        assert time.monotonic() - began < within, f"{name} not listed in {path} after {within} s"
        time.sleep(0.1)
    return time.monotonic() - began


def test_read_only_listings_are_kept_by_the_kernel_and_expire(mounter, tmp_path):
    root = _store(tmp_path / "s.zarr")
    m = mounter(root, "ro", "attr_timeout=1")
    walk = subprocess.run(["find", str(m.path)], capture_output=True, text=True, check=True)
    assert f"{m.path}/a/chunks/2.0" in walk.stdout.split()
    assert sorted(os.listdir(m.path / "a" / "chunks")) == ["0.0", "1.0", "2.0"]
    zarr.open_group(str(root)).create_array("c", shape=(2,), chunks=(2,), dtype="u1")
    if kernel_dir_cache_supported():  # the kernel answers from the listing it keeps
        assert "c" not in os.listdir(m.path)
    _appears(m.path, "c", within=5.0)  # one attribute timeout (+1 s) after it was listed
    st = os.stat(m.path / "c" / "data.raw")
    assert st.st_size == 2 and st.st_blocks == 0  # nothing stored yet


def test_sizes_blocks_and_du_after_a_walk_of_a_read_only_mount(mounter, tmp_path):
    root = _store(tmp_path / "s.zarr")
    m = mounter(root, "ro")
    subprocess.run(["ls", "-lR", str(m.path)], capture_output=True, check=True)
    stored = sum(f.stat().st_size for f in (root / "a" / "c").rglob("*") if f.is_file())
    st = os.stat(m.path / "a" / "data.raw")
    assert (st.st_size, st.st_blocks) == (96, -(-stored // 512))
    du = subprocess.run(["du", "-B1", str(m.path / "a" / "data.raw")], capture_output=True,
                        text=True, check=True)  # fmt: skip
    assert int(du.stdout.split()[0]) == st.st_blocks * 512
    info = (m.path / "a" / "info.json").read_bytes()
    assert os.stat(m.path / "a" / "info.json").st_size == len(info)
    assert b'"stored_bytes": %d' % stored in info


def test_a_writable_mount_lists_what_changed_through_it_at_once(mounter, tmp_path):
    root = _store(tmp_path / "s.zarr")
    m = mounter(root)
    chunks = m.path / "a" / "chunks"
    assert sorted(os.listdir(chunks)) == ["0.0", "1.0", "2.0"]
    os.truncate(m.path / "a" / "data.raw", 8 * 16)  # 8 rows of 4 float32: a 4th chunk row
    assert sorted(os.listdir(chunks)) == ["0.0", "1.0", "2.0", "3.0"]
    assert os.stat(m.path / "a" / "data.raw").st_size == 128
    (m.path / "a" / "notes.txt").write_text("scratch")
    assert "notes.txt" in os.listdir(m.path / "a")
    os.unlink(m.path / "a" / "notes.txt")
    assert "notes.txt" not in os.listdir(m.path / "a")
