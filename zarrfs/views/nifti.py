"""``data.nii``: a single-file NIfTI image whose data region is ``data.raw``.

Formats: NIfTI-1 (``nifti1.h``) and NIfTI-2 (``nifti2.h``), single file (magic ``n+1``/``n+2``).
Headers are produced by nibabel (``Nifti1Header``/``Nifti2Header``), never packed by hand.

Invariants:
- The file is ``header + extensions + padding`` followed by exactly the bytes of ``data.raw``;
  ``vox_offset`` equals the length of that prefix and is a multiple of 16. The header is in the
  mount's byte order, which is also the data's.
- NIfTI axes run fastest first: ``dim[1..n]`` is the Zarr shape reversed (x is the last Zarr
  axis). Ranks 1..7 only; every axis at least 1 long; NIfTI-1 while every axis fits its 16-bit
  ``dim`` fields, NIfTI-2 (64-bit fields) otherwise.
- Data types: the NIfTI codes for (u)int8..(u)int64, float32, float64, complex64, complex128;
  ``bool`` is described as uint8 (Zarr stores one byte per element, 0 or 1). Anything else
  (float16, raw bytes, strings) gets no ``data.nii``: absent, never approximate.
- Geometry, in order of precedence: a NIfTI-Zarr header stored with the group (the ``nifti``
  array of NIfTI-Zarr 1.0, or the base64 ``nifti`` attribute of the 0.x drafts) is served with
  only what must change to describe this array (dims, data type, byte order, ``vox_offset``,
  magic, and for a lower-resolution level the affine scaled as its OME-NGFF scales say);
  otherwise the voxel sizes, units and a diagonal affine come from the OME-NGFF
  ``coordinateTransformations`` (scale, translation; dataset then multiscale level) of the
  dataset the array is; otherwise the header has unit voxel sizes and no transform codes.
- Equal inputs give byte-identical headers.
"""

from __future__ import annotations

import base64
import binascii
import io
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from nibabel.nifti1 import Nifti1Header
from nibabel.nifti2 import Nifti2Header
from nibabel.spatialimages import HeaderDataError

from zarrfs.views.legacy import resolve_byte_order, type_code
from zarrfs.views.numbers import finite_number

log = logging.getLogger(__name__)

#: largest size a NIfTI-1 ``dim`` entry holds (signed 16-bit)
NIFTI1_DIM_MAX = 2**15 - 1
#: most data axes a NIfTI header describes
NIFTI_MAX_RANK = 7
#: the numeric types NIfTI has a code for (byte-order-free keys of ``legacy.type_code``)
NIFTI_TYPES = frozenset({"u1", "i1", "u2", "i2", "u4", "i4", "u8", "i8", "f4", "f8", "c8", "c16"})
#: largest stored NIfTI-Zarr header (with extensions) that is read
MAX_STORED_HEADER = 1 << 20

#: OME-NGFF unit names -> nibabel's NIfTI unit names
_SPACE_UNITS = {"meter": "meter", "millimeter": "mm", "micrometer": "micron"}
_TIME_UNITS = {"second": "sec", "millisecond": "msec", "microsecond": "usec"}


@dataclass(frozen=True)
class OmeAxis:
    """One axis of an OME-NGFF image: its name, type and unit, how far apart samples are
    (``scale``) and where index 0 lies (``translation``); 1 and 0 when the metadata gives no
    transformation."""

    name: str
    type: str | None
    unit: str | None
    scale: float
    translation: float


def nifti_dtype(dtype: np.dtype[Any]) -> np.dtype[Any] | None:
    """The NIfTI data type that describes ``dtype`` exactly (native order), or None."""
    code = type_code(dtype)
    if code not in NIFTI_TYPES:
        return None
    return np.dtype(code)


def describable(dtype: np.dtype[Any], shape: Sequence[int]) -> bool:
    """Whether a ``data.nii`` can describe an array of this data type and shape exactly."""
    return (
        nifti_dtype(dtype) is not None
        and 1 <= len(shape) <= NIFTI_MAX_RANK
        and all(n > 0 for n in shape)
        and max(shape) < 2**63
    )


def plain_prefix_size(shape: Sequence[int]) -> int:
    """Length of the prefix :func:`nifti_header` writes without a stored header (no
    extensions): 352 bytes for NIfTI-1, 544 for NIfTI-2."""
    return 352 if max(shape) <= NIFTI1_DIM_MAX else 544


# ----------------------------------------------------------------------------- OME-NGFF


def multiscales(attrs: Mapping[str, Any]) -> list[Any]:
    """The ``multiscales`` list of OME-NGFF 0.4 (top level) or 0.5 (under ``ome``)."""
    ome = attrs.get("ome")
    found = ome.get("multiscales") if isinstance(ome, dict) else attrs.get("multiscales")
    return found if isinstance(found, list) else []


