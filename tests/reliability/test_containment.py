"""Containment (SECURITY.md §3): nothing outside the store root is ever read or written.

A ``world`` directory holds the store and, beside it, ``outside/``: canary files, a valid group
and a valid array (so a path that escaped would find real data). The store is hostile:
symbolic links to ``outside`` (directories, a chunk, a metadata document), a hard link, and
the mount is used with hostile names (mkdir/create/rename of ``__x``, ``...``, backslashes,
reserved names). Other stores: a non-listable store whose consolidated metadata has keys with
``..`` and absolute paths, and a zip archive with such member names.

Detection: inotify on ``outside/`` (any access, open, change) and on ``world/`` (anything
created, deleted or moved beside the store); canary contents, atime and mtime compared before
and after (atimes are set far in the past, so a read would move them); the file set of
``outside`` and ``world`` compared.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bombs import write_zip
from reliability_helpers import FaultPlan, errno_of, pread, write_array, write_group

pytestmark = pytest.mark.timeout(120)

IN_ACCESS, IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x1, 0x2, 0x4, 0x8
IN_OPEN, IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x20, 0x40, 0x80, 0x100, 0x200
ALL_EVENTS = 0xFFF
STRUCTURE = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO


class Inotify:
    """Minimal inotify (ctypes): watch paths, collect (path, mask, name) events."""

    def __init__(self) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            pytest.skip("inotify is not available")
        self.paths: dict[int, Path] = {}

    def watch(self, path: Path, mask: int) -> None:
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(path), mask)
        assert wd >= 0, os.strerror(ctypes.get_errno())
        self.paths[wd] = path

    def events(self) -> list[tuple[Path, int, str]]:
        out = []
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return out
            pos = 0
            while pos < len(data):
                wd, mask, _, length = struct.unpack_from("iIII", data, pos)
                name = data[pos + 16 : pos + 16 + length].rstrip(b"\0").decode()
                out.append((self.paths.get(wd, Path("?")), mask, name))
                pos += 16 + length

    def close(self) -> None:
        os.close(self.fd)


def fingerprint(root: Path) -> dict[str, tuple[bytes, int, int]]:
    """path -> (content, atime_ns, mtime_ns) of every regular file (links not followed)."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            st = p.lstat()
            if p.is_symlink():
                out[str(p.relative_to(root))] = (os.readlink(p).encode(), 0, st.st_mtime_ns)
            else:
                fd = os.open(p, os.O_RDONLY | os.O_NOATIME)  # our own look must not move atime
                try:
                    content = os.read(fd, 1 << 20)
                finally:
                    os.close(fd)
                out[str(p.relative_to(root))] = (content, st.st_atime_ns, st.st_mtime_ns)
    return out


def names_under(root: Path) -> set[str]:
    return {str(Path(d, n).relative_to(root)) for d, ds, fs in os.walk(root) for n in ds + fs}


@pytest.fixture
def world(tmp_path: Path) -> Iterator[Any]:
    """(world dir, store, outside, check()) -- check() fails on any trace outside the store."""
    world = tmp_path / "world"
    store, outside = world / "store", world / "outside"
    outside.mkdir(parents=True)
    store.mkdir()
    (outside / "canary").write_bytes(b"canary: must never be read or written\n")
    (outside / "hardcanary").write_bytes(bytes(range(64)))
    write_group(outside)
    write_array(outside, "arr", np.arange(64, dtype="u1"), (64,))
    (outside / "emptydir").mkdir()
    for p in [*outside.rglob("*"), outside]:
        if p.is_file():
            os.utime(p, ns=(1_000_000_000, 2_000_000_000))  # atime < mtime: a read moves it
    before = fingerprint(outside)
    world_names = names_under(world)
    notify = Inotify()
    for d in [outside, *[p for p in outside.rglob("*") if p.is_dir()]]:
        notify.watch(d, ALL_EVENTS)
    notify.watch(world, STRUCTURE)

    def check() -> None:
        events = notify.events()  # before our own reads below make events
        assert not events, f"activity outside the store root: {events[:10]}"
        after = fingerprint(outside)
        # the hard link is a store file too (same inode): reading it through the store may
        # move its atime; its content and mtime must not change
        for state in (after, before):
            content, _, mtime = state["hardcanary"]
            state["hardcanary"] = (content, 0, mtime)
        assert after == before
        new = names_under(world) - world_names
        assert all(n.startswith("store") for n in new), sorted(new)

    yield world, store, outside, check
    notify.close()


