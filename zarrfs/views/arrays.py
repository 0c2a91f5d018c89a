"""Array directories: ``data.raw``, ``data.npy``, ``data.nii``, ``chunks/``, ``info.json``,
the generated headers and metadata files.

Every file node holds the hierarchy and the array's path, never a ZarrArray: the array object is
looked up on each call, so a metadata change seen at ``open`` (close-to-open revalidation)
replaces it everywhere at once.

Write rules (DESIGN §4): ``data.raw``, the data part of ``data.npy`` and ``data.nii`` and
``chunks/*`` are writable on a read-write mount (a header may only be rewritten with identical
bytes; anything else is InvalidWriteError, EINVAL with a log line); ``O_TRUNC`` keeps size and
content; ``truncate`` of ``data.raw`` to whole axis-0 rows resizes axis 0; writing past the end
of ``data.raw`` grows axis 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import TYPE_CHECKING, Any

from zarrfs.core.array import ZarrArray
from zarrfs.core.errors import InvalidWriteError, NodeNotFound, ReadOnlyError
from zarrfs.views.base import GeneratedFile, Stat, VDir, VFile, VHandle, VNode
from zarrfs.views.editing import EditableDirMixin, metadata_file, metadata_names
from zarrfs.views.formats import nifti_prefix, nifti_prefix_size, present_formats, vrt_content
from zarrfs.views.headers import npy_header, view_dtype
from zarrfs.views.info import (
    array_info,
    array_xattrs,
    info_base_size,
    info_size,
    numpy_describes,
    render_json,
)
from zarrfs.views.legacy import HEADER_VIEWS, array_header, present_headers
from zarrfs.views.tiff import TIFF_VIEWS, TiffView, present_tiffs

if TYPE_CHECKING:
    from zarrfs.views.tree import MountContext


class _ArrayRef:
    """(context, path) -> the current ZarrArray of that path."""

    def __init__(self, ctx: MountContext, path: str) -> None:
        self.ctx = ctx
        self.path = path

    def array(self) -> ZarrArray:
        return self.ctx.hierarchy.array(self.path)

    def cached_array(self) -> ZarrArray | None:
        """The array if it is already open (no store access), else None."""
        return self.ctx.hierarchy.cached_array(self.path)

    @property
    def writable(self) -> bool:
        return self.ctx.writable


# ----------------------------------------------------------------------------- data files


class DataFile(VFile, _ArrayRef):
    """``data.raw`` (kind ``raw``), ``data.npy`` (``npy``) or ``data.nii`` (``nii``): a header
    (none for ``raw``) followed by the array's decoded bytes, served from the same cache."""

    def __init__(self, ctx: MountContext, path: str, kind: str) -> None:
        _ArrayRef.__init__(self, ctx, path)
        if kind not in ("raw", "npy", "nii"):
            raise ValueError(f"not a data file kind: {kind!r}")
        self.kind = kind

    @property
    def name(self) -> str:
        return f"data.{self.kind}"

    @property
    def fixed_size(self) -> bool:
        """Only ``data.raw`` resizes (truncate, writing past the end)."""
        return self.kind != "raw"

    def header(self, arr: ZarrArray) -> bytes:
        if self.kind == "raw":
            return b""
        if self.kind == "npy":
            return npy_header(view_dtype(arr.dtype, self.ctx.byte_order), arr.shape)
        return nifti_prefix(self.ctx, arr)

    def header_size(self, arr: ZarrArray) -> int:
        if self.kind == "nii":  # most arrays need no rendering to know it
            return nifti_prefix_size(self.ctx, arr)
        return len(self.header(arr))

    def stat(self) -> Stat:
        arr = self.array()
        size = self.header_size(arr) + arr.nbytes
        return Stat(
            is_dir=False,
            size=size,
            stored_bytes=arr.stored_bytes(),
            writable=self.writable,
            mtime_ns=arr.mtime_ns,
            blksize=1 << 20,
        )

    def xattrs(self) -> dict[str, bytes]:
        return array_xattrs(self.array(), self.ctx.byte_order)

    def cache_token(self) -> object:
        arr = self.array()
        # mtime_ns: a write through another file of the array (a sibling view, a chunk file)
        # changed these bytes without going through this file's pages
        if self.kind == "nii":  # the header also follows the group's metadata
            return (arr.uid, arr.shape, arr.mtime_ns, self.header(arr))
        return (arr.uid, arr.shape, arr.mtime_ns)

    def open(self, write: bool, truncate: bool) -> VHandle:
        self.ctx.hierarchy.revalidate(self.path)
        if write and not self.writable:
            raise ReadOnlyError("read-only mount")
        handle = DataHandle(self)
        if self.kind == "nii":  # rendered here (a worker thread), so reads need no worker
            handle._header(self.array())
        return handle

    def truncate(self, size: int) -> None:
        if not self.writable:
            raise ReadOnlyError("read-only mount")
        arr = self.array()
        head = len(self.header(arr))
        if size == head + arr.nbytes:
            return
        if self.fixed_size or not arr.shape:
            raise InvalidWriteError(f"{self.path}: only data.raw of an array with axes resizes")
        row = prod(arr.shape[1:]) * arr.itemsize
        if row == 0 or size % row:
            raise InvalidWriteError(
                f"{self.path}: size {size} is not a whole number of axis-0 rows ({row} bytes)"
            )
        arr.resize((size // row, *arr.shape[1:]))


class DataHandle(VHandle):
    def __init__(self, file: DataFile) -> None:
        self.file = file
        #: ((array uid, shape), header) of the last header rendered through this handle, so
        #: the in-memory paths (read_cached, write_cached) never render one
        self._head: tuple[Any, bytes] | None = None

    def _header(self, arr: ZarrArray, cached: bool = False) -> bytes | None:
        key = (arr.uid, arr.shape)
        hit = self._head
        if hit is not None and hit[0] == key:
            return hit[1]
        if cached and self.file.kind == "nii":  # rendering may read the group: a worker's job
            return None
        head = self.file.header(arr)
        self._head = (key, head)
        return head

    def read(self, offset: int, size: int) -> bytes | memoryview:
        arr = self.file.array()
        head = self._header(arr) or b""
        byte_order = self.file.ctx.byte_order
        if offset >= len(head):  # the data alone: sent straight from the gathered buffer
            return arr.read_buffer(offset - len(head), size, byte_order)
        out = head[offset : offset + size]
        if size > len(out):
            out += arr.read_buffer(0, size - len(out), byte_order)
        return out

    def read_cached(self, offset: int, size: int) -> memoryview | None:
        arr = self.file.cached_array()
        if arr is None:
            return None
        head = self._header(arr, cached=True)
        if head is None or offset < len(head):  # a header: rare, served by a worker thread
            return None
        return arr.read_cached(offset - len(head), size, self.file.ctx.byte_order)

    def write_cached(self, offset: int, data: bytes) -> bool:
        arr = self.file.cached_array()
        if arr is None or not self.file.writable:
            return False
        head = self._header(arr, cached=True)
        if head is None or offset < len(head):  # a header: checked in a worker thread
            return False
        return arr.write_cached(offset - len(head), data, self.file.ctx.byte_order)

    def write(self, offset: int, data: bytes) -> int:
        if not self.file.writable:
            raise ReadOnlyError("read-only mount")
        arr = self.file.array()
        head = self._header(arr) or b""
        n = len(data)
        if offset < len(head):
            # the header part may only be rewritten with identical bytes (cp of an equal file)
            part = data[: len(head) - offset]
            if head[offset : offset + len(part)] != part:
                raise InvalidWriteError(
                    f"/{self.file.path}/{self.file.name}: bytes 0..{len(head) - 1} are the "
                    f"generated header and cannot change; write the data from byte {len(head)}"
                )
            data = data[len(part) :]
            offset = len(head)
        offset -= len(head)
        if not data:
            return n
        end = offset + len(data)
        if end > arr.nbytes:
            if self.file.fixed_size or not arr.shape:
                raise InvalidWriteError(
                    f"/{self.file.path}/{self.file.name}: write past the end of a fixed-size file"
                )
            row = prod(arr.shape[1:]) * arr.itemsize
            if row == 0:
                raise InvalidWriteError("cannot grow an array with an empty row")
            arr.resize((-(-end // row), *arr.shape[1:]))
            arr = self.file.array()
        arr.write(offset, data, self.file.ctx.byte_order)
        return n

    def flush(self) -> None:
        if self.file.writable:
            self.file.array().flush()

    def release(self) -> None:
        self.flush()


# ----------------------------------------------------------------------------- chunk files


def chunk_name(coords: tuple[int, ...]) -> str:
    return ".".join(map(str, coords)) if coords else "0"


class ChunkNames(Sequence[str]):
    """The names of every chunk of a grid, generated on demand (never a store listing)."""

    def __init__(self, grid_shape: tuple[int, ...]) -> None:
        self.grid_shape = grid_shape
        self._n = prod(grid_shape)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        coords = []
        for n in reversed(self.grid_shape):
            coords.append(i % n)
            i //= n
        return chunk_name(tuple(reversed(coords)))


class ChunksDir(VDir, _ArrayRef):
    lists_from_metadata = True

    def __init__(self, ctx: MountContext, path: str) -> None:
        _ArrayRef.__init__(self, ctx, path)

    def stat(self) -> Stat:
        return Stat(is_dir=True, writable=False)

    def names(self) -> Sequence[str]:  # type: ignore[override]
        return ChunkNames(self.array().grid.grid_shape)

    def lookup(self, name: str) -> VNode | None:
        arr = self.array()
        if not arr.shape:
            return ChunkFile(self.ctx, self.path, ()) if name == "0" else None
        parts = name.split(".")
        if len(parts) != len(arr.shape) or not all(p.isdigit() and p == str(int(p)) for p in parts):
            return None
        coords = tuple(int(p) for p in parts)
        return ChunkFile(self.ctx, self.path, coords) if arr.grid.contains(coords) else None


class ChunkFile(VFile, _ArrayRef):
    def __init__(self, ctx: MountContext, path: str, coords: tuple[int, ...]) -> None:
        _ArrayRef.__init__(self, ctx, path)
        self.coords = coords

    def stat(self) -> Stat:
        arr = self.array()
        return Stat(
            is_dir=False,
            size=arr.chunk_nbytes,
            writable=self.writable,
            blksize=1 << 20,
            mtime_ns=arr.mtime_ns,
        )

    def cache_token(self) -> object:
        arr = self.array()
        return (arr.uid, arr.shape, arr.mtime_ns)  # (as DataFile's)

    def open(self, write: bool, truncate: bool) -> VHandle:
        self.ctx.hierarchy.revalidate(self.path)
        if write and not self.writable:
            raise ReadOnlyError("read-only mount")
        if not self.array().grid.contains(self.coords):
            raise NodeNotFound("chunk no longer exists")
        return ChunkHandle(self)


class ChunkHandle(VHandle):
    def __init__(self, file: ChunkFile) -> None:
        self.file = file

    def read(self, offset: int, size: int) -> bytes | memoryview:
        return self.file.array().read_chunk_buffer(
            self.file.coords, offset, size, self.file.ctx.byte_order
        )

    def read_cached(self, offset: int, size: int) -> memoryview | None:
        arr = self.file.cached_array()
        if arr is None:
            return None
        return arr.read_chunk_cached(self.file.coords, offset, size, self.file.ctx.byte_order)

    def write(self, offset: int, data: bytes) -> int:
        if not self.file.writable:
            raise ReadOnlyError("read-only mount")
        arr = self.file.array()
        arr.write_chunk(self.file.coords, offset, data, self.file.ctx.byte_order)
        return len(data)

    def flush(self) -> None:
        if self.file.writable:
            self.file.array().flush()

    def release(self) -> None:
        self.flush()


class ArrayDir(EditableDirMixin, VDir, _ArrayRef):
    """One directory per array: views only."""

    lists_from_metadata = True

    def __init__(self, ctx: MountContext, path: str) -> None:
        _ArrayRef.__init__(self, ctx, path)

    def stat(self) -> Stat:
        return Stat(is_dir=True, writable=self.writable)

    def warm(self) -> None:
        # the chunk listing behind st_blocks of data.raw/data.npy, and the view names
        self.array().stored_bytes()
        self.view_names()

    def view_names(self) -> list[str]:
        """The data and header views present for the current array (``info.json`` "views")."""
        arr = self.array()

        def compute() -> list[str]:
            if not numpy_describes(arr):  # bits numpy has no type for: the raw bytes only
                return ["data.raw"] if self.ctx.view_enabled("data.raw") else []
            names = [v for v in ("data.raw", "data.npy") if self.ctx.view_enabled(v)]
            names += present_headers(arr, self.ctx.byte_order, self.ctx.view_enabled, self._header)
            names += present_formats(arr, self.ctx.view_enabled)
            return names + present_tiffs(self.ctx, arr)

        return self.ctx.memo(("views", self.path, arr.uid, arr.shape), compute)

    def names(self) -> list[str]:
        node = self.ctx.hierarchy.node(self.path)
        names = {*self.view_names(), "info.json", "chunks", *metadata_names(self.ctx, node)}
        return sorted(names | set(self.scratch_names()))

    def lookup(self, name: str) -> VNode | None:
        if name == "data.raw" and self.ctx.view_enabled(name):
            return DataFile(self.ctx, self.path, "raw")
        if name == "data.npy" and name in self.view_names():
            return DataFile(self.ctx, self.path, "npy")
        if name == "data.nii" and name in self.view_names():
            return DataFile(self.ctx, self.path, "nii")
        if name == "data.vrt" and name in self.view_names():
            return GeneratedFile(lambda: vrt_content(self.ctx, self.array()))
        if name in HEADER_VIEWS and name in self.view_names():
            return GeneratedFile(lambda: self._present_header(name))
        if name in TIFF_VIEWS and name in self.view_names():
            return TiffView(self.ctx, self.path, name)
        if name == "chunks":
            return ChunksDir(self.ctx, self.path)
        if name == "info.json":
            return GeneratedFile(
                self._memo_render(name, lambda arr: render_json(self._info(arr))),
                self._memo_render("info.json size", self._info_size),
            )
        return metadata_file(self.ctx, self.path, name) or self.scratch_lookup(name)

    def _header(self, name: str, arr: ZarrArray, byte_order: str) -> bytes | None:
        """``array_header`` once per distinct input: deciding which headers are present
        renders them, and their sizes are then known without rendering them again. The key is
        everything ``array_header`` reads (data type, shape, dimension names, byte order), so
        arrays alike share one rendering."""
        names = arr.metadata.dimension_names
        key = ("header", name, arr.dtype, arr.shape, names, byte_order)
        return self.ctx.memo(key, lambda: array_header(name, arr, byte_order))  # type: ignore[no-any-return]

    def _present_header(self, name: str) -> bytes:
        arr = self.array()
        data = self._header(name, arr, self.ctx.byte_order)
        if data is None:  # the array changed since the file was looked up
            raise NodeNotFound(f"/{arr.path}/{name}: the format cannot describe this array")
        return data

    def _info(self, arr: ZarrArray) -> dict[str, Any]:
        return array_info(arr, self.ctx.byte_order, self.view_names())

    def _info_size(self, arr: ZarrArray) -> int:
        """``len`` of ``info.json`` without rendering it: what every array with this metadata
        object (one per distinct document) shares is computed once (``memo_of``), then the
        members that differ (``info.VARYING``) are added."""
        key = ("info.json base", self.ctx.byte_order)
        base = self.ctx.memo_of(arr.metadata, key, lambda: info_base_size(self._info(arr)))
        return info_size(base, arr.path, arr.stored_bytes(), self.view_names())

    def _memo_render(self, name: str, render: Any) -> Any:
        """``render(array)`` computed once per array state (stat and read agree, and
        listing many arrays does not render every file twice)."""

        def content() -> bytes:
            arr = self.array()
            key = (name, self.path, arr.uid, arr.shape, arr.mtime_ns, arr.stored_bytes())
            return self.ctx.memo(key, lambda: render(arr))

        return content

    def refresh(self, read_since: float | None = None) -> None:
        self.ctx.hierarchy.revalidate(self.path, read_since)
