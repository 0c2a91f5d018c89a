"""What a TIFF view says about an array besides its pixels: axis roles, ImageJ hyperstack and
OME-XML descriptions (``data.tif``, ``data.btf``; the byte layout is in ``zarrfs.views.tiff``).

Axis roles come from the array's ``dimension_names`` (v3; ``_ARRAY_DIMENSIONS`` in v2) or, for
an array that is a dataset of an OME-NGFF ``multiscales`` group (0.4: ``attributes.multiscales``,
0.5: ``attributes.ome.multiscales``), from the group's ``axes``: ``t``/``time`` is time,
``c``/``channel`` is channel, ``z`` is depth (case-insensitive; NGFF axis types ``time`` and
``channel`` count too). The last two axes are always the image plane (Y, X).

Invariants:
- Pages run in the array's C order (a page is the plane at one index of the leading axes), so
  the data region is exactly ``data.raw``.
- ImageJ reads a hyperstack's planes in one order only (channel fastest, then z, then time) and
  reads a file's planes at increasing offsets, so ImageJ hyperstack metadata (``channels=``,
  ``slices=``, ``frames=``, ``hyperstack=true``, spacing and unit) is written only when the
  array's axes of size > 1 already run in that order; otherwise ImageJ opens a plain stack.
  OME-XML (OME-NGFF datasets) states any axis order through DimensionOrder.
- A directory carries one ImageDescription (libtiff warns about two): ``data.tif`` the ImageJ
  description where there is one, else OME-XML; ``data.btf`` OME-XML where there is one, else
  the ImageJ description; otherwise tifffile's shaped description.
- Every description is produced by tifffile (``imagej_description``, ``shaped_description``,
  ``OmeXml``). Axes without a known role give tifffile's shaped description (the N-D shape).
- Metadata that cannot be stated exactly is left out (an unknown unit drops its physical
  size), never guessed; OME-XML is ASCII (other characters become XML character references).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tifffile
from tifffile.tifffile import shaped_description

from zarrfs.views.numbers import finite_number

#: ImageJ's plane order: slowest first (time, depth, channel)
_IMAGEJ_ROLES = ("t", "z", "c")
#: data types ImageJ opens from a TIFF (tifffile's ImageJ writer accepts the same)
IMAGEJ_TYPES = frozenset({"u1", "u2", "i2", "f4"})
_NAMES = {"t": "t", "time": "t", "c": "c", "channel": "c", "z": "z"}
#: NGFF (UDUNITS) unit names -> OME-XML unit symbols
_OME_UNITS = {
    "angstrom": "Å", "nanometer": "nm", "micrometer": "µm", "millimeter": "mm",
    "centimeter": "cm", "meter": "m", "kilometer": "km",
    "nanosecond": "ns", "microsecond": "µs", "millisecond": "ms", "second": "s",
    "minute": "min", "hour": "h",
}  # fmt: skip
_TIME_UNITS = frozenset({"nanosecond", "microsecond", "millisecond", "second", "minute", "hour"})
#: NGFF unit names -> ImageJ calibration unit strings
_IMAGEJ_UNITS = {
    "nanometer": "nm", "micrometer": "micron", "millimeter": "mm", "centimeter": "cm",
    "meter": "m",
}  # fmt: skip


@dataclass(frozen=True)
class NgffImage:
    """What an OME-NGFF multiscales group says about one of its datasets."""

    axes: tuple[dict[str, Any], ...]
    scale: tuple[float, ...] | None
    channel_names: tuple[str, ...] | None
    name: str | None


@dataclass
class TiffMeta:
    """What the first directory's ImageDescription can say about one array."""

    #: tifffile's shaped description (the N-D shape), always available
    shaped: str
    #: ImageJ hyperstack description, where ImageJ can state the array's axes
    imagej: str | None = None
    #: OME-XML, for a dataset of an OME-NGFF image
    ome: str | None = None
    #: (x, y) pixels per unit for XResolution/YResolution, or None
    resolution: tuple[float, float] | None = None
    #: (planes, Y, X) when ImageJ opens the type: its plain-stack description is made on demand
    stack: tuple[int, int, int] | None = None

    def imagej_single(self) -> str | None:
        """ImageJ's description (with ``images=``) for the one-IFD form used above 4 GiB, whose
        planes are read as one block in the array's order; None where ImageJ cannot open it."""
        if self.imagej is not None:
            return self.imagej
        return None if self.stack is None else tifffile.imagej_description(self.stack, "ZYX")


