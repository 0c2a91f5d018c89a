"""Georeferencing of a 2-D/3-D array from its attributes, for ``data.vrt``.

Conventions read, first match wins:

1. GeoZarr ``spatial:`` + ``proj:`` (zarr-conventions "spatial" and "proj"): an affine
   ``spatial:transform`` ``[a, b, c, d, e, f]`` (``x = a*col + b*row + c``, pixel corners;
   ``spatial:registration: "node"`` means it addresses pixel centres) over the two axes named by
   ``spatial:dimensions``, and the CRS from ``proj:wkt2``, ``proj:projjson`` or ``proj:code``.
   Array attributes first; the parent group's apply when its ``spatial:shape`` is the array's.
2. GDAL's ``_CRS`` attribute (as GDAL's Zarr driver writes it: ``wkt``, ``projjson``, ``url``)
   with the geotransform from the 1-D coordinate arrays named by the last two dimensions.
3. CF ``grid_mapping``: the named variable's ``crs_wkt`` (CF) or ``spatial_ref`` (GDAL) and
   the coordinate arrays as in 2 (else the variable's GDAL ``GeoTransform`` attribute).

Invariants:
- Georeferencing applies only when the two spatial axes are the array's last two, in the order
  (y, x); otherwise none is given (the VRT is then in pixel coordinates).
- A coordinate array gives a geotransform only when it is 1-D, as long as its axis and
  regularly spaced *exactly*: every stored value equals ``v[0] + i*step`` computed in float64
  and rounded to the array's own type, for the step ``(v[-1]-v[0])/(n-1)`` or ``v[1]-v[0]``.
  Coordinates are pixel centres (CF); the geotransform addresses pixel corners.
- The CRS text is passed on as written (no CRS library at run time).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from zarrfs.views.numbers import finite_number
from zarrfs.views.vrt import Georeference

#: (name) -> the 1-D values of the sibling array called ``name``, or None
CoordinateReader = Callable[[str], "np.ndarray[Any, Any] | None"]
#: (name) -> the attributes of the sibling node called ``name``, or None
AttributeReader = Callable[[str], "Mapping[str, Any] | None"]


def regular_step(values: np.ndarray[Any, Any]) -> float | None:
    """The exact spacing of a regularly spaced 1-D coordinate array (see module docstring),
    or None."""
    n = len(values)
    if values.ndim != 1 or n < 2 or values.dtype.kind not in "iuf":
        return None
    v64 = values.astype(np.float64)
    if not np.all(np.isfinite(v64)):
        return None
    idx = np.arange(n, dtype=np.float64)
    for step in ((v64[-1] - v64[0]) / (n - 1), v64[1] - v64[0]):
        if step == 0:
            continue
        expected = v64[0] + idx * step
        if values.dtype.kind == "f":
            same = np.array_equal(expected.astype(values.dtype), values)
        else:
            same = np.array_equal(expected, v64)
        if same:
            return float(step)
    return None


def _coordinate_transform(
    dims: Sequence[str | None] | None, shape: Sequence[int], read: CoordinateReader
) -> tuple[float, float, float, float, float, float] | None:
    """Geotransform from the regularly spaced coordinate arrays of the last two axes."""
    if not dims or len(dims) != len(shape) or dims[-1] is None or dims[-2] is None:
        return None
    steps = []
    for name, n in ((dims[-1], shape[-1]), (dims[-2], shape[-2])):
        values = read(name)
        if values is None or values.shape != (n,):
            return None
        step = regular_step(values)
        if step is None:
            return None
        steps.append((float(values[0]), step))
    (x0, dx), (y0, dy) = steps
    return (x0 - dx / 2, dx, 0.0, y0 - dy / 2, 0.0, dy)


def _srs_text(value: Any) -> str | None:
    """WKT/authority strings as they are; a PROJJSON object as compact JSON."""
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, dict) and value:
        return json.dumps(value, separators=(",", ":"))
    return None


def _geozarr(
    attrs: Mapping[str, Any], group_attrs: Mapping[str, Any], dims: Sequence[str | None] | None,
    shape: Sequence[int],
) -> Georeference | None:  # fmt: skip
    spatial: Mapping[str, Any] = attrs
    if "spatial:transform" not in attrs and group_attrs.get("spatial:shape") == list(shape[-2:]):
        spatial = group_attrs
    srs = None
    for source in (attrs, group_attrs):
        for key in ("proj:wkt2", "proj:projjson", "proj:code"):
            srs = srs or _srs_text(source.get(key))
    gt = None
    transform = spatial.get("spatial:transform")
    names = spatial.get("spatial:dimensions")
    if transform is not None:
        coeffs = [finite_number(v) for v in transform] if isinstance(transform, list) else []
        kind = spatial.get("spatial:transform_type", "affine")
        size = spatial.get("spatial:shape", list(shape[-2:]))
        if (
            len(coeffs) == 6
            and all(c is not None for c in coeffs)
            and kind == "affine"
            and size == list(shape[-2:])
            and isinstance(names, list)
            and dims is not None
            and names == list(dims[-2:])
        ):
            a, b, c, d, e, f = (float(x) for x in coeffs)  # type: ignore[arg-type]
            if spatial.get("spatial:registration", "pixel") == "node":
                c, f = c - (a + b) / 2, f - (d + e) / 2
            gt = (c, a, b, f, d, e)
    if gt is None and srs is None:
        return None
    return Georeference(gt, srs, "geozarr")


def georeference(
    attrs: Mapping[str, Any],
    group_attrs: Mapping[str, Any],
    dims: Sequence[str | None] | None,
    shape: Sequence[int],
    read_coordinate: CoordinateReader,
    read_attributes: AttributeReader,
) -> Georeference | None:
    """The georeferencing the attributes give an array of ``shape`` (2-D or 3-D) whose
    dimension names are ``dims``, or None."""
    geo = _geozarr(attrs, group_attrs, dims, shape)
    if geo is not None:
        return geo
    crs = attrs.get("_CRS")
    if isinstance(crs, dict):
        srs = (
            _srs_text(crs.get("wkt")) or _srs_text(crs.get("projjson")) or _srs_text(crs.get("url"))
        )
        gt = _coordinate_transform(dims, shape, read_coordinate)
        if srs is not None or gt is not None:
            return Georeference(gt, srs, "_CRS")
    mapping = attrs.get("grid_mapping")
    # the CF extended form "crs: x y" names the variable before the colon
    words = mapping.split(":")[0].split() if isinstance(mapping, str) else []
    if words:
        var = read_attributes(words[0]) or {}
        srs = _srs_text(var.get("crs_wkt")) or _srs_text(var.get("spatial_ref"))
        gt = _coordinate_transform(dims, shape, read_coordinate)
        if gt is None and isinstance(var.get("GeoTransform"), str):
            parts = [finite_number(_parse(p)) for p in var["GeoTransform"].split()]
            if len(parts) == 6 and all(p is not None for p in parts):
                gt = tuple(parts)  # type: ignore[assignment]
        if srs is not None or gt is not None:
            return Georeference(gt, srs, "grid_mapping")
    return None


def _parse(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None
