"""The byte layout of a TIFF view (``data.tif``, ``data.btf``; the nodes are in
``zarrfs.views.tiff``)::

    [0, data_offset)                  TIFF header, the first IFD and its values (description),
                                      zero padding to a 4 KiB boundary
    [data_offset, + nbytes)           the array's C-order bytes in the mount's byte order
    [trailer, size)                   IFDs 1 .. pages-1, ``stride`` bytes each (trailer = the
                                      end of the data, rounded up to even)

Every page is one uncompressed strip of one (Y, X) plane. The bytes of the first IFD and one
IFD template come from tifffile: it writes a two-page stand-in of the same plane geometry, data
type, byte order and description length into a sparse in-memory sink (its data are never
materialised), and ``tifffile.TiffFile`` reads the stand-in back to locate every offset field.
Later IFDs differ from the template only in offsets (the next-IFD link, the strip offset and
pointers to their own out-of-line values), so IFD ``k`` is computed from the template when a
read touches it, exactly as tifffile's own writer patches its template; a stack of 100,000
planes costs one template, not 100,000 directories.

Invariants:
- The stand-in's second IFD is recomputed from the template and compared with tifffile's bytes,
  so a template that tifffile would not write raises rather than serving a wrong file.
- A stand-in depends only on (data type, one or more pages, description length, resolution,
  BigTIFF, byte order), so it is rendered once for all arrays that share them; the plane
  geometry is then set in the four fields that hold it (ImageWidth, ImageLength, RowsPerStrip,
  StripByteCounts: one inline value each, of a type that does not depend on the value, since
  every page is one strip), and the description text is written over the placeholder of the
  same length (the description tag's count and every offset stay what tifffile wrote). A
  geometry outside those fields' range, or a stand-in whose fields are not laid out that way,
  is rendered by tifffile for that geometry instead (``tests/views/test_tifflayout.py`` checks
  the set fields against tifffile's own rendering).
"""

from __future__ import annotations

import functools
import math
import mmap
import struct
from dataclasses import dataclass
from typing import IO, Any, cast

import numpy as np
import tifffile

from zarrfs.views.sparseimage import SparseImage
from zarrfs.views.tiffmeta import TiffMeta, description

#: the data region starts on a page boundary: the kernel's page-sized reads of the view fall on
#: the same array offsets as reads of data.raw, and a memory map of the view is page-aligned
_ALIGN = mmap.ALLOCATIONGRANULARITY


#: most bytes the stand-in file may hold (header, two IFDs and their descriptions)
_STANDIN_LIMIT = 64 << 20
#: the plane (Y, X) a stand-in is rendered for before its geometry fields are set
_CANONICAL_PLANE = (16, 16)
#: the tags that hold the plane geometry: ImageWidth, ImageLength, RowsPerStrip, StripByteCounts
_WIDTH, _LENGTH, _ROWS, _BYTECOUNTS = 256, 257, 278, 279
#: struct formats of the TIFF types these tags may have (LONG, LONG8)
_TYPE_FORMATS = {4: "I", 16: "Q"}


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


@dataclass(frozen=True)
class _Kind:
    """What a stand-in depends on besides its plane (Y, X): data type, one or more pages,
    description length, resolution, BigTIFF, byte order (``<``/``>``, that of ``dtype``)."""

    dtype: np.dtype[Any]
    multi: bool
    desc_len: int
    resolution: tuple[float, float] | None
    big: bool
    byteorder: str


