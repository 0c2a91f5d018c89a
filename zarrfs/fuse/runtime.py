"""The daemon's process environment: logging, systemd notification, pid files, mount table.

Invariants:
- Logging goes to stderr. When stderr is the journal (``JOURNAL_STREAM`` names the same
  device:inode as fd 2) every line starts with ``<N>``, the syslog priority journald reads; else
  lines carry a timestamp and level.
- ``sd_notify`` is a best-effort datagram to ``$NOTIFY_SOCKET`` (no dependency on libsystemd); it
  never raises.
- One pid file per mountpoint in ``runtime_dir()``: ``$ZARRFS_RUNTIME_DIR`` if set, else
  ``/run/zarrfs`` for root, ``$XDG_RUNTIME_DIR/zarrfs`` or ``/tmp/zarrfs-<uid>`` otherwise. The
  daemon writes it once the mount is live and removes it when it exits; ``zarrfs umount`` reads it
  to wait for that exit. The daemon's log file (when it runs detached) sits next to it, and so
  does its result file: how it ended (data it could not store, scratch files it dropped), which
  ``zarrfs umount`` reports once the daemon has exited.
- Mount-table questions are answered from ``/proc/self/mountinfo``, never by touching the
  mountpoint (a dead FUSE mount makes ``stat`` fail or hang).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import select
import socket
import sys
import time
from pathlib import Path
from typing import Any

from zarrfs.core.errors import ZarrFSError

log = logging.getLogger(__name__)

FSTYPE = "fuse.zarrfs"
#: a mountpoint naming a ``/dev/fuse`` descriptor that someone else opened and mounted
_FD_MOUNTPOINT = re.compile(r"^/dev/fd/(\d+)$")


class MountError(ZarrFSError):
    """The mountpoint cannot be used, the kernel refused the mount, or unmounting failed."""


def fuse_fd(mountpoint: str) -> int | None:
    """N for a ``/dev/fd/N`` mountpoint (libfuse >= 3.3 serves such a descriptor as given:
    a privileged helper opened ``/dev/fuse`` and mounted it), else None."""
    match = _FD_MOUNTPOINT.match(mountpoint)
    return int(match.group(1)) if match else None


def read_status(fd: int, timeout: float) -> str:
    """One line from a daemon's status pipe: ``live``, ``error ...``, "" (EOF) or "timeout"."""
    data = b""
    deadline = time.monotonic() + timeout
    while b"\n" not in data:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "timeout"
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
    return data.split(b"\n", 1)[0].decode(errors="replace")


_PRIORITIES = {
    logging.DEBUG: 7,
    logging.INFO: 6,
    logging.WARNING: 4,
    logging.ERROR: 3,
    logging.CRITICAL: 2,
}


class _JournalFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        priority = _PRIORITIES.get(record.levelno, 6)
        text = super().format(record)
        return "\n".join(f"<{priority}>{line}" for line in text.splitlines())


def stderr_is_journal() -> bool:
    """True when stderr is connected to journald (systemd sets ``JOURNAL_STREAM``)."""
    stream = os.environ.get("JOURNAL_STREAM", "")
    device, _, inode = stream.partition(":")
    try:
        st = os.fstat(2)
    except OSError:
        return False
    if not (device.isdigit() and inode.isdigit()):
        return False
    return (st.st_dev, st.st_ino) == (int(device), int(inode))


def setup_logging(level: str) -> None:
    """Send zarrfs' (and pyfuse3's) log records to stderr at ``level``."""
    handler = logging.StreamHandler(sys.stderr)
    if stderr_is_journal():
        handler.setFormatter(_JournalFormatter("%(name)s: %(message)s"))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


