"""``<group>/group.nc``: a Zarr group rendered as one netCDF-4 (HDF5) file around the arrays'
decoded bytes.

netCDF-4 files are HDF5 files that follow the netCDF-4 conventions (netCDF-C "NetCDF-4 Format
with HDF5": dimensions are HDF5 dimension scales carrying ``_Netcdf4Dimid``, a dimension without
a coordinate variable is a scale whose ``NAME`` starts with "This is a netCDF dimension but not
a netCDF variable", ``_NCProperties`` on the root group). HDF5 keeps a contiguous dataset's
elements as one run of bytes at an address the library chooses, in either byte order, so a
dataset can be exactly the bytes ``data.raw`` serves.

How the file is made: h5py (libhdf5) writes the whole file into a :class:`SparseImage`, a file
object that keeps only the pages written to it. Every included array is a contiguous dataset
with fill time "never"; once all metadata is written, writing one element makes libhdf5 reserve
each dataset's address range at the end of the file (``get_offset()`` gives it), so the
metadata (superblock, object headers, heaps, attributes) comes first and reading it never reads
ahead into more than the first array. The data ranges stay holes that are never materialised: a
10 GiB group costs the few kilobytes of its metadata. The file's size is known from metadata
alone (:func:`size_bound`: the data plus a generous allowance), and the rendered file is padded
with zeros up to it, so ``stat`` never renders.

Invariants of a :class:`Layout`:
- ``extents`` are disjoint, sorted, inside ``[0, size)``; extent ``e`` holds exactly the C-order
  bytes of array ``e.path`` in the byte order of its dataset (the mount's byte order);
- ``segments`` are the metadata bytes libhdf5 wrote, sorted, disjoint from every extent; any
  other byte of the file reads as zero (what libhdf5 would read from its own sparse file),
  including the padding from ``eoa`` (HDF5's end of allocation) to ``size``;
- rendering depends only on the group's attributes and the arrays' metadata, never on data.

Variables and dimensions (see docs/netcdf.md for the reasons):
- an array is included when netCDF-4 has its element type exactly: integers of 1-8 bytes,
  32/64-bit floats, and ``bool`` as ``byte`` with the attribute ``dtype = "bool"`` (how xarray
  stores booleans); other arrays are listed with the reason in the global attribute
  ``zarrfs_excluded`` and the log;
- dimension names come from v3 ``dimension_names`` or v2 ``_ARRAY_DIMENSIONS``; a name whose
  length disagrees with the dimension already defined (a 1-D array named like its dimension
  defines it first), or a missing name, gives the array its own dimension;
- ``_FillValue`` follows the Zarr-to-CF convention xarray reads: the Zarr fill value for v2
  arrays (unless null), the ``_FillValue`` attribute for v3 arrays; the Zarr fill value is
  always the HDF5 dataset fill value.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import h5py
import numpy as np

from zarrfs.core.metadata.model import ArrayMetadata
from zarrfs.views.sparseimage import SparseImage

log = logging.getLogger(__name__)

#: the file name of the view in every group directory
NC_FILE = "group.nc"
#: the global attribute naming the arrays that are not in the file, with the reason
EXCLUDED_ATTR = "zarrfs_excluded"
#: what netCDF-C writes as the NAME of a dimension scale that is not a variable
PHONY_NAME = "This is a netCDF dimension but not a netCDF variable.%10d"
#: prefix netCDF-C gives a variable named like a dimension it is not the coordinate of
NON_COORD_PREFIX = "_nc4_non_coord_"
#: attributes the netCDF-4/HDF5 conventions own (never copied from Zarr attributes)
RESERVED_ATTRS = frozenset(
    {
        "_ARRAY_DIMENSIONS", "_FillValue", "_Netcdf4Dimid", "_Netcdf4Coordinates",
        "_NCProperties", "_nc3_strict", "_IsNetcdf4", "_SuperblockVersion", "_Format",
        "DIMENSION_LIST", "REFERENCE_LIST", "CLASS", "NAME", "DIMENSION_LABELS",
    }
)  # fmt: skip
#: the most metadata a rendering may write (a guard: real groups need kilobytes)
MAX_METADATA_BYTES = 64 << 20
#: the HDF5 Dimension Scales attributes (HDF5 "Dimension Scale Specification"), as H5DS
#: writes them: one object reference per axis, and (variable, axis) pairs on each scale
_DIMENSION_LIST = h5py.vlen_dtype(h5py.ref_dtype)
_REFERENCE_LIST = np.dtype([("dataset", h5py.ref_dtype), ("dimension", "<i4")])
#: metadata allowances of ``size_bound`` (bytes; generous: tests check renders stay within)
_FILE_BASE = 32 << 10
_PER_DIMENSION = 2 << 10
_PER_VARIABLE = 4 << 10
_PER_AXIS = 256
_PER_ATTRIBUTE = 512
_INT64 = (-(2**63), 2**63 - 1)


# ----------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Extent:
    """Bytes ``[start, stop)`` of the file are the decoded bytes of the array at ``path``."""

    start: int
    stop: int
    path: str


@dataclass
class Layout:
    """A rendered file: metadata segments, data extents, and what was left out."""

    size: int
    segments: list[tuple[int, bytes]]
    extents: list[Extent]
    excluded: dict[str, str] = field(default_factory=dict)
    #: HDF5's end-of-allocation address: bytes from here to ``size`` are zero padding
    eoa: int = 0

    @property
    def metadata_bytes(self) -> int:
        return sum(len(d) for _, d in self.segments)


@dataclass(frozen=True)
class Member:
    """An array of the group: its name in the group, its node path and metadata."""

    name: str
    path: str
    metadata: ArrayMetadata


@dataclass
class _Var:
    member: Member
    dtype: np.dtype[Any]
    is_bool: bool
    dims: tuple[str, ...] = ()
    h5name: str = ""


def file_dtype(dtype: np.dtype[Any], byte_order: str) -> tuple[np.dtype[Any] | None, str]:
    """The HDF5 element type of a netCDF-4 variable holding ``dtype`` exactly in
    ``byte_order`` (``little``/``big``), or (None, why not)."""
    order: Literal["<", ">"] = "<" if byte_order == "little" else ">"
    if dtype.kind == "b" and dtype.itemsize == 1:
        return np.dtype("i1"), ""
    if dtype.kind in "iu" and dtype.itemsize in (1, 2, 4, 8):
        return dtype.newbyteorder(order), ""
    if dtype.kind == "f" and dtype.itemsize in (4, 8):
        return dtype.newbyteorder(order), ""
    reasons = {
        "f": "netCDF-4 has no 16-bit float type",
        "c": "netCDF-4 has no complex type",
        "M": "netCDF-4 has no datetime type (CF stores times as numbers with units)",
        "m": "netCDF-4 has no timedelta type (CF stores durations as numbers with units)",
        "S": "fixed-length byte strings have no exact netCDF-4 type",
        "U": "fixed-length UTF-32 strings have no netCDF-4 type",
        "V": "raw bytes have no exact netCDF-4 type",
    }
    return None, reasons.get(dtype.kind, f"data type {dtype} has no netCDF-4 type")


def dimension_names(meta: ArrayMetadata) -> tuple[str | None, ...]:
    """v3 ``dimension_names`` or v2 ``_ARRAY_DIMENSIONS``; None where an axis has no name."""
    names: Any = meta.dimension_names
    if names is None and meta.zarr_format != 3:
        names = meta.attributes.get("_ARRAY_DIMENSIONS")
    if not isinstance(names, (list, tuple)) or len(names) != meta.ndim:
        return (None,) * meta.ndim
    return tuple(n if isinstance(n, str) and _valid_name(n) else None for n in names)


def _valid_name(name: str) -> bool:
    return bool(name) and "/" not in name and name != "." and "\x00" not in name and _utf8(name)


def _utf8(name: str) -> bool:
    """Whether ``name`` is UTF-8 text, as netCDF names are: no surrogates (a store's file name
    that is not UTF-8 decodes with surrogate escapes; JSON may hold lone surrogates)."""
    return _SURROGATE.search(name) is None


def _excluded_line(name: str, why: str) -> str:
    """A line of ``zarrfs_excluded``: the name as text even where it is not UTF-8."""
    return f"{name.encode('utf-8', 'backslashreplace').decode('utf-8')}: {why}"


def plan_dimensions(variables: Sequence[_Var]) -> dict[str, int]:
    """Give every variable its dimension names (``_Var.dims``); returns name -> length in
    definition order. Shared names whose lengths disagree, and unnamed axes, get a dimension
    of their own named after the array."""
    sizes: dict[str, int] = {}
    names = {v.member.name for v in variables}
    for v in variables:  # coordinate variables define their dimension
        m = v.member.metadata
        if m.ndim == 1 and dimension_names(m) == (v.member.name,):
            sizes[v.member.name] = m.shape[0]
    for v in variables:
        dims: list[str] = []
        meta = v.member.metadata
        for axis, (name, n) in enumerate(zip(dimension_names(meta), meta.shape)):
            if name is not None and sizes.setdefault(name, n) == n:
                dims.append(name)
                continue
            base = f"{v.member.name}_{name}" if name is not None else f"{v.member.name}_dim{axis}"
            own, k = base, 1
            while own in sizes or own in names:
                k += 1
                own = f"{base}_{k}"
            sizes[own] = n
            dims.append(own)
        v.dims = tuple(dims)
    return sizes


# ----------------------------------------------------------------------------- attributes


def nc_attribute(value: Any) -> Any:
    """A JSON attribute value as a netCDF attribute: numbers as int64/float64, booleans as
    byte, strings as text, lists of one type as arrays of it, anything else as JSON text."""
    if isinstance(value, bool):
        return np.int8(value)
    if isinstance(value, int) and _INT64[0] <= value <= _INT64[1]:
        return np.int64(value)
    if isinstance(value, float):
        return np.float64(value)
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value:
        if all(isinstance(x, bool) for x in value):
            return np.array(value, dtype=np.int8)
        if all(isinstance(x, int) and not isinstance(x, bool) for x in value):
            if all(_INT64[0] <= x <= _INT64[1] for x in value):
                return np.array(value, dtype=np.int64)
        elif all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value):
            if all(isinstance(x, float) or abs(x) <= 2**53 for x in value):
                return np.array(value, dtype=np.float64)
        if all(isinstance(x, str) for x in value):
            return np.array(value, dtype=h5py.string_dtype())
    return json.dumps(value, allow_nan=True, ensure_ascii=False)


def _set_attr(attrs: h5py.AttributeManager, name: str, value: Any) -> None:
    if isinstance(value, str):
        data = value.encode("utf-8")
        if data and b"\x00" not in data:  # text as netCDF `char` (fixed-length UTF-8)
            attrs.create(name, np.bytes_(data), dtype=h5py.string_dtype("utf-8", len(data)))
        else:
            attrs.create(name, value, dtype=h5py.string_dtype())
    else:
        attrs.create(name, value)


def _copy_attributes(attrs: h5py.AttributeManager, source: Mapping[str, Any], what: str) -> None:
    for name, value in source.items():
        if name in RESERVED_ATTRS or not name or "\x00" in name:
            continue
        converted = nc_attribute(value)
        try:
            _set_attr(attrs, name, converted)
        except (OSError, ValueError, TypeError, UnicodeError) as exc:
            log.warning("group.nc: attribute %r of %s left out: %s", name, what, exc)


_SURROGATE = re.compile("[\ud800-\udfff]")
_B64 = re.compile(r"^[A-Za-z0-9+/]{11}=$")


def cf_fill_value(meta: ArrayMetadata, dtype: np.dtype[Any]) -> np.ndarray[Any, Any] | None:
    """The variable's ``_FillValue`` in ``dtype``, as xarray reads it from Zarr (v2: the fill
    value unless null; v3: the ``_FillValue`` attribute, floats possibly base64 of a
    little-endian double), or None."""
    if meta.zarr_format == 3:
        value = meta.attributes.get("_FillValue")
        if value is None:
            return None
        if dtype.kind == "f" and isinstance(value, str):
            special = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
            if value in special:
                value = special[value]
            elif _B64.match(value):
                value = struct.unpack("<d", base64.b64decode(value))[0]
        try:
            out = np.asarray(value).astype(dtype, casting="unsafe")
            if not isinstance(value, (bool, int, float)) or (
                out.item() != value and not (isinstance(value, float) and math.isnan(value))
            ):
                raise ValueError("not exactly representable")
        except (TypeError, ValueError, OverflowError):
            log.warning("%s: _FillValue %r does not fit %s; left out", meta, value, dtype)
            return None
        return out
    if meta.document.get("fill_value", 0) is None:
        return None
    return meta.fill_value.astype(dtype)


# ----------------------------------------------------------------------------- rendering


def _dcpl(fill: np.ndarray[Any, Any] | None) -> h5py.h5p.PropDCID:
    """Contiguous, allocated on first write (``_allocate``), never filled by libhdf5."""
    plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    plist.set_layout(h5py.h5d.CONTIGUOUS)
    plist.set_obj_track_times(False)
    plist.set_alloc_time(h5py.h5d.ALLOC_TIME_LATE)
    plist.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
    if fill is not None:
        plist.set_fill_value(np.ascontiguousarray(fill))
    return plist


def _allocate(ds: h5py.Dataset) -> Extent:
    """Make libhdf5 reserve the dataset's storage (at the end of the file) by writing its
    first element; the element lands inside the extent, which the array's bytes replace."""
    space = ds.id.get_space()
    space.select_none()
    if ds.shape:
        space.select_hyperslab((0,) * len(ds.shape), (1,) * len(ds.shape))
    else:
        space.select_all()
    ds.id.write(h5py.h5s.create_simple((1,)), space, np.zeros(1, ds.dtype))
    offset = ds.id.get_offset()
    size = ds.id.get_storage_size()
    if offset is None or size != ds.size * ds.dtype.itemsize:
        raise OSError(f"libhdf5 did not allocate {ds.name} contiguously")
    return Extent(offset, offset + size, "")


