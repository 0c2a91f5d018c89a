"""Fixtures shared by every test directory: real mounts in a subprocess.

``mounter`` mounts a store with ``zarrfs mount STORE MNT -f`` in a child process and returns a
``Mount``; every mount is unmounted at teardown whatever happened (``fusermount3 -u``, then lazy,
then a connection abort if the daemon hangs) and the daemon is stopped by its PID.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

MOUNT_TIMEOUT = 30.0


@dataclass
class Mount:
    store: str
    path: Path
    proc: subprocess.Popen[bytes]
    log_path: Path
    options: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def unmount(self, timeout: float = 30.0) -> int:
        """Unmount cleanly and wait for the daemon; returns its exit status."""
        subprocess.run(["fusermount3", "-u", str(self.path)], capture_output=True)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            force_unmount(self)
            return self.proc.wait(10)


def is_mounted(path: Path) -> bool:
    target = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == target for line in f)


def force_unmount(m: Mount) -> None:
    """Unmount whatever state the daemon is in; stop it by PID."""
    if is_mounted(m.path):
        subprocess.run(["fusermount3", "-u", "-z", str(m.path)], capture_output=True)
    if m.proc.poll() is None:
        try:
            m.proc.wait(5)
        except subprocess.TimeoutExpired:
            try:
                dev = os.stat(m.path).st_dev
                conn = Path(f"/sys/fs/fuse/connections/{os.minor(dev)}/abort")
                if conn.exists():
                    conn.write_text("1")
            except OSError:
                pass
            m.proc.send_signal(signal.SIGKILL)
            m.proc.wait(10)
    if is_mounted(m.path):
        subprocess.run(["fusermount3", "-u", "-z", str(m.path)], capture_output=True)


def start_mount(
    store: str | Path,
    mnt: Path,
    *options: str,
    log_path: Path | None = None,
    env: dict | None = None,
    cmd_prefix: list[str] | None = None,
) -> Mount:
    """Mount in the foreground; ``cmd_prefix`` replaces ``python -m zarrfs`` (test wrappers)."""
    mnt.mkdir(parents=True, exist_ok=True)
    log_path = log_path or mnt.parent / f"{mnt.name}.log"
    prefix = cmd_prefix or [sys.executable, "-m", "zarrfs"]
    cmd = [*prefix, "mount", str(store), str(mnt), "-f"]
    opts = ["log_level=debug", *options]
    cmd += ["-o", ",".join(opts)]
    logf = open(log_path, "ab")
    proc = subprocess.Popen(
        cmd, stdout=logf, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
    )
    logf.close()
    m = Mount(str(store), mnt, proc, log_path, list(options))
    deadline = time.monotonic() + MOUNT_TIMEOUT
    while not is_mounted(mnt):
        if proc.poll() is not None:
            raise RuntimeError(f"zarrfs exited with {proc.returncode} before mounting:\n{m.log()}")
        if time.monotonic() > deadline:
            force_unmount(m)
            raise RuntimeError(f"mount did not come up in {MOUNT_TIMEOUT} s:\n{m.log()}")
        time.sleep(0.05)
    os.stat(mnt)  # the mount answers
    return m


def _mounts_under(base: Path) -> Iterator:
    """A ``mount(store, *options, name=, env=, cmd_prefix=)`` factory; unmounts all at the end."""
    mounts: list[Mount] = []

    def mount(
        store: str | Path, *options: str, name: str = "mnt", env: dict | None = None,
        cmd_prefix: list[str] | None = None,
    ) -> Mount:  # fmt: skip
        m = start_mount(store, base / name, *options, env=env, cmd_prefix=cmd_prefix)
        mounts.append(m)
        return m

    try:
        yield mount
    finally:
        for m in mounts:
            force_unmount(m)


@pytest.fixture
def mounter(tmp_path: Path) -> Iterator:
    """``mounter(store, *options, name="mnt")`` -> Mount; all unmounted at teardown."""
    yield from _mounts_under(tmp_path)


@pytest.fixture(scope="module")
def module_mounter(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """Like ``mounter`` but the mounts live for the whole module."""
    yield from _mounts_under(tmp_path_factory.mktemp("mounts"))


@pytest.fixture
def record_fsyncs(monkeypatch: pytest.MonkeyPatch) -> Callable[[], list[str]]:
    """Call it to start recording: the list it returns gets the path of every descriptor
    ``os.fsync`` is given from then on (until the test's ``monkeypatch`` is undone)."""

    def start() -> list[str]:
        synced: list[str] = []
        real_fsync = os.fsync

        def recording_fsync(fd: int) -> None:
            synced.append(os.readlink(f"/proc/self/fd/{fd}"))
            real_fsync(fd)

        monkeypatch.setattr(os, "fsync", recording_fsync)
        return synced

    return start


@pytest.fixture
def version_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The keys a ``LocalStore`` is asked the ``version`` of (a close-to-open check's
    ``lstat``), from the start of the test."""
    from zarrfs.core.stores.local import LocalStore

    asked: list[str] = []
    real = LocalStore.version

    def counting(self: LocalStore, key: str) -> str | None:
        asked.append(key)
        return real(self, key)

    monkeypatch.setattr(LocalStore, "version", counting)
    return asked
