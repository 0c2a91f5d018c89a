"""Run a command as ``nobody`` with no capabilities at all, the way a CSI driver runs a FUSE
daemon it hands a ``/dev/fuse`` descriptor to.

This Python may live under a directory others cannot enter (``/root/.pyenv``): the command then
runs in a private mount namespace where each such directory is replaced by an empty tmpfs
(mode 755) holding only the paths needed, bind-mounted back. The namespace also drops its copy
of the FUSE mountpoint, so that when the helper unmounts it the connection really ends (a copy
of the mount kept in another namespace would keep it open).
"""

from __future__ import annotations

import os
import shlex
import stat
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SETPRIV = [
    "setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
    "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs",
]  # fmt: skip


def _closed_dirs(paths: list[str]) -> dict[str, set[str]]:
    """Directory others cannot enter -> the names below it that the paths need."""
    found: dict[str, set[str]] = {}
    for path in paths:
        parts = Path(path).parts
        for i in range(1, len(parts) - 1):
            parent = Path(*parts[:i])
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                found.setdefault(str(parent), set()).add(parts[i])
                break
    return found


def nobody_command(command: list[str], mountpoint: str, stash: str) -> list[str]:
    """``command`` as nobody without capabilities, in a namespace that can reach this Python.

    ``stash`` is an empty directory the namespace may mount things on."""
    needed = [os.path.realpath(sys.executable), sys.prefix, sys.base_prefix, str(REPO)]
    script = ["set -e", f"umount -l {shlex.quote(mountpoint)}"]
    for n, (closed, names) in enumerate(sorted(_closed_dirs(needed).items())):
        for name in sorted(names):
            keep = shlex.quote(f"{stash}/{n}-{name}")
            inside = shlex.quote(f"{closed}/{name}")
            script += [f"mkdir -p {keep}", f"mount --bind {inside} {keep}"]
        script.append(f"mount -t tmpfs -o mode=755 zarrfs-test {shlex.quote(closed)}")
        for name in sorted(names):
            keep = shlex.quote(f"{stash}/{n}-{name}")
            inside = shlex.quote(f"{closed}/{name}")
            script += [f"mkdir {inside}", f"mount --move {keep} {inside}"]
    script.append("exec " + shlex.join([*SETPRIV, *command]))
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(script)]