def hostile_store(store: Path, outside: Path) -> None:
    write_group(store)
    write_array(store, "a", np.arange(256, dtype="u1"), (64,))
    os.symlink(outside, store / "evil_dir")
    os.symlink(outside / "arr", store / "evil_arr")
    os.symlink(outside / "emptydir", store / "evil_empty")
    (store / "lnk").mkdir()
    os.symlink(outside / "zarr.json", store / "lnk" / "zarr.json")
    (store / "a" / "c" / "1").unlink()
    os.symlink(outside / "canary", store / "a" / "c" / "1")
    (store / "a" / "c" / "2").unlink()
    os.link(outside / "hardcanary", store / "a" / "c" / "2")  # same inode as an outside file
    write_array(store, "b", np.arange(64, dtype="u1"), (64,))
    (store / "b" / "c" / "0").unlink()
    (store / "b" / "c").rmdir()
    os.symlink(outside / "arr" / "c", store / "b" / "c")  # a chunk directory that is a link


def test_directory_store_with_links_and_hostile_names(world: Any, mounter: Any) -> None:
    _, store, outside, check = world
    hostile_store(store, outside)
    m = mounter(store, "writeback=0")
    mnt = m.path
    # links are never followed: not listed, not found, not readable
    assert sorted(os.listdir(mnt)) == [
        ".zarrfs", "a", "attributes.json", "b", "group.nc", "zarr.json"
    ]  # fmt: skip
    for name in ("evil_dir", "evil_arr", "evil_empty", "lnk"):
        assert errno_of(lambda n=name: os.stat(mnt / n)) == errno.ENOENT, name
    raw = mnt / "a" / "data.raw"
    assert errno_of(lambda: pread(raw, 64, 64)) == errno.EIO  # chunk 1 is a link
    assert pread(raw, 128, 64) == bytes(range(64))  # the hard link is a store file
    assert errno_of(lambda: pread(mnt / "b" / "data.raw", 0, 64)) == errno.EIO
    # writes: a partial write over the linked chunk fails; whole-chunk writes replace the
    # store's names (link or hard link) and never write through them
    fd = os.open(raw, os.O_RDWR)
    try:
        assert errno_of(lambda: os.pwrite(fd, b"x", 70)) == errno.EIO
        os.pwrite(fd, b"\x11" * 64, 64)
        os.pwrite(fd, b"\x22" * 64, 128)
        os.fsync(fd)
    finally:
        os.close(fd)
    assert not (store / "a" / "c" / "1").is_symlink()
    assert (store / "a" / "c" / "2").stat().st_ino != (outside / "hardcanary").stat().st_ino
    fd = os.open(mnt / "b" / "data.raw", os.O_RDWR)
    try:
        os.pwrite(fd, b"\x33" * 64, 0)  # the chunk directory b/c is a link: refused
        assert errno_of(lambda: os.fsync(fd)) == errno.EIO
    finally:
        errno_of(lambda: os.close(fd))
    # hostile names through mkdir/create/rename
    for name in ("evil_dir", "evil_empty", "lnk"):
        assert errno_of(lambda n=name: os.mkdir(mnt / n)) in (errno.EINVAL, errno.EIO), name
    for name in ("__x", "...", "a\\b", ".zarrfs-tmp-1", "x" * 255):
        code = errno_of(lambda n=name: os.mkdir(mnt / n))
        assert code in (0, errno.EINVAL, errno.EIO), (name, code)
        if code == 0:
            assert (store / name / "zarr.json").is_file() and name == "x" * 255
    for name in ("..x", "a\\..\\b", "\u202e..", "zarr.json.tmp", "x" * 255):
        (mnt / "a" / name).write_bytes(b"scratch")  # scratch files live in memory only
        os.rename(mnt / "a" / name, mnt / "a" / "renamed")
        os.unlink(mnt / "a" / "renamed")
    assert errno_of(lambda: os.rename(mnt / "a" / "info.json", mnt / "evil")) == errno.EPERM
    assert errno_of(lambda: os.symlink("/etc/passwd", mnt / "a" / "s")) in (
        errno.EPERM, errno.ENOSYS, errno.EOPNOTSUPP)  # fmt: skip
    assert errno_of(lambda: os.link(raw, mnt / "a" / "h")) in (errno.EPERM, errno.ENOSYS)
    assert m.proc.poll() is None
    m.unmount()
    check()
    assert not any(p.name.startswith(".zarrfs-tmp-") for p in store.rglob("*"))


