"""An in-memory file that stores only the pages written to it: what libhdf5 writes
``group.nc`` into (through h5py's file-object driver), and what tifffile writes the stand-in of a
TIFF view into (it seeks over the data region of a write without data).

Invariants: unwritten bytes read as zero; memory is one 4 KiB page per page touched by a write,
at most ``limit`` bytes (a write past it raises ``OSError``, which libhdf5 reports as a failed
write); ``size`` is the end of the last write or the last ``truncate``.
"""

from __future__ import annotations

import io
from typing import Any

_PAGE = 4096


class SparseImage(io.RawIOBase):
    """A seekable in-memory file that stores only the 4 KiB pages written to it; unwritten
    bytes read as zero. h5py's file-object driver writes the file through it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.pages: dict[int, bytearray] = {}
        self.pos = 0
        self.size = 0

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = base + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer: Any) -> int:
        out = memoryview(buffer).cast("B")
        n = max(0, min(len(out), self.size - self.pos))
        done = 0
        while done < n:
            page, skip = divmod(self.pos + done, _PAGE)
            k = min(_PAGE - skip, n - done)
            data = self.pages.get(page)
            out[done : done + k] = data[skip : skip + k] if data is not None else bytes(k)
            done += k
        self.pos += n
        return n

    def write(self, buffer: Any) -> int:
        data = memoryview(buffer).cast("B")
        done = 0
        while done < len(data):
            page, skip = divmod(self.pos + done, _PAGE)
            k = min(_PAGE - skip, len(data) - done)
            dest = self.pages.get(page)
            if dest is None:
                if len(self.pages) * _PAGE >= self.limit:
                    raise OSError(f"more than {self.limit} bytes written")
                dest = self.pages[page] = bytearray(_PAGE)
            dest[skip : skip + k] = data[done : done + k]
            done += k
        self.pos += len(data)
        self.size = max(self.size, self.pos)
        return len(data)

    def truncate(self, size: int | None = None) -> int:
        self.size = self.pos if size is None else size
        for page in [p for p in self.pages if p * _PAGE >= self.size]:
            del self.pages[page]
        return self.size

    def getrange(self, start: int, stop: int) -> bytes:
        """Bytes ``start:stop`` of the file (zeros where nothing was written); the position
        is left as it was."""
        pos = self.pos
        try:
            self.pos = start
            return self.read(max(0, stop - start)) or b""
        finally:
            self.pos = pos

    def runs(self) -> list[tuple[int, bytes]]:
        """The written pages merged into (offset, bytes) runs, clipped to the file size."""
        out: list[tuple[int, bytes]] = []
        start = prev = -2
        parts: list[bytes] = []
        for page in sorted(self.pages):
            if page != prev + 1 and parts:
                out.append((start * _PAGE, b"".join(parts)))
                parts = []
            if not parts:
                start = page
            parts.append(bytes(self.pages[page]))
            prev = page
        if parts:
            out.append((start * _PAGE, b"".join(parts)))
        return [(o, d[: max(0, self.size - o)]) for o, d in out if o < self.size]