def _dataset(
    parent: h5py.Group, name: str, dtype: np.dtype[Any], shape: tuple[int, ...], plist: Any
) -> h5py.Dataset:
    space = h5py.h5s.create_simple(shape) if shape else h5py.h5s.create(h5py.h5s.SCALAR)
    tid = h5py.h5t.py_create(dtype)
    return h5py.Dataset(h5py.h5d.create(parent.id, name.encode(), tid, space, dcpl=plist))


def _properties() -> str:
    from zarrfs import __version__

    versions = f"hdf5={h5py.version.hdf5_version},h5py={h5py.__version__}"
    return f"version=2,zarrfs={__version__},{versions}"


def _select(
    members: Sequence[Member], byte_order: str, excluded: Mapping[str, str] | None
) -> tuple[list[_Var], dict[str, str]]:
    """The arrays that become variables, and the others with the reason."""
    left_out = dict(excluded or {})
    variables: list[_Var] = []
    for m in sorted(members, key=lambda m: m.name):
        dtype, why = file_dtype(m.metadata.dtype, byte_order)
        if not _utf8(m.name):
            left_out[m.name] = "its name is not UTF-8 text, which netCDF names are"
        elif dtype is None:
            left_out[m.name] = why
        elif 0 in m.metadata.shape:
            left_out[m.name] = "netCDF has no fixed dimension of length 0"
        else:
            variables.append(_Var(m, dtype, m.metadata.dtype.kind == "b"))
    return variables, left_out


