"""A small in-memory virtual tree for the FUSE tests (test-only).

The daemon serves it when ``$ZARRFS_TEST_TREE_FACTORY=fuse_fake_tree:open_fake_tree`` (see
``zarrfs.fuse.daemon.TEST_TREE_FACTORY_ENV``). Its nodes misbehave on purpose:

    /hello.txt          read-only text
    /data.bin           1 MiB writable, fixed size, content PATTERN; 1000 stored bytes; xattrs
    /corrupt.bin        1 MiB; reads touching [BAD_START, BAD_END) raise CorruptDataError(BAD_KEY)
    /slow.bin           every read sleeps SLOW_S seconds (past a short -o timeout=)
    /boom.bin           reads below offset 4096 raise ZeroDivisionError (a bug in a node)
    /flushfail.bin      writable; flush (close, fsync) raises StoreError
    /big/               MANY read-only files f00000 ... (created on lookup)
    /sub/deep/leaf.txt  nesting
    /scratch/           a writable directory: create, mkdir, unlink, rmdir, rename
    /edit/doc.json      commits on flush, re-rendered (``render``: the size changes); renaming
                        a file over it commits that file's content into the same node
    /edit/shadow.txt    read-only, derived from doc.json: its size changes when doc.json commits

``fake://broken`` fails to open with StoreError. When ``$ZARRFS_FAKE_EVENTS`` names a file, the
root appends ``flush_all`` and ``close`` lines to it, so tests can see the shutdown sequence;
``$ZARRFS_FAKE_FLUSH_DELAY`` (seconds) makes ``flush_all`` slow.
"""

from __future__ import annotations

import os
import threading
import time

from zarrfs.core.errors import (
    CorruptDataError,
    InvalidWriteError,
    NodeNotFound,
    ReadOnlyError,
    StoreError,
)
from zarrfs.views.base import Stat, VDir, VFile, VHandle, VNode

SIZE = 1 << 20
PATTERN = bytes((i * 31 + (i >> 8) + (i >> 16)) & 0xFF for i in range(SIZE))
BAD_START, BAD_END = 256 * 1024, 384 * 1024
BAD_KEY = "corrupt/c/0/2"
SLOW_S = 20.0
MANY = 10_000
HELLO = b"hello, world\n"
MTIME_NS = 1_700_000_000_123_456_789


class MemFile(VFile):
    """A file backed by a bytearray; fixed size unless ``resizable``."""

    def __init__(self, data: bytes, writable: bool, resizable: bool = False) -> None:
        self.data = bytearray(data)
        self.writable = writable
        self.resizable = resizable
        self.lock = threading.Lock()
        self.stored_bytes: int | None = None
        self.extra_xattrs: dict[str, bytes] = {}
        self.generation = 0

    def stat(self) -> Stat:
        return Stat(
            is_dir=False,
            size=len(self.data),
            stored_bytes=self.stored_bytes,
            writable=self.writable,
            mtime_ns=MTIME_NS,
        )

    def xattrs(self) -> dict[str, bytes]:
        return dict(self.extra_xattrs)

    def open(self, write: bool, truncate: bool) -> VHandle:
        if write and not self.writable:
            raise ReadOnlyError("read-only file")
        return MemHandle(self)

    def truncate(self, size: int) -> None:
        if not self.writable:
            raise ReadOnlyError("read-only file")
        with self.lock:
            if size == len(self.data):
                return
            if not self.resizable:
                raise InvalidWriteError(f"fixed size {len(self.data)}, not {size}")
            del self.data[size:]
            self.data.extend(bytes(size - len(self.data)))

    def cache_token(self) -> object:
        return self.generation

    def read_range(self, offset: int, size: int) -> bytes:
        with self.lock:
            return bytes(self.data[offset : offset + size])


class MemHandle(VHandle):
    def __init__(self, file: MemFile) -> None:
        self.file = file

    def read(self, offset: int, size: int) -> bytes:
        return self.file.read_range(offset, size)

    def write(self, offset: int, data: bytes) -> int:
        file = self.file
        with file.lock:
            end = offset + len(data)
            if end > len(file.data):
                if not file.resizable:
                    raise InvalidWriteError(f"write past the end of a {len(file.data)}-byte file")
                file.data.extend(bytes(end - len(file.data)))
            file.data[offset:end] = data
        return len(data)


