"""Running a floor file system (``listing_floor.py``, ``write_floor.py``) for one measurement.

A floor is a minimal pyfuse3 file system the benchmark compares zarrfs with; its script mounts
it in a child process (``--serve MOUNTPOINT``). ``serving`` starts that process, waits until
the mount is there, and always unmounts and reaps it, even when the measurement fails.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator

#: seconds a floor may take to mount
MOUNT_TIMEOUT = 30.0


@contextlib.contextmanager
def serving(argv: list[str], mountpoint: str) -> Iterator[None]:
    """Run ``argv`` (a floor serving at ``mountpoint``) for the duration of the block."""
    server = subprocess.Popen(argv)
    try:
        deadline = time.monotonic() + MOUNT_TIMEOUT
        while not os.path.ismount(mountpoint):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the floor file system did not mount")
            time.sleep(0.05)
        yield
    finally:
        subprocess.run(["fusermount3", "-u", "-z", mountpoint], capture_output=True)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
