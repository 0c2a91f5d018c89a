"""The ``mount`` fixture: real mounts of the fake tree, always cleaned up.

``mount(options="", url="fake://tree")`` mounts in the foreground (``-f``) and returns a
``Mounted``. Teardown unmounts (``force_unmount``), stops the daemon by its pid, and fails the
test if the daemon logged a WARNING or ERROR the test did not announce with
``Mounted.expect_log``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fuse_mount_helpers import (
    REPO,
    Mounted,
    force_unmount,
    stop_process,
    wait_for_mount,
    zarrfs_cmd,
    zarrfs_env,
)


@pytest.fixture
def mount(tmp_path: Path) -> Iterator:
    mounted: list[Mounted] = []

    def start(options: str = "", url: str = "fake://tree", name: str = "mnt") -> Mounted:
        mountpoint = tmp_path / name
        mountpoint.mkdir()
        log = tmp_path / f"{name}.log"
        args = ["mount", url, str(mountpoint), "-f"] + (["-o", options] if options else [])
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                zarrfs_cmd(*args), stdout=out, stderr=out, env=zarrfs_env(tmp_path), cwd=REPO
            )
        m = Mounted(mountpoint, proc, log, tmp_path / "events")
        mounted.append(m)
        wait_for_mount(mountpoint, proc, log)
        return m

    try:
        yield start
    finally:
        for m in mounted:
            force_unmount(m.mountpoint)
            stop_process(m.proc)
    for m in mounted:
        unexpected = m.unexpected_log_lines()
        if unexpected:
            pytest.fail("daemon logged unexpected warnings/errors:\n" + "\n".join(unexpected))
