"""zarrfs@.service's ExecStart run as systemd runs it: READY=1 only once the mount answers, and
SIGTERM with dirty data gives STOPPING=1, a flush into the store, an unmount and exit 0; the log
goes to "the journal" with syslog priorities.

tests/fuse/test_fuse_cli.py checks the notification protocol itself on the fake tree; here it
is the unit's own command line, on a real store, with data still dirty at SIGTERM, once as is
and once inside the unit's sandbox (hardened_exec.py)."""

from __future__ import annotations

import errno
import os
import re
import signal
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest
from systemd_helpers import (
    ARRAY,
    SHAPE,
    exec_start,
    hardened_prefix,
    is_mounted,
    read_store,
    require,
    zarrfs_env,
)

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("sandbox", ["plain", "hardened"])
def test_ready_when_live_then_sigterm_flushes_dirty_data_and_exits_0(
    tmp_path: Path, store, mountpoint: Path, cleanup, sandbox: str
) -> None:
    root, model = store
    config = {
        "STORE": str(root),
        "MOUNTPOINT": str(mountpoint),
        "OPTIONS": "writeback=3600,log_level=info",  # dirty data waits for close or SIGTERM
    }
    argv = exec_start(config)
    if sandbox == "hardened":
        require("systemd-analyze")
        argv = hardened_prefix(tmp_path) + argv
    address = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(30)
    journal = tmp_path / "journal"
    with open(journal, "wb") as err:
        st = os.fstat(err.fileno())
        env = zarrfs_env(tmp_path, NOTIFY_SOCKET=address, JOURNAL_STREAM=f"{st.st_dev}:{st.st_ino}")
        proc = cleanup.popen(
            subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=env)
        )
    fd = None
    try:
        ready = sock.recv(4096).decode()
        assert ready.split("\n")[0] == "READY=1", ready
        # the first message, and the mount answers the moment it arrives
        assert is_mounted(mountpoint)
        # one descriptor for everything: the release of another one would flush the array
        fd = os.open(mountpoint / ARRAY / "data.raw", os.O_RDWR)
        assert os.pread(fd, model.nbytes, 0) == model.tobytes()

        patch = np.full(40, 0xBEEF, dtype="<u2")
        offset = 5 * SHAPE[1] + 3  # elements; spans two chunks
        assert os.pwrite(fd, patch.tobytes(), offset * 2) == patch.nbytes
        assert np.array_equal(read_store(root), model)  # still dirty: only in the daemon

        proc.send_signal(signal.SIGTERM)
        assert sock.recv(4096).decode() == "STOPPING=1"
        assert proc.wait(timeout=60) == 0
        with pytest.raises(OSError) as late:  # nothing written after the stop is lost silently
            os.pwrite(fd, b"\0\0", 0)
        assert late.value.errno == errno.ENOTCONN
    finally:
        sock.close()
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass  # the connection is gone; the daemon flushed before it exited
    expected = model.copy()
    expected.reshape(-1)[offset : offset + patch.size] = patch
    assert np.array_equal(read_store(root), expected)
    assert not is_mounted(mountpoint)

    lines = journal.read_text().splitlines()
    assert lines and all(re.match(r"<[0-7]>", line) for line in lines), lines
    assert any(line.startswith("<6>zarrfs.fuse.daemon: mounted") for line in lines), lines
    assert any(line.startswith("<6>zarrfs.fuse.daemon: SIGTERM received") for line in lines)
    assert not [line for line in lines if line.startswith("<7>")]  # log_level=info