def _scale_translation(transforms: Any, rank: int) -> tuple[list[float], list[float]] | None:
    """(scale, translation) of an OME-NGFF ``coordinateTransformations`` list, or None when it
    holds anything else (or a ``path`` reference, or lengths that do not match the rank)."""
    scale, translation = [1.0] * rank, [0.0] * rank
    if transforms is None:
        return scale, translation
    if not isinstance(transforms, list):
        return None
    for t in transforms:
        if not isinstance(t, dict) or t.get("type") not in ("scale", "translation"):
            return None
        values = t.get(t["type"])
        numbers = [finite_number(v) for v in values] if isinstance(values, list) else []
        if len(numbers) != rank or None in numbers:
            return None
        if t["type"] == "scale":
            scale = [s * float(v) for s, v in zip(scale, numbers)]  # type: ignore[arg-type]
            translation = [x * float(v) for x, v in zip(translation, numbers)]  # type: ignore[arg-type]
        else:
            translation = [x + float(v) for x, v in zip(translation, numbers)]  # type: ignore[arg-type]
    return scale, translation


def ome_axes(group_attrs: Mapping[str, Any], name: str, rank: int) -> list[OmeAxis] | None:
    """The OME-NGFF axes of dataset ``name`` (a child array of the group whose attributes are
    ``group_attrs``), with the scale and translation of its dataset transformations followed
    by the multiscale's own; None when the group does not list such a dataset."""
    for ms in multiscales(group_attrs):
        if not isinstance(ms, dict):
            continue
        datasets = ms.get("datasets")
        for ds in datasets if isinstance(datasets, list) else []:
            if not isinstance(ds, dict) or ds.get("path") != name:
                continue
            inner = _scale_translation(ds.get("coordinateTransformations"), rank)
            outer = _scale_translation(ms.get("coordinateTransformations"), rank)
            if inner is None or outer is None:
                return None
            axes = ms.get("axes")
            if axes is None:
                axes = [{"name": n} for n in "tczyx"[5 - rank :]] if rank <= 5 else []
            if not isinstance(axes, list) or len(axes) != rank:
                return None
            out = []
            for i, ax in enumerate(axes):
                ax = {"name": ax} if isinstance(ax, str) else ax
                if not isinstance(ax, dict):
                    return None
                kind, unit = ax.get("type"), ax.get("unit")
                out.append(
                    OmeAxis(
                        name=str(ax.get("name", "")),
                        type=kind if isinstance(kind, str) else None,
                        unit=unit if isinstance(unit, str) else None,
                        scale=inner[0][i] * outer[0][i],
                        translation=inner[1][i] * outer[0][i] + outer[1][i],
                    )
                )
            return out
    return None


def _is_space(ax: OmeAxis) -> bool:
    return ax.type == "space" or (ax.type is None and ax.name.lower() in ("x", "y", "z"))


def _ome_geometry(hdr: Nifti1Header, axes: list[OmeAxis]) -> None:
    """Voxel sizes, units and a diagonal affine from OME-NGFF axes (Zarr order)."""
    nifti_axes = list(reversed(axes))  # x first
    spatial = nifti_axes[:3]
    affine = np.eye(4)
    for i, ax in enumerate(spatial):
        if _is_space(ax):
            affine[i, i], affine[i, 3] = ax.scale, ax.translation
    zooms = [float(affine[i, i]) for i in range(len(spatial))]
    zooms += [ax.scale if ax.type == "time" else 1.0 for ax in nifti_axes[3:]]
    hdr.set_zooms([abs(z) for z in zooms])
    hdr.set_qform(affine, code="aligned")
    hdr.set_sform(affine, code="aligned")
    space = {_SPACE_UNITS.get(ax.unit or "") for ax in spatial if _is_space(ax)}
    time = {_TIME_UNITS.get(ax.unit or "") for ax in nifti_axes[3:4] if ax.type == "time"}
    hdr.set_xyzt_units(
        xyz=space.pop() if len(space) == 1 and None not in space else "unknown",
        t=time.pop() if len(time) == 1 and None not in time else "unknown",
    )


# ----------------------------------------------------------------------------- NIfTI-Zarr


def stored_header_bytes(group_attrs: Mapping[str, Any]) -> bytes | None:
    """The binary header of a NIfTI-Zarr 0.x group (base64 under ``nifti``), or None."""
    nifti = group_attrs.get("nifti")
    if not isinstance(nifti, dict) or not isinstance(nifti.get("base64"), str):
        return None
    try:
        return base64.b64decode(nifti["base64"], validate=True)
    except (binascii.Error, ValueError):
        return None


def parse_stored_header(data: bytes) -> Nifti1Header | None:
    """A stored NIfTI-1 or NIfTI-2 header (either byte order, extensions included) parsed by
    nibabel, or None (logged) when it is not one."""
    if len(data) < 348:
        return None
    for klass in (Nifti1Header, Nifti2Header):
        size = np.frombuffer(data[:4], "<i4")[0]
        if klass.sizeof_hdr not in (size, size.byteswap()):
            continue
        try:
            hdr = klass.from_fileobj(io.BytesIO(data), check=False)
        except (HeaderDataError, ValueError, EOFError) as exc:
            log.warning("NIfTI-Zarr header not readable (%s); data.nii uses OME-NGFF", exc)
            return None
        return hdr
    log.warning("NIfTI-Zarr header has no NIfTI-1/2 size field; data.nii uses OME-NGFF")
    return None