def ngff_image(group_attrs: Mapping[str, Any], array_name: str) -> NgffImage | None:
    """The NGFF multiscales entry of ``array_name`` in a group's attributes, or None."""
    ome = group_attrs.get("ome")
    root = ome if isinstance(ome, Mapping) else group_attrs
    multiscales = root.get("multiscales")
    if not isinstance(multiscales, list):
        return None
    for ms in multiscales:
        if not isinstance(ms, Mapping) or not isinstance(ms.get("axes"), list):
            continue
        axes = tuple(a if isinstance(a, Mapping) else {"name": a} for a in ms["axes"])
        datasets = ms.get("datasets")
        for ds in datasets if isinstance(datasets, list) else []:
            if isinstance(ds, Mapping) and ds.get("path") == array_name:
                scale = _scale(ds.get("coordinateTransformations"), len(axes))
                outer = _scale(ms.get("coordinateTransformations"), len(axes))
                if scale is not None and outer is not None:
                    scale = tuple(a * b for a, b in zip(scale, outer, strict=True))
                name = ms.get("name")
                return NgffImage(
                    tuple(dict(a) for a in axes),
                    scale,
                    _channel_names(root.get("omero")),
                    name if isinstance(name, str) else None,
                )
    return None


def _scale(transforms: Any, ndim: int) -> tuple[float, ...] | None:
    if not isinstance(transforms, list):
        return None if transforms is not None else tuple([1.0] * ndim)
    for t in transforms:
        if isinstance(t, Mapping) and t.get("type") == "scale":
            s = t.get("scale")
            if isinstance(s, list) and len(s) == ndim and all(_positive(v) for v in s):
                return tuple(float(v) for v in s)
            return None
    return tuple([1.0] * ndim)


def _positive(v: Any) -> bool:
    f = finite_number(v)
    return f is not None and f > 0


def _channel_names(omero: Any) -> tuple[str, ...] | None:
    if not isinstance(omero, Mapping) or not isinstance(omero.get("channels"), list):
        return None
    labels = [c.get("label") if isinstance(c, Mapping) else None for c in omero["channels"]]
    return tuple(labels) if all(isinstance(x, str) for x in labels) else None  # type: ignore[arg-type]


def axis_roles(
    ndim: int, dimension_names: Sequence[str | None] | None, ngff: NgffImage | None
) -> list[str | None] | None:
    """``t``/``c``/``z`` (or None) for each leading axis; None when no axis names are known."""
    if ngff is not None and len(ngff.axes) == ndim:
        roles: list[str | None] = []
        for a in ngff.axes[:-2]:
            name = str(a.get("name", "")).lower()
            kind = str(a.get("type", "")).lower()
            roles.append("t" if kind == "time" else "c" if kind == "channel" else _NAMES.get(name))
        return roles
    if dimension_names is None or len(dimension_names) != ndim:
        return None
    return [_NAMES.get((n or "").lower()) for n in dimension_names[:-2]]


