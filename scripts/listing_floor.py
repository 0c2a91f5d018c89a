#!/usr/bin/env python3
"""The floor for listing through pyfuse3 on this machine.

Mounts an in-memory pyfuse3 file system shaped like the benchmark's listing hierarchy (GROUPS
groups x ARRAYS arrays; each array directory holds the files zarrfs shows for a 1-D float32
array and a ``chunks/`` directory with one file) that answers every request in the event loop
from a dict, then times ``find MNT | wc -l`` and ``ls -lR MNT`` on it, each on a mount of its
own (the benchmark drops the caches before each, as before zarrfs's walks). No zarrfs code runs:
what it measures is the kernel round trips of a tree walk plus pyfuse3's own per-request cost,
which bound any pyfuse3 file system serving that tree.

    python scripts/listing_floor.py [--groups 100] [--arrays 100] [--walk find|ls]...
    # prints one JSON line
"""

from __future__ import annotations

import argparse
import errno
import itertools
import json
import stat
import subprocess
import sys
import tempfile
import time

from floorfs import serving

ARRAY_FILES = ("attributes.json", "data.btf", "data.hdr", "data.mhd", "data.nhdr", "data.nii",
               "data.npy", "data.raw", "data.tif", "info.json", "zarr.json")  # fmt: skip


def serve(mountpoint: str, groups: int, arrays: int) -> None:
    import pyfuse3
    import trio

    paths: dict[int, tuple[tuple[str, ...], bool]] = {pyfuse3.ROOT_INODE: ((), True)}
    inodes: dict[tuple[str, ...], int] = {(): pyfuse3.ROOT_INODE}
    numbers = itertools.count(pyfuse3.ROOT_INODE + 1)

    def inode_of(path: tuple[str, ...], is_dir: bool) -> int:
        ino = inodes.get(path)
        if ino is None:
            ino = inodes[path] = next(numbers)
            paths[ino] = (path, is_dir)
        return ino

    def children(path: tuple[str, ...]) -> list[tuple[str, bool]]:
        depth = len(path)
        if depth == 0:
            return [("zarr.json", False)] + [(f"g{g:03d}", True) for g in range(groups)]
        if depth == 1:
            return [("attributes.json", False), ("zarr.json", False)] + [
                (f"a{a:03d}", True) for a in range(arrays)
            ]
        if depth == 2:
            return sorted([(name, False) for name in ARRAY_FILES] + [("chunks", True)])
        return [("0", False)] if depth == 3 else []

    def attributes(ino: int) -> pyfuse3.EntryAttributes:
        _, is_dir = paths[ino]
        attrs = pyfuse3.EntryAttributes()
        attrs.st_ino = ino
        attrs.st_mode = (stat.S_IFDIR | 0o755) if is_dir else (stat.S_IFREG | 0o644)
        attrs.st_size = 0 if is_dir else 100
        attrs.attr_timeout = attrs.entry_timeout = 1.0
        return attrs

    class Floor(pyfuse3.Operations):
        async def getattr(self, inode: int, ctx: object = None) -> pyfuse3.EntryAttributes:
            return attributes(inode)

        async def lookup(self, parent: int, name: bytes, ctx: object = None) -> object:
            path = paths[parent][0]
            for child, is_dir in children(path):
                if child == name.decode():
                    return attributes(inode_of(path + (child,), is_dir))
            raise pyfuse3.FUSEError(errno.ENOENT)

        async def opendir(self, inode: int, ctx: object) -> int:
            return inode

        async def readdir(self, fh: int, start: int, token: object) -> None:
            path = paths[fh][0]
            entries = children(path)
            for k in range(start, len(entries)):
                name, is_dir = entries[k]
                attrs = attributes(inode_of(path + (name,), is_dir))
                if not pyfuse3.readdir_reply(token, name.encode(), attrs, k + 1):
                    return

        async def getxattr(self, inode: int, name: bytes, ctx: object) -> bytes:
            raise pyfuse3.FUSEError(errno.ENOTSUP)

    pyfuse3.init(Floor(), mountpoint, {"fsname=listing-floor"})
    try:
        trio.run(pyfuse3.main)
    finally:
        pyfuse3.close(unmount=False)


def _timed(cmd: str) -> tuple[float, str]:
    began = time.perf_counter()
    out = subprocess.run(cmd, shell=True, check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - began, out


#: the walks timed, each on a fresh mount: name -> (command, key of its time in the output)
WALKS = {
    "find": ("find '{mnt}' | wc -l", "find_s"),
    "ls": ("ls -lR '{mnt}' > /dev/null", "ls_lR_s"),
}


def measure(groups: int, arrays: int, walks: list[str]) -> dict[str, float | int]:
    """Each walk of ``walks`` on a fresh mount (as zarrfs's walks are: a second walk on the
    same mount finds the kernel's inodes and dentries there already, ~6 % faster here)."""
    out: dict[str, float | int] = {}
    for walk in walks:
        cmd, key = WALKS[walk]
        with tempfile.TemporaryDirectory(prefix="listing-floor-") as mnt:
            argv = [sys.executable, __file__, "--serve", mnt, "--groups", str(groups),
                    "--arrays", str(arrays)]  # fmt: skip
            with serving(argv, mnt):
                out[key], printed = _timed(cmd.format(mnt=mnt))
            if walk == "find":
                out["entries"] = int(printed.strip())
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--groups", type=int, default=100)
    p.add_argument("--arrays", type=int, default=100)
    p.add_argument(
        "--walk", action="append", choices=sorted(WALKS),
        help="a walk to time (repeatable; default: find, then ls -lR), each on a fresh mount",
    )  # fmt: skip
    p.add_argument("--serve", metavar="MOUNTPOINT", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        serve(args.serve, args.groups, args.arrays)
        return 0
    print(json.dumps(measure(args.groups, args.arrays, args.walk or ["find", "ls"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
