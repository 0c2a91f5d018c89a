"""``data.tif`` (classic TIFF) and ``data.btf`` (BigTIFF): a generated header and image file
directories (IFDs) around the very bytes ``data.raw`` serves.

File layout (both views)::

    [0, data_offset)                  TIFF header, the first IFD and its values (descriptions)
    [data_offset, + nbytes)           the array's C-order bytes in the mount's byte order
    [trailer, size)                   IFDs 1 .. pages-1, ``stride`` bytes each (trailer = the
                                      end of the data, rounded up to even)

Every page is one uncompressed strip of one (Y, X) plane. The bytes of the first IFD and one
IFD template come from tifffile: it writes a two-page stand-in of the same plane geometry, data
type, byte order and descriptions into a sparse in-memory sink (its data are never
materialised), and ``tifffile.TiffFile`` reads the stand-in back to locate every offset field.
Later IFDs differ from the template only in offsets (the next-IFD link, the strip offset and
pointers to their own out-of-line values), so IFD ``k`` is computed from the template when a
read touches it, exactly as tifffile's own writer patches its template; a stack of 100,000
planes costs one template, not 100,000 directories. The stand-in's second IFD is recomputed from
the template and compared with tifffile's bytes, so a template that tifffile would not write
makes the view absent rather than wrong.

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

import functools
import io
import logging
import math
import mmap
import struct
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, cast

import numpy as np
import tifffile

from zarrfs.core.errors import InvalidWriteError, NodeNotFound, ReadOnlyError, ZarrFSError
from zarrfs.views.base import Stat, VFile, VHandle
from zarrfs.views.legacy import resolve_byte_order, type_code
from zarrfs.views.tiffmeta import NgffImage, TiffMeta, description, ngff_image, tiff_meta

if TYPE_CHECKING:
    from zarrfs.core.array import ZarrArray
    from zarrfs.views.tree import MountContext

log = logging.getLogger(__name__)

#: the TIFF views, in the order they are listed
TIFF_VIEWS = ("data.tif", "data.btf")
#: the data region starts on a page boundary: the kernel's page-sized reads of the view fall on
#: the same array offsets as reads of data.raw, and a memory map of the view is page-aligned
_ALIGN = mmap.ALLOCATIONGRANULARITY
_TIFF_TYPES = frozenset(
    {"u1", "i1", "u2", "i2", "u4", "i4", "u8", "i8", "f2", "f4", "f8", "c8", "c16"}
)


class _SparseSink(io.RawIOBase):
    """A seekable in-memory file that keeps only what was written (tifffile skips over the
    data region of a write without data); unwritten bytes read as zeros."""

    def __init__(self) -> None:
        self._pos = 0
        self._size = 0
        self._writes: list[tuple[int, bytes]] = []

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        base = (0, self._pos, self._size)[whence]
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def write(self, b: Any) -> int:
        data = bytes(b)
        self._writes.append((self._pos, data))
        self._pos += len(data)
        self._size = max(self._size, self._pos)
        return len(data)

    def readinto(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        n = max(0, min(len(view), self._size - self._pos))
        out = self.getrange(self._pos, self._pos + n)
        view[:n] = out
        self._pos += n
        return n

    def getrange(self, start: int, stop: int) -> bytes:
        out = bytearray(stop - start)
        for pos, data in self._writes:  # later writes win, as in a file
            lo, hi = max(start, pos), min(stop, pos + len(data))
            if lo < hi:
                out[lo - start : hi - start] = data[lo - pos : hi - pos]
        return bytes(out)


@dataclass(frozen=True)
class TiffLayout:
    """One TIFF view of one array state (see the module docstring for the byte layout)."""

    head: bytes
    data_offset: int
    nbytes: int
    plane: int
    pages: int
    trailer: int
    template: bytes
    stride: int
    #: positions in the template of pointers to its own values, and their offsets in it
    self_ptrs: tuple[tuple[int, int], ...]
    #: positions in the template of strip offsets, and their offsets from the page's data
    strip_ptrs: tuple[tuple[int, int], ...]
    next_ptr: int
    fmt: str
    size: int

    @property
    def data_end(self) -> int:
        return self.data_offset + self.nbytes

    def ifd(self, k: int) -> bytes:
        """The bytes of IFD ``k`` (1 <= k < pages) and its values, ``stride`` long."""
        pos = self.trailer + (k - 1) * self.stride
        out = bytearray(self.template)
        for at, rel in self.self_ptrs:
            struct.pack_into(self.fmt, out, at, pos + rel)
        base = self.data_offset + k * self.plane
        for at, rel in self.strip_ptrs:
            struct.pack_into(self.fmt, out, at, base + rel)
        nxt = pos + self.stride if k + 1 < self.pages else 0
        struct.pack_into(self.fmt, out, self.next_ptr, nxt)
        return bytes(out)

    def outside(self, start: int, stop: int) -> bytes:
        """Bytes of [start, stop) that lie after the data region (padding and IFDs)."""
        out = bytearray()
        pos = start
        if pos < self.trailer:
            out += bytes(min(stop, self.trailer) - pos)
            pos = self.trailer
        while pos < stop:
            k, skip = divmod(pos - self.trailer, self.stride)
            piece = self.ifd(k + 1)[skip : skip + stop - pos]
            out += piece
            pos += len(piece)
        return bytes(out)


def _standin(
    dtype: np.dtype[Any],
    y: int,
    x: int,
    pages: int,
    desc_len: int,
    resolution: tuple[float, float] | None,
    big: bool,
    byteorder: str,
) -> tuple[_SparseSink, tifffile.TiffFile]:
    """tifffile's file of ``pages`` planes whose description is ``desc_len`` placeholder
    characters, in a sparse sink, and a ``TiffFile`` reading it back."""
    sink = _SparseSink()
    kw: dict[str, Any] = {}
    if resolution is not None:
        kw = {"resolution": resolution, "resolutionunit": 1}
    order: Any = byteorder
    with tifffile.TiffWriter(
        cast(IO[bytes], sink), bigtiff=big, byteorder=order, shaped=False
    ) as tw:
        tw.write(
            shape=(pages, y, x) if pages > 1 else (y, x),
            dtype=dtype,
            photometric="minisblack",
            contiguous=True,
            align=_ALIGN,
            description="x" * desc_len,
            software=False,
            metadata=None,
            **kw,
        )
    sink.seek(0)
    return sink, tifffile.TiffFile(cast(IO[bytes], sink))


def _entry_fields(tif: tifffile.TiffFile, page: Any) -> tuple[int, list[Any]]:
    """(position of the next-IFD link, tags) of a page of the stand-in."""
    t = tif.tiff
    sink = tif.filehandle
    sink.seek(page.offset)
    (count,) = struct.unpack(t.tagnoformat, sink.read(t.tagnosize))
    return page.offset + t.tagnosize + count * t.tagsize, list(page.tags.values())


@dataclass(frozen=True)
class _Skeleton:
    """Everything of a layout but the description text and the number of pages."""

    head: bytes
    desc_at: int
    next0: int
    fmt: str
    template: bytes
    self_ptrs: tuple[tuple[int, int], ...]
    strip_ptrs: tuple[tuple[int, int], ...]
    next_ptr: int


@functools.lru_cache(maxsize=256)
def _skeleton(
    dtype: np.dtype[Any],
    y: int,
    x: int,
    multi: bool,
    desc_len: int,
    resolution: tuple[float, float] | None,
    big: bool,
    byteorder: str,
) -> _Skeleton:
    """The first IFD and the IFD template tifffile writes for this geometry. Arrays of the
    same geometry and description length share it (a listing of many like arrays renders
    once); the description is put in place by ``render_layout``."""
    sink, tif = _standin(dtype, y, x, 2 if multi else 1, desc_len, resolution, big, byteorder)
    with tif:
        t = tif.tiff
        p0 = tif.pages[0]
        data_offset = p0.dataoffsets[0]
        head = sink.getrange(0, data_offset)
        next0, tags0 = _entry_fields(tif, p0)
        (desc_at,) = [tag.valueoffset for tag in tags0 if tag.code == 270]
        if not multi:
            return _Skeleton(head, desc_at, next0, t.offsetformat, b"", (), (), 0)
        p1 = tif.pages[1]
        nxt, tags1 = _entry_fields(tif, p1)
        stride = sink._size - p1.offset
        inline = 4 + t.offsetsize
        self_ptrs, strip_ptrs = [], []
        for tag in tags1:
            if tag.valueoffset != tag.offset + inline:
                self_ptrs.append((tag.offset + inline - p1.offset, tag.valueoffset - p1.offset))
            if tag.code == 273:
                if tag.count != 1 or tag.dtype not in (4, 16):
                    raise ValueError("unexpected StripOffsets layout")
                strip_ptrs.append((tag.valueoffset - p1.offset, 0))
        template = sink.getrange(p1.offset, p1.offset + stride)
        sk = _Skeleton(
            head, desc_at, next0, t.offsetformat, template, tuple(self_ptrs),
            tuple(strip_ptrs), nxt - p1.offset,
        )  # fmt: skip
        plane = y * x * dtype.itemsize
        check = TiffLayout(
            head, data_offset, 2 * plane, plane, 2, p1.offset, template, stride,
            sk.self_ptrs, sk.strip_ptrs, sk.next_ptr, sk.fmt, 0,
        )  # fmt: skip
        if check.ifd(1) != template or p1.dataoffsets[0] != data_offset + plane:
            raise ValueError("tifffile's IFD template does not patch as expected")
        return sk


def render_layout(
    dtype: np.dtype[Any],
    shape: tuple[int, ...],
    meta: TiffMeta,
    big: bool,
    single: bool,
    byteorder: str,
) -> TiffLayout:
    """The layout of a TIFF (``big``: BigTIFF; ``single``: ImageJ's one-IFD form) in
    ``byteorder`` (``<`` or ``>``, the order of ``dtype`` too)."""
    y, x = shape[-2:]
    pages = math.prod(shape[:-2])
    plane = y * x * dtype.itemsize
    text = (meta.imagej_single() or "") if single else description(meta, big)
    desc = text.encode("ascii")
    multi = not single and pages > 1
    sk = _skeleton(dtype, y, x, multi, len(desc), meta.resolution, big, byteorder)
    head = bytearray(sk.head)
    head[sk.desc_at : sk.desc_at + len(desc)] = desc
    data_offset = len(head)
    end = data_offset + pages * plane
    if not multi:
        return TiffLayout(
            bytes(head), data_offset, pages * plane, plane, 1, end, b"", 2, (), (), sk.next0,
            sk.fmt, end,
        )  # fmt: skip
    trailer = end + end % 2
    struct.pack_into(sk.fmt, head, sk.next0, trailer)
    stride = len(sk.template)
    return TiffLayout(
        bytes(head), data_offset, pages * plane, plane, pages, trailer, sk.template, stride,
        sk.self_ptrs, sk.strip_ptrs, sk.next_ptr, sk.fmt, trailer + (pages - 1) * stride,
    )  # fmt: skip


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
    """``tiff_layout`` computed once per array state."""
    ngff, token = ngff_of(ctx, arr.path)
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
        return (arr.uid, arr.shape, ngff_of(self.ctx, self.path)[1])

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
