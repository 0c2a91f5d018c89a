"""Listings the kernel keeps, and listings that follow changes.

When the installed pyfuse3 names the directory in ``readdir`` (the build ``scripts/setup.sh``
makes), the kernel keeps each listing it read, on read-only and writable mounts: a second walk
asks the daemon nothing. What another store client adds must still show up, one attribute
timeout after the listing was read. On a writable mount, what changes through the mount shows
up in the next listing at once, also the changes the kernel does not see as changes to that
directory (a metadata document committed, an array resized, an array made in a group).
"""

from __future__ import annotations

import json
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


def _kept_by_the_kernel(root: Path, m) -> None:  # type: ignore[no-untyped-def]
    """The mount's root listing is answered by the kernel: an array another client adds is
    not listed until the kept listing expires (the tests below would pass without a kept
    listing, so they first show that there is one)."""
    assert "c" not in os.listdir(m.path)
    zarr.open_group(str(root)).create_array("c", shape=(2,), chunks=(2,), dtype="u1")
    assert "c" not in os.listdir(m.path)
    waited = _appears(m.path, "c", within=5.0)
    assert waited <= 2.5  # within one attribute timeout (2 s) of the listing, with slack


@pytest.mark.skipif(not kernel_dir_cache_supported(), reason="pyfuse3 without ReaddirToken.inode")
def test_a_writable_mount_lets_the_kernel_keep_listings_until_they_expire(mounter, tmp_path):
    root = _store(tmp_path / "s.zarr")
    m = mounter(root, "attr_timeout=2")
    _kept_by_the_kernel(root, m)


@pytest.mark.skipif(not kernel_dir_cache_supported(), reason="pyfuse3 without ReaddirToken.inode")
def test_kept_listings_follow_changes_the_kernel_does_not_see(mounter, tmp_path):
    root = _store(tmp_path / "s.zarr")
    m = mounter(root, "attr_timeout=30")  # kept listings last the whole test unless dropped
    assert "c" not in os.listdir(m.path)
    zarr.open_group(str(root)).create_array("c", shape=(2,), chunks=(2,), dtype="u1")
    assert "c" not in os.listdir(m.path)  # the kernel keeps the listing
    a, chunks = m.path / "a", m.path / "a" / "chunks"
    assert sorted(os.listdir(chunks)) == ["0.0", "1.0", "2.0"]
    # a shape change through zarr.json (no entry of chunks/ or a/ is created or removed)
    doc = json.loads((a / "zarr.json").read_text())
    doc["shape"] = [2, 4]
    (a / "zarr.json").write_text(json.dumps(doc))
    assert sorted(os.listdir(chunks)) == ["0.0"]
    # a write past the end of data.raw grows the array by two chunk rows
    with open(a / "data.raw", "r+b", buffering=0) as f:
        f.seek(6 * 16)
        f.write(np.ones(4, dtype="<f4").tobytes())
        assert sorted(os.listdir(chunks)) == ["0.0", "1.0", "2.0", "3.0"]  # before close
    # an array zarr.json written over an empty group's document: the group becomes an array
    os.mkdir(m.path / "g")
    assert "data.raw" not in os.listdir(m.path / "g")
    doc["shape"] = [3, 4]
    (m.path / "g" / "zarr.json").write_text(json.dumps(doc))
    assert "data.raw" in os.listdir(m.path / "g")
    assert sorted(os.listdir(m.path / "g" / "chunks")) == ["0.0", "1.0"]


def _helpers_of(pid: int) -> list[int]:
    """The listing read-ahead helpers among the children of process ``pid``."""
    out = subprocess.run(["pgrep", "-P", str(pid), "-f", "readahead.py"], capture_output=True)
    return [int(p) for p in out.stdout.split()]


@pytest.mark.parametrize("options, helpers", [((), 1), (("noreadahead_listing",), 0)])
def test_listing_read_ahead_helper_lives_and_ends_with_the_mount(
    mounter, tmp_path, options, helpers
):
    root = _store(tmp_path / "s.zarr")
    m = mounter(root, *options)
    walk = subprocess.run(["find", str(m.path)], capture_output=True, text=True, check=True)
    assert f"{m.path}/b/data.raw" in walk.stdout.split()
    found = _helpers_of(m.pid)
    assert len(found) == helpers
    assert m.unmount() == 0
    for pid in found:  # it ends with the daemon, never after it
        assert not os.path.exists(f"/proc/{pid}") or "Z" in open(f"/proc/{pid}/stat").read()
