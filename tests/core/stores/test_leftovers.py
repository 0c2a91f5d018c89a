"""Leftover temporary files of a directory store (core/stores/leftovers.py): a writable store
whose listings meet temporary files of other processes removes them while no other writer has
the store open (each holds a lock on the root); a read-only store, a store opened beside
another writable one (in this or another process), this process's own temporary files, and
anything not a regular file are left alone. Keys are never touched."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import numpy as np
import pytest
import zarr

from zarrfs.core.stores import leftovers
from zarrfs.core.stores.local import LocalStore
from zarrfs.core.stores.localgroup import TEMP_PREFIX

KEYS = ["c/0/0", "c/0/1", "c/1/0", "c/1/1", "zarr.json"]
DEAD = "0badc0de"  # the token of a process that is gone


@pytest.fixture
def store_path(tmp_path):
    path = tmp_path / "s.zarr"
    z = zarr.create_array(str(path), shape=(4, 4), chunks=(2, 2), dtype="<i4")
    z[...] = np.arange(16, dtype="<i4").reshape(4, 4)
    return path


def _plant(path, rel, size=1000):
    f = path / rel
    f.write_bytes(b"x" * size)
    return f


def test_a_lone_writable_store_removes_the_leftovers_its_listings_meet(store_path, caplog):
    old = _plant(store_path, f"c/0/{TEMP_PREFIX}{DEAD}00000001", size=1234)
    top = _plant(store_path, f"{TEMP_PREFIX}{DEAD}00000002")
    store = LocalStore(store_path)
    with caplog.at_level(logging.WARNING, logger="zarrfs.core.stores.leftovers"):
        assert sorted(store.list_prefix("")) == KEYS
    assert not old.exists() and not top.exists()
    assert "c/0/" + old.name in caplog.text and "(1234 bytes)" in caplog.text
    assert zarr.open_array(str(store_path), mode="r")[...].ravel().tolist() == list(range(16))
    store.close()


def test_list_sizes_and_list_dir_remove_them_too(store_path):
    a = _plant(store_path, f"c/1/{TEMP_PREFIX}{DEAD}00000003")
    b = _plant(store_path, f"c/{TEMP_PREFIX}{DEAD}00000004")
    store = LocalStore(store_path)
    assert sorted(k for k, _ in store.list_sizes("c/1")) == ["c/1/0", "c/1/1"]
    assert not a.exists() and b.exists()  # only the directories listed
    assert store.list_dir("c") == ([], ["0", "1"])
    assert not b.exists()
    store.close()


def test_a_read_only_store_removes_nothing(store_path):
    old = _plant(store_path, f"c/0/{TEMP_PREFIX}{DEAD}00000005")
    store = LocalStore(store_path, read_only=True)
    assert sorted(store.list_prefix("")) == KEYS
    assert old.exists()
    store.close()


def test_nothing_is_removed_while_another_writer_has_the_store_open(store_path):
    old = _plant(store_path, f"c/0/{TEMP_PREFIX}{DEAD}00000006")
    first = LocalStore(store_path)
    first.list_dir("")  # takes its lock on the root
    second = LocalStore(store_path)
    assert sorted(second.list_prefix("")) == KEYS
    assert sorted(first.list_prefix("")) == KEYS
    assert old.exists()  # either may be writing it, as far as the other knows
    first.close()
    assert sorted(second.list_prefix("")) == KEYS  # alone now
    assert not old.exists()
    second.close()


def test_a_writer_in_another_process_keeps_its_files(store_path, tmp_path):
    """A live writer of another process holds its lock: its files are not leftovers."""
    old = _plant(store_path, f"c/0/{TEMP_PREFIX}{DEAD}00000007")
    code = (
        "import sys; from zarrfs.core.stores.local import LocalStore\n"
        f"s = LocalStore({str(store_path)!r}); s.list_dir('zarr.json'[:0])\n"
        "print('locked', flush=True); sys.stdin.read()\n"
    )
    other = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "locked"
        store = LocalStore(store_path)
        assert sorted(store.list_prefix("")) == KEYS
        assert old.exists()
    finally:
        assert other.stdin is not None
        other.stdin.close()
        other.wait(10)
    assert sorted(store.list_prefix("")) == KEYS  # the other process has ended
    assert not old.exists()
    store.close()


def test_this_processes_own_temporary_files_are_kept(store_path):
    own = _plant(store_path, f"c/0/{TEMP_PREFIX}{leftovers.TOKEN}00000008")
    store = LocalStore(store_path)
    assert sorted(store.list_prefix("")) == KEYS
    assert own.exists()  # a set of this process may be writing it
    store.close()


def test_a_directory_or_link_with_the_temporary_prefix_is_not_removed(store_path):
    d = store_path / "c" / "0" / f"{TEMP_PREFIX}{DEAD}dir"
    d.mkdir()
    target = _plant(store_path, "outside-file")
    link = store_path / "c" / "0" / f"{TEMP_PREFIX}{DEAD}link"
    link.symlink_to(target)
    store = LocalStore(store_path)
    assert sorted(store.list_prefix("")) == [*KEYS[:4], "outside-file", "zarr.json"]
    assert d.is_dir() and link.is_symlink() and target.exists()
    store.close()


def test_temporary_files_carry_the_token_of_their_process_and_a_fork_gets_its_own(store_path):
    store = LocalStore(store_path)
    seen = []
    real = os.fsync

    def spy(fd):
        seen.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    os.fsync = spy
    try:
        store.set("c/0/0", b"\0" * 16)
    finally:
        os.fsync = real
    assert any(name.startswith(TEMP_PREFIX + leftovers.TOKEN) for name in seen)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(w, leftovers.TOKEN.encode())
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(r, 64).decode() != leftovers.TOKEN
    os.close(r)
    os.close(w)
    store.close()
