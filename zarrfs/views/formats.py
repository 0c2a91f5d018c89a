"""The whole-file format views of an array, ``data.nii`` and ``data.vrt``, bound to the tree.

``views.nifti``, ``views.vrt`` and ``views.georef`` are pure (metadata in, bytes out); this
module gathers what they read from the hierarchy: the parent group's attributes (OME-NGFF
multiscales, NIfTI-Zarr header, GeoZarr), sibling arrays (the NIfTI-Zarr ``nifti`` array, CF
coordinate arrays read through the engine, grid-mapping variables).

Invariants:
- Which format views exist depends only on the array's data type and shape (and on ``-o
  views=``); their content may also depend on the neighbours listed above.
- Content is rendered once per state: the memo key holds the array's identity, shape and data
  mtime, and the identity of every neighbour it read (a metadata edit, a resize or a rewrite of
  a coordinate array renders anew). A neighbour that was missing is not looked for on every
  stat; one created later is seen once the array or its group is re-read.
- A header that no longer applies (the array changed since the file was looked up) is
  ``NodeNotFound``, as for the sidecar headers.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from zarrfs.core.array import ZarrArray
from zarrfs.core.errors import CorruptDataError, MetadataError, NodeNotFound, ZarrFSError
from zarrfs.core.hierarchy import Node, join
from zarrfs.views import nifti, vrt
from zarrfs.views.georef import georeference
from zarrfs.views.legacy import DATA_FILE

if TYPE_CHECKING:
    from zarrfs.views.tree import MountContext

#: the format views, in the order they are listed
FORMAT_VIEWS = ("data.nii", "data.vrt")
#: longest coordinate array read for a geotransform (elements)
MAX_COORDINATE_LENGTH = 1 << 24
#: rendered documents larger than this are held compressed
COMPRESS_ABOVE = 16 << 10


def present_formats(arr: ZarrArray, enabled: Callable[[str], bool]) -> list[str]:
    """The format views shown for ``arr`` (``data.vrt`` also needs ``data.raw``)."""
    out = []
    if enabled("data.nii") and nifti.describable(arr.dtype, arr.shape):
        out.append("data.nii")
    if enabled("data.vrt") and enabled(DATA_FILE) and vrt.describable(arr.dtype, arr.shape):
        out.append("data.vrt")
    return out


log = logging.getLogger(__name__)

#: what leaves a neighbour out of a rendering, as if it were missing (logged): its metadata
#: or its data cannot be read. A store error is not one: it may pass, and a rendering made
#: without the neighbour would be kept.
_UNREADABLE = (MetadataError, CorruptDataError)


def _sibling_name(name: str) -> bool:
    """Whether an attribute's ``name`` can name a sibling node."""
    return bool(name) and name not in (".", "..") and "/" not in name


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


def _name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


class _Neighbours:
    """What one rendering reads around the array; ``deps`` records each neighbour read, so
    the memo key can hold their identities (:func:`_dep_token`)."""

    def __init__(self, ctx: MountContext, arr: ZarrArray) -> None:
        self.ctx = ctx
        self.arr = arr
        self.parent = _parent(arr.path)
        #: (kind, name, found) of each neighbour read
        self.deps: list[tuple[str, str, bool]] = []
        self.group_attrs: Mapping[str, Any] = {}
        group = _group(ctx, arr.path)
        if group is not None:
            self.group_attrs = group.metadata.attributes

    def _left_out(self, kind: str, name: str, exc: Exception) -> None:
        log.info("/%s: neighbour %r left out of a header: %s", self.arr.path, name, exc)
        self.deps.append((kind, name, False))

    def sibling_array(self, name: str) -> ZarrArray | None:
        if not self.arr.path or not _sibling_name(name):
            return None
        try:
            sib = self.ctx.hierarchy.array(join(self.parent, name))
        except NodeNotFound:
            self.deps.append(("array", name, False))
            return None
        except _UNREADABLE as exc:
            self._left_out("array", name, exc)
            return None
        self.deps.append(("array", name, True))
        return sib

    def sibling_attrs(self, name: str) -> Mapping[str, Any] | None:
        if not self.arr.path or not _sibling_name(name):
            return None
        try:
            node = self.ctx.hierarchy.node(join(self.parent, name))
        except NodeNotFound:
            self.deps.append(("node", name, False))
            return None
        except _UNREADABLE as exc:
            self._left_out("node", name, exc)
            return None
        self.deps.append(("node", name, True))
        return node.metadata.attributes

    def coordinate(self, name: str) -> np.ndarray[Any, Any] | None:
        sib = self.sibling_array(name)
        if sib is None or len(sib.shape) != 1 or sib.shape[0] > MAX_COORDINATE_LENGTH:
            return None
        if sib.dtype.kind not in "iuf":
            return None
        try:
            data = sib.read(0, sib.nbytes, "little")
        except _UNREADABLE as exc:  # (a damaged chunk: no coordinates, as for a missing array)
            log.info("/%s: coordinate %r left out of a header: %s", self.arr.path, name, exc)
            return None
        return np.frombuffer(data, dtype=sib.dtype.newbyteorder("<"))

    def stored_nifti(self) -> bytes | None:
        """The NIfTI-Zarr header of the group: its ``nifti`` array (1.0), else the base64
        ``nifti`` attribute (0.x drafts)."""
        sib = self.sibling_array("nifti")
        if sib is not None and sib.dtype.kind in "uS" and len(sib.shape) <= 1:
            if sib.dtype.kind == "u" and sib.itemsize != 1:
                return None
            if 0 < sib.nbytes <= nifti.MAX_STORED_HEADER:
                return sib.read(0, sib.nbytes)
            return None
        return nifti.stored_header_bytes(self.group_attrs)