def _attributes_bound(attrs: Mapping[str, Any]) -> int:
    total = 0
    for name, value in attrs.items():
        converted = nc_attribute(value)
        if isinstance(converted, str):
            payload = len(converted.encode("utf-8", "surrogatepass"))
        elif converted.dtype.kind == "O":
            payload = sum(len(str(x).encode("utf-8", "surrogatepass")) + 32 for x in converted)
        else:
            payload = converted.nbytes
        total += _PER_ATTRIBUTE + 2 * len(name.encode("utf-8", "surrogatepass")) + 2 * payload
    return total


def size_bound(
    members: Sequence[Member],
    group_attributes: Mapping[str, Any],
    byte_order: str,
    excluded: Mapping[str, str] | None = None,
) -> int:
    """The size ``render`` gives the file, computed from the metadata alone (no libhdf5): the
    data plus a generous allowance for every HDF5 object; the rendered file is padded with
    zeros up to it (readers ignore bytes past HDF5's end-of-allocation address). This is what
    lets ``ls -l`` show the size without rendering."""
    variables, left_out = _select(members, byte_order, excluded)
    sizes = plan_dimensions(variables)
    total = _FILE_BASE + len(sizes) * _PER_DIMENSION + _attributes_bound(group_attributes)
    total += sum(2 * len(_excluded_line(n, why).encode()) + 64 for n, why in left_out.items())
    for v in variables:
        meta = v.member.metadata
        total += _PER_VARIABLE + _PER_AXIS * meta.ndim + meta.nbytes
        total += _attributes_bound(meta.attributes) + 4 * len(v.member.name.encode())
    return total


