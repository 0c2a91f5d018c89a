"""Extended attributes and ``statfs`` (a mixin of ``ZarrOperations``).

- Extended attributes are the node's ``xattrs()``, all in the ``user.`` namespace; they are
  derived, so setting or removing one is ENOTSUP (which ``cp -a``/``rsync -X`` treat as "no
  xattr support", not as a failure). A name in another namespace is refused with ENOTSUP
  without asking the node.
- ``statfs`` reports 1 PiB of capacity (object stores have no fixed size), all free unless the
  mount is read-only.
"""

from __future__ import annotations

import errno
import os
from typing import Any

import pyfuse3

from zarrfs.fuse.inodes import Entry, InodeTable
from zarrfs.fuse.offload import Offload
from zarrfs.fuse.requests import checked_bytes, fail, translate

#: the namespace of every extended attribute a node has (``user.zarr.*``); other names
#: (``system.posix_acl_access``, ``security.selinux`` asked by ``ls -l``, ``security.capability``
#: by ``cp``) are refused with ENOTSUP without asking the node: the namespace is not supported,
#: which ``ls`` remembers per file system (with ENODATA it asks twice for every file it lists)
XATTR_PREFIX = b"user."
#: what ``statfs`` reports as capacity (object stores have no fixed size): 1 PiB
_STATFS_BYTES = 1 << 50
_STATFS_FRSIZE = 4096
#: ``statfs``'s ``f_bsize``, and ``st_blksize`` when a node has no preference: the kernel's
#: largest read request
DEFAULT_BLKSIZE = 128 * 1024


class AttributeHandlers:
    """``getxattr``/``listxattr``/``setxattr``/``removexattr``/``statfs`` over the state
    ``ZarrOperations`` sets up."""

    inodes: InodeTable
    offload: Offload
    latency: Any
    _ro: bool

    def _entry(self, inode: int) -> Entry:
        raise NotImplementedError  # ZarrOperations'

    @translate
    async def getxattr(self, inode: int, name: bytes, ctx: Any) -> bytes:
        entry = self._entry(inode)
        if not name.startswith(XATTR_PREFIX):  # ACLs, capabilities, SELinux: asked by ls -l
            raise fail(errno.ENOTSUP)  # "not supported here": ls stops asking for this mount
        values = await self.offload(entry.node.xattrs)
        value = values.get(os.fsdecode(name))
        if value is None:
            raise fail(pyfuse3.ENOATTR)
        return checked_bytes(value, "getxattr")

    @translate
    async def listxattr(self, inode: int, ctx: Any) -> list[bytes]:
        values = await self.offload(self._entry(inode).node.xattrs)
        return [os.fsencode(name) for name in values]

    @translate
    async def setxattr(self, inode: int, name: bytes, value: bytes, ctx: Any) -> None:
        raise fail(errno.ENOTSUP)

    @translate
    async def removexattr(self, inode: int, name: bytes, ctx: Any) -> None:
        values = await self.offload(self._entry(inode).node.xattrs)
        raise fail(errno.ENOTSUP if os.fsdecode(name) in values else pyfuse3.ENOATTR)

    @translate
    async def statfs(self, ctx: Any) -> pyfuse3.StatvfsData:
        data = pyfuse3.StatvfsData()
        data.f_bsize = DEFAULT_BLKSIZE
        data.f_frsize = _STATFS_FRSIZE
        data.f_blocks = _STATFS_BYTES // _STATFS_FRSIZE
        data.f_bfree = data.f_bavail = 0 if self._ro else data.f_blocks
        data.f_files = 1 << 32
        data.f_ffree = data.f_favail = 0 if self._ro else data.f_files - len(self.inodes)
        data.f_namemax = 255
        return data
