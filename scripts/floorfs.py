"""Running a floor file system (``listing_floor.py``, ``write_floor.py``) for one measurement.

A floor is a minimal pyfuse3 file system the benchmark compares zarrfs with; its script mounts
it in a child process (``--serve MOUNTPOINT``). ``serving`` starts that process, waits until
the mount is there, and always unmounts and reaps it, even when the measurement fails.
``process_cpu`` tells the CPU seconds a process (the floor's server) used so far.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator

#: seconds a floor may take to mount
MOUNT_TIMEOUT = 30.0


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/PID/stat``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def serving(argv: list[str], mountpoint: str) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``argv`` (a floor serving at ``mountpoint``) for the duration of the block, which
    gets the serving process."""
    server = subprocess.Popen(argv)
    try:
        deadline = time.monotonic() + MOUNT_TIMEOUT
        while not os.path.ismount(mountpoint):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the floor file system did not mount")
            time.sleep(0.05)
        yield server
    finally:
        subprocess.run(["fusermount3", "-u", "-z", mountpoint], capture_output=True)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