def sd_notify(message: str) -> bool:
    """Send ``message`` (e.g. ``"READY=1"``) to systemd; False when not run by systemd."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(message.encode(), address)
    except OSError as exc:
        log.warning("cannot notify systemd (%s): %s", address, exc)
        return False
    return True


def runtime_dir() -> Path:
    """Where pid and log files live (created 0700 on demand)."""
    override = os.environ.get("ZARRFS_RUNTIME_DIR")
    if override:
        path = Path(override)
    elif os.geteuid() == 0:
        path = Path("/run/zarrfs")
    elif os.environ.get("XDG_RUNTIME_DIR"):
        path = Path(os.environ["XDG_RUNTIME_DIR"]) / "zarrfs"
    else:
        path = Path(f"/tmp/zarrfs-{os.geteuid()}")
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def _key(mountpoint: str) -> str:
    slug = mountpoint.strip("/").replace("/", "-")[-60:] or "root"
    digest = hashlib.blake2b(os.fsencode(mountpoint), digest_size=4).hexdigest()
    return f"{slug}.{digest}"


def pid_file(mountpoint: str) -> Path:
    return runtime_dir() / f"{_key(mountpoint)}.pid"


def log_file(mountpoint: str) -> Path:
    return runtime_dir() / f"{_key(mountpoint)}.log"


def write_pid_file(mountpoint: str) -> Path | None:
    """Record this daemon for ``zarrfs umount``; not for a ``/dev/fd/N`` mountpoint (no path
    to key it by, and descriptor numbers repeat across daemons)."""
    if fuse_fd(mountpoint) is not None:
        return None
    path = pid_file(mountpoint)
    scratch = path.with_suffix(f".tmp{os.getpid()}")
    scratch.write_text(f"{os.getpid()}\n{mountpoint}\n")
    scratch.replace(path)
    return path


def result_file(mountpoint: str) -> Path:
    return runtime_dir() / f"{_key(mountpoint)}.result"


def write_result(mountpoint: str, code: int, problems: list[str], notes: list[str]) -> None:
    """Leave how the daemon ended for ``zarrfs umount``, which waits for the daemon to exit and
    then reports it: ``problems`` (data that could not be stored: exit status 1) and ``notes``
    (what the mount held that was never meant to be stored). Keyed by mountpoint and pid."""
    if fuse_fd(mountpoint) is not None:
        return
    doc = {"pid": os.getpid(), "code": code, "problems": problems, "notes": notes}
    try:
        path = result_file(mountpoint)
        scratch = path.with_suffix(f".tmp{os.getpid()}")
        scratch.write_text(json.dumps(doc))
        scratch.replace(path)
    except OSError as exc:
        log.warning("cannot record the result for zarrfs umount: %s", exc)


def read_result(mountpoint: str, pid: int) -> dict[str, Any] | None:
    """What ``write_result`` left for the daemon ``pid`` (None if it left nothing)."""
    try:
        doc = json.loads(result_file(mountpoint).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("pid") == pid else None


def report_result(mountpoint: str, pid: int | None) -> int:
    """For ``zarrfs umount``, once daemon ``pid`` has exited: say on stderr what it could not
    store (then return 1) and which scratch files it dropped; 0 otherwise."""
    result = read_result(mountpoint, pid) if pid is not None else None
    if result is None:
        return 0
    result_file(mountpoint).unlink(missing_ok=True)  # reported once
    for note in result.get("notes") or ():
        print(
            f"zarrfs: dropped (a scratch file: memory only, never stored): {note}", file=sys.stderr
        )
    log_path = log_file(mountpoint)
    where = f" (the daemon's log: {log_path})" if log_path.exists() else ""
    for problem in result.get("problems") or ():
        print(f"zarrfs: {problem}{where}", file=sys.stderr)
    return 1 if result.get("code") else 0


def remove_pid_file(mountpoint: str) -> None:
    if fuse_fd(mountpoint) is not None:
        return  # never written (see ``write_pid_file``)
    try:
        path = pid_file(mountpoint)
        if path.read_text().split("\n", 1)[0] == str(os.getpid()):
            path.unlink()
    except OSError:
        pass


def process_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie has finished: it only waits to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] not in (b"Z", b"X")


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [os.fsdecode(arg) for arg in f.read().split(b"\0") if arg]
    except OSError:
        return []


def _serves(pid: int, mountpoint: str) -> bool:
    """Whether process ``pid`` is a zarrfs daemon given ``mountpoint`` (an absolute path) on its
    command line, as written there or relative to the directory it was started in (``zarrfs
    mount -f store mnt``)."""
    args = _cmdline(pid)
    if "umount" in args or not any("zarrfs" in a for a in args):
        return False
    if mountpoint in args:
        return True
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    return any(
        not os.path.isabs(a) and os.path.normpath(os.path.join(cwd, a)) == mountpoint for a in args
    )


def find_daemon(mountpoint: str) -> int | None:
    """The pid of the daemon serving ``mountpoint``: its pid file, else a scan of /proc."""
    try:
        pid = int(pid_file(mountpoint).read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        pid = None
    if pid is not None and process_alive(pid) and _serves(pid, mountpoint):
        return pid
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid() and _serves(int(entry), mountpoint):
            if process_alive(int(entry)):
                return int(entry)
    return None


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal ``\\NNN``."""
    raw = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), os.fsencode(field))
    return os.fsdecode(raw)


