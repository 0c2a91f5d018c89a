"""``data.tif`` (classic TIFF) and ``data.btf`` (BigTIFF): a generated header and image file
directories (IFDs) around the very bytes ``data.raw`` serves (byte layout:
``zarrfs.views.tifflayout``; descriptions: ``zarrfs.views.tiffmeta``; docs/tiff.md).

Invariants:
- Present only where TIFF describes the array exactly: a numeric or bool (as uint8) type, rank
  >= 1 (a 1-D array is one row), no empty axis, width and height below 2**32. ``data.tif`` is
  classic TIFF while the whole file is below 4 GiB; above that it is ImageJ's one-IFD form
  (description ``images=N``, planes contiguous after the first IFD: ImageJ and tifffile read
  it past 4 GiB) for the types ImageJ opens, and absent otherwise. ``data.btf`` always has every
  IFD.
- The data region is a byte shift onto the array's read/write path: reads come from the same
  decoded-chunk cache as ``data.raw``; writes re-encode chunks exactly as ``data.raw`` writes do.
  A write that would change header or IFD bytes is refused (``InvalidWriteError``: EINVAL, and
  the FUSE layer logs why); rewriting them with identical bytes (``cp`` of an equal file) is
  accepted. The size never changes.
- A layout is computed once per array state (``MountContext.memo`` keyed by the array's uid and
  shape and the parent group's state, whose OME-NGFF attributes feed the metadata).
"""

from __future__ import annotations

import logging
import math
import struct
from typing import TYPE_CHECKING

import numpy as np

from zarrfs.core.errors import InvalidWriteError, NodeNotFound, ReadOnlyError, ZarrFSError
from zarrfs.views.base import Stat, VFile, VHandle
from zarrfs.views.legacy import resolve_byte_order, type_code
from zarrfs.views.tifflayout import TiffLayout, render_layout
from zarrfs.views.tiffmeta import NgffImage, ngff_image, tiff_meta

if TYPE_CHECKING:
    from zarrfs.core.array import ZarrArray
    from zarrfs.views.tree import MountContext

log = logging.getLogger(__name__)

#: the TIFF views, in the order they are listed
TIFF_VIEWS = ("data.tif", "data.btf")
_TIFF_TYPES = frozenset(
    {"u1", "i1", "u2", "i2", "u4", "i4", "u8", "i8", "f2", "f4", "f8", "c8", "c16"}
)


def tiff_layout(
    name: str, arr: ZarrArray, byte_order: str, ngff: NgffImage | None
) -> TiffLayout | None:
    """The layout of view ``name`` for ``arr``, or None where TIFF cannot describe it."""
    code = type_code(arr.dtype)
    shape = tuple(int(n) for n in arr.shape)
    if code not in _TIFF_TYPES or not shape or min(shape) < 1 or shape[-1] >= 2**32:
        return None
    planes = (1, *shape) if len(shape) == 1 else shape
    if planes[-2] >= 2**32:
        return None
    bo = "<" if resolve_byte_order(byte_order) == "little" else ">"
    dtype = np.dtype(code).newbyteorder(bo)  # type: ignore[arg-type]
    names = arr.metadata.dimension_names if len(shape) > 1 else None
    meta = tiff_meta(code, planes, names, ngff, arr.path or "image", shape)
    try:
        if name == "data.btf":
            return render_layout(dtype, planes, meta, True, False, bo)
        if _fits_classic(planes, dtype.itemsize):
            try:
                layout = render_layout(dtype, planes, meta, False, False, bo)
            except struct.error:  # the directories would start past 4 GiB
                layout = None
            if layout is not None and layout.size < 2**32:
                return layout
        if meta.imagej_single() is None:
            return None
        layout = render_layout(dtype, planes, meta, False, True, bo)
    except (ValueError, struct.error) as exc:  # beyond what the format's fields hold
        log.debug("/%s/%s: no TIFF layout: %s", arr.path, name, exc)
        return None
    return layout if layout.data_offset + layout.plane < 2**32 else None