def _standin(kind: _Kind, y: int, x: int) -> tuple[SparseImage, tifffile.TiffFile]:
    """tifffile's file of one page of (``y``, ``x``) (two if ``kind.multi``) whose description
    is ``kind.desc_len`` placeholder characters, in a sparse sink, and a ``TiffFile`` reading
    it back."""
    sink = SparseImage(_STANDIN_LIMIT)
    kw: dict[str, Any] = {}
    if kind.resolution is not None:
        kw = {"resolution": kind.resolution, "resolutionunit": 1}
    order: Any = kind.byteorder
    desc_len = kind.desc_len
    with tifffile.TiffWriter(
        cast(IO[bytes], sink), bigtiff=kind.big, byteorder=order, shaped=False
    ) as tw:
        tw.write(
            shape=(2, y, x) if kind.multi else (y, x),
            dtype=kind.dtype,
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
    #: (position, tag code, struct format) of the geometry fields in ``head`` and in
    #: ``template``; empty when they are not laid out as ``_skeleton`` can set them
    geometry: tuple[tuple[tuple[int, int, str], ...], ...] = ()


def _geometry_fields(tags: list[Any], base: int) -> tuple[tuple[int, int, str], ...] | None:
    """Where the four geometry tags keep their value (relative to ``base``), or None when one
    is missing, holds more than one value or has a type other than LONG/LONG8."""
    found = []
    for tag in tags:
        if tag.code in (_WIDTH, _LENGTH, _ROWS, _BYTECOUNTS):
            if tag.count != 1 or tag.dtype not in _TYPE_FORMATS:
                return None
            found.append((tag.valueoffset - base, tag.code, _TYPE_FORMATS[tag.dtype]))
    return tuple(sorted(found)) if len(found) == 4 else None


@functools.lru_cache(maxsize=1024)
def _skeleton(kind: _Kind, y: int, x: int) -> _Skeleton:
    """The first IFD and the IFD template tifffile writes for this geometry: the stand-in of
    ``_CANONICAL_PLANE`` with the same other arguments (rendered once for every plane size)
    with this plane's geometry set, or, where that cannot be done (a value beyond its field,
    fields not laid out as expected, a stand-in of 2 GiB or more, 4 EiB for BigTIFF),
    tifffile's rendering of this very geometry."""
    cy, cx = _CANONICAL_PLANE
    sk = _rendered(kind, cy, cx)
    values = {_WIDTH: x, _LENGTH: y, _ROWS: y, _BYTECOUNTS: y * x * kind.dtype.itemsize}
    # a stand-in whose offsets near the format's limit is left to tifffile, which decides
    # whether it fits
    standin_data = (2 if kind.multi else 1) * values[_BYTECOUNTS]
    limit = 1 << (62 if kind.big else 31)
    fits = y >= 1 and x >= 1 and bool(sk.geometry) and standin_data < limit
    for fields in sk.geometry:
        fits = fits and all(values[c] < 1 << (8 * struct.calcsize(k)) for _, c, k in fields)
    if not fits:
        return _rendered(kind, y, x)
    head, template = bytearray(sk.head), bytearray(sk.template)
    for buf, fields in zip((head, template), sk.geometry, strict=False):
        for at, code, fmt in fields:
            struct.pack_into(kind.byteorder + fmt, buf, at, values[code])
    return _Skeleton(
        bytes(head), sk.desc_at, sk.next0, sk.fmt, bytes(template), sk.self_ptrs,
        sk.strip_ptrs, sk.next_ptr,
    )  # fmt: skip


@functools.lru_cache(maxsize=256)
def _rendered(kind: _Kind, y: int, x: int) -> _Skeleton:
    """The first IFD and the IFD template tifffile writes for this geometry. Arrays of the
    same geometry and description length share it (a listing of many like arrays renders
    once); the description is put in place by ``render_layout``."""
    sink, tif = _standin(kind, y, x)
    dtype, multi = kind.dtype, kind.multi
    with tif:
        t = tif.tiff
        p0 = tif.pages[0]
        data_offset = p0.dataoffsets[0]
        head = sink.getrange(0, data_offset)
        next0, tags0 = _entry_fields(tif, p0)
        (desc_at,) = [tag.valueoffset for tag in tags0 if tag.code == 270]
        head_fields = _geometry_fields(tags0, 0)
        geometry: tuple[tuple[tuple[int, int, str], ...], ...]
        if not multi:
            geometry = () if head_fields is None else (head_fields,)
            return _Skeleton(head, desc_at, next0, t.offsetformat, b"", (), (), 0, geometry)
        p1 = tif.pages[1]
        nxt, tags1 = _entry_fields(tif, p1)
        stride = sink.size - p1.offset
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
        template_fields = _geometry_fields(tags1, p1.offset)
        geometry = (
            (head_fields, template_fields)
            if head_fields is not None and template_fields is not None
            else ()
        )
        sk = _Skeleton(
            head, desc_at, next0, t.offsetformat, template, tuple(self_ptrs),
            tuple(strip_ptrs), nxt - p1.offset,
            geometry,
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
    sk = _skeleton(_Kind(dtype, multi, len(desc), meta.resolution, big, byteorder), y, x)
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