def _group(ctx: MountContext, path: str) -> Node | None:
    """The group holding the array at ``path`` (None at the root or if unreadable)."""
    if not path:
        return None
    try:
        node = ctx.hierarchy.node(_parent(path))
    except ZarrFSError:
        return None
    return None if node.is_array else node


def _dep_token(ctx: MountContext, parent: str, dep: tuple[str, str, bool]) -> tuple[Any, ...]:
    """The current identity of a neighbour a rendering read. One that was missing is not
    looked for again (the hierarchy keeps no negative entries, and this runs on every stat):
    it is noticed once the array or its group changes (a metadata edit, revalidation)."""
    kind, name, found = dep
    if not found:
        return (kind, name, None)
    path = join(parent, name)
    try:
        if kind == "array":
            sib = ctx.hierarchy.array(path)
            return (kind, name, sib.uid, sib.shape, sib.mtime_ns)
        node = ctx.hierarchy.node(path)
        return (kind, name, id(node), node.mtime_ns)
    except NodeNotFound:
        return (kind, name, None)
    except _UNREADABLE:  # (read when it was not: the rendering is made again)
        return (kind, name, "unreadable")


def _render(
    ctx: MountContext, arr: ZarrArray, name: str, render: Callable[[_Neighbours], bytes]
) -> bytes:
    """``render`` memoised under the state of ``arr``, of its group, and of every neighbour
    the first rendering of that state read."""
    node = ctx.hierarchy.node(arr.path)
    group = _group(ctx, arr.path)
    base: tuple[Any, ...] = (
        "format", name, arr.path, ctx.byte_order, arr.uid, arr.shape, arr.mtime_ns,
        id(node), node.mtime_ns, None if group is None else (id(group), group.mtime_ns),
    )  # fmt: skip
    first: dict[str, bytes] = {}

    def record() -> tuple[tuple[str, str, bool], ...]:
        nb = _Neighbours(ctx, arr)
        first["data"] = render(nb)
        return tuple(nb.deps)

    deps = ctx.memo(("deps", *base), record)
    key = (*base, *(_dep_token(ctx, _parent(arr.path), d) for d in deps))
    return ctx.memo(  # type: ignore[no-any-return]
        key, lambda: first["data"] if "data" in first else render(_Neighbours(ctx, arr))
    )


def nifti_prefix(ctx: MountContext, arr: ZarrArray) -> bytes:
    """The bytes of ``data.nii`` before its data region (header, extensions, padding)."""

    def render(nb: _Neighbours) -> bytes:
        axes = nifti.ome_axes(nb.group_attrs, _name(arr.path), len(arr.shape))
        stored = None
        level0 = None
        if axes is not None:
            raw = nb.stored_nifti()
            stored = nifti.parse_stored_header(raw) if raw is not None else None
            if stored is not None:
                first = _first_dataset(nb.group_attrs)
                level0 = nifti.ome_axes(nb.group_attrs, first, len(arr.shape)) if first else None
        data = nifti.nifti_header(arr.dtype, arr.shape, ctx.byte_order, axes, stored, level0)
        if data is None:
            raise NodeNotFound(f"/{arr.path}/data.nii: NIfTI cannot describe this array")
        return data

    return _render(ctx, arr, "data.nii", render)


def nifti_prefix_size(ctx: MountContext, arr: ZarrArray) -> int:
    """``len(nifti_prefix(ctx, arr))``, without rendering when the group is no OME-NGFF
    image (no NIfTI-Zarr header can apply, so the prefix is the plain one): listing many
    arrays then costs no header rendering."""
    group = _group(ctx, arr.path)
    if group is None or not nifti.multiscales(group.metadata.attributes):
        if not nifti.describable(arr.dtype, arr.shape):
            raise NodeNotFound(f"/{arr.path}/data.nii: NIfTI cannot describe this array")
        return nifti.plain_prefix_size(arr.shape)
    return len(nifti_prefix(ctx, arr))


def _first_dataset(group_attrs: Mapping[str, Any]) -> str | None:
    for ms in nifti.multiscales(group_attrs):
        datasets = ms.get("datasets") if isinstance(ms, dict) else None
        if isinstance(datasets, list) and datasets and isinstance(datasets[0], dict):
            path = datasets[0].get("path")
            return path if isinstance(path, str) else None
    return None


def vrt_content(ctx: MountContext, arr: ZarrArray) -> bytes:
    """The ``data.vrt`` document of ``arr`` (held zlib-compressed when large: a 4096-band
    document is 1.2 MB of very repetitive XML, about 30 KB compressed)."""
    held = _render(ctx, arr, "data.vrt", _vrt_render(ctx, arr))
    return zlib.decompress(held[1:]) if held[:1] == b"z" else held[1:]


def _vrt_render(ctx: MountContext, arr: ZarrArray) -> Callable[[_Neighbours], bytes]:
    """The rendering of ``data.vrt``: a tag byte (``z`` compressed, ``=`` plain), then data."""

    def render(nb: _Neighbours) -> bytes:
        geo = georeference(
            arr.metadata.attributes,
            nb.group_attrs,
            arr.metadata.dimension_names,
            arr.shape,
            nb.coordinate,
            nb.sibling_attrs,
        )
        data = vrt.vrt_document(arr.dtype, arr.shape, ctx.byte_order, geo)
        if data is None:
            raise NodeNotFound(f"/{arr.path}/data.vrt: a VRT cannot describe this array")
        return b"z" + zlib.compress(data, 1) if len(data) > COMPRESS_ABOVE else b"=" + data

    return render