def _fits_classic(planes: tuple[int, ...], itemsize: int) -> bool:
    """Whether the data alone leave room for classic TIFF's 32-bit offsets."""
    return math.prod(planes) * itemsize < 2**32


def ngff_of(ctx: MountContext, path: str) -> tuple[NgffImage | None, object]:
    """The OME-NGFF description of the array at ``path`` from its parent group's attributes,
    and a token of that group's state (for memo keys)."""
    if not path:
        return None, None
    parent, _, name = path.rpartition("/")
    try:
        node = ctx.hierarchy.node(parent)
    except ZarrFSError:
        return None, None
    return ngff_image(node.metadata.attributes, name), (id(node), node.mtime_ns)


def layout_for(ctx: MountContext, name: str, arr: ZarrArray) -> TiffLayout | None:
    """``tiff_layout`` computed once per distinct input. Without an OME-NGFF description in
    the group it reads only the data type, shape, dimension names and byte order, so arrays
    alike share one layout (a ``TiffLayout`` is immutable); with one it also follows the
    group's state and the array's path (the OME-XML names the image)."""
    ngff, token = ngff_of(ctx, arr.path)
    key: tuple[object, ...]
    if ngff is None:
        names = arr.metadata.dimension_names
        key = ("tiff", name, arr.dtype, arr.shape, names, ctx.byte_order)
    else:
        key = ("tiff", name, arr.path, arr.uid, arr.shape, token)
    return ctx.memo(key, lambda: tiff_layout(name, arr, ctx.byte_order, ngff))  # type: ignore[no-any-return]


# ----------------------------------------------------------------------------- nodes


class TiffView(VFile):
    """``data.tif`` or ``data.btf`` of one array (the array is looked up on every call)."""

    def __init__(self, ctx: MountContext, path: str, name: str) -> None:
        self.ctx = ctx
        self.path = path
        self.name = name

    @property
    def writable(self) -> bool:
        return self.ctx.writable

    def state(self) -> tuple[ZarrArray, TiffLayout]:
        arr = self.ctx.hierarchy.array(self.path)
        layout = layout_for(self.ctx, self.name, arr)
        if layout is None:
            raise NodeNotFound(f"/{self.path}/{self.name}: TIFF cannot describe this array")
        return arr, layout

    def stat(self) -> Stat:
        arr, layout = self.state()
        return Stat(
            is_dir=False,
            size=layout.size,
            stored_bytes=arr.stored_bytes(),
            writable=self.writable,
            mtime_ns=arr.mtime_ns,
            blksize=1 << 20,
        )

    def cache_token(self) -> object:
        arr = self.ctx.hierarchy.array(self.path)
        return (arr.uid, arr.shape, arr.mtime_ns, ngff_of(self.ctx, self.path)[1])

    def open(self, write: bool, truncate: bool) -> VHandle:
        self.ctx.hierarchy.revalidate(self.path)
        if write and not self.writable:
            raise ReadOnlyError("read-only mount")
        return TiffHandle(self, *self.state())

    def truncate(self, size: int) -> None:
        if not self.writable:
            raise ReadOnlyError("read-only mount")
        if size != self.state()[1].size:
            raise InvalidWriteError(f"/{self.path}/{self.name}: a TIFF view has a fixed size")