def render(
    members: Sequence[Member],
    group_attributes: Mapping[str, Any],
    byte_order: str,
    excluded: Mapping[str, str] | None = None,
) -> Layout:
    """Render the netCDF-4 file of a group whose arrays are ``members``.

    ``byte_order`` is ``little`` or ``big`` (the mount's); ``excluded`` names arrays left out
    before rendering (name -> reason). Never reads array data."""
    variables, left_out = _select(members, byte_order, excluded)
    sizes = plan_dimensions(variables)
    coords = {
        v.member.name: v for v in variables if v.dims == (v.member.name,) and v.member.name in sizes
    }
    image = SparseImage(MAX_METADATA_BYTES)
    datasets: dict[str, h5py.Dataset] = {}
    with h5py.File(image, "w", track_order=True, libver=("v108", "v110")) as f:
        scales: dict[str, h5py.Dataset] = {}
        refs: dict[str, list[tuple[Any, int]]] = {dim: [] for dim in sizes}
        for dimid, (dim, n) in enumerate(sizes.items()):
            var = coords.get(dim)
            if var is None:  # a dimension with no coordinate variable: an empty scale
                ds = _dataset(f, dim, np.dtype(">f4"), (n,), _dcpl(None))
                h5py.h5ds.set_scale(ds.id, (PHONY_NAME % n).encode())
            else:
                ds = _create_variable(f, var, dim)
                datasets[var.member.path] = ds
                h5py.h5ds.set_scale(ds.id, dim.encode())
            ds.attrs.create("_Netcdf4Dimid", np.int32(dimid))
            scales[dim] = ds
        for var in variables:
            if var.member.name in coords:
                continue
            h5name = var.member.name
            if h5name in sizes:
                h5name = NON_COORD_PREFIX + h5name
            if h5name in f:  # only a Zarr name that imitates netCDF-C's own prefix
                left_out[var.member.name] = f"its HDF5 name {h5name} is taken"
                continue
            ds = _create_variable(f, var, h5name)
            datasets[var.member.path] = ds
            for axis, dim in enumerate(var.dims):
                refs[dim].append((ds.ref, axis))
            if var.dims:
                lists = np.empty(len(var.dims), dtype=_DIMENSION_LIST)
                lists[:] = [np.array([scales[d].ref], dtype=h5py.ref_dtype) for d in var.dims]
                ds.attrs.create("DIMENSION_LIST", lists)
        for dim, entries in refs.items():
            if entries:  # what H5DSattach_scale keeps, written once (it rewrites per attach)
                scales[dim].attrs.create("REFERENCE_LIST", np.array(entries, _REFERENCE_LIST))
        _copy_attributes(f.attrs, group_attributes, "the group")
        if left_out:
            lines = [_excluded_line(name, why) for name, why in sorted(left_out.items())]
            f.attrs.create(EXCLUDED_ATTR, np.array(lines, dtype=h5py.string_dtype()))
        _set_attr(f.attrs, "_NCProperties", _properties())
        # the data last: every byte of metadata lies before the first extent, so reading
        # the metadata (ncdump -h) never reads ahead into many arrays
        extents = [replace(_allocate(ds), path=path) for path, ds in datasets.items()]
    for name, why in sorted(left_out.items()):
        log.info("group.nc: %s is not included: %s", name, why)
    extents.sort(key=lambda e: e.start)
    bound = size_bound(members, group_attributes, byte_order, excluded)
    if image.size > bound:  # the allowance was too small: the size changes (and is logged)
        log.warning("group.nc: %d bytes rendered, %d allowed; size follows", image.size, bound)
    size = max(bound, image.size)
    return Layout(size, _cut(image.runs(), extents), extents, left_out, image.size)


