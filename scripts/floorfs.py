"""Running a floor file system (``listing_floor.py``, ``write_floor.py``) for one measurement.

A floor is a minimal pyfuse3 file system the benchmark compares zarrfs with; its script mounts
it in a child process (``--serve MOUNTPOINT``). ``serving`` starts that process, waits until
the mount is there, and always unmounts and reaps it, even when the measurement fails.
``proc_cpu`` (``proc_times``: its user and kernel parts) and ``children_cpu`` tell the CPU
seconds a process (a floor's server, the daemon) and this process' reaped children used so far;
the bench uses them too.
"""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import time
from collections.abc import Iterator

#: seconds a floor may take to mount
MOUNT_TIMEOUT = 30.0


def proc_times(pid: int) -> tuple[float, float]:
    """User and system (kernel: its copies from and to the page cache, page faults, the FUSE
    device) CPU seconds of a running process (``/proc/PID/stat``; 0, 0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of a running process (``proc_times``)."""
    return sum(proc_times(pid))


def children_cpu() -> float:
    """User + system CPU seconds of this process' waited-for children so far."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


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