class TiffHandle(VHandle):
    """Reads and writes of one open TIFF view: the data region is ``data.raw`` shifted by
    ``data_offset``; header and IFD bytes are generated."""

    def __init__(self, file: TiffView, arr: ZarrArray, layout: TiffLayout) -> None:
        self.file = file
        self.byte_order = file.ctx.byte_order
        self._arr = arr
        self._layout = layout

    def _state(self) -> tuple[ZarrArray, TiffLayout]:
        arr = self.file.ctx.hierarchy.array(self.file.path)
        if arr is not self._arr:
            self._arr, self._layout = self.file.state()
        return self._arr, self._layout

    def _current(self) -> TiffLayout | None:
        """The layout if the array open at ``open`` is still the current one (no store access)."""
        arr = self.file.ctx.hierarchy.cached_array(self.file.path)
        return self._layout if arr is self._arr else None

    def read(self, offset: int, size: int) -> bytes | memoryview:
        arr, lay = self._state()
        end = min(offset + size, lay.size)
        if offset >= end:
            return b""
        if lay.data_offset <= offset and end <= lay.data_end:
            return arr.read_buffer(offset - lay.data_offset, end - offset, self.byte_order)
        parts: list[bytes | memoryview] = []
        pos = offset
        if pos < lay.data_offset:
            parts.append(lay.head[pos : min(end, lay.data_offset)])
            pos = min(end, lay.data_offset)
        if pos < end and pos < lay.data_end:
            n = min(end, lay.data_end) - pos
            parts.append(arr.read_buffer(pos - lay.data_offset, n, self.byte_order))
            pos += n
        if pos < end:
            parts.append(lay.outside(pos, end))
        return b"".join(parts)

    def read_cached(self, offset: int, size: int) -> memoryview | None:
        lay = self._current()
        if lay is None or offset < lay.data_offset or offset + size > lay.data_end:
            return None  # generated bytes, or the array changed: answered in a worker thread
        return self._arr.read_cached(offset - lay.data_offset, size, self.byte_order)

    def write_cached(self, offset: int, data: bytes) -> bool:
        lay = self._current()
        if lay is None or not self.file.writable:
            return False
        if offset < lay.data_offset or offset + len(data) > lay.data_end:
            return False
        return self._arr.write_cached(offset - lay.data_offset, data, self.byte_order)

    def write(self, offset: int, data: bytes) -> int:
        if not self.file.writable:
            raise ReadOnlyError("read-only mount")
        arr, lay = self._state()
        n = len(data)
        end = offset + n
        if end > lay.size:
            raise InvalidWriteError(
                f"/{self.file.path}/{self.file.name}: write past the end of a fixed-size file"
            )
        lo, hi = max(offset, lay.data_offset), min(end, lay.data_end)
        for a, b in ((offset, min(end, lay.data_offset)), (max(offset, lay.data_end), end)):
            if a < b and bytes(data[a - offset : b - offset]) != self._generated(lay, a, b):
                raise InvalidWriteError(
                    f"/{self.file.path}/{self.file.name}: bytes {a}..{b - 1} are TIFF header or "
                    f"directory bytes and cannot change; only the image data "
                    f"[{lay.data_offset}, {lay.data_end}) is writable"
                )
        if lo < hi:
            arr.write(lo - lay.data_offset, data[lo - offset : hi - offset], self.byte_order)
        return n

    @staticmethod
    def _generated(lay: TiffLayout, a: int, b: int) -> bytes:
        return lay.head[a:b] if b <= lay.data_offset else lay.outside(a, b)

    def flush(self) -> None:
        if self.file.writable:
            self.file.ctx.hierarchy.array(self.file.path).flush()

    def release(self) -> None:
        self.flush()


def _surely_present(name: str, arr: ZarrArray) -> bool | None:
    """Whether view ``name`` exists, decided without rendering it where that is certain (a
    listing of many arrays renders nothing); None when only the layout can tell."""
    shape = arr.shape
    if type_code(arr.dtype) not in _TIFF_TYPES or not shape or min(shape) < 1:
        return False
    if max(shape[-2:]) >= 2**32:
        return False
    pages = math.prod(shape[:-2])
    # far below 4 GiB even with a generous allowance for descriptions and directories
    if name == "data.btf" or arr.nbytes + pages * 4096 + (64 << 20) < 2**32:
        return True
    return None


def present_tiffs(ctx: MountContext, arr: ZarrArray) -> list[str]:
    """The TIFF views shown for ``arr``: enabled and able to describe it."""
    out = []
    for name in TIFF_VIEWS:
        if not ctx.view_enabled(name):
            continue
        try:
            present = _surely_present(name, arr)
            if present is None:
                present = layout_for(ctx, name, arr) is not None
        except Exception:  # a tifffile failure hides the view, never the directory
            log.exception("/%s/%s: TIFF layout failed", arr.path, name)
            present = False
        if present:
            out.append(name)
    return out
