"""Temporary files of a directory store left by a process that died: found and removed.

A crash (power loss, ``SIGKILL``, the OOM killer) between writing a temporary file and
renaming it over its key leaves the file behind: ``.zarrfs-tmp-<token><random>``, never
listed as a key and never read. Such files can be large (a shard being built from parked
inner chunks, a chunk written through), so a store that only ever gained them would fill
its disk unseen.

Protocol (``claim``, ``alone``, ``remove_leftovers``):
- every temporary file a process creates carries the process's token (``TOKEN``, new in a
  forked child) right after the prefix (``localgroup.create_temp``);
- every writable ``LocalStore`` holds a read lock of its own open file description
  (``F_OFD_SETLK``) on its root directory, taken at its first use of the root (before it
  creates any temporary file) and held until it closes the root; a process that dies
  loses it;
- a listing that meets temporary names in a directory asks (``F_OFD_GETLK``, after reading
  the names) whether any other open file description holds a lock on the root. If none
  does, no other writer, in any process, has the store open, and none had it when the names
  were read (it locks before creating a file), so every temporary file not named with this
  process's token is a leftover: those that are regular files are removed (``unlinkat``
  relative to the directory, no link followed), each logged with its size;
- a store that is read-only, could not lock (some network file systems), or is not alone
  removes nothing; this process's own temporary files are never removed. Writers of
  releases before this module take no lock, so they are not seen.
"""

from __future__ import annotations

import fcntl
import logging
import os
import secrets
import stat
import struct
from collections.abc import Iterable

log = logging.getLogger(__name__)

#: marks the temporary files of this process (after the prefix)
TOKEN = secrets.token_hex(4)


def _new_token() -> None:
    global TOKEN
    TOKEN = secrets.token_hex(4)


os.register_at_fork(after_in_child=_new_token)

#: ``struct flock``: type, whence, start, length (0: the whole file), pid (0 for OFD locks)
_FLOCK = "hhqqi4x"


def _lock_request(kind: int) -> bytes:
    return struct.pack(_FLOCK, kind, os.SEEK_SET, 0, 0, 0)


def claim(root_fd: int) -> bool:
    """Take this store's read lock on the root (held while ``root_fd`` stays open); False
    where the file system cannot (the store then never removes leftovers)."""
    try:
        fcntl.fcntl(root_fd, fcntl.F_OFD_SETLK, _lock_request(fcntl.F_RDLCK))
    except (OSError, AttributeError):  # no OFD locks here
        return False
    return True


def alone(root_fd: int) -> bool:
    """True if no other open file description holds a lock on the root (no other writer of
    the store is open, in any process)."""
    try:
        got = fcntl.fcntl(root_fd, fcntl.F_OFD_GETLK, _lock_request(fcntl.F_WRLCK))
    except OSError:
        return False
    return struct.unpack(_FLOCK, got)[0] == fcntl.F_UNLCK


def leftover(name: str, prefix: str) -> bool:
    """Whether the temporary file ``name`` is not one of this process's."""
    return not name.startswith(prefix + TOKEN)


def remove_leftovers(dir_fd: int, names: Iterable[str], where: str) -> None:
    """Remove the files ``names`` (leftovers, read from the directory ``dir_fd`` before the
    caller saw the store ``alone``; ``where``, for the log) that are regular files; never
    raises."""
    for name in names:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                continue
            os.unlink(name, dir_fd=dir_fd)
        except OSError:  # gone already, or not ours to remove: left as it is
            continue
        log.warning(
            "removed %s/%s (%d bytes): a temporary file left by a zarrfs process that ended "
            "before it was stored",
            where or ".",
            name,
            st.st_size,
        )


def find(root: str, prefix: str) -> list[tuple[str, int]]:
    """(path relative to ``root``, size) of every regular file below the directory ``root``
    whose name starts with ``prefix``, in walk order; links are neither followed nor
    reported (``zarrfs check`` lists the leftovers this way, without removing any)."""
    out: list[tuple[str, int]] = []
    for directory, _, files in os.walk(root, followlinks=False):
        for name in files:
            if not name.startswith(prefix):
                continue
            path = os.path.join(directory, name)
            try:
                st = os.lstat(path)
            except OSError:  # gone meanwhile
                continue
            if stat.S_ISREG(st.st_mode):
                out.append((os.path.relpath(path, root), st.st_size))
    return out