def tiff_meta(
    dtype_code: str,
    shape: tuple[int, ...],
    dimension_names: Sequence[str | None] | None,
    ngff: NgffImage | None,
    path: str,
    array_shape: tuple[int, ...] | None = None,
) -> TiffMeta:
    """Descriptions for planes ``shape`` (rank >= 2, pages in C order) of an array of
    ``array_shape`` (the same unless the array is 1-D)."""
    lead = len(shape) - 2
    if ngff is not None and len(ngff.axes) != len(shape):
        ngff = None  # (a multiscales entry whose axes are not this array's: not used)
    roles = axis_roles(len(shape), dimension_names, ngff)
    named = roles is not None and lead > 0 and None not in roles and len(set(roles)) == lead
    stack = None
    if dtype_code in IMAGEJ_TYPES and math.prod(shape[-2:]) < 2**31:
        stack = (math.prod(shape[:-2]), shape[-2], shape[-1])
    shaped = shaped_description(array_shape or shape)
    if not named or roles is None:
        return TiffMeta(shaped, stack=stack)
    extra, resolution = _calibration(ngff)
    meta = TiffMeta(shaped, resolution=resolution, stack=stack)
    letters = "".join(r.upper() for r in roles if r is not None) + "YX"
    if ngff is not None:
        try:
            meta.ome = _ome_xml(dtype_code, shape, letters, ngff, path)
        except tifffile.OmeXmlError:  # an axis order or type OME-XML cannot state: left out
            meta.ome = None
    # ImageJ reads planes in one order only (channel fastest, then z, then time): a hyperstack
    # is stated only when the array's axes of size > 1 already run in that order
    sized = [r for r, n in zip(roles, shape, strict=False) if n > 1]
    in_order = sized == [r for r in _IMAGEJ_ROLES if r in sized]
    if stack is not None and in_order:
        sizes = {r: shape[roles.index(r)] if r in roles else 1 for r in _IMAGEJ_ROLES}
        ij_shape = (sizes["t"], sizes["z"], sizes["c"], *shape[-2:])
        ij = tifffile.imagej_description(ij_shape, "TZCYX", hyperstack=True, **extra)
        meta.imagej = ij
    return meta


def description(meta: TiffMeta, big: bool) -> str:
    """The one ImageDescription of a view (libtiff warns about a directory with two):
    ``data.tif`` is for ImageJ first (ImageJ does not read BigTIFF), ``data.btf`` for OME
    readers (Bio-Formats, QuPath) first; tifffile reads every one of them."""
    first, second = (meta.ome, meta.imagej) if big else (meta.imagej, meta.ome)
    return first or second or meta.shaped


def _calibration(ngff: NgffImage | None) -> tuple[dict[str, Any], tuple[float, float] | None]:
    """ImageJ description keys and X/Y resolution from NGFF scales (micrometre-like units)."""
    if ngff is None or ngff.scale is None:
        return {}, None
    units = [str(a.get("unit", "")) for a in ngff.axes]
    unit = _IMAGEJ_UNITS.get(units[-1])
    if unit is None or units[-2] != units[-1]:
        return {}, None
    extra: dict[str, Any] = {"unit": unit}
    for a, s, u in zip(ngff.axes[:-2], ngff.scale[:-2], units[:-2], strict=True):
        name = str(a.get("name", "")).lower()
        if name == "z" and u == units[-1]:
            extra["spacing"] = s
        if str(a.get("type", "")).lower() == "time" and u == "second":
            extra["finterval"] = s
    return extra, (1.0 / ngff.scale[-1], 1.0 / ngff.scale[-2])


def _ome_xml(dtype_code: str, shape: tuple[int, ...], axes: str, ngff: NgffImage, path: str) -> str:
    """OME-XML (tifffile's ``OmeXml``) for planes in the array's C order (tifffile derives
    DimensionOrder from ``axes``)."""
    meta: dict[str, Any] = {"Name": ngff.name or path or "image"}
    if ngff.scale is not None:
        units = [str(a.get("unit", "")) for a in ngff.axes]
        for key, i in (("X", len(axes) - 1), ("Y", len(axes) - 2), ("Z", axes.find("Z"))):
            if i >= 0 and units[i] in _OME_UNITS and units[i] not in _TIME_UNITS:
                meta[f"PhysicalSize{key}"] = ngff.scale[i]
                meta[f"PhysicalSize{key}Unit"] = _OME_UNITS[units[i]]
        t = axes.find("T")
        if t >= 0 and units[t] in _TIME_UNITS:
            meta["TimeIncrement"] = ngff.scale[t]
            meta["TimeIncrementUnit"] = _OME_UNITS[units[t]]
    c = axes.find("C")
    channels = shape[c] if c >= 0 else 1
    if ngff.channel_names is not None and len(ngff.channel_names) == channels:
        meta["Channel"] = {"Name": list(ngff.channel_names)}
    ome = tifffile.OmeXml()
    pages = math.prod(shape[:-2])
    storedshape = (pages, 1, 1, shape[-2], shape[-1], 1)
    ome.addimage(np.dtype(dtype_code), shape, storedshape, axes=axes, **meta)
    return ome.tostring(declaration=True).encode("ascii", "xmlcharrefreplace").decode("ascii")