def _level_affine(stored: Nifti1Header, axes0: list[OmeAxis], axes: list[OmeAxis]) -> None:
    """Scale a level-0 header's transforms to another pyramid level (OME-NGFF scales)."""

    def phys(ax: list[OmeAxis]) -> np.ndarray:
        m = np.eye(4)
        for i, a in enumerate(list(reversed(ax))[:3]):
            m[i, i], m[i, 3] = a.scale, a.translation
        return m

    change = np.linalg.inv(phys(axes0)) @ phys(axes)
    qform, qcode = stored.get_qform(coded=True)
    sform, scode = stored.get_sform(coded=True)
    if qform is not None:
        stored.set_qform(qform @ change, int(qcode))
    if sform is not None:
        stored.set_sform(sform @ change, int(scode))


# ----------------------------------------------------------------------------- the header


def _usable(axes: list[OmeAxis]) -> bool:
    """Scales that make an invertible affine (finite, non-zero) and finite translations."""
    return all(np.isfinite(a.scale) and a.scale != 0 and np.isfinite(a.translation) for a in axes)


def _from_stored(
    klass: type[Nifti1Header],
    stored: Nifti1Header,
    endian: str,
    ndtype: np.dtype[Any],
    dims: tuple[int, ...],
    axes: list[OmeAxis] | None,
    level0_axes: list[OmeAxis] | None,
) -> Nifti1Header:
    """The stored NIfTI-Zarr header changed only where it must to describe this array."""
    hdr = stored.copy() if isinstance(stored, klass) else klass.from_header(stored)
    if hdr.endianness != endian:
        hdr = hdr.as_byteswapped(endian)
    # neither byte-swapping nor a NIfTI-1 -> 2 conversion carries the extensions
    hdr.extensions.clear()
    hdr.extensions.extend(stored.extensions)
    if axes is not None and level0_axes is not None and axes != level0_axes:
        if not (_usable(axes) and _usable(level0_axes)):
            raise ValueError("OME-NGFF scales of a level are zero or not finite")
        _level_affine(hdr, level0_axes, axes)
    hdr.set_data_dtype(ndtype)
    zooms = [abs(float(z)) or 1.0 for z in hdr.get_zooms()]
    hdr.set_data_shape(dims)
    keep = zooms[: min(3, len(dims))]
    if axes is not None:
        # NIfTI-Zarr keeps (t, c) before (z, y, x), so NIfTI dim 4 is the channel axis when
        # both exist: the stored time step goes wherever the time axis is
        step = zooms[3] if len(zooms) > 3 else 1.0
        keep += [step if a.type == "time" else 1.0 for a in list(reversed(axes))[3 : len(dims)]]
    else:
        keep += zooms[3 : len(dims)]
    hdr.set_zooms(keep + [1.0] * (len(dims) - len(keep)))
    return hdr


def nifti_header(
    dtype: np.dtype[Any],
    shape: Sequence[int],
    byte_order: str,
    axes: list[OmeAxis] | None = None,
    stored: Nifti1Header | None = None,
    level0_axes: list[OmeAxis] | None = None,
) -> bytes | None:
    """The bytes ``data.nii`` starts with (header, extensions, padding to ``vox_offset``), or
    None when NIfTI cannot describe the array exactly.

    ``axes``: the array's OME-NGFF axes (Zarr order); ``stored``: a NIfTI-Zarr header of the
    group, served for the array with its dims, type and byte order; ``level0_axes``: the axes
    of the level ``stored`` describes (its affine is rescaled when they differ from ``axes``).
    """
    ndtype = nifti_dtype(dtype)
    if ndtype is None or not describable(dtype, shape):
        return None
    endian = "<" if resolve_byte_order(byte_order) == "little" else ">"
    dims = tuple(int(n) for n in reversed(shape))
    klass = Nifti1Header if max(dims) <= NIFTI1_DIM_MAX else Nifti2Header
    hdr = None
    if stored is not None:
        try:
            hdr = _from_stored(klass, stored, endian, ndtype, dims, axes, level0_axes)
        except (HeaderDataError, ValueError, np.linalg.LinAlgError) as exc:
            log.warning("NIfTI-Zarr header cannot describe the array (%s); using OME-NGFF", exc)
    if hdr is None:
        hdr = klass(endianness=endian)
        hdr.set_data_dtype(ndtype)
        hdr.set_data_shape(dims)
        if axes is not None and _usable(axes):
            _ome_geometry(hdr, axes)
    hdr["magic"] = b"n+2" if klass is Nifti2Header else b"n+1"
    head = klass.sizeof_hdr + 4 + hdr.extensions.get_sizeondisk()
    hdr["vox_offset"] = -(-head // 16) * 16
    buf = io.BytesIO()
    hdr.write_to(buf)
    out = buf.getvalue()
    return out + bytes(int(hdr["vox_offset"]) - len(out))
