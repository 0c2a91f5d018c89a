"""Helpers for real mounts of the fake tree (``fuse_fake_tree``) in a daemon subprocess.

``force_unmount`` unmounts whatever is on a mountpoint (``fusermount3 -u -z``; if that hangs, it
aborts the connection via ``/sys/fs/fuse/connections/<dev>/abort`` first); ``stop_process`` stops
a daemon by its pid. ``Mounted`` collects the daemon's log and the WARNING/ERROR lines a test
announces with ``expect_log``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from zarrfs.fuse.runtime import mount_info

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def zarrfs_env(tmp_path: Path) -> dict[str, str]:
    """Environment for a zarrfs subprocess serving the fake tree."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(HERE)])
    env["ZARRFS_TEST_TREE_FACTORY"] = "fuse_fake_tree:open_fake_tree"
    env["ZARRFS_RUNTIME_DIR"] = str(tmp_path / "run")
    env["ZARRFS_FAKE_EVENTS"] = str(tmp_path / "events")
    env.pop("NOTIFY_SOCKET", None)
    env.pop("JOURNAL_STREAM", None)
    return env


def zarrfs_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "zarrfs", *args]


def wait_for_mount(mountpoint: Path, proc: subprocess.Popen[bytes] | None, log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"daemon exited with {proc.returncode}:\n{log.read_text()}")
        if mount_info(str(mountpoint)) is not None:
            os.stat(mountpoint)
            return
        time.sleep(0.02)
    pytest.fail(f"{mountpoint} was not mounted in time:\n{log.read_text()}")


def force_unmount(mountpoint: Path) -> None:
    """Unmount whatever is on ``mountpoint``, aborting a hung connection first if need be."""
    found = mount_info(str(mountpoint))
    if found is None:
        return
    try:
        subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], timeout=10, check=False)
    except subprocess.TimeoutExpired:
        with open(f"/sys/fs/fuse/connections/{found[2]}/abort", "w") as f:
            f.write("1")
        subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], timeout=10, check=False)


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


#: libfuse's own complaint when the kernel has already dropped a RELEASE at unmount (the
#: closing process is gone, nobody waits for the answer): a shutdown race, not a daemon fault
BENIGN_LIBFUSE = (r"fuse_release\(\): fuse_reply_\* failed with No such file or directory",)


@dataclass
class Mounted:
    mountpoint: Path
    proc: subprocess.Popen[bytes]
    log: Path
    events: Path
    allowed: list[str] = field(default_factory=list)

    def __truediv__(self, name: str) -> Path:
        return self.mountpoint / name

    def expect_log(self, pattern: str) -> None:
        """Announce a WARNING/ERROR line (regex) this test provokes on purpose."""
        self.allowed.append(pattern)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def unexpected_log_lines(self) -> list[str]:
        return [
            line
            for line in self.log_text().splitlines()
            if re.search(r" (WARNING|ERROR|CRITICAL) ", line)
            and not any(re.search(p, line) for p in (*self.allowed, *BENIGN_LIBFUSE))
        ]