class CorruptFile(MemFile):
    def read_range(self, offset: int, size: int) -> bytes:
        if offset < BAD_END and offset + size > BAD_START:
            raise CorruptDataError("checksum mismatch", key=BAD_KEY)
        return super().read_range(offset, size)


class SlowFile(MemFile):
    def read_range(self, offset: int, size: int) -> bytes:
        time.sleep(SLOW_S)
        return super().read_range(offset, size)


class BoomFile(MemFile):
    def read_range(self, offset: int, size: int) -> bytes:
        if offset < 4096:
            return bytes(1 // (offset - offset))  # a node bug: ZeroDivisionError
        return super().read_range(offset, size)


class FlushFailHandle(MemHandle):
    def flush(self) -> None:
        raise StoreError("injected flush failure")


class FlushFailFile(MemFile):
    def open(self, write: bool, truncate: bool) -> VHandle:
        return FlushFailHandle(self)


class RenderedHandle(MemHandle):
    """Edits a private copy; ``flush`` commits it re-rendered (like a metadata view)."""

    def __init__(self, file: MemFile, truncate: bool) -> None:
        super().__init__(file)
        self.draft = bytearray() if truncate else bytearray(file.data)

    def read(self, offset: int, size: int) -> bytes:
        return bytes(self.draft[offset : offset + size])

    def write(self, offset: int, data: bytes) -> int:
        if offset + len(data) > len(self.draft):
            self.draft.extend(bytes(offset + len(data) - len(self.draft)))
        self.draft[offset : offset + len(data)] = data
        return len(data)

    def truncate(self, size: int) -> None:
        del self.draft[size:]
        self.draft.extend(bytes(size - len(self.draft)))

    def flush(self) -> None:
        with self.file.lock:
            self.file.data = bytearray(render(bytes(self.draft)))


def render(text: bytes) -> bytes:
    """How ``RenderedFile`` stores a document: normalised, so its size changes on commit."""
    return text.strip().upper() + b"\n--committed--\n"


class RenderedFile(MemFile):
    def open(self, write: bool, truncate: bool) -> VHandle:
        return RenderedHandle(self, truncate) if write else MemHandle(self)


class ShadowFile(MemFile):
    """Read-only, derived from another file: its size follows that file's committed content."""

    def __init__(self, source: MemFile) -> None:
        super().__init__(b"", writable=False)
        self.source = source

    def stat(self) -> Stat:
        return Stat(is_dir=False, size=len(self.source.data), mtime_ns=MTIME_NS)

    def read_range(self, offset: int, size: int) -> bytes:
        return bytes(self.source.data).lower()[offset : offset + size]


class MemDir(VDir):
    """A directory of nodes; ``writable`` ones support create/mkdir/unlink/rmdir/rename."""

    def __init__(self, children: dict[str, VNode] | None = None, writable: bool = False) -> None:
        self.children: dict[str, VNode] = dict(children or {})
        self.writable = writable
        self.lock = threading.Lock()

    def stat(self) -> Stat:
        return Stat(is_dir=True, writable=self.writable, mtime_ns=MTIME_NS)

    def names(self) -> list[str]:
        with self.lock:
            return list(self.children)

    def lookup(self, name: str) -> VNode | None:
        with self.lock:
            return self.children.get(name)

    def _check(self) -> None:
        if not self.writable:
            raise ReadOnlyError("read-only directory")

    def mkdir(self, name: str) -> VDir:
        self._check()
        with self.lock:
            node = self.children.setdefault(name, MemDir(writable=True))
        if not isinstance(node, VDir):
            raise InvalidWriteError(f"{name} exists")
        return node

    def create(self, name: str) -> VFile:
        self._check()
        with self.lock:
            node = self.children.setdefault(name, MemFile(b"", writable=True, resizable=True))
        if not isinstance(node, VFile):
            raise InvalidWriteError(f"{name} is a directory")
        return node

    def unlink(self, name: str) -> None:
        self._check()
        with self.lock:
            if not isinstance(self.children.get(name), VFile):
                raise NodeNotFound(name)
            del self.children[name]

    def rmdir(self, name: str) -> None:
        self._check()
        with self.lock:
            node = self.children.get(name)
            if not isinstance(node, MemDir):
                raise NodeNotFound(name)
            if node.children:
                raise InvalidWriteError(f"{name} is not empty")
            del self.children[name]

    def rename(self, name: str, new_parent: VDir, new_name: str) -> None:
        self._check()
        if not isinstance(new_parent, MemDir) or not new_parent.writable:
            raise ReadOnlyError("cannot move there")
        with self.lock:
            node = self.children.pop(name, None)
        if node is None:
            raise NodeNotFound(name)
        with new_parent.lock:
            new_parent.children[new_name] = node


class CommitDir(MemDir):
    """Renaming a file over an existing one commits its content into that node (like a view
    directory keeps serving its own ``attributes.json`` node after ``sed -i``)."""

    def rename(self, name: str, new_parent: VDir, new_name: str) -> None:
        target = new_parent.lookup(new_name)
        source = self.lookup(name)
        if not isinstance(target, MemFile) or not isinstance(source, MemFile):
            super().rename(name, new_parent, new_name)
            return
        with target.lock:
            target.data = bytearray(render(bytes(source.data)))
        with self.lock:
            del self.children[name]


class ManyDir(VDir):
    """``count`` small read-only files, built on lookup."""

    def __init__(self, count: int) -> None:
        self.count = count

    def stat(self) -> Stat:
        return Stat(is_dir=True, mtime_ns=MTIME_NS)

    def names(self) -> list[str]:
        return [f"f{i:05d}" for i in range(self.count)]

    def lookup(self, name: str) -> VNode | None:
        if len(name) == 6 and name[0] == "f" and name[1:].isdigit() and int(name[1:]) < self.count:
            return MemFile(name.encode() + b"\n", writable=False)
        return None


class FakeRoot(MemDir):
    """The root; records ``flush_all``/``close`` in ``$ZARRFS_FAKE_EVENTS``."""

    def _event(self, what: str) -> None:
        path = os.environ.get("ZARRFS_FAKE_EVENTS")
        if path:
            with open(path, "a") as f:
                f.write(what + "\n")

    def flush_all(self) -> None:
        time.sleep(float(os.environ.get("ZARRFS_FAKE_FLUSH_DELAY", "0")))
        self._event("flush_all")

    def close(self) -> None:
        self._event("close")


def build_tree(read_only: bool = False) -> FakeRoot:
    rw = not read_only
    data = MemFile(PATTERN, writable=rw)
    data.stored_bytes = 1000
    data.extra_xattrs = {"user.zarr.shape": b"[1048576]", "user.zarr.dtype": b"uint8"}
    doc = RenderedFile(render(b"{}"), writable=rw)
    return FakeRoot(
        {
            "hello.txt": MemFile(HELLO, writable=False),
            "data.bin": data,
            "corrupt.bin": CorruptFile(PATTERN, writable=False),
            "slow.bin": SlowFile(PATTERN[:4096], writable=False),
            "boom.bin": BoomFile(PATTERN[:8192], writable=False),
            "flushfail.bin": FlushFailFile(bytes(4096), writable=rw),
            "big": ManyDir(MANY),
            "sub": MemDir({"deep": MemDir({"leaf.txt": MemFile(b"leaf\n", writable=False)})}),
            "scratch": MemDir(writable=rw),
            "edit": CommitDir({"doc.json": doc, "shadow.txt": ShadowFile(doc)}, writable=rw),
        }
    )


def open_fake_tree(url: str, options: object) -> FakeRoot:
    """The tree factory the daemon calls (``TreeFactory``)."""
    if url == "fake://broken":
        raise StoreError("injected: the store does not answer")
    return build_tree(read_only=bool(getattr(options, "ro", False)))