def _create_variable(f: h5py.File, var: _Var, h5name: str) -> h5py.Dataset:
    meta = var.member.metadata
    hdf5_fill = meta.fill_value.astype(var.dtype)
    ds = _dataset(f, h5name, var.dtype, meta.shape, _dcpl(hdf5_fill))
    attrs = dict(meta.attributes)
    if var.is_bool:
        attrs.setdefault("dtype", "bool")
    cf_fill = cf_fill_value(meta, var.dtype)
    if cf_fill is not None:
        ds.attrs.create("_FillValue", cf_fill.reshape(1), dtype=var.dtype)
    _copy_attributes(ds.attrs, attrs, var.member.path)
    return ds


def _cut(runs: list[tuple[int, bytes]], extents: list[Extent]) -> list[tuple[int, bytes]]:
    """The metadata runs with every data extent cut out (extents win where they overlap a
    partly written page)."""
    out: list[tuple[int, bytes]] = []
    for start, data in runs:
        pieces = [(start, start + len(data))]
        for e in extents:
            nxt = []
            for a, b in pieces:
                if e.stop <= a or e.start >= b:
                    nxt.append((a, b))
                    continue
                if a < e.start:
                    nxt.append((a, e.start))
                if e.stop < b:
                    nxt.append((e.stop, b))
            pieces = nxt
        out.extend((a, data[a - start : b - start]) for a, b in pieces if b > a)
    return out