def mount_info(mountpoint: str) -> tuple[str, str, int] | None:
    """``(fstype, source, device number)`` of the last mount on ``mountpoint``, or None."""
    found = None
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            fields = line.split()
            if len(fields) < 10 or _unescape(fields[4]) != mountpoint:
                continue
            sep = fields.index("-", 6)
            major, minor = fields[2].split(":")
            found = (
                fields[sep + 1],
                _unescape(fields[sep + 2]),
                os.makedev(int(major), int(minor)),
            )
    return found


def set_readahead(mountpoint: str, nbytes: int) -> bool:
    """Set the kernel read-ahead window of the FUSE mount at ``mountpoint``.

    Sequential readers then get large read requests (up to the kernel's FUSE maximum, 1 MiB)
    and several in flight, instead of 128 KiB at a time. Needs root (sysfs); returns False
    when it cannot be set, which only costs throughput."""
    # the device number from mountinfo, never from a stat: the daemon must not send requests
    # to its own mount from the thread that serves it
    try:
        # resolve the parent only: realpath() of the mountpoint itself would lstat the mount
        parent, name = os.path.split(os.path.abspath(mountpoint))
        info = mount_info(os.path.join(os.path.realpath(parent), name))
    except OSError:
        info = None
    if info is None:
        return False
    dev = info[2]
    try:
        with open(f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb", "w") as f:
            f.write(str(max(4, nbytes // 1024)))
        return True
    except OSError as exc:
        log.debug("cannot set the read-ahead of %s: %s", mountpoint, exc)
        return False


#: glibc ``mallopt`` parameters
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8
#: buffers up to this size (read replies, write requests, gathered pieces: the kernel's
#: requests are at most 1 MiB) come from the heap; anything larger gets its own mapping
MALLOC_MMAP_THRESHOLD = (1 << 20) + (256 << 10)
#: free heap memory kept for reuse before it is returned to the system, per arena
MALLOC_TRIM_THRESHOLD = 8 << 20
#: malloc arenas: the daemon's threads mostly run under the GIL, so more buy no parallelism
MALLOC_ARENAS = 4


def tune_malloc() -> bool:
    """Keep request-sized buffers in the heap instead of a fresh ``mmap`` per request.

    By default glibc serves every allocation above its (adaptive) mmap threshold with a new
    mapping and returns it on free, so each 1 MiB read reply costs 256 page faults and the
    zeroing of a megabyte: measured ~900 us per request vs ~60 us with a heap buffer. The
    retained heap is bounded by ``MALLOC_TRIM_THRESHOLD`` per arena and ``MALLOC_ARENAS``
    arenas (<= 32 MiB). Chunk-sized buffers (above the threshold, just over a request) still
    get their own mappings, returned to the system when a chunk leaves the cache: with a
    threshold of 4 MiB, the 2 MiB inner chunks of a sharded array (and their encoded bytes)
    came from the heap and fragmented it, and a cold ``cat`` of the benchmark's sharded array
    peaked at 640-657 MiB RSS for a 512 MiB cache, vs 553-572 MiB with their own mappings.
    Returns False where glibc is not the C library (the defaults then stay)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    ok = True
    for param, value in (
        (_M_ARENA_MAX, MALLOC_ARENAS),
        (_M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD),
        (_M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD),
    ):
        ok = bool(mallopt(param, value)) and ok
    _no_numpy_hugepages()
    return ok


def _no_numpy_hugepages() -> None:
    """Chunk-sized arrays get ordinary pages, not numpy's ``MADV_HUGEPAGE``.

    The daemon allocates and frees chunk-sized arrays all the time (decoded units, dirty
    copies). With transparent huge pages in ``madvise`` mode, each fresh allocation that asks
    for huge pages makes the faulting thread compact memory first; under page-cache pressure
    (a large copy in progress) that stalled writes by tens of milliseconds. Measured on a full
    overwrite through the mount: 295-441 MiB/s with huge pages, 444-487 without; reads
    unchanged."""
    try:
        from numpy._core.multiarray import _set_madvise_hugepage  # type: ignore[attr-defined]
    except ImportError:  # numpy 1.x
        try:
            from numpy.core.multiarray import (  # type: ignore[attr-defined,no-redef]
                _set_madvise_hugepage,
            )
        except ImportError:
            return
    _set_madvise_hugepage(False)
