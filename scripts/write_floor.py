#!/usr/bin/env python3
"""The floor for a full overwrite through pyfuse3 on this machine.

Mounts a pyfuse3 file system with one file, ``data.raw``, of SIZE bytes, then times the
bench's overwrite on it: ``dd if=SRC of=MNT/data.raw bs=1M conv=notrunc,fsync`` followed by
``sync`` (as the bench times every engine). No zarrfs code runs. Two kinds of file:

- ``memory``: every write is copied into one preallocated buffer (touched once before the
  timing, so no page faults), in the event loop; ``fsync`` does nothing. What it measures is
  the kernel round trips of 1 MiB writes plus pyfuse3's own per-request cost (the request
  copied into a ``bytes``), which bound any pyfuse3 file system taking these writes;
- ``file``: every write goes to a real file (``pwrite`` in the event loop, the page cache),
  in the directory given by ``--dir`` (the store's disk), and ``fsync`` fsyncs it in a worker
  thread. What it adds is one more copy and the disk: the floor of any pyfuse3 file system
  that stores the bytes as they come and keeps the durability promise.

``dd`` opens the file for writing only, which the floor serves with ``direct_io`` (the
kernel passes each write from ``dd``'s buffer, not through the page cache), as zarrfs does.

SRC is read once before the timing, so it comes from the page cache. After the timing the file
is read back through the mount and compared with SRC (``same``). ``cpu_s``: the CPU seconds
the floor's server and ``dd`` used in the timing (the transport's CPU cost).

    python scripts/write_floor.py SRC [--dir DIR] [--kind memory,file]   # prints one JSON line
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import stat
import subprocess
import sys
import tempfile
import time

from floorfs import children_cpu, proc_cpu, serving

INODE = 2
NAME = b"data.raw"


def serve(mountpoint: str, size: int, kind: str, directory: str) -> None:
    import pyfuse3
    import trio

    buf = bytearray(size) if kind == "memory" else None
    view = memoryview(buf) if buf is not None else None
    if view is not None:
        view[:] = b"\1" * size  # fault every page in before the timing
    fd = -1
    if kind == "file":
        fd, path = tempfile.mkstemp(prefix="write-floor-", dir=directory)
        os.unlink(path)
        os.ftruncate(fd, size)

    def attributes(ino: int) -> pyfuse3.EntryAttributes:
        attrs = pyfuse3.EntryAttributes()
        attrs.st_ino = ino
        if ino == pyfuse3.ROOT_INODE:
            attrs.st_mode = stat.S_IFDIR | 0o755
        else:
            attrs.st_mode = stat.S_IFREG | 0o644
            attrs.st_size = size
        attrs.attr_timeout = attrs.entry_timeout = 1.0
        return attrs

    class Floor(pyfuse3.Operations):
        async def getattr(self, inode: int, ctx: object = None) -> pyfuse3.EntryAttributes:
            return attributes(inode)

        async def lookup(self, parent: int, name: bytes, ctx: object = None) -> object:
            if parent == pyfuse3.ROOT_INODE and name == NAME:
                return attributes(INODE)
            raise pyfuse3.FUSEError(errno.ENOENT)

        async def open(self, inode: int, flags: int, ctx: object) -> pyfuse3.FileInfo:
            # as zarrfs serves a descriptor opened for writing only: past the page cache
            return pyfuse3.FileInfo(fh=inode, direct_io=flags & os.O_ACCMODE == os.O_WRONLY)

        async def write(self, fh: int, off: int, data: bytes) -> int:
            if off + len(data) > size:
                raise pyfuse3.FUSEError(errno.EFBIG)
            if view is not None:
                view[off : off + len(data)] = data
            else:
                os.pwrite(fd, data, off)
            return len(data)

        async def read(self, fh: int, off: int, length: int) -> bytes:
            if view is not None:
                return bytes(view[off : off + length])
            return os.pread(fd, length, off)

        async def fsync(self, fh: int, datasync: bool) -> None:
            if fd >= 0:
                await trio.to_thread.run_sync(os.fsync, fd)

        async def flush(self, fh: int) -> None:
            pass

        async def release(self, fh: int) -> None:
            pass

        async def setattr(self, inode: int, attr: object, fields: object, fh: object,
                          ctx: object) -> pyfuse3.EntryAttributes:  # fmt: skip
            return attributes(inode)

        async def getxattr(self, inode: int, name: bytes, ctx: object) -> bytes:
            raise pyfuse3.FUSEError(errno.ENOTSUP)

    pyfuse3.init(Floor(), mountpoint, {"fsname=write-floor"})
    try:
        trio.run(pyfuse3.main)
    finally:
        pyfuse3.close(unmount=False)


def measure(src: str, kind: str, directory: str) -> dict[str, float | str | bool]:
    size = os.path.getsize(src)
    subprocess.run(["cat", src], stdout=subprocess.DEVNULL, check=True)  # into the page cache
    with tempfile.TemporaryDirectory(prefix="write-floor-") as mnt:
        argv = [sys.executable, __file__, src, "--serve", mnt, "--kind", kind, "--dir", directory]
        with serving(argv, mnt) as server:
            target = os.path.join(mnt, NAME.decode())
            cpu0 = proc_cpu(server.pid) + children_cpu()
            began = time.perf_counter()
            subprocess.run(
                ["dd", f"if={src}", f"of={target}", "bs=1M", "conv=notrunc,fsync", "status=none"],
                check=True,
            )
            wrote = time.perf_counter()
            os.sync()
            done = time.perf_counter()
            cpu = proc_cpu(server.pid) + children_cpu() - cpu0
            seconds = done - began
            # untimed: what the floor took is what dd wrote (the floor really stores the bytes)
            same = subprocess.run(["cmp", "-s", src, target]).returncode == 0
            return {
                "same": same,
                "kind": kind,
                "seconds": seconds,
                "dd_s": wrote - began,
                "sync_s": done - wrote,
                "mib_s": size / (1 << 20) / seconds,
                "cpu_s": cpu,
            }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("src", help="the file dd copies (its size is the file's size)")
    p.add_argument("--dir", default=tempfile.gettempdir(), help="where the 'file' kind writes")
    p.add_argument("--kind", default="memory,file", help="memory, file or both")
    p.add_argument("--serve", metavar="MOUNTPOINT", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        serve(args.serve, os.path.getsize(args.src), args.kind, args.dir)
        return 0
    for kind in args.kind.split(","):
        print(json.dumps(measure(args.src, kind, args.dir)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
