"""Permissions (SECURITY.md §6): ``ro`` gives EROFS; ``allow_other`` + ``default_permissions``
with ``uid=``/``gid=``/``umask=`` make the kernel enforce the reported modes for other users.

Other users are a numeric uid/gid without a passwd entry (nothing is added to the system); their
commands run through ``setpriv --reuid --regid --clear-groups`` with the system Python, which
prints the errno of each attempted operation.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from reliability_helpers import errno_of, write_array, write_group

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mounts with allow_other)"),
    pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv"),
]

OTHER = 4242  # a uid and gid nobody uses
PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"

PROBE = r"""
import errno, json, os, sys
def attempt(fn):
    try:
        fn()
    except OSError as exc:
        return exc.errno
    return 0
root = sys.argv[1]
p = lambda *parts: os.path.join(root, *parts)
def write(path):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, b"\x07", 0)
        os.fsync(fd)
    finally:
        os.close(fd)
print(json.dumps({
    "stat_root": attempt(lambda: os.stat(root)),
    "list_root": attempt(lambda: os.listdir(root)),
    "read": attempt(lambda: open(p("a", "data.raw"), "rb").read(16)),
    "read_meta": attempt(lambda: open(p("a", "zarr.json"), "rb").read()),
    "write": attempt(lambda: write(p("a", "data.raw"))),
    "mkdir": attempt(lambda: os.mkdir(p("g%d" % os.getuid()))),
    "create": attempt(lambda: open(p("a", "x%d" % os.getuid()), "wb").close()),
}))
"""


def as_other(mnt: Path) -> dict[str, int]:
    out = subprocess.run(
        ["setpriv", f"--reuid={OTHER}", f"--regid={OTHER}", "--clear-groups",
         PYTHON, "-c", PROBE, str(mnt)],
        capture_output=True, text=True, timeout=60, cwd="/",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return {k: v for k, v in json.loads(out.stdout).items()}


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    write_group(root)
    write_array(root, "a", np.arange(64, dtype="u1"), (16,))
    return root


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory every user can traverse (pytest's tmp dirs are private to root)."""
    path = Path(tempfile.mkdtemp(prefix="zarrfs-perm-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    if not os.path.ismount(path / "mnt"):  # never recurse into a mount that is still there
        shutil.rmtree(path, ignore_errors=True)


def mount_open(mounter: Any, store: Path, open_dir: Path, *options: str) -> Any:
    mnt = open_dir / "mnt"
    return mounter(store, *options, name=str(mnt))  # an absolute name: mounted there


def test_ro_gives_erofs(store: Path, mounter: Any) -> None:
    m = mounter(store, "ro")
    mnt = m.path
    raw = mnt / "a" / "data.raw"
    assert raw.read_bytes() == bytes(range(64))
    checks = {
        "open for writing": lambda: os.close(os.open(raw, os.O_WRONLY)),
        "truncate": lambda: os.truncate(raw, 32),
        "mkdir": lambda: os.mkdir(mnt / "g"),
        "create": lambda: (mnt / "a" / "new").write_bytes(b""),
        "metadata edit": lambda: (mnt / "a" / "attributes.json").write_text("{}"),
        "rename": lambda: os.rename(mnt / "a" / "info.json", mnt / "a" / "x"),
        "unlink": lambda: os.unlink(mnt / "a" / "info.json"),
        "control write": lambda: (mnt / ".zarrfs" / "flush").write_text("1"),
    }
    for what, fn in checks.items():
        assert errno_of(fn) == errno.EROFS, what
    assert (store / "a" / "c" / "0").read_bytes() == bytes(range(16))


def test_without_allow_other_others_are_refused(open_dir: Path, store: Path, mounter: Any) -> None:
    m = mount_open(mounter, store, open_dir)
    got = as_other(m.path)
    assert got["stat_root"] == errno.EACCES and got["read"] == errno.EACCES, got
    m.unmount()


def test_owner_umask_and_modes_are_enforced(open_dir: Path, store: Path, mounter: Any) -> None:
    # owner root, others may read (umask 022): reads allowed, writes and mkdir EACCES
    m = mount_open(mounter, store, open_dir, "allow_other", "default_permissions", "umask=022")
    assert (m.path / "a" / "data.raw").stat().st_mode & 0o777 == 0o644
    got = as_other(m.path)
    assert got == {
        "stat_root": 0,
        "list_root": 0,
        "read": 0,
        "read_meta": 0,
        "write": errno.EACCES,
        "mkdir": errno.EACCES,
        "create": errno.EACCES,
    }, got
    m.unmount()
    # umask 077: nothing for others
    m = mount_open(mounter, store, open_dir, "allow_other", "default_permissions", "umask=077")
    got = as_other(m.path)
    assert got["list_root"] == errno.EACCES and got["read"] == errno.EACCES, got
    m.unmount()
    # uid=/gid= make the other user the owner: writes allowed
    m = mount_open(mounter, store, open_dir, "allow_other", "default_permissions",
                   f"uid={OTHER}", f"gid={OTHER}", "umask=077")  # fmt: skip
    st = (m.path / "a" / "data.raw").stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (OTHER, OTHER, 0o600)
    got = as_other(m.path)
    assert got == {
        "stat_root": 0,
        "list_root": 0,
        "read": 0,
        "read_meta": 0,
        "write": 0,
        "mkdir": 0,
        "create": 0,
    }, got
    m.unmount()
    assert (store / "a" / "c" / "0").read_bytes()[:1] == b"\x07"
    assert (store / f"g{OTHER}" / "zarr.json").is_file()