def consolidated_root(entries: dict[str, Any]) -> bytes:
    return json.dumps({
        "zarr_format": 3, "node_type": "group", "attributes": {},
        "consolidated_metadata": {"kind": "inline", "must_understand": False,
                                  "metadata": entries},
    }).encode()  # fmt: skip


def array_json(n: int = 64) -> dict[str, Any]:
    return {
        "zarr_format": 3, "node_type": "array", "shape": [n], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [n]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0, "codecs": [{"name": "bytes"}], "attributes": {},
    }  # fmt: skip


HOSTILE_KEYS = ["..", "../outside", "../outside/arr", "ok/../../outside/arr", "/abs",
                "/tmp", "__x", ".", "ok/./x", "ok//x", "a\\..\\b"]  # fmt: skip


def test_consolidated_metadata_keys_cannot_escape(
    world: Any, faulty_mount: Any, plan: FaultPlan
) -> None:
    _, store, outside, check = world
    entries: dict[str, Any] = {k: array_json() for k in HOSTILE_KEYS}
    entries["ok"] = array_json()
    (store / "zarr.json").write_bytes(consolidated_root(entries))
    (store / "ok" / "c").mkdir(parents=True)
    (store / "ok" / "c" / "0").write_bytes(bytes(range(64)))
    plan.write([], listable=False)  # children come from the consolidated metadata only
    m = faulty_mount(store, "ro")
    assert sorted(os.listdir(m.path)) == [
        ".zarrfs", "attributes.json", "group.nc", "ok", "zarr.json"
    ]  # fmt: skip
    assert (m.path / "ok" / "data.raw").read_bytes() == bytes(range(64))
    for key in HOSTILE_KEYS:
        name = key.strip("/").split("/")[0]
        if name and name not in (".", "..", "ok"):
            assert errno_of(lambda n=name: os.stat(m.path / n / "data.raw")) == errno.ENOENT, key
    touched = {key for _, key, _ in plan.calls()}
    assert all(".." not in k.split("/") and not k.startswith("/") for k in touched), touched
    m.unmount()
    check()


def test_zip_member_names_cannot_escape(world: Any, mounter: Any, tmp_path: Path) -> None:
    _, store, outside, check = world
    group = b'{"zarr_format": 3, "node_type": "group", "attributes": {}}'
    meta = json.dumps(array_json()).encode()
    data = bytes(range(64))
    members = [("zarr.json", group), ("ok/zarr.json", meta), ("ok/c/0", data)]
    for key in ("../outside/zarr.json", "../outside/arr/zarr.json", "/abs/zarr.json",
                "ok/../../outside/x", "a\\..\\..\\b/zarr.json", "__x/zarr.json", "./zarr.json",
                "ok/c/../../../outside/canary"):  # fmt: skip
        members.append((key, meta))
    archive = tmp_path / "store.zip"  # the zip is the store root
    write_zip(archive, [(n, 0, d, zlib.crc32(d), len(d)) for n, d in members])
    m = mounter(archive)
    assert sorted(os.listdir(m.path)) == [
        ".zarrfs", "attributes.json", "group.nc", "ok", "zarr.json"
    ]  # fmt: skip
    assert (m.path / "ok" / "data.raw").read_bytes() == data
    assert errno_of(lambda: os.mkdir(m.path / "new")) == errno.EROFS
    assert errno_of(lambda: (m.path / "ok" / "data.raw").write_bytes(data)) == errno.EROFS
    m.unmount()
    check()
