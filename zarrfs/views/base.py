"""The virtual-node interface the FUSE layer serves.

A mounted tree is made of ``VDir`` and ``VFile`` nodes. The FUSE layer owns inode numbers
(stable per path), lookup counts and file handles; the nodes own content. Every method may block
(store I/O, decoding) and is called from a worker thread; every method is thread-safe. Failures
are raised as ``zarrfs.core.errors`` exceptions, which the FUSE layer maps to errno.

Opening a file returns a ``VHandle``; reads and writes go through the handle so per-open state
(a metadata document being edited, a scratch file) lives there and is committed on ``release``.

Kernel caching: ``VFile.cache_token()`` is an opaque value that changes whenever the content
may have changed behind the kernel's back (another writer, a metadata change). The FUSE layer
keeps the kernel page cache on open only when the token is unchanged since the previous open.
"""

from __future__ import annotations

import stat as stat_mod
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from zarrfs.core.errors import InvalidWriteError, ReadOnlyError

#: the default timestamp of nodes with no better one: when this process started serving
MOUNT_TIME_NS = time.time_ns()


#: the largest size a file can report (``off_t``): a view of more (the ``group.nc`` of a group
#: whose arrays add up to more, the ``data.npy`` of an array of almost as many bytes) is left
#: out of listings and answers EFBIG (``fuse/nodecalls.py``, ``fuse/operations.py``)
MAX_FILE_SIZE = 2**63 - 1


@dataclass
class Stat:
    """What ``getattr`` reports for a node (the FUSE layer adds inode, uid, gid, mode mask)."""

    is_dir: bool
    size: int = 0
    #: bytes actually stored (for ``st_blocks``); None means "same as size"
    stored_bytes: int | None = None
    writable: bool = False
    #: stable unless the content changes (tools compare it: vim, make, rsync)
    mtime_ns: int = field(default_factory=lambda: MOUNT_TIME_NS)
    #: preferred I/O size (``st_blksize``); 0 lets the FUSE layer choose
    blksize: int = 0

    @property
    def mode(self) -> int:
        if self.is_dir:
            return stat_mod.S_IFDIR | (0o755 if self.writable else 0o555)
        return stat_mod.S_IFREG | (0o644 if self.writable else 0o444)


class VNode(ABC):
    """A file or directory in the mounted tree."""

    is_dir: bool = False

    @abstractmethod
    def stat(self) -> Stat: ...

    def xattrs(self) -> dict[str, bytes]:
        """Extended attributes, all in the ``user.`` namespace (``user.zarr.shape``): the FUSE
        layer answers names outside it with ENODATA without calling this."""
        return {}

    def warm(self) -> None:
        """Load now what listing this node's own children will need (called, concurrently
        for siblings, while the parent directory is listed); a failure here is ignored."""


class VHandle(ABC):
    """One open file. ``read``/``write`` take byte offsets; short reads only at end of file.

    ``read`` may return a read-only ``memoryview`` instead of ``bytes`` (the FUSE layer sends
    either without copying); the handle must not change the memory behind it afterwards."""

    @abstractmethod
    def read(self, offset: int, size: int) -> bytes | memoryview: ...

    def read_cached(self, offset: int, size: int) -> bytes | memoryview | None:
        """``read`` if it can be answered from memory without waiting (no store I/O, no
        decoding, no lock held across either), else None. The FUSE layer calls it in its event
        loop before sending the request to a worker thread, which saves the thread round trip
        (about 150 us) on every cache hit."""
        return None

    def write(self, offset: int, data: bytes) -> int:
        raise ReadOnlyError("file is read-only")

    def write_cached(self, offset: int, data: bytes) -> bool:
        """``write`` of all of ``data`` if it can be done in memory without waiting (see
        ``read_cached``); False if not, having changed nothing or applied part of ``data``
        (which ``write`` then applies again, with the same result)."""
        return False

    def flush(self) -> None:
        """Make every byte written through any handle of this file durable (fsync)."""

    def release(self) -> None:
        """Close: commit (and validate) what was written; errors are reported to close()."""


class VFile(VNode):
    """A regular file."""

    #: serve through direct I/O (content generated per read, size unknown in advance)
    direct_io: bool = False

    @abstractmethod
    def open(self, write: bool, truncate: bool) -> VHandle:
        """Open for reading (and writing if ``write``). ``truncate`` is O_TRUNC."""

    def truncate(self, size: int) -> None:
        """Change the size (``truncate(2)``); most views refuse."""
        raise InvalidWriteError("this file has a fixed size")

    def cache_token(self) -> object:
        """Changes whenever content may change behind the kernel's back (None: never cache)."""
        return None


class VDir(VNode):
    """A directory."""

    is_dir = True
    #: the listing and the children's attributes come from metadata already read (no store
    #: request per child): the FUSE layer lists such a directory along with its parent
    lists_from_metadata = False

    @abstractmethod
    def names(self) -> list[str]:
        """Child names in a stable order (readdir offsets index this list)."""

    @abstractmethod
    def lookup(self, name: str) -> VNode | None:
        """The child called ``name``, or None."""

    def mkdir(self, name: str) -> VDir:
        raise ReadOnlyError("cannot create a directory here")

    def create(self, name: str) -> VFile:
        raise ReadOnlyError("cannot create a file here")

    def unlink(self, name: str) -> None:
        raise ReadOnlyError("cannot remove files here")

    def rmdir(self, name: str) -> None:
        raise ReadOnlyError("cannot remove directories here")

    def rename(self, name: str, new_parent: VDir, new_name: str) -> None:
        raise ReadOnlyError("cannot rename here")

    def refresh(self, read_since: float | None = None) -> None:
        """Re-read the store (close-to-open revalidation on opendir/lookup). Metadata read at
        or after ``read_since`` (``time.monotonic()``) is current enough: it was read during
        the caller's own request, so checking it again could only see a change that raced
        that request anyway."""


class BytesHandle(VHandle):
    """A read handle over bytes fixed at open time."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, offset: int, size: int) -> bytes:
        return self.data[offset : offset + size]

    def read_cached(self, offset: int, size: int) -> bytes:
        return self.read(offset, size)


class GeneratedFile(VFile):
    """A read-only file whose content is computed from the current state on every open."""

    direct_io = True

    def __init__(self, render: Any, size: Any = None) -> None:
        self._render = render
        #: ``size()`` equals ``len(render())`` for the same state, computed without rendering
        self._size = size
        self._lock = threading.Lock()

    def stat(self) -> Stat:
        size = self._size() if self._size is not None else len(self._render())
        return Stat(is_dir=False, size=size)

    def open(self, write: bool, truncate: bool) -> VHandle:
        if write:
            raise ReadOnlyError("this file is generated and read-only")
        return BytesHandle(self._render())
